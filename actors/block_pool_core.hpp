// block_pool_core: the block pool's state and every decision about who gets a
// block, without an actor around it (the block_pool actor wraps it; tests and
// benchmarks drive it directly). CAF-free apart from caf::expected.
//
// Invariants (check() verifies them all):
//  - every block is in exactly one state: free (on the free stack), cached
//    (ref count 0, in the prefix index and on one LRU level) or used (ref
//    count > 0, equal to the number of sequence tables that hold it);
//  - the prefix index maps a hash to a block iff that block is `indexed` with
//    that hash; cached blocks are always indexed;
//  - each used block is charged to exactly one tenant (the one whose request
//    took it from the pool, as Linux memcg charges the first toucher); the
//    tenants' charges sum to the used blocks.
// Every operation validates first and then commits: a failed one changes
// nothing. Cost: O(1) per block touched.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "kvactor/actors/block_hash.hpp"
#include "kvactor/actors/block_lists.hpp"
#include "kvactor/actors/flat_index.hpp"
#include "kvactor/config/cache_config.hpp"
#include "kvactor/messages/step.hpp"
#include "kvactor/messages/types.hpp"

namespace kvactor::detail {

/// One live request as the pool sees it.
struct sequence {
  request_id id = 0;
  std::uint64_t cache_id = 0; ///< unique over the pool's lifetime
  std::uint64_t admitted = 0; ///< admission order (larger = newer)
  std::uint16_t tenant = 0;
  kvactor::priority priority = kvactor::priority::normal;
  std::uint64_t num_tokens = 0;
  std::uint64_t max_tokens = 0;
  std::vector<block_id> blocks;
  // Hashing state: the first `num_hashed` blocks are full and hashed, `chain`
  // is the last one's hash (the namespace seed if none) and `tail` holds the
  // tokens after them. Lost (hashable = false) once tokens arrive unnamed.
  bool hashable = false;
  std::uint32_t num_hashed = 0;
  block_hash chain;
  std::vector<token_id> tail;
};

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
  std::uint64_t preemptions = 0;
  std::uint64_t query_tokens = 0;        ///< prompt tokens looked up
  std::uint64_t hit_tokens = 0;          ///< of which found cached
};

/// A change to the prefix index, for KV-event subscribers.
struct index_event {
  bool stored = true; ///< false: removed (evicted)
  std::uint64_t hash = 0;
  std::uint64_t parent_hash = 0; ///< 0 for a chain's first block
  block_id block = 0;
  std::uint16_t tenant = 0;
};

/// Per-tenant state.
struct tenant_state {
  tenant_config config;
  block_hash seed;
  std::uint64_t used = 0;
  std::uint64_t active = 0;
  std::uint64_t query_tokens = 0;
  std::uint64_t hit_tokens = 0;
  std::uint64_t preemptions = 0;
  std::uint64_t failures = 0;
};

/// What an allocation did.
struct allocation_outcome {
  std::uint64_t cache_id = 0;
  std::uint64_t hit_tokens = 0;
};

/// What an extension did.
struct extension_outcome {
  std::uint32_t first_changed = 0; ///< first table index that changed
  bool changed = false;            ///< any block appended or replaced
  std::vector<block_copy> copies;  ///< copy-on-write to perform
};

class block_pool_core {
public:
  /// A pool of `num_blocks` blocks for `cfg` (block size, model, tenants,
  /// prefix caching). REQUIRES: validate(cfg) passed; num_blocks < 2^31.
  block_pool_core(const cache_config& cfg, std::uint32_t num_blocks);

  // -- requests ------------------------------------------------------------------

  /// Checks `req` against the model, the tenants and the size limits;
  /// returns the tenant's index. Changes nothing.
  caf::expected<std::uint16_t> check(const allocation_request& req) const;

  /// Allocates room for `req`: the prompt's cached full blocks are shared
  /// (at most (len - 1) / block_size of them, so the last token is always
  /// computed), the rest are fresh. All or nothing.
  caf::expected<allocation_outcome> allocate(const allocation_request& req);

  /// True if allocate(req) would succeed now.
  bool can_allocate(const allocation_request& req) const;

  /// Grows `id` by `n` tokens (`tokens`: null or exactly n token ids). A
  /// shared, partially filled last block is replaced by a private copy first.
  caf::expected<extension_outcome> extend(request_id id, std::uint64_t n,
                                          const token_id* tokens);

  /// Ends `id`: its blocks return, last block first; indexed ones stay cached.
  /// Returns the number of blocks whose last reference went.
  caf::expected<std::uint32_t> release(request_id id);

  /// release(id) only if its cache_id is still `cache_id` (a reclaim after
  /// the handle died must not free a newer request with the same id).
  caf::expected<std::uint32_t> reclaim(request_id id, std::uint64_t cache_id);

