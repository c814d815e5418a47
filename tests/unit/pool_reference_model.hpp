// pool_reference_model: a slow, obviously correct block pool for the model
// test. It keeps what block_pool_core keeps, in std containers: the prefix
// index maps (namespace, the whole token prefix) to a block instead of a
// chained hash, LRU levels are std::lists, the free blocks a std::vector
// stack, reservations are summed over tenants on every question. It follows
// the documented policy (block_pool_core.hpp, messages/step.hpp) and predicts
// the core's every answer, block ids included: allocation with quotas,
// reservations and admission headroom, swapping in two phases, pins with a
// time to live (or unpinned early), the choice of preemption victims, and
// copy-on-write copies held until the device answers (settle_copies).
#pragma once

#include <array>
#include <cstdint>
#include <list>
#include <map>
#include <optional>
#include <string>
#include <set>
#include <utility>
#include <vector>

#include "kvactor/actors/block_pool_core.hpp"
#include "kvactor/config/cache_config.hpp"
#include "kvactor/messages/errc.hpp"
#include "kvactor/messages/step.hpp"
#include "kvactor/messages/types.hpp"

namespace kvactor::test {

/// Blocks that hold `tokens` tokens.
inline std::uint64_t blocks_for(std::uint64_t tokens, std::uint32_t block_size) {
  return (tokens + block_size - 1) / block_size;
}

/// No value: success.
using maybe_errc = std::optional<errc>;

/// A prefix index key: the namespace and every token up to a block's end.
using prefix_key = std::pair<std::string, std::vector<token_id>>;

struct model_sequence {
  request_id id = 0;
  std::uint64_t cache_id = 0;
  std::uint64_t admitted = 0; ///< admission order (forks included)
  std::uint16_t tenant = 0;
  std::uint64_t salt = 0; ///< allocation_request::cache_salt
  kvactor::priority priority = kvactor::priority::normal;
  /// Retention: 4 * tenant priority + request priority; lower goes first.
  std::size_t level = 5;
  std::uint64_t num_tokens = 0;
  std::uint64_t max_tokens = 0;
  std::vector<block_id> blocks;
  /// Whether every token so far is known (then `tokens` holds them all).
  bool hashable = false;
  std::vector<token_id> tokens;
  /// Its last `drafts` tokens are unsettled drafts (none of their blocks
  /// indexed; it neither grows nor forks until settle_drafts).
  std::uint64_t drafts = 0;
  /// Tokens it is expected to reach (reserve_expected); 0 = no promise.
  std::uint64_t expected_tokens = 0;
  detail::residency where = detail::residency::resident;
  std::vector<block_id> host_blocks; ///< swapping_out, swapped, swapping_in
  /// Per host block: its index key when it left, if it was indexed.
  std::vector<std::optional<prefix_key>> host_keys;
  std::vector<block_id> incoming;    ///< swapping_in
  std::uint64_t shared_at_swap_in = 0; ///< of incoming: shared, not copied
  bool release_pending = false;
  /// Blocks its admission found cached, at most 65535 (as the pool keeps);
  /// a fork's are its parent's.
  std::uint32_t hit_blocks = 0;
  /// Its table from here on is what it brought to the index (before: its
  /// admission's hits, or a fork's parent's table then; at most 65535).
  std::uint32_t brought_from = 0;
  /// It came onto its partly filled last block by a fork or by a failed
  /// copy, and has not grown since: others may read that block, so before
  /// writing into it, it takes a copy unless it is the only reader left
  /// (pool_reference_model_copies.cpp). Otherwise it wrote there last and
  /// holds the most tokens in it: it writes in place.
  bool shared_tail = false;
  /// The epoch its writes belong to now (write_lineage.hpp): a new one each
  /// time it becomes resident; live while it is.
  std::uint64_t epoch = 0;
  /// The live epochs whose writes the blocks it holds but did not write
  /// were computed over (dead ones linger until its next write).
  std::set<std::uint64_t> acc;
};

struct model_tenant {
  tenant_config config;
  std::string ns;
  /// The most blocks one of its requests may hold: the pool, and (the
  /// supervisor preempting at critical) below the critical mark unless its
  /// reservation covers them.
  std::uint64_t lone_cap = 0;
  std::uint64_t used = 0;
  std::uint64_t active = 0;
  std::uint64_t query_tokens = 0;
  std::uint64_t hit_tokens = 0;
  std::uint64_t preemptions = 0;
  std::uint64_t failures = 0;
};

struct model_event {
  bool stored = true;
  prefix_key key;
  block_id block = 0;
  std::uint16_t tenant = 0;
};

struct model_allocation {
  maybe_errc err;
  std::uint64_t cache_id = 0;
  std::uint64_t hit_tokens = 0;
};

struct model_extension {
  maybe_errc err;
  std::uint32_t first_changed = 0;
  bool changed = false;
  std::vector<block_copy> copies;
};

struct model_release {
  maybe_errc err;
  std::uint32_t freed = 0;
};

struct model_moves {
  maybe_errc err;
  std::vector<block_move> moves;
};

struct model_unpin {
  maybe_errc err;
  std::uint32_t unpinned = 0; ///< blocks that lost their pin
  std::uint32_t kept = 0;     ///< pinned blocks of the chain that stayed
};

/// step_result with error codes in place of caf::error.
struct model_step_result {
  std::vector<request_id> freed;
  std::vector<table_delta> changed;
  std::vector<block_copy> copies;
  std::vector<request_id> preempted;
  std::vector<admission> admitted;
  std::vector<std::pair<request_id, errc>> failed;
  request_id blocked = 0;
  bool admission_blocked = false;
  std::uint64_t free_blocks = 0;
  std::uint64_t used_blocks = 0;
};

class pool_model {
public:
  pool_model(const cache_config& cfg, std::uint32_t num_blocks);

