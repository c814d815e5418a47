// A scope in which one CUDA device is current on the calling thread, and
// after which the thread's previous device is current again. Plain C++ (no
// CUDA types), for the CUDA backend's calls made on a caller's thread.
#pragma once

namespace kvactor::detail {

/// The storage must not change which device its caller's thread works on:
/// an engine thread working on device 1 that creates or destroys a cache on
/// device 0 still works on device 1 afterwards. enter() saves the thread's
/// current device (cudaGetDevice) and makes `device` current; restore(), or
/// the destructor, makes the saved device current again, once, and only if
/// it differs. Nothing is switched when `device` is already current.
/// Every function returns a cudaError_t as an int (0 = success). A failed
/// call's error is also taken off the runtime's last error (these are not
/// sticky), so that a later launch check does not report it as its own.
/// NOTE: a thread that never chose a device reads as device 0, and
/// cudaSetDevice initialises the device's primary context (since CUDA 12):
/// restoring device 0 there creates device 0's context if the process had
/// none. A thread that uses another device should choose it first (or the
/// process should see only its devices: CUDA_VISIBLE_DEVICES).
/// Thread-safety: one thread; enter, restore and destroy on that thread.
class cuda_device_guard {
public:
  cuda_device_guard() = default;
  ~cuda_device_guard();
  cuda_device_guard(const cuda_device_guard&) = delete;
  cuda_device_guard& operator=(const cuda_device_guard&) = delete;

  /// Saves the current device and makes `device` current. On failure the
  /// thread's device is unchanged and there is nothing to restore.
  /// REQUIRES: nothing to restore (not entered, or restored since).
  int enter(int device) noexcept;

  /// Makes the saved device current again; 0 if there is nothing to restore.
  /// Either way there is nothing to restore afterwards.
  int restore() noexcept;

private:
  static constexpr int none = -1;
  int saved_ = none; ///< the device to make current again, or none
};

} // namespace kvactor::detail
