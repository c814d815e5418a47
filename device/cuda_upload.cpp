// The metadata upload ring of the CUDA backend (cuda_upload.hpp).
#include "kvactor/device/cuda_upload.hpp"

#include <cstring>

#include <cuda_runtime_api.h>

namespace kvactor::detail {

upload_ring::~upload_ring() {
  if (stream_ != nullptr) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
  for (auto& s : slots_) {
    if (s.uploaded != nullptr)
      cudaEventDestroy(s.uploaded);
    cudaFreeHost(s.host);
    cudaFree(s.dev);
  }
}

int upload_ring::init() {
  if (auto err = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking))
    return err;
  for (auto& s : slots_) {
    if (auto err = cudaEventCreateWithFlags(&s.uploaded,
                                            cudaEventDisableTiming))
      return err;
    if (auto err = reserve(s, initial_capacity))
      return err;
  }
  return cudaSuccess;
}

int upload_ring::reserve(slot& s, std::size_t bytes) {
  if (s.capacity >= bytes)
    return cudaSuccess;
  auto capacity = s.capacity == 0 ? initial_capacity : s.capacity;
  while (capacity < bytes)
    capacity *= 2;
  cudaFreeHost(s.host);
  cudaFree(s.dev);
  s.host = nullptr;
  s.dev = nullptr;
  s.capacity = 0;
  if (auto err = cudaHostAlloc(&s.host, capacity, cudaHostAllocDefault))
    return err;
  if (auto err = cudaMalloc(&s.dev, capacity))
    return err;
  s.capacity = capacity;
  return cudaSuccess;
}

int upload_ring::stage(const void* data, std::size_t bytes,
                       CUstream_st* consumer, void*& dev) {
  last_ = next_;
  next_ = (next_ + 1) % num_slots;
  auto& s = slots_[last_];
  // The slot's previous op and its upload must be done with both buffers.
  if (auto err = tickets_.sync_one(s.user))
    return err;
  if (auto err = cudaEventSynchronize(s.uploaded))
    return err;
  s.user = 0;
  if (auto err = reserve(s, bytes))
    return err;
  std::memcpy(s.host, data, bytes);
  if (auto err = cudaMemcpyAsync(s.dev, s.host, bytes, cudaMemcpyHostToDevice,
                                 stream_))
    return err;
  if (auto err = cudaEventRecord(s.uploaded, stream_))
    return err;
  if (auto err = cudaStreamWaitEvent(consumer, s.uploaded, 0))
    return err;
  dev = s.dev;
  return cudaSuccess;
}

} // namespace kvactor::detail