  model_allocation allocate(const allocation_request& req);
  bool can_allocate(const allocation_request& req) const;
  /// Prompt tokens allocate(req) would hit now, or check's error.
  std::pair<maybe_errc, std::uint64_t>
  cached_prefix(const allocation_request& req) const;
  /// `tokens`: null or exactly n ids; the last `drafts` of them drafts.
  /// With `hold`, a copy-on-write copy stays in flight until settle_copies.
  model_extension extend(request_id id, std::uint64_t n,
                         const std::vector<token_id>* tokens,
                         std::uint64_t drafts = 0, bool hold = false);
  /// Keeps the first `accepted` of `id`'s drafts, drops the rest.
  model_extension settle_drafts(request_id id, std::uint64_t accepted);
  model_release release(request_id id);
  model_release reclaim(request_id id, std::uint64_t cache_id);
  /// release, caching nothing it lets go (resident requests only) but its
  /// admission's written hits (its first hit_blocks).
  model_release discard(request_id id, bool brought_held = true);
  /// discard of `seq`, away on the host or coming back: its epoch ends
  /// bad, what it wrote before it left goes.
  model_release discard_away(model_sequence& seq);
  /// Cached `b` leaves the index (unpinned first) and goes free.
  void free_cached(block_id b);
  /// forget_built_on({bad}) now, or with the step's other discards.
  void forget_spread(std::uint64_t bad);
  /// With `unindex`, as discard (the supervisor's victims).
  model_release preempt(request_id id, bool unindex = false);
  /// preempt(id, true), the blocks whose last reference went draining
  /// (block_pool_core::preempt_draining); last_drain() names the drain.
  model_release preempt_draining(request_id id, std::uint64_t tag);
  std::uint64_t last_drain() const {
    return last_drain_;
  }
  std::uint32_t end_drain(std::uint64_t serial);
  std::uint32_t end_drains(std::uint64_t tag);
  /// Serials of the drains, oldest first.
  std::vector<std::uint64_t> drains() const;
  std::uint64_t draining_blocks() const;
  model_allocation fork(request_id parent, request_id child);
  std::uint32_t evict(std::uint32_t n);
  model_step_result run_step(const step_request& step, bool hold = false);

