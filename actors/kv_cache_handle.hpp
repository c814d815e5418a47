// kv_cache_handle: an in-process reference to one request's cache (ferrum's
// KvCacheHandle). Two implementations: paged_kv_cache_handle serves views of
// the shared per-layer pools indexed by the block table; the contiguous one
// serves a [max_sequence_length, num_heads, head_dim] snapshot per layer, in
// host memory, gathered from those pools on each call.
// Handles are made by the kv_cache_manager facade; they stay safe to use
// after the request ended or the manager stopped (is_valid() is then false
// and data accessors fail with invalid_handle).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <caf/expected.hpp>

#include "kvactor/messages/interfaces.hpp"
#include "kvactor/messages/tensor_view.hpp"
#include "kvactor/messages/types.hpp"

namespace kvactor {

namespace detail {
class facade_core;
/// State shared by every reference to one request (clones included).
struct request_slot {
  request_info info;
  request_handle_actor actor;
  std::uint64_t handle_id = 0; ///< the handle actor's id: cache_id()
  std::atomic<bool> valid{true};
};
} // namespace detail

class kv_cache_handle {
public:
  virtual ~kv_cache_handle() = default;

  /// The current block table (a round trip to the pool); empty once
  /// the request ended - and on any failure (ferrum's contract returns a
  /// plain table): checked_table() tells which.
  block_table table() const;
  /// The current block table, or why there is none: invalid_handle (the
  /// request ended - the cache's end, its facade's too), shutting_down (the
  /// cache stopped during the call), CAF's request_timeout (no answer
  /// within the facade's timeout: the request may well be live). Asked of
  /// the pool for this handle's incarnation (invalid_handle once its handle
  /// actor has begun to quit: killed or crashed).
  caf::expected<block_table> checked_table() const;

  request_id id() const noexcept {
    return slot_->info.request.id;
  }
  kvactor::device device() const noexcept {
    return slot_->info.request.device;
  }
  kvactor::dtype dtype() const noexcept {
    return slot_->info.request.dtype;
  }
  std::uint32_t num_layers() const noexcept {
    return slot_->info.request.num_layers;
  }
  std::uint32_t num_heads() const noexcept {
    return slot_->info.request.num_heads;
  }
  std::uint32_t head_dim() const noexcept {
    return slot_->info.request.head_dim;
  }
  std::uint64_t max_sequence_length() const noexcept {
    return slot_->info.request.max_sequence_length;
  }
  /// Tokens stored now (0 once the request ended, or on any failure:
  /// checked_table() tells which).
  std::uint64_t num_tokens() const;

  /// Views of layer `layer`'s keys, values, or both (leading dimension 2:
  /// K then V). nullopt when the storage is `none` (bookkeeping only).
  /// Errors: invalid_handle (request ended), invalid_request (layer out of
  /// range; a contiguous view of a swapped-out request), shutting_down (the
  /// cache stopped during a contiguous view's gather). A contiguous view
  /// is a snapshot of what the request held when the pool passed its gather
  /// to the device, whatever other threads do to the request meanwhile.
  /// With storage cuda a paged view points into the device pools, which
  /// kvactor's own copies (copy-on-write, swaps, gathers) use on streams of
  /// their own: work the caller queued on its streams into these blocks
  /// must have finished (cudaStreamSynchronize, or an event it waited on)
  /// before it asks kvactor for anything that reads or moves them - a
  /// swap-out, a preemption, a fork's first append - or the copy may take
  /// stale bytes.
  caf::expected<std::optional<tensor_view>> key_cache(std::uint32_t layer) const {
    return view(layer, view_part::keys);
  }
  caf::expected<std::optional<tensor_view>> value_cache(std::uint32_t layer) const {
    return view(layer, view_part::values);
  }
  caf::expected<std::optional<tensor_view>> kv_cache(std::uint32_t layer) const {
    return view(layer, view_part::both);
  }

  /// Another reference to the same cache (not a copy): it sees the same
  /// blocks and turns invalid with this one.
  virtual std::shared_ptr<kv_cache_handle> clone_handle() const = 0;

