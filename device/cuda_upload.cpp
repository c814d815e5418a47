// The metadata upload ring of the CUDA backend (cuda_upload.hpp).
#include "kvactor/device/cuda_upload.hpp"

#include <algorithm>
#include <cstring>

#include <cuda_runtime_api.h>

namespace kvactor::detail {

upload_ring::~upload_ring() {
  // Errors are ignored here: a failed device cannot be cleaned up better.
  // The storage synchronised every consumer stream before this runs.
  if (stream_ != nullptr)
    cudaStreamSynchronize(stream_);
  for (auto& s : slots_) {
    if (s.uploaded != nullptr)
      cudaEventDestroy(s.uploaded);
    if (s.dev != nullptr)
      free_dev(s.dev);
    if (s.host != nullptr) // none after abandon(): no CUDA call at all
      cudaFreeHost(s.host);
  }
  for (auto p : retired_host_)
    cudaFreeHost(p);
  if (stream_ != nullptr) {
    cudaStreamSynchronize(stream_); // the stream-ordered frees
    cudaStreamDestroy(stream_);
  }
}

int upload_ring::init(int device, std::size_t capacity) {
  int pools = 0;
  if (auto err = cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported,
                                        device))
    return err;
  async_alloc_ = pools != 0;
  if (auto err = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking))
    return err;
  capacity = initial_capacity(capacity);
  for (auto& s : slots_) {
    if (auto err = cudaEventCreateWithFlags(&s.uploaded,
                                            cudaEventDisableTiming))
      return err;
    if (auto err = reserve(s, capacity))
      return err;
  }
  return cudaSuccess;
}

int upload_ring::free_dev(void* p) {
  return async_alloc_ ? cudaFreeAsync(p, stream_) : cudaFree(p);
}

int upload_ring::reserve(slot& s, std::size_t bytes) {
  if (s.capacity >= bytes)
    return cudaSuccess;
  auto capacity = std::max(s.capacity, min_capacity);
  while (capacity < bytes)
    capacity *= 2;
  // Allocate first: on failure the slot keeps its old buffers.
  void* host = nullptr;
  if (auto err = cudaHostAlloc(&host, capacity, cudaHostAllocDefault))
    return err;
  void* dev = nullptr;
  // Stream-ordered: the upload (on the same stream) and the consumer (which
  // waits for the upload's event) run after the allocation.
  auto err = async_alloc_ ? cudaMallocAsync(&dev, capacity, stream_)
                          : cudaMalloc(&dev, capacity);
  if (err != cudaSuccess) {
    cudaFreeHost(host); // an error path: a sync does no harm
    return err;
  }
  // Every use of the old buffers completed (the caller waited for the slot's
  // consumer and upload), so the old device buffer may go now; the old
  // pinned one waits for the destructor (see the class comment).
  auto old_dev = s.dev;
  if (s.host != nullptr)
    retired_host_.push_back(s.host);
  s.host = host;
  s.dev = dev;
  s.capacity = capacity;
  return old_dev != nullptr ? free_dev(old_dev) : cudaSuccess;
}

int upload_ring::stage(const void* data, std::size_t bytes,
                       CUstream_st* consumer, void*& dev) {
  ++stages_;
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
