// Storage kind "cuda": the layout of storage.hpp in one cudaMalloc, the host
// tier in pinned memory, three work streams (each with a notifier stream for
// wake callbacks), and per-block events that keep work on different streams
// in the order it was submitted.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kvactor/device/cuda_device_guard.hpp"
#include "kvactor/device/cuda_tickets.hpp"
#include "kvactor/device/cuda_upload.hpp"
#include "kvactor/device/hazards.hpp"
#include "kvactor/device/kernels.hpp"
#include "kvactor/device/slot_plan.hpp"
#include "kvactor/device/storage.hpp"
#include "kvactor/device/write_chain.hpp"

namespace kvactor {

/// Streams: compute (copy_blocks, write_slots, gather_blocks), device→host
/// (swap_out) and host→device (swap_in), plus an upload stream for each
/// op's metadata in each of three upload rings (the compute ops', and one
/// per swap stream for the swap kernel's runs). Ordering: before an op goes on its stream, that
/// stream waits (cudaStreamWaitEvent) for the newest conflicting op of each
/// other stream on the blocks it touches (read-after-write, write-after-read,
/// write-after-write; detail::hazard_tracker), device and host tier alike.
/// So a swap_out followed by a copy_blocks overwriting its source block swaps
/// the old bytes. Tickets map to events; done() and finished() query, wait()
/// and wait_one() synchronise. A set wake function runs from a
/// cudaLaunchHostFunc callback after each op, queued on a notifier stream of
/// the op's work stream (one each, waiting on the op's event), never on the
/// work stream itself: a host function there would hold the stream's next op
/// until CUDA's callback thread ran it, a host round trip between ops.
/// A forward pass's write_slots of one mapping, layer after layer with no
/// other op between, reuse the first layer's plan, mapping upload and
/// hazard group, and each next layer's kernel may run beside the ones
/// before it that write other layers (write_chain.hpp); kernels on the
/// compute stream still finish in stream order.
/// Caller buffers: write_slots' key/value and gather_blocks' outputs must be
/// device-accessible (device memory or pinned host memory); pageable host
/// memory is rejected (invalid_request). Only each buffer's first byte is
/// checked, so sizes are trusted.
/// REQUIRES: key, value and each output hold num_tokens rows, all of them
///   device-accessible (a shorter buffer is read or written out of bounds:
///   a fault, which fails the storage for good, not an invalid_request) -
///   also the rows of tokens whose slot is -1, which write_slots may read
///   (a short row's bytes are loaded beside its slot, kernels.hpp).
/// The buffers are not tracked, and the storage's streams are created
/// cudaStreamNonBlocking: nothing orders them after any stream of the
/// caller's, not even the legacy default stream.
/// REQUIRES: inputs (key, value) are complete when the op is called:
///   synchronise the stream or event that produced them first (a kernel
///   still writing them on the caller's stream may be read half-written).
/// REQUIRES: no earlier work of the caller still reads or writes an output.
/// Outputs hold the op's bytes only once its completion is reported (done()
/// or finished() true, wait() or wait_one() returned; the device actor's
/// reply); until then keep every buffer alive, inputs unchanged and outputs
/// untouched. Host-memory arguments (slot_mapping, pairs, moves, block
/// lists) are copied before the call returns and may be reused at once.
/// Device: make(), host_buffer() and the destructor work on the storage's
/// device and leave the calling thread's current device as they found it
/// (detail::cuda_device_guard). The ops and waits make the storage's device
/// current on the calling thread and leave it so: that thread is the device
/// actor's own (detached by default), which works on this device alone.
/// Failure: any CUDA error makes the storage failed for good: that op and
/// every later op or wait returns device_failure with the CUDA error text -
/// except an upload ring that cannot grow for want of memory, which fails
/// that op alone (upload_failed).
/// Thread-safety: as storage (one caller thread; wake from CUDA's thread).
class cuda_storage final : public storage {
public:
  enum class stream_role : std::uint8_t {
    compute = 0,
    device_to_host = 1,
    host_to_device = 2,
  };

  /// Picks the device, sizes the pool (num_blocks 0: gpu_memory_utilization
  /// of the free memory) and allocates everything; the pools and the host
  /// tier start zeroed, as the host backend's. device_failure with the
  /// CUDA error text and the sizes asked for when memory or device is
  /// lacking; invalid_config for an impossible layout.
  static caf::expected<std::unique_ptr<storage>>
  make(const storage_options& opts);

