// Test helper of gpu_tests: a gate on a stream (stream_gate.hpp).
#if KVACTOR_HAVE_CUDA

#include "stream_gate.hpp"

#include <chrono>

namespace kvactor::test {

stream_gate::stream_gate(cudaStream_t stream)
  : stream_(stream), flags_(std::make_unique<flags>()) {
  BOOST_REQUIRE(cudaLaunchHostFunc(stream_, &hold, flags_.get())
                == cudaSuccess);
  deadline_ = std::thread([f = flags_.get()] {
    for (int i = 0; i < 1000 && !f->open.load(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds{10});
    if (!f->open.exchange(true))
      f->forced = true;
  });
}

stream_gate::~stream_gate() {
  open();
  // hold() reads the flags until it sees them open: once the stream is
  // synchronised it has returned, and they may go. If synchronising fails
  // (a CUDA fault: no more host functions run, but one may be running),
  // whether hold() still reads them cannot be known: they are left
  // allocated, a leak on a failed run only.
  if (cudaStreamSynchronize(stream_) != cudaSuccess) {
    cudaGetLastError();
    static_cast<void>(flags_.release());
  }
}

void stream_gate::open() {
  flags_->open.store(true, std::memory_order_release);
  if (deadline_.joinable())
    deadline_.join();
}

void CUDART_CB stream_gate::hold(void* f) {
  auto& fl = *static_cast<flags*>(f);
  while (!fl.open.load(std::memory_order_acquire)) {
    // spin: a host function may make no CUDA call
  }
}

cudaStream_t stream_of(twin& tw, cuda_storage::stream_role role) {
  return static_cast<cudaStream_t>(
    static_cast<cuda_storage&>(*tw.cuda).native_stream(role));
}

} // namespace kvactor::test

#endif // KVACTOR_HAVE_CUDA