  /// The device made (`copied`) or failed `copies`, taken with `hold`:
  /// made, their requests' filled blocks enter the index; failed, each
  /// live request's extend is undone. The holds end either way. Returns
  /// the requests whose extends were undone, newest first.
  std::vector<request_id> settle_copies(const std::vector<block_copy>& copies,
                                        bool copied);
  std::size_t copies_in_flight() const {
    return held_.size();
  }
  /// References to `b`: its holders' tables and the copies in flight.
  std::uint32_t refs(block_id b) const {
    return blocks_[b].refs;
  }
  /// References to `b` held by copies in flight (its refs count them).
  std::uint32_t holds(block_id b) const;
  /// Copy-on-write copies so far by why they were needed (coverage).
  const std::map<std::string, std::size_t>& copy_reasons() const {
    return copy_reasons_;
  }
  /// Discards that took blocks computed over theirs out of the index, and
  /// the requests they stopped from indexing (coverage).
  std::pair<std::size_t, std::size_t> built_on() const {
    return {built_on_taken_, built_on_stopped_};
  }
  /// Steps whose discards ended several epochs others built on: one scan
  /// for all (coverage).
  std::size_t batched_scans() const {
    return batched_scans_;
  }

  model_moves swap_out_begin(request_id id);
  model_release swap_out_done(request_id id, std::uint64_t cache_id, bool ok);
  model_moves swap_in_begin(request_id id);
  model_release swap_in_done(request_id id, std::uint64_t cache_id, bool ok);
  /// maybe_errc, and the number of blocks pinned (`t` a tenant index).
  std::pair<maybe_errc, std::uint32_t>
  pin(std::uint16_t t, const std::vector<token_id>& tokens,
      std::uint64_t ttl_ms, std::uint64_t now_ms, std::uint64_t salt = 0);
  model_unpin unpin(std::uint16_t t, const std::vector<token_id>& tokens,
        std::uint64_t salt = 0);
  std::uint32_t expire_pins(std::uint64_t now_ms);
  std::vector<request_id> choose_victims(std::uint64_t blocks) const;

  const std::map<request_id, model_sequence>& sequences() const {
    return seqs_;
  }
  /// Requests released during a swap, by cache id, until the swap ends.
  const std::map<std::uint64_t, model_sequence>& ghosts() const {
    return ghosts_;
  }
  const std::vector<model_tenant>& tenants() const {
    return tenants_;
  }
  const detail::pool_counters& counters() const {
    return counters_;
  }
  std::uint64_t used_blocks() const;
  std::uint64_t cached_blocks() const;
  std::uint64_t free_blocks() const {
    return blocks_.size() - used_blocks() - draining_blocks();
  }
  /// Blocks on the free stack or an LRU level: what allocations may take.
  std::uint64_t takeable_blocks() const {
    return free_.size() + cached_blocks();
  }
  std::uint64_t pinned_blocks() const {
    return pinned_.size();
  }
  std::uint64_t free_host_blocks() const {
    return host_free_.size();
  }
  /// Sum over tenants of reserved - used, where positive.
  std::uint64_t shortfall() const;
  /// The prefix index: block by key.
  const std::map<prefix_key, block_id>& index() const {
    return index_;
  }
  std::vector<model_event> take_events() {
    return std::exchange(events_, {});
  }

private:
  enum class state { free, cached, used, draining };

  struct block {
    std::uint32_t refs = 0;
    state st = state::free;
    std::uint16_t tenant = 0; ///< last charged
    /// While cached: its LRU level. While used: the highest retention of
    /// its holders since it was taken fresh (revived, it keeps its level).
    std::size_t level = 0;
    std::optional<prefix_key> key; ///< set iff indexed
    /// Not indexed: the prefix it is a second copy of (its first copy held
    /// or pinned when it was filled), if any.
    std::optional<prefix_key> copy_of;
    std::uint16_t copy_tenant = 0; ///< whose request filled the second copy
    std::uint16_t stored_by = 0;   ///< tenant of its stored event
    bool pinned = false;           ///< then never on an LRU level
    std::uint64_t pin_until = 0;
    /// The pins whose prefix ends here (what unpin lets go): each one's
    /// token count and deadline.
    std::vector<std::pair<std::size_t, std::uint64_t>> pin_ends; ///< tokens, until
    /// The epoch that wrote into it last (0: none since taken), and the
    /// live epochs its writer had acquired then.
    std::uint64_t writer = 0;
    std::set<std::uint64_t> deps;
  };