  /// Waits for all submitted work, then frees everything.
  ~cuda_storage() override;

  storage_kind kind() const noexcept override {
    return storage_kind::cuda;
  }
  kvactor::device where() const noexcept override {
    return {device_kind::cuda, device_};
  }
  void* layer_base(std::uint32_t layer) noexcept override;
  void* host_layer_base(std::uint32_t layer) noexcept override;

  caf::expected<ticket> copy_blocks(const std::vector<block_copy>& pairs) override;
  caf::expected<ticket> swap_out(const std::vector<block_move>& moves) override;
  caf::expected<ticket> swap_in(const std::vector<block_move>& moves) override;
  caf::expected<ticket>
  write_slots(std::uint32_t layer, const void* key, const void* value,
              const std::int64_t* slot_mapping, std::size_t num_tokens) override;
  /// One launch for every layer (kernels.hpp's launch_write_layers).
  caf::expected<ticket>
  write_layers(std::uint32_t first_layer, std::uint32_t num_layers,
               const void* key, const void* value, std::size_t layer_stride,
               const std::int64_t* slot_mapping,
               std::size_t num_tokens) override;
  caf::expected<ticket>
  gather_blocks(std::uint32_t layer, const std::vector<block_id>& blocks,
                std::size_t num_tokens, void* key_out, void* value_out) override;

  bool done(ticket t) override;
  caf::error wait(ticket t) override;
  bool finished(ticket t) override;
  caf::error wait_one(ticket t) override;
  /// Polls t's event (cudaEventQuery), yielding between polls, then
  /// sleeping 50 us once a millisecond passed; a wait spins anyway (events
  /// without cudaEventBlockingSync), so the write and gather replies keep
  /// their latency.
  caf::error wait_one_for(ticket t, std::chrono::nanoseconds limit,
                          bool& timed_out) override;
  void set_wake(std::function<void()> wake) override;
  /// From now on, teardown waits for no unfinished work: the destructor
  /// leaks the streams, the pools, the host tier and the upload buffers if
  /// any stream is still busy then, and a host_buffer freed later is
  /// leaked too (cudaFreeHost would wait for the device) - until a new
  /// wake is set (a restart's device actor) with no work queued any more.
  void mark_stalled() noexcept override;

  /// Pinned (cudaHostAlloc) memory.
  std::shared_ptr<std::uint8_t> host_buffer(std::size_t bytes) override;

  /// write_slots calls that were a forward pass's next layer (the mapping's
  /// plan, upload and hazard group reused) and, of those, the ones whose
  /// kernel was launched to overlap the kernels before it
  /// (write_overlap::work): for tests and benchmarks.
  struct next_layer_counts {
    std::uint64_t reused = 0;
    std::uint64_t overlapped = 0;
  };
  next_layer_counts next_layer_writes() const noexcept {
    return next_layers_;
  }

  /// The cudaStream_t of `role`, for benchmarks and tests that time or order
  /// their own work against this storage's.
  void* native_stream(stream_role role) const noexcept {
    return streams_[static_cast<std::size_t>(role)];
  }

private:
  static constexpr std::size_t num_streams = 3;

  static constexpr std::size_t stream_of(stream_role r) noexcept {
    return static_cast<std::size_t>(r);
  }

  cuda_storage(storage_layout layout, int device);

  caf::error init();

  /// device_failure if failed, else selects the device for this thread.
  caf::error usable();
  /// What a wait answers once the storage failed, `wait_result` being its
  /// wait for the ticket's work all the same (cuda_storage_wait.cpp).
  caf::error failed_after(int wait_result);

  /// Marks the storage failed with `what` (the call, and the op's sizes)
  /// and the CUDA error text.
  caf::error fail(int err, const std::string& what);

  /// An op's upload of `bytes` bytes (its pairs, slots or block ids) failed
  /// with `err` before its launch. A batch larger than any before grows
  /// the upload ring, and that allocation (pinned and device memory) can
  /// fail: not a sticky error, nothing launched, so the op fails alone and
  /// the storage stays usable - failing it for good would also answer
  /// device_failure for work the GPU is still running. Any other error
  /// fails the storage (fail()).
  caf::error upload_failed(int err, const char* what, std::size_t bytes);

  /// Makes `role`'s stream wait for the tickets in `w` of other streams.
  caf::error order(const detail::hazard_tracker::waits& w, stream_role role);

