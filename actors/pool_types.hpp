// pool_types: the plain values block_pool_core hands out and keeps per
// tenant - lifetime counters, prefix-index events, tenant state, what an
// allocation, extension or step did - and how the pool names requests and
// ranks retention. No behaviour; block_pool_core.hpp is where they are used.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvactor/actors/block_hash.hpp"
#include "kvactor/config/cache_config.hpp"
#include "kvactor/messages/types.hpp"

namespace kvactor::detail {

/// "request <id>", as the pool's error messages name a request.
inline std::string req_name(request_id id) {
  return "request " + std::to_string(id);
}

/// The LRU level of a request's blocks: tenants by priority first, then
/// requests by priority within a tenant - the lowest level is evicted first.
constexpr std::uint8_t retention_of(priority tenant, priority request) noexcept {
  return static_cast<std::uint8_t>(static_cast<int>(tenant) * 4
                                   + static_cast<int>(request));
}

/// Counters over the pool's lifetime.
struct pool_counters {
  std::uint64_t allocations = 0;         ///< successful allocate / admit / fork
  std::uint64_t allocation_failures = 0; ///< lack of blocks or quota
  std::uint64_t blocks_allocated = 0;    ///< fresh blocks handed out
  std::uint64_t prefix_hit_blocks = 0;   ///< blocks shared from the index
  std::uint64_t blocks_freed = 0;        ///< blocks whose last ref went
  std::uint64_t blocks_cached = 0;       ///< blocks entered into the index
  std::uint64_t evictions = 0;           ///< cached blocks evicted
  std::uint64_t cow_copies = 0;
  /// Resident requests preempted (their device blocks freed at once);
  /// preempting a swapped or mid-swap request ends it but is not counted.
  std::uint64_t preemptions = 0;
  std::uint64_t query_tokens = 0;        ///< prompt tokens looked up
  std::uint64_t hit_tokens = 0;          ///< of which found cached
  std::uint64_t swap_outs = 0;           ///< requests moved to the host tier
  std::uint64_t swap_ins = 0;            ///< and back
  std::uint64_t swap_in_shared = 0;      ///< blocks a swap-in found on the device
  std::uint64_t draft_tokens = 0;        ///< extended as drafts (speculative)
  std::uint64_t drafts_rejected = 0;     ///< of which settle_drafts dropped
};

/// A change to the prefix index, for KV-event subscribers.
struct index_event {
  bool stored = true; ///< false: removed (evicted)
  std::uint64_t hash = 0;
  std::uint64_t parent_hash = 0; ///< 0 for a chain's first block
  block_id block = 0;
  std::uint16_t tenant = 0;
  std::vector<token_id> tokens; ///< the block's tokens (stored events)
};

/// Per-tenant state.
struct tenant_state {
  tenant_config config;
  block_hash seed;
  std::uint64_t used = 0;
  std::uint64_t active = 0;
  /// Past this many blocks one of its requests never stays live
  /// (lone_request_cap).
  std::uint64_t lone_cap = 0;
  /// Other tenants' reservations together (a bound on its requests when its
  /// namespace is its own).
  std::uint64_t others_reserved = 0;
  /// Another tenant names its prefix namespace: blocks its requests hold may
  /// be charged to that one (so its quota bounds no table).
  bool shares_namespace = false;
  /// Blocks an empty pool leaves one of its requests past the watermark
  /// and the other tenants' reservations (a promise's bound).
  std::uint64_t promise_room = 0;
  /// Sum of growth() over the tenant's live resident requests: blocks its
  /// promises may still take (reserve_expected).
  std::uint64_t promised = 0;
  /// Draining blocks last charged to it (a supervisor's victim let them
  /// go under a grace): they cover its reservation's shortfall, not any
  /// other tenant's.
  std::uint64_t draining = 0;
  std::uint64_t query_tokens = 0;
  std::uint64_t hit_tokens = 0;
  std::uint64_t preemptions = 0; ///< as pool_counters::preemptions
  std::uint64_t failures = 0;
};

/// The last admission that did not fit: its prompt (validated) and block
/// hashes. Retrying it (the waiting head, every step under pressure) costs
/// a comparison, not a validation and a rehash (vLLM keeps the hashes on
/// its request object for the same reason).
struct admission_memo {
  bool valid = false;
  block_hash seed; ///< the chain's root: tenant namespace and salt
  std::vector<token_id> prompt;
  std::vector<block_hash> hashes;
};

/// What an allocation did.
struct allocation_outcome {
  std::uint64_t cache_id = 0;
  std::uint64_t hit_tokens = 0;
};

/// What run_step tells its caller beyond the step_result
/// (block_pool_core::step_trace).
struct pool_step_trace {
  /// Index in step.admits of each admission (admits may repeat an id).
  std::vector<std::uint32_t> admitted_at;
  /// Blocks whose last reference went, per entry of freed / preempted.
  std::vector<std::uint32_t> freed_blocks;
  std::vector<std::uint32_t> preempted_blocks;
  /// The last this many entries of freed were discards (after the frees).
  std::uint32_t discarded = 0;
  void clear() noexcept {
    admitted_at.clear();
    freed_blocks.clear();
    preempted_blocks.clear();
    discarded = 0;
  }
};

/// What an extension did.
struct extension_outcome {
  std::uint32_t first_changed = 0; ///< first table index that changed
  bool changed = false;            ///< any block appended or replaced
  std::vector<block_copy> copies;  ///< copy-on-write to perform
};

} // namespace kvactor::detail
