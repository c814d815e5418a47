// Test helper of gpu_tests: holds one of the cuda storage's streams at a host
// function until opened, so that work submitted meanwhile cannot have run,
// and only the storage's cross-stream events order it.
#pragma once

#include <atomic>
#include <memory>
#include <thread>

#include <cuda_runtime_api.h>

#include "kvactor/device/cuda_storage.hpp"
#include "twin.hpp"

namespace kvactor::test {

/// Holds `stream` (a host function spinning on a flag) until open() - or
/// until 10 s passed, which a correct backend never needs: it orders work
/// across streams with events, never by waiting on the host, so every call
/// returns while the stream is held. forced() says the deadline opened it.
/// The destructor opens the gate and synchronises the stream, so the host
/// function has returned before its flag goes (also when a failed check
/// unwinds the test before anything synchronised).
/// While the compute stream is held, submit at most 16 compute calls
/// that upload (copy_blocks, gather_blocks, and write_slots but a forward
/// pass's next layers, which reuse their mapping's upload) after the gate:
/// each takes one of the upload ring's 16 slots, and the 17th would wait on
/// the host for the op that used its slot before, which the gate holds. Likewise at
/// most 16 swaps with short runs (each stages its runs in its swap
/// stream's ring) while that swap stream is held.
class stream_gate {
public:
  explicit stream_gate(cudaStream_t stream);
  ~stream_gate();
  stream_gate(const stream_gate&) = delete;
  stream_gate& operator=(const stream_gate&) = delete;

  void open();

  bool forced() const {
    return flags_->forced.load();
  }

private:
  struct flags {
    std::atomic<bool> open{false};
    std::atomic<bool> forced{false};
  };

  static void CUDART_CB hold(void* f);

  cudaStream_t stream_;
  std::unique_ptr<flags> flags_; // read by hold() on CUDA's callback thread
  std::thread deadline_;
};

/// The cudaStream_t of `role` of the twin's cuda storage.
cudaStream_t stream_of(twin& tw, cuda_storage::stream_role role);

} // namespace kvactor::test