  /// release(id), counted as a preemption.
  caf::expected<std::uint32_t> preempt(request_id id);

  /// A new request `child` sharing every block of `parent` (copy-on-write on
  /// its first append into the shared last block).
  caf::expected<allocation_outcome> fork(request_id parent, request_id child);

  /// Executes one scheduler step (see messages/step.hpp).
  step_result run_step(const step_request& step);

  // -- cache ---------------------------------------------------------------------

  /// Evicts up to `n` cached blocks, least valuable first; returns how many.
  std::uint32_t evict(std::uint32_t n);

  /// Turns on recording of index changes into events().
  void record_events(bool on) noexcept {
    record_events_ = on;
  }
  /// Index changes since the last take_events().
  std::vector<index_event> take_events() {
    return std::move(events_);
  }

  // -- queries -------------------------------------------------------------------

  const sequence* find(request_id id) const noexcept;
  block_table table(const sequence& seq) const;
  std::uint32_t num_blocks() const noexcept {
    return static_cast<std::uint32_t>(blocks_.size());
  }
  std::uint32_t block_size() const noexcept {
    return block_size_;
  }
  std::uint64_t used_blocks() const noexcept {
    return used_;
  }
  std::uint64_t cached_blocks() const noexcept {
    return lru_.size();
  }
  std::uint64_t free_blocks() const noexcept {
    return blocks_.size() - used_;
  }
  std::size_t num_sequences() const noexcept {
    return seq_index_.size();
  }
  const pool_counters& counters() const noexcept {
    return counters_;
  }
  const std::vector<tenant_state>& tenants() const noexcept {
    return tenants_;
  }
  /// Calls f(const sequence&) for every live request.
  template <class F>
  void for_each_sequence(F&& f) const {
    seq_index_.for_each([&](std::uint64_t, std::uint32_t slot) { f(seqs_[slot]); });
  }

  /// Verifies every invariant in the header comment; O(blocks + table
  /// entries). Returns invariant_violation naming the first broken one.
  caf::error check_invariant() const;

private:
  enum class block_state : std::uint8_t { free, cached, used };

  struct block_meta {
    std::uint32_t ref_count = 0;
    std::uint16_t tenant = 0;
    block_state state = block_state::free;
    std::uint8_t level = 0; ///< LRU level while cached
    bool indexed = false;
    block_hash hash;
    std::uint64_t parent = 0; ///< parent's hash.lo, for events
  };

  // -- helpers (block_pool_core.cpp) ---------------------------------------------

  /// Blocks tenant `t` may take now: free and cached blocks, minus what other
  /// tenants' reservations hold back.
  std::uint64_t takeable(std::uint16_t t) const noexcept;
  /// Whether tenant `t` may take `n` more blocks (quota and reservations);
  /// the error says which limit.
  caf::error admit_blocks(std::uint16_t t, std::uint64_t n) const;
  block_id take_block(std::uint16_t t);
  void charge(block_id b, std::uint16_t t) noexcept;
  void uncharge(block_id b) noexcept;
  void unref(block_id b, std::uint8_t level);
  void evict_one(block_id b, std::uint8_t level);
  void index_block(block_id b, block_hash h, std::uint64_t parent, std::uint16_t t);
  void hash_appended(sequence& seq, const token_id* tokens, std::uint64_t n);
  std::uint8_t retention_level(const sequence& seq) const noexcept;
  /// Prompt block hashes into scratch_; returns how many lead the index.
  std::uint32_t lookup(std::uint16_t t, const std::vector<token_id>& prompt,
                       std::uint32_t max_hits) const;
  sequence* find_mut(request_id id) noexcept;
  sequence& new_sequence(request_id id);
  void drop_sequence(request_id id);
  std::uint64_t shortfall(std::uint16_t t) const noexcept;

  std::uint32_t block_size_;
  bool prefix_caching_;
  model_config model_;
  std::vector<block_meta> blocks_;
  free_stack free_;
  lru_lists lru_;
  flat_index index_; ///< hash.lo -> block
  std::vector<sequence> seqs_;
  std::vector<std::uint32_t> free_seq_slots_;
  flat_index seq_index_; ///< request id -> slot in seqs_
  std::vector<tenant_state> tenants_;
  std::uint64_t used_ = 0;
  std::uint64_t shortfall_total_ = 0; ///< sum over tenants of reserved - used
  std::uint64_t next_cache_id_ = 1;
  std::uint64_t next_admission_ = 1;
  pool_counters counters_;
  bool record_events_ = false;
  std::vector<index_event> events_;
  mutable std::vector<block_hash> scratch_;
};

} // namespace kvactor::detail
