// Value types that travel between kvactor's actors (and to subscribers), on
// top of the public ones in types.hpp. Each has inspect() and is registered.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/meta/type_name.hpp>

#include "kvactor/messages/types.hpp"

namespace caf {
class error;
} // namespace caf

namespace kvactor {

/// Why a request ended.
enum class end_reason : std::uint8_t {
  deallocated, ///< its owner freed it (a finished request)
  preempted,   ///< its blocks were taken back to make room (recompute later)
  reclaimed,   ///< its handle actor or its owner died, GC found it an
               ///< orphan, or nobody received it (a late reply)
  shutdown,    ///< the manager stopped
  /// Its owner discarded it (a failed forward pass: what it wrote also
  /// left the prefix index). Last, so the values before keep their
  /// numbers on the wire.
  discarded,
};

const char* to_string(end_reason x) noexcept;

/// What a subscription is for.
enum class topic : std::uint8_t {
  pressure,  ///< (pressure_atom, pressure_event) on each change of level
  lifecycle, ///< (ended_atom, request_ended) when a request ends
  kv_events, ///< (kv_event_atom, kv_event_batch) on prefix-index changes
};

const char* to_string(topic x) noexcept;

/// The cache id that names whichever incarnation of a request id is live
/// now (the pool numbers incarnations from 1).
inline constexpr std::uint64_t current_incarnation = 0;

/// A request as the manager knows it (the prompt is not kept).
struct request_info {
  // cache_id first: the manager's registry reads it on every operation by
  // id, and here it shares a cache line with the entry's key.
  std::uint64_t cache_id = 0; ///< the pool's id of this incarnation
  bool swapped = false;       ///< blocks live in the host tier
  allocation_request request; ///< as allocated, prompt dropped
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, request_info& x) {
  return f(caf::meta::type_name("request_info"), x.request, x.cache_id,
           x.swapped);
}

/// The pool's reply to an extend: the new table and the copies to make
/// before the request may append (copy-on-write).
struct extension {
  block_table table;
  std::vector<block_copy> copies;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, extension& x) {
  return f(caf::meta::type_name("extension"), x.table, x.copies);
}

/// What a step changed in the manager's registry. The pool sends it to the
/// manager one-way, before it replies to the step: anything the stepping
/// scheduler sends the manager after the reply finds the registry up to date
/// (the manager's mailbox holds this message first), yet the step's round
/// trip does not wait for the registry (handles spawned, owners monitored,
/// lifecycle subscribers told).
struct step_effects {
  std::vector<request_id> freed;
  std::vector<request_id> preempted;
  std::vector<allocation_request> admitted; ///< as asked, prompts dropped
  std::vector<std::uint64_t> cache_ids;     ///< of `admitted`, in order
  /// Of `admitted`, in order: prompt tokens each found cached (its
  /// handle's stats report them).
  std::vector<std::uint64_t> hit_tokens;
  /// Blocks whose last reference went, per entry of freed / preempted
  /// (the lifecycle events' blocks_released).
  std::vector<std::uint32_t> freed_blocks;
  std::vector<std::uint32_t> preempted_blocks;
  /// The last this many entries of freed were discards (the step's frees
  /// come first).
  std::uint32_t discarded = 0;
};

/// counts[k], or 0 where the list is short (a count not sent).
inline std::uint32_t count_at(const std::vector<std::uint32_t>& counts,
                              std::size_t k) noexcept {
  return k < counts.size() ? counts[k] : 0u;
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_effects& x) {
  return f(caf::meta::type_name("step_effects"), x.freed, x.preempted,
           x.admitted, x.cache_ids, x.hit_tokens, x.freed_blocks,
           x.preempted_blocks, x.discarded);
}

/// Pool usage, sent to the supervisor when it crosses a pressure mark.
struct pool_usage {
  std::uint64_t used_blocks = 0;
  std::uint64_t cached_blocks = 0;
  std::uint64_t total_blocks = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, pool_usage& x) {
  return f(caf::meta::type_name("pool_usage"), x.used_blocks, x.cached_blocks,
           x.total_blocks);
}

/// A change of pressure level.
struct pressure_event {
  memory_pressure level = memory_pressure::low;
  memory_pressure previous = memory_pressure::low;
  std::uint64_t used_blocks = 0;
  std::uint64_t total_blocks = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, pressure_event& x) {
  return f(caf::meta::type_name("pressure_event"), x.level, x.previous,
           x.used_blocks, x.total_blocks);
}

/// A request that ended, for lifecycle subscribers and owners.
struct request_ended {
  request_id id = 0;
  std::uint64_t cache_id = 0;
  end_reason reason = end_reason::deallocated;
  /// Blocks whose last reference went as it ended (full hashed ones stay
  /// cached). 0 for a request that ended while a swap moved its bytes:
  /// its blocks return when the move ends, with no event of their own.
  std::uint32_t blocks_released = 0;
  /// The id of the ended incarnation's handle actor (0 where the sender
  /// does not know it: the ends a step reply reports).
  std::uint64_t handle = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, request_ended& x) {
  return f(caf::meta::type_name("request_ended"), x.id, x.cache_id, x.reason,
           x.blocks_released, x.handle);
}

/// The pool's figures (the manager merges them into cache_manager_stats).
struct pool_stats {
  std::uint64_t total_blocks = 0;
  std::uint64_t used_blocks = 0;
  std::uint64_t cached_blocks = 0;
  std::uint64_t active_requests = 0;
  std::uint64_t allocations = 0;
  std::uint64_t allocation_failures = 0;
  std::uint64_t blocks_allocated = 0;
  std::uint64_t prefix_hit_blocks = 0;
  std::uint64_t blocks_freed = 0;
  std::uint64_t blocks_cached = 0;
  std::uint64_t evictions = 0;
  std::uint64_t cow_copies = 0;
  std::uint64_t preemptions = 0;
  std::uint64_t query_tokens = 0;
  std::uint64_t hit_tokens = 0;
  std::vector<tenant_usage> tenants;
  std::uint64_t swap_outs = 0;
  std::uint64_t swap_ins = 0;
  std::uint64_t host_total_blocks = 0;
  std::uint64_t host_free_blocks = 0;
  std::uint64_t pinned_blocks = 0;
  std::uint64_t swap_in_shared = 0;
  std::uint64_t draft_tokens = 0;
  std::uint64_t draft_tokens_rejected = 0;
  /// Let go by the supervisor's victims, not yet free (preempt_grace_ms).
  std::uint64_t draining_blocks = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, pool_stats& x) {
  return f(caf::meta::type_name("pool_stats"), x.total_blocks, x.used_blocks,
           x.cached_blocks, x.active_requests, x.allocations,
           x.allocation_failures, x.blocks_allocated, x.prefix_hit_blocks,
           x.blocks_freed, x.blocks_cached, x.evictions, x.cow_copies,
           x.preemptions, x.query_tokens, x.hit_tokens, x.tenants,
           x.swap_outs, x.swap_ins, x.host_total_blocks, x.host_free_blocks,
           x.pinned_blocks, x.swap_in_shared, x.draft_tokens,
           x.draft_tokens_rejected, x.draining_blocks);
}

/// New tokens' K and V rows for one layer, to scatter into their slots
/// (the message form of write_slots; bytes are in host memory).
struct slot_write {
  std::uint32_t layer = 0;
  std::vector<std::int64_t> slots;  ///< per token; -1 skips it
  std::vector<std::uint8_t> keys;   ///< [num_tokens, num_heads, head_dim]
  std::vector<std::uint8_t> values; ///< [num_tokens, num_heads, head_dim]
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, slot_write& x) {
  return f(caf::meta::type_name("slot_write"), x.layer, x.slots, x.keys,
           x.values);
}

/// One layer's K and V of a request's tokens, gathered contiguously.
struct gathered_kv {
  std::uint32_t layer = 0;
  std::uint64_t num_tokens = 0;
  std::vector<std::uint8_t> keys;   ///< [num_tokens, num_heads, head_dim]
  std::vector<std::uint8_t> values;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, gathered_kv& x) {
  return f(caf::meta::type_name("gathered_kv"), x.layer, x.num_tokens, x.keys,
           x.values);
}

/// A change to the prefix index (vLLM's KV events: BlockStored /
/// BlockRemoved), so a router outside the process can track what a node
/// holds. Hashes are the chained 64-bit block hashes (actors/block_hash.hpp).
struct kv_event {
  bool stored = true;            ///< false: removed (evicted)
  std::uint64_t block_hash = 0;
  std::uint64_t parent_hash = 0; ///< 0: first block of its chain
  block_id block = 0;
  std::string tenant;
  std::vector<token_id> token_ids; ///< stored events: the block's tokens
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_event& x) {
  return f(caf::meta::type_name("kv_event"), x.stored, x.block_hash,
           x.parent_hash, x.block, x.tenant, x.token_ids);
}

/// The index changes of one pool message, in order; batches are numbered
/// consecutively from 1, one sequence for all subscribers, so a subscriber
/// can tell it missed one. Changes made while nobody was subscribed count
/// as one batch nobody heard: a subscriber whose first batch is not 1
/// joined after changes it has no snapshot of. Every tenant's events,
/// token ids included: a subscriber is the operator's.
struct kv_event_batch {
  std::uint64_t seq = 0;
  std::uint32_t block_size = 0;
  std::vector<kv_event> events;
  /// When the pool made the changes: wall-clock seconds since the epoch
  /// (vLLM's EventBatch.ts).
  double ts = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_event_batch& x) {
  return f(caf::meta::type_name("kv_event_batch"), x.seq, x.block_size,
           x.events, x.ts);
}

/// What the device actor serves.
struct storage_info {
  std::string kind;   ///< "none", "host" or "cuda"
  kvactor::device device;
  std::uint32_t num_blocks = 0;
  std::uint32_t num_host_blocks = 0;
  std::uint64_t bytes_per_block = 0; ///< all layers, K and V
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, storage_info& x) {
  return f(caf::meta::type_name("storage_info"), x.kind, x.device,
           x.num_blocks, x.num_host_blocks, x.bytes_per_block);
}

/// None if `req` may live in `store`: a storage of kind "none" holds no
/// bytes and takes any device; any other needs the request's device to be
/// its own (invalid_request, naming both, otherwise).
caf::error check_device(const storage_info& store, const allocation_request& req);

} // namespace kvactor
