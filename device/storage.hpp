// The storage seam: where the K/V bytes live and the operations that move
// them. Backends: none (bookkeeping only), host (plain memory, the reference),
// cuda (device memory, streams, kernels). Only the device actor calls these.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "kvactor/messages/types.hpp"

namespace kvactor {

enum class storage_kind : std::uint8_t { none, host, cuda };

const char* to_string(storage_kind x) noexcept;

/// Geometry of the cache memory, documented once. One allocation holds every
/// layer, K and V of a layer side by side as vLLM's flash-attention layout:
///   [num_layers][2 (K, V)][num_blocks][block_size][num_heads][head_dim]
/// so that a layer's K (or V) pool is [num_blocks, block_size, num_heads,
/// head_dim] and a block of one layer's K is one contiguous run of
/// block_bytes(). The host tier has the same layout with num_host_blocks.
struct storage_layout {
  std::uint32_t num_layers = 0;
  std::uint32_t num_blocks = 0;
  std::uint32_t block_size = 0;
  std::uint32_t num_heads = 0;
  std::uint32_t head_dim = 0;
  kvactor::dtype dtype = kvactor::dtype::fp16;
  std::uint32_t num_host_blocks = 0;

  std::size_t elem_bytes() const noexcept {
    return size_of(dtype);
  }
  /// One token of one layer's K (or V): a row.
  std::size_t row_bytes() const noexcept {
    return std::size_t{num_heads} * head_dim * elem_bytes();
  }
  /// One block of one layer's K (or V).
  std::size_t block_bytes() const noexcept {
    return std::size_t{block_size} * num_heads * head_dim * elem_bytes();
  }
  /// One block across all layers, K and V: what a block costs.
  std::size_t bytes_per_block() const noexcept {
    return 2 * std::size_t{num_layers} * block_bytes();
  }
  /// One layer's K and V pools.
  std::size_t layer_bytes(std::uint32_t blocks) const noexcept {
    return 2 * std::size_t{blocks} * block_bytes();
  }
  std::size_t device_bytes() const noexcept {
    return std::size_t{num_layers} * layer_bytes(num_blocks);
  }
  std::size_t host_bytes() const noexcept {
    return std::size_t{num_layers} * layer_bytes(num_host_blocks);
  }
};

/// Identifies submitted work. Tickets increase; 0 is never issued.
using ticket = std::uint64_t;

/// A storage backend. Every batch is validated whole before anything is
/// submitted: a bad batch returns an error (invalid_request) and does nothing.
/// Thread-safety: one caller thread (the device actor's), except that the wake
/// function may be invoked from any thread.
class storage {
public:
  explicit storage(storage_layout layout) : layout_(layout) {
  }
  virtual ~storage() = default;
  storage(const storage&) = delete;
  storage& operator=(const storage&) = delete;

  const storage_layout& layout() const noexcept {
    return layout_;
  }

  virtual storage_kind kind() const noexcept = 0;

  /// Where the device pools live (cpu for none and host).
  virtual kvactor::device where() const noexcept = 0;

  /// Base of layer `layer`'s [2][num_blocks][block_size][num_heads][head_dim]
  /// pools in the backend's memory, or nullptr for `none`.
  virtual void* layer_base(std::uint32_t layer) noexcept = 0;

  /// Base of layer `layer` in the host tier, or nullptr without one.
  virtual void* host_layer_base(std::uint32_t layer) noexcept = 0;

  /// Copies each pair's K and V in every layer. Destinations must be distinct
  /// and no destination may also be a source in the same batch.
  virtual caf::expected<ticket> copy_blocks(const std::vector<block_copy>& pairs) = 0;

  /// Device blocks to host-tier blocks (every layer, K and V).
  virtual caf::expected<ticket> swap_out(const std::vector<block_move>& moves) = 0;

  /// Host-tier blocks back to device blocks.
  virtual caf::expected<ticket> swap_in(const std::vector<block_move>& moves) = 0;

  /// Scatters `num_tokens` tokens' key and value rows of layer `layer`
  /// (each [num_tokens, num_heads, head_dim], in the backend's memory) into
  /// the slots `slot_mapping[i]` (block * block_size + offset); slot -1 skips
  /// the token; of tokens that name the same slot, the last one's rows are
  /// written (a block freed and reallocated within one batch). `slot_mapping`
  /// is in host memory. REQUIRES: key and value are complete when called
  /// (cuda: the storage's streams do not wait for the caller's), and lie
  /// outside the pools (cuda: a forward pass's writes of other layers may
  /// run at the same time, kernels.hpp's write_overlap::work).
  virtual caf::expected<ticket>
  write_slots(std::uint32_t layer, const void* key, const void* value,
              const std::int64_t* slot_mapping, std::size_t num_tokens) = 0;