  /// The request's figures (a round trip); zeros once it ended - and on
  /// any failure (ferrum's contract returns plain figures): checked_stats()
  /// tells which.
  cache_handle_stats stats() const;
  /// The request's figures, or why there are none (the errors of
  /// checked_table()): where a zero prefix_hit_tokens must mean "nothing
  /// cached", not "no answer".
  caf::expected<cache_handle_stats> checked_stats() const;

  /// False once the request was deallocated, preempted or reclaimed, or the
  /// manager stopped.
  bool is_valid() const noexcept;

  /// True while its blocks live in the host tier (a round trip).
  bool is_swapped() const;

  /// Unique over the actor system's lifetime (the handle actor's id).
  std::uint64_t cache_id() const noexcept {
    return slot_->handle_id;
  }

  /// The request's handle actor.
  request_handle_actor actor() const {
    return slot_->actor;
  }

  /// The shared per-request state (for the facade).
  const std::shared_ptr<detail::request_slot>& slot() const noexcept {
    return slot_;
  }

  /// True if the facade behind `core` made this handle (for the facade: a
  /// handle passed to another cache's facade must not reach that cache,
  /// whose request of the same id and incarnation is another request).
  bool made_by(const detail::facade_core& core) const noexcept {
    return core_.lock().get() == &core;
  }

protected:
  enum class view_part { keys, values, both };

  /// What the layouts differ in: the view of one part of a layer.
  virtual caf::expected<std::optional<tensor_view>>
  view(std::uint32_t layer, view_part part) const = 0;

  kv_cache_handle(std::shared_ptr<detail::request_slot> slot,
                  std::weak_ptr<detail::facade_core> core)
    : slot_(std::move(slot)), core_(std::move(core)) {
  }

  /// invalid_handle unless the request is live and the manager running.
  caf::error check_live() const;
  /// The running facade, for a view of `layer`: invalid_handle unless the
  /// request is live and the manager running, invalid_request unless
  /// layer < num_layers().
  caf::expected<std::shared_ptr<detail::facade_core>>
  view_core(std::uint32_t layer) const;

  std::shared_ptr<detail::request_slot> slot_;
  std::weak_ptr<detail::facade_core> core_;
};

/// Views of the shared pools: layer l's keys are [num_blocks, block_size,
/// num_heads, head_dim]; the request's tokens live in the blocks its table
/// names.
class paged_kv_cache_handle final : public kv_cache_handle {
public:
  paged_kv_cache_handle(std::shared_ptr<detail::request_slot> slot,
                        std::weak_ptr<detail::facade_core> core)
    : kv_cache_handle(std::move(slot), std::move(core)) {
  }

  std::shared_ptr<kv_cache_handle> clone_handle() const override;

private:
  caf::expected<std::optional<tensor_view>>
  view(std::uint32_t layer, view_part part) const override;
};

/// ferrum's DefaultKvCacheHandle: per layer, one [max_sequence_length,
/// num_heads, head_dim] buffer for keys and one for values, in host memory,
/// refreshed from the cache (a gather through the device actor) on each
/// call; rows past num_tokens() are zero. A snapshot: writes to it do not
/// reach the cache. Each call makes a new one, owned by the view it returns
/// (and by a DLPack export of that view).
class contiguous_kv_cache_handle final : public kv_cache_handle {
public:
  /// invalid_request (naming `id` and its max_sequence_length) unless a
  /// snapshot of `max_len` tokens whose K (or V) rows take `row` bytes -
  /// [2][max_len][heads][head_dim] - can be described: its byte count and
  /// shape fit int64. The facade checks it at allocate.
  static caf::error check_length(request_id id, std::uint64_t max_len,
                                 std::uint64_t row);

  contiguous_kv_cache_handle(std::shared_ptr<detail::request_slot> slot,
                             std::weak_ptr<detail::facade_core> core);

  std::shared_ptr<kv_cache_handle> clone_handle() const override;

private:
  caf::expected<std::optional<tensor_view>>
  view(std::uint32_t layer, view_part part) const override;
};

} // namespace kvactor
