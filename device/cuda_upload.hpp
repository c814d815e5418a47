// Stages each op's small metadata (copy pairs, slot mapping, block list, a
// swap's short runs) in
// device memory without putting a host-to-device copy in the compute stream's
// critical path, and without device-wide synchronisation on the hot path.
// CUDA types stay opaque (forward declarations).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvactor/device/cuda_tickets.hpp"

namespace kvactor::detail {

/// A ring of slots, each a pinned host buffer and a device buffer. stage()
/// copies the bytes into the next slot's pinned buffer, moves them with
/// cudaMemcpyAsync on the ring's own upload stream and makes the consumer
/// stream wait on that copy's event. While the consumer is busy with earlier
/// work, the upload of the next op overlaps it, so back-to-back ops start
/// without a gap. A slot is reused only once the op that consumed it (and its
/// upload) completed: with num_slots in rotation that wait rarely blocks.
/// Sizes: init() gives every slot the capacity its caller asks for (the
/// storage sizes it from the layout, up to max_initial_capacity), so most
/// ops never grow a slot. A slot that is still too small grows (doubling)
/// without a device-wide sync: its device buffer comes from the stream-ordered
/// allocator (cudaMallocAsync / cudaFreeAsync on the upload stream), and its
/// old pinned buffer is kept until the ring is destroyed, because
/// cudaFreeHost synchronises the device; as capacities double, the retired
/// buffers of a slot hold less than its current capacity.
/// NOTE: growing still calls cudaHostAlloc (pinning pages costs time), and on
/// a device without memory pools device buffers fall back to cudaMalloc and
/// cudaFree, which synchronise the device.
/// Functions return a cudaError_t as int (0 = success).
/// Thread-safety: none (the storage's caller thread only).
class upload_ring {
public:
  static constexpr std::size_t num_slots = 16;
  static constexpr std::size_t min_capacity = 64 * 1024;
  /// What init() allocates at most per slot: 16 slots of 256 KiB are 4 MiB
  /// pinned plus 4 MiB of device memory, enough for a 32768-token write.
  static constexpr std::size_t max_initial_capacity = 256 * 1024;

  explicit upload_ring(ticket_table& tickets) : tickets_(tickets) {
  }
  ~upload_ring();
  upload_ring(const upload_ring&) = delete;
  upload_ring& operator=(const upload_ring&) = delete;

  /// What each slot holds after init(capacity).
  static std::size_t initial_capacity(std::size_t capacity) noexcept {
    return capacity < min_capacity          ? min_capacity
           : capacity > max_initial_capacity ? max_initial_capacity
                                             : capacity;
  }

  /// Creates the upload stream, the events and the first buffers, each slot
  /// holding initial_capacity(capacity) bytes, on the current device
  /// `device`.
  int init(int device, std::size_t capacity);

  /// Uploads `bytes` bytes from host memory `data` for the next op on
  /// `consumer`; `dev` receives their device address. The caller must then
  /// call consumed() with the op's ticket (or the slot is reused unguarded).
  int stage(const void* data, std::size_t bytes, CUstream_st* consumer,
            void*& dev);

  /// Ticket `t` (the op just submitted) reads the slot stage() returned.
  /// Also for a later op that reads the same slot again, while stages()
  /// has not changed since that stage(): the slot then waits for it too.
  void consumed(ticket t) noexcept {
    slots_[last_].user = t;
  }

  /// How many times stage() was called, failed calls included (each takes
  /// the next slot): the device buffer of the last stage() still holds its
  /// bytes, for later ops to read, while this count stays the same.
  std::uint64_t stages() const noexcept {
    return stages_;
  }

  CUstream_st* stream() const noexcept {
    return stream_;
  }

  /// Leaves the stream, the buffers and the events to the process: the
  /// destructor then frees nothing. For a stalled GPU's teardown, where
  /// freeing pinned memory (cudaFreeHost) would wait for the device.
  void abandon() noexcept {
    stream_ = nullptr;
    slots_ = {};
    retired_host_.clear();
  }

private:
  struct slot {
    void* host = nullptr; // pinned
    void* dev = nullptr;
    std::size_t capacity = 0;
    ticket user = 0;      // the last op that read `dev`
    CUevent_st* uploaded = nullptr;
  };

  /// Grows `s` to hold `bytes`. REQUIRES: no pending work uses `s`.
  int reserve(slot& s, std::size_t bytes);

  /// Frees a device buffer: stream-ordered on the upload stream if it came
  /// from cudaMallocAsync.
  int free_dev(void* p);

  ticket_table& tickets_;
  CUstream_st* stream_ = nullptr;
  bool async_alloc_ = false; // device buffers from cudaMallocAsync
  std::array<slot, num_slots> slots_;
  std::vector<void*> retired_host_; // pinned, freed by the destructor
  std::size_t next_ = 0;
  std::size_t last_ = 0;
  std::uint64_t stages_ = 0;
};

} // namespace kvactor::detail