  /// Records ticket next_ticket_ on `role`'s stream, queues the wake
  /// callback on its notifier, and returns the ticket.
  caf::expected<ticket> submit(stream_role role);

  /// swap_out and swap_in: the runs by the swap kernel (short) and the copy
  /// engines (long), on the direction's stream.
  caf::expected<ticket> swap(const std::vector<block_move>& moves,
                             detail::swap_direction dir);

  /// The writes' shared steps (write_slots, write_layers): both inputs
  /// device-accessible when there are tokens; the compute stream ordered
  /// after every other stream's pending access of the planned blocks
  /// (slots_.blocks()); the planned mapping staged for the compute stream,
  /// `dev` its device copy (`what` names the upload if it fails).
  caf::error check_inputs(const char* op, const void* key, const void* value,
                          std::size_t num_tokens);
  caf::error order_planned_writes();
  caf::error stage_mapping(const char* what, const std::int64_t* slot_mapping,
                           std::size_t num_tokens, void*& dev);

  /// invalid_request unless `p` is device-accessible (or null): pinned host
  /// memory, or memory of this device. Checks the first byte only: the size
  /// of the buffer behind `p` is trusted (checking the range would need the
  /// driver API's cuMemGetAddressRange, and the project links only cudart).
  caf::error check_accessible(const void* p, const char* op, const char* what);

  detail::pool_geometry geometry() const noexcept;

  /// A notifier's host function: calls the wake in `box` (a wake_box).
  static void on_complete(void* box);

  /// Whether any stream (work, notifier, upload) still has work queued.
  bool busy() noexcept;

  // First member, so destroyed last: the destructor makes device_ current
  // through it, and the members' own CUDA cleanup runs before it restores.
  detail::cuda_device_guard exit_device_;
  int device_;
  detail::slot_planner slots_;     // write_slots' blocks and last writers
  std::byte* pools_ = nullptr;     // device: the whole layout, one cudaMalloc
  std::byte* host_tier_ = nullptr; // pinned: cudaHostAlloc, or nullptr
  CUstream_st* streams_[num_streams] = {};
  // Per work stream: where its ops' wake callbacks run. One each, so a wake
  // never waits behind another stream's longer op.
  CUstream_st* notifiers_[num_streams] = {};
  std::size_t max_pitch_ = 0;      // cudaDevAttrMaxPitch
  detail::ticket_table tickets_;
  detail::upload_ring uploads_;
  // The swap kernel's runs, one ring per swap stream: a slot of the compute
  // ring would come round again (16 compute ops later) while a long swap
  // still held it, and the op reusing it would wait on the host.
  // A swap stream's own slot comes round 16 swaps later, after its swap.
  detail::upload_ring swap_uploads_[2] = {detail::upload_ring{tickets_},
                                          detail::upload_ring{tickets_}};
  detail::hazard_tracker device_hazards_;
  detail::hazard_tracker host_hazards_;
  // write_slots' next layers (cuda_ops.cpp): the plan the last write wrote
  // (slots_.plans()), its mapping's device copy and the upload count
  // (uploads_.stages()) that copy is valid at, and the layers whose kernels
  // may still run together.
  std::uint64_t written_plan_ = 0;
  const void* mapping_dev_ = nullptr;
  std::uint64_t mapping_stage_ = 0;
  detail::write_chain chain_;
  next_layer_counts next_layers_;
  ticket next_ticket_ = 1;
  std::string failed_;             // empty while healthy
  bool has_wake_ = false;
  /// mark_stalled() was called; shared with host_buffer()'s deleters,
  /// which may run after the storage is gone.
  std::shared_ptr<std::atomic<bool>> stalled_
    = std::make_shared<std::atomic<bool>>(false);
  /// What the completion callbacks read - they get its address, not the
  /// storage's. After a fault the destructor's synchronisation of the
  /// notifiers returns at once, maybe while a callback that had started
  /// still runs: the destructor then leaves the box behind (a few dozen
  /// bytes, once per failed device) rather than free it under that callback.
  struct wake_box {
    std::mutex mtx;
    std::shared_ptr<const std::function<void()>> wake; // guarded by mtx
  };
  std::unique_ptr<wake_box> wake_box_ = std::make_unique<wake_box>();
};

namespace detail {

/// Number of CUDA devices that answer; 0 with `why` set otherwise.
int cuda_device_count(std::string& why) noexcept;

} // namespace detail

} // namespace kvactor