  /// write_slots for the `num_layers` layers from `first_layer` in one op:
  /// layer first_layer + i's rows are at key + i * layer_stride and value +
  /// i * layer_stride (bytes; 0 means num_tokens rows, layers packed). For
  /// a batch whose K/V of every layer are at hand together - a KV transfer
  /// from a prefill node, a restore from an external cache - which one op
  /// moves at copy speed (cuda: one launch for all layers) where one op per
  /// layer pays each layer's launch. Same rules and REQUIRES as
  /// write_slots; the whole batch is checked first (at least one layer,
  /// all in range, the stride, the pointers, the slots; validate.hpp's
  /// check_write_layers) and a bad one writes nothing (invalid_request);
  /// no tokens writes nothing, and then the pointers may be null. The
  /// ticket covers every layer's write (done() and wait(); finished() and
  /// wait_one() by their rule for shared blocks). This default writes
  /// layer by layer through write_slots and returns the last one's ticket:
  /// a device_failure partway leaves the earlier layers written, as any
  /// failed backend's work is lost anyway.
  virtual caf::expected<ticket>
  write_layers(std::uint32_t first_layer, std::uint32_t num_layers,
               const void* key, const void* value, std::size_t layer_stride,
               const std::int64_t* slot_mapping, std::size_t num_tokens);

  /// Gathers the first `num_tokens` tokens held by `blocks` of layer `layer`
  /// into `key_out` and `value_out` (each [num_tokens, num_heads, head_dim],
  /// in the backend's memory), which hold them once the ticket completed.
  virtual caf::expected<ticket>
  gather_blocks(std::uint32_t layer, const std::vector<block_id>& blocks,
                std::size_t num_tokens, void* key_out, void* value_out) = 0;

  /// True once `t` and all work submitted before it no longer run
  /// (finished, or can never run: see finished()).
  virtual bool done(ticket t) = 0;

  /// Blocks until `t` and the work before it no longer run (as done());
  /// returns device_failure if any work failed. A failure is sticky: every
  /// later wait reports it too.
  virtual caf::error wait(ticket t) = 0;

  /// True once `t` itself no longer runs: it finished, or it can never run
  /// (a sticky fault, after which nothing runs). A failure alone is not
  /// enough: after one that leaves the device running (cuda: a refused
  /// launch or event call) work queued before it still runs. The device
  /// actor trusts this fully - it answers `t` at once, and the pool then
  /// undoes or hands on the blocks `t` writes (a copy-on-write destination)
  /// - so true while `t` may still write them lets another request's data
  /// be overwritten. Work submitted before `t` may still be running. Every
  /// earlier op that touched a block `t` touches (a write of it, or a read
  /// of a block `t` writes) finished before `t` did: backends order such
  /// work before `t` runs. The default is done(t): correct, but it holds
  /// `t` behind unrelated earlier work.
  virtual bool finished(ticket t) {
    return done(t);
  }

  /// Blocks until `t` itself no longer runs (as finished()); device_failure
  /// if the storage failed - at once only if nothing can run any more. The
  /// default is wait(t).
  virtual caf::error wait_one(ticket t) {
    return wait(t);
  }

  /// As wait_one(t), but gives up after `limit`, setting `timed_out` (the
  /// work may still run): the device actor's bound on a stalled GPU. The
  /// default is wait_one(t), right for backends whose work is complete when
  /// submitted (host, none).
  virtual caf::error wait_one_for(ticket t, std::chrono::nanoseconds limit,
                                  bool& timed_out) {
    static_cast<void>(limit);
    timed_out = false;
    return wait_one(t);
  }

  /// Sets the function called (from any thread) when some ticket completes.
  virtual void set_wake(std::function<void()> wake) = 0;

  /// Tells the backend that its work looks stalled (the device actor gave
  /// up waiting for it, after device_timeout_ms): its teardown must not
  /// wait for work that may never end. The cuda backend then leaks what
  /// unfinished work may still touch (pools, streams) instead of
  /// synchronising; the default does nothing, right for backends whose
  /// work is complete when submitted.
  virtual void mark_stalled() noexcept {
  }

  /// True while this thread runs a wake (a CUDA host callback for cuda),
  /// where no storage may be destroyed: CUDA forbids CUDA calls there, and
  /// a storage's destructor synchronises its streams.
  static bool in_wake() noexcept;

  /// A host buffer of `bytes` that write_slots and gather_blocks accept
  /// (pinned memory for cuda, plain memory otherwise): where the device
  /// actor stages bytes that arrive in, or leave in, messages. Null if the
  /// allocation failed.
  virtual std::shared_ptr<std::uint8_t> host_buffer(std::size_t bytes);

protected:
  storage_layout layout_;
};

/// How to make a storage backend.
struct storage_options {
  /// "none", "host", "cuda" or "auto" (cuda when a device answers, else host).
  std::string kind = "auto";
  storage_layout layout;
  /// With layout.num_blocks == 0 (cuda only): size the pool from this
  /// fraction of the device's free memory, always leaving 128 MiB of it
  /// free for the backend's own buffers.
  double gpu_memory_utilization = 0.9;
  int device_index = 0;
};

/// Allocates every pool now, so a shortage is reported at start:
/// device_failure with the CUDA error text and the sizes asked for, or
/// invalid_config for an impossible layout. The returned storage's layout
/// has num_blocks filled in.
caf::expected<std::unique_ptr<storage>> make_storage(const storage_options& opts);

/// True if the CUDA backend was built and a device answers.
bool cuda_device_available() noexcept;

namespace detail {

/// Marks this thread as running a wake (storage::in_wake) while it lives:
/// a backend holds one around each call of its wake function.
class wake_scope {
public:
  wake_scope() noexcept;
  ~wake_scope();
  wake_scope(const wake_scope&) = delete;
  wake_scope& operator=(const wake_scope&) = delete;
};

} // namespace detail

} // namespace kvactor