  maybe_errc check(const allocation_request& req, std::uint16_t& t) const;
  /// The key of tokens[0, len) under tenant t's namespace and `salt`.
  prefix_key key_of(std::uint16_t t, std::uint64_t salt,
                    const std::vector<token_id>& tokens, std::size_t len) const;
  std::uint32_t hits(std::uint16_t t, std::uint64_t salt,
                     const std::vector<token_id>& prompt) const;
  /// Quota on `n`; availability on `n - unlisted` (revived pinned blocks
  /// come off no list).
  maybe_errc admit(std::uint16_t t, std::uint64_t n,
                   std::uint64_t unlisted = 0) const;
  /// What tenant `t` may take: free and LRU blocks less the others'
  /// reservations.
  std::uint64_t takeable(std::uint16_t t) const;
  /// Per tenant: what the free and LRU blocks hold back for its
  /// reservation - its shortfall less its own draining blocks.
  std::vector<std::uint64_t> reserve_held() const;
  /// Blocks `seq` is expected to grow by, resident only.
  std::uint64_t growth(const model_sequence& seq) const;
  /// `charged`: blocks the admission charges to `t` (`n` and revived
  /// pinned ones); a tenant's promises count only up to its quota.
  maybe_errc headroom(std::uint16_t t, std::uint64_t n,
                      std::uint64_t own_growth, std::uint64_t charged) const;
  /// The plan of allocate and can_allocate: the error, or what to take.
  struct plan {
    maybe_errc err;
    std::uint16_t t = 0;
    std::uint64_t n = 0;     ///< tokens now (a prefill chunk's: fewer)
    std::uint64_t whole = 0; ///< the prompt's (or initial) tokens
    std::uint64_t need = 0;
    std::uint32_t hits = 0;
    std::uint32_t written = 0; ///< leading hits on cached blocks
    bool hashing = false;
    std::uint64_t expected = 0;
  };
  plan plan_allocation(const allocation_request& req) const;
  /// release, for a request no device move holds.
  void release_now(request_id id);
  /// Its blocks back: device ones unreferenced (pins giving way), host ones
  /// to the host tier.
  void return_blocks(model_sequence& seq);
  /// Incarnation `cache_id` of `id`, live or a ghost; null if neither.
  model_sequence* find_swapping(request_id id, std::uint64_t cache_id);
  /// Ends a swap of `seq` (ok or not) and, for a ghost, its release.
  model_release finish_swap(model_sequence& seq, std::uint64_t before);
  block_id take(std::uint16_t t, std::size_t level);
  /// One more holder for indexed block `b`: `seq` (revived if cached).
  void share(block_id b, model_sequence& seq);
  void unref(block_id b, std::size_t level);
  /// Every full block of `tokens` found in the index, from the first on
  /// (what pin and unpin walk).
  std::vector<block_id> chain(std::uint16_t t, std::uint64_t salt,
                              const std::vector<token_id>& tokens) const;
  /// Pins give way to reservations (block_pool_core::give_way).
  void give_way(const std::vector<block_id>& table);
  void unpin_with_descendants(block_id b);
  /// Whether x's key extends b's (indexed) by one block.
  bool is_child(block_id x, block_id b) const;
  /// Unpins `b` alone, as the core's unpin_at does.
  void drop_pin(block_id b);
  void evict_block(block_id b);
  /// evict_block for the LRU's own evictions (take, evict): a second copy
  /// still held is indexed in the evicted first copy's place.
  void evict_from_lru(block_id b);
  /// Out of the index while in use (pins first, with those below).
  void unindex_held(block_id b);
  /// After discards ended epochs `bad` as never written: every indexed
  /// block computed over one leaves the index, and every request that
  /// acquired one indexes nothing more.
  void forget_built_on(const std::set<std::uint64_t>& bad);
  /// While a step discards: the bad epochs whose scan waits for its last.
  std::set<std::uint64_t>* batched_bad_ = nullptr;

