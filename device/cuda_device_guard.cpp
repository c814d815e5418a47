// The CUDA backend's device scope on a caller's thread (cuda_device_guard.hpp).
#include "kvactor/device/cuda_device_guard.hpp"

#include <cassert>

#include <cuda_runtime_api.h>

namespace kvactor::detail {

cuda_device_guard::~cuda_device_guard() {
  // A destructor cannot report: restore() already took a failure off the
  // runtime's last error, and the thread keeps the device it has.
  restore();
}

int cuda_device_guard::enter(int device) noexcept {
  assert(saved_ == none);
  int current = 0;
  if (auto err = cudaGetDevice(&current)) {
    cudaGetLastError();
    return err;
  }
  if (current == device)
    return cudaSuccess;
  if (auto err = cudaSetDevice(device)) {
    cudaGetLastError();
    return err;
  }
  saved_ = current;
  return cudaSuccess;
}

int cuda_device_guard::restore() noexcept {
  if (saved_ == none)
    return cudaSuccess;
  const auto device = saved_;
  saved_ = none;
  if (auto err = cudaSetDevice(device)) {
    cudaGetLastError();
    return err;
  }
  return cudaSuccess;
}

} // namespace kvactor::detail
