// A stalled GPU's teardown: once the device actor has told the storage its
// work stalled (mark_stalled), destroying the storage must not wait for
// that work - it would hang the destroying thread (a facade's owner) for as
// long as the GPU does. The stall here is a host function holding the
// compute stream, with a copy queued behind it; the storage is destroyed
// on a thread of its own, which must return while the stream is still
// held. What the queued copy still touches is leaked, not freed.
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "twin.hpp"

#if KVACTOR_HAVE_CUDA

#include <cuda_runtime_api.h>

#include "kvactor/device/cuda_storage.hpp"

using namespace kvactor;
using namespace kvactor::test;

namespace {

/// Spins on the host (a host function may make no CUDA call) until `open`.
void CUDART_CB hold(void* open) {
  auto& flag = *static_cast<std::atomic<bool>*>(open);
  while (!flag.load(std::memory_order_acquire)) {
  }
}

} // namespace

BOOST_AUTO_TEST_SUITE(cuda_stall_teardown_suite,
                      *boost::unit_test::precondition(gpu_present{}))

BOOST_AUTO_TEST_CASE(a_storage_told_of_a_stall_is_destroyed_without_waiting) {
  storage_options opts;
  opts.kind = "cuda";
  opts.layout = make_layout(2, 16, 16, 2, 64, dtype::fp16, 4);
  auto made = make_storage(opts);
  BOOST_REQUIRE_MESSAGE(made, why(made));
  std::unique_ptr<storage> store = std::move(*made);
  auto stream = static_cast<cudaStream_t>(
    static_cast<cuda_storage&>(*store).native_stream(
      cuda_storage::stream_role::compute));
  // Outlives the storage and this test: the leaked stream's host function
  // reads it until it is opened below.
  auto open = std::make_shared<std::atomic<bool>>(false);
  // A failed check below unwinds through the storage's destructor, not yet
  // told of the stall, which waits for the held stream: opened first (this
  // guard goes before the storage), the test fails, not hangs.
  struct opener {
    std::shared_ptr<std::atomic<bool>> flag;
    ~opener() {
      flag->store(true, std::memory_order_release);
    }
  } open_on_exit{open};
  BOOST_REQUIRE(cudaLaunchHostFunc(stream, &hold, open.get()) == cudaSuccess);
  auto t = store->copy_blocks({block_copy{0, 1}});
  BOOST_REQUIRE_MESSAGE(t, why(t));
  BOOST_TEST(!store->done(*t));
  store->mark_stalled();
  auto gone = std::async(std::launch::async, [s = std::move(store)]() mutable {
    s.reset();
  });
  auto returned = gone.wait_for(std::chrono::seconds{5})
                  == std::future_status::ready;
  BOOST_TEST(returned, "the stalled storage's destructor waited for the GPU");
  // Let the held work run (on what was leaked), then let the flag go.
  open->store(true, std::memory_order_release);
  BOOST_TEST(cudaStreamSynchronize(stream) == cudaSuccess);
  gone.wait();
}

BOOST_AUTO_TEST_CASE(a_storage_told_of_a_stall_whose_work_ended_cleans_up) {
  // The stall passed (the work ended after all): nothing is running, and
  // the storage is torn down as usual - the process's device memory is
  // back afterwards.
  storage_options opts;
  opts.kind = "cuda";
  opts.layout = make_layout(2, 256, 16, 8, 128, dtype::fp16, 0);
  std::size_t free_before = 0;
  std::size_t total = 0;
  BOOST_REQUIRE(cudaMemGetInfo(&free_before, &total) == cudaSuccess);
  {
    auto made = make_storage(opts);
    BOOST_REQUIRE_MESSAGE(made, why(made));
    auto t = (*made)->copy_blocks({block_copy{0, 1}});
    BOOST_REQUIRE_MESSAGE(t, why(t));
    BOOST_REQUIRE(!(*made)->wait(*t));
    (*made)->mark_stalled();
  }
  std::size_t free_after = 0;
  BOOST_REQUIRE(cudaMemGetInfo(&free_after, &total) == cudaSuccess);
  // The pools alone are 32 MiB; the driver's own bookkeeping may move the
  // figure by a little.
  BOOST_TEST(free_after + (8u << 20) >= free_before,
             "free " << free_before << " before, " << free_after << " after");
}

BOOST_AUTO_TEST_SUITE_END()

#endif // KVACTOR_HAVE_CUDA