  // -- epochs (pool_reference_model_lineage.cpp) -----------------------------

  /// `seq` becomes resident: a new epoch, live.
  void begin_epoch(model_sequence& seq);
  /// Ends `seq`'s epoch if live; whether another request acquired it.
  bool end_epoch(model_sequence& seq);
  /// Adds `t`, if live, to `into`, and marks it acquired by another.
  void add_live(std::set<std::uint64_t>& into, std::uint64_t t);
  /// `seq` wrote into its blocks [from, to).
  void wrote(model_sequence& seq, std::size_t from, std::size_t to);
  /// `seq` holds `b`, which it did not write (a hit, a swap-in's share).
  void acquire(model_sequence& seq, block_id b);
  std::map<std::uint64_t, bool> live_epochs_; ///< -> acquired by another
  std::uint64_t next_epoch_ = 1;
  void index(block_id b, prefix_key key, std::uint16_t t);
  /// Indexes `seq`'s blocks of settled tokens from block `from` on.
  void index_settled(model_sequence& seq, std::size_t from);

  std::uint32_t block_size_;
  bool prefix_caching_;
  model_config model_;
  std::vector<block> blocks_;
  std::vector<block_id> free_; ///< back = handed out next
  std::array<std::list<block_id>, detail::lru_lists::num_levels> lru_;
  std::map<prefix_key, block_id> index_;
  std::map<request_id, model_sequence> seqs_;
  std::map<std::uint64_t, model_sequence> ghosts_;
  std::vector<model_tenant> tenants_;
  detail::pool_counters counters_;
  std::uint64_t next_cache_id_ = 1;
  std::uint64_t next_admission_ = 1;
  std::vector<model_event> events_;
  admission_config admission_;
  std::uint64_t watermark_blocks_ = 0;
  std::uint64_t max_pinned_ = 0;
  /// The latest now expire_pins was given: pins ended by then cover nothing.
  std::uint64_t pins_now_ = 0;
  /// Pinned blocks, in the order the core keeps them: expiry walks it and
  /// moves the last entry into each removed one's place, and that order is
  /// the order expired cached blocks rejoin the LRU.
  std::vector<block_id> pinned_;
  std::vector<block_id> host_free_; ///< back = handed out next
  struct drain {
    std::uint64_t serial = 0;
    std::uint64_t tag = 0;
    std::vector<block_id> blocks;
  };
  std::vector<drain> drains_; ///< oldest first
  std::uint64_t next_drain_ = 1;
  std::uint64_t last_drain_ = 0;
  /// Its blocks back on the free stack, in its order; drops it.
  std::uint32_t end_drain_at(std::size_t i);

  // -- copies in flight (pool_reference_model_copies.cpp) ----------------------

  /// A copy-on-write copy taken with `hold`: its request as the extend
  /// found it (what a failed copy brings back) and the blocks the extend
  /// took (the copy and the new ones, which the undo returns as never
  /// handed out).
  struct held_copy {
    block_copy copy;
    model_sequence before;
    std::uint64_t taken = 0;
  };
  std::vector<held_copy> held_; ///< oldest first
  /// The copy in flight of request `seq`'s incarnation, or null.
  const held_copy* copy_of(const model_sequence& seq) const;
  /// Why `seq` must copy its partly filled last block before writing into
  /// it (a coverage key), or null if it may write in place.
  const char* copy_reason(const model_sequence& seq) const;
  std::map<std::string, std::size_t> copy_reasons_;
  std::size_t built_on_taken_ = 0;
  std::size_t batched_scans_ = 0;
  std::size_t built_on_stopped_ = 0;
  /// The failed copy's extend undone, if its request is still live.
  bool undo(const held_copy& h);
};

} // namespace kvactor::test
