// block_pool_core: the block pool's state and every decision about who gets a
// block, without an actor around it (the block_pool actor wraps it; tests and
// benchmarks drive it directly). CAF-free apart from caf::expected.
//
// Invariants (check_invariant() verifies them all):
//  - every block is in exactly one state: free (on the free stack), cached
//    (ref count 0, in the prefix index and on one LRU level), used (ref
//    count > 0, equal to the number of sequence tables that hold it plus
//    its holds: one per copy in flight it is the source or destination of)
//    or draining (ref count 0, unindexed, in exactly one drain: let go by a
//    supervisor's victim, not yet free - preempt_draining);
//  - the prefix index maps a hash to a block iff that block is `indexed` with
//    that hash; cached blocks are always indexed;
//  - live requests are in the id index, requests released during a swap
//    (ghosts) are not; both hold their blocks;
//  - each used block is charged to exactly one tenant (the one whose request
//    took it from the pool, as Linux memcg charges the first toucher); the
//    tenants' charges sum to the used blocks, none above its max_blocks;
//  - a partially filled block that several tables hold is written in place
//    by at most one of them, one with as many tokens in it as any other
//    (the others are flagged tail_shared);
//  - a request's hashed blocks and tail add up to its tokens; no block
//    holding one of its unsettled draft tokens is indexed;
//  - the blocks anyone may take (free, or cached and not pinned) cover every
//    tenant's reservation shortfall (pins give way to keep it so) - with
//    the draining ones, which come free when their drain ends.
// Every operation validates first and then commits: a failed one changes
// nothing. Running out of host memory is not such a failure: a container's
// std::bad_alloc may leave an operation half done, so it is fatal - the
// block_pool actor ends ("block pool: crashed: std::bad_alloc", see
// crash_reason.hpp; the manager stops the cache), and every request to it is
// answered with CAF's request_receiver_down from then on, never with a
// half-changed pool. Cost: O(1) per block touched - but a discard of a
// request whose writes another request built on, which scans the pool for
// what was computed over them (forget_built_on, write_lineage.hpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "kvactor/actors/block_hash.hpp"
#include "kvactor/actors/block_lists.hpp"
#include "kvactor/actors/chunked_vector.hpp"
#include "kvactor/actors/index_hint.hpp"
#include "kvactor/actors/pool_sequence.hpp"
#include "kvactor/actors/pool_types.hpp"
#include "kvactor/actors/prefix_index.hpp"
#include "kvactor/actors/write_lineage.hpp"
#include "kvactor/config/cache_config.hpp"
#include "kvactor/messages/step.hpp"
#include "kvactor/messages/types.hpp"

namespace kvactor::detail {

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
  /// computed), the rest are fresh - with prefill_chunk, only that many
  /// tokens past the hits. All or nothing.
  caf::expected<allocation_outcome> allocate(const allocation_request& req);

  /// True if allocate(req) would succeed now.
  bool can_allocate(const allocation_request& req) const;

  /// How many of req's prompt tokens allocate(req) would find cached now:
  /// its leading full blocks in the prefix index (cached or in use, under
  /// its tenant's namespace and cache_salt), never the last token; 0 with
  /// prefix caching off or no prompt. For cache-aware scheduling - which
  /// waiting request gains most - not a promise: allocate looks again.
  /// Changes nothing. Errors: check's (the id need not be free).
  caf::expected<std::uint64_t> cached_prefix(const allocation_request& req) const;

  /// Grows `id` by `n` tokens (`tokens`: null or exactly n token ids). A
  /// shared, partially filled last block is replaced by a private copy first.
  /// With `hold_copies` the device has yet to copy (the caller settles the
  /// copies, settle_copies, before any other operation): both blocks of
  /// the copy stay held (in use, counted in their references) so neither
  /// may be handed to another request before - not even by a free later in
  /// the same step - and the extend stays undoable until then.
  /// `drafts` (at most n and max_draft_tokens): the last that many tokens
  /// are speculative - they get slots, but no block holding one enters the
  /// prefix index until settle_drafts keeps it. While drafts are unsettled
  /// the request neither grows nor forks (invalid_request).
  caf::expected<extension_outcome> extend(request_id id, std::uint64_t n,
                                          const token_id* tokens,
                                          bool hold_copies = false,
                                          std::uint64_t drafts = 0);

  /// Settles `id`'s draft tokens (block_pool_rollback.cpp): the first
  /// `accepted` become ordinary tokens (the blocks they fill enter the
  /// prefix index), the rest are dropped - the request shrinks by them and
  /// the blocks that held only dropped tokens go back to the pool, last
  /// first (never cached: nothing valid is in them). The outcome's
  /// first_changed is the new table length; `changed` says blocks went.
  /// Errors: unknown_request; invalid_request (not resident, a copy in
  /// flight, or accepted > its drafts). accepted = drafts = 0 is a no-op.
  caf::expected<extension_outcome> settle_drafts(request_id id,
                                                 std::uint64_t accepted);

  /// Ends `id`: its blocks return, last block first; indexed ones stay cached.
  /// Returns the number of blocks whose last reference went. During a swap
  /// it ends `id` at once (the id may be admitted again) and returns 0: the
  /// blocks stay with the ended incarnation, a ghost, until the swap's end.
  caf::expected<std::uint32_t> release(request_id id);

  /// release(id), but the blocks whose last reference goes leave the prefix
  /// index (free, not cached - pinned ones lose their pins, and their
  /// pinned descendants): for a request whose K/V may never have been
  /// written, its forward pass having failed. So do those it brought (from
  /// brought_from on) that others still hold - they hit them or forked it,
  /// and read what it never wrote: discard the other requests of a failed
  /// pass too - but not those it only found, and not with `!brought_held`
  /// (a supervisor's victim: the pass of a step that admitted it still
  /// writes its K/V). One being swapped out is discarded as if resident -
  /// what it holds alone counts as let go last - its ghost freeing what
  /// left the index when the copy ends. One away on the host or coming
  /// back takes out of the index what it wrote before it left (its epoch
  /// lasts until a swap-in: the pool is not told that a pass succeeded,
  /// nor does a swap-out say so). What its admission found cached (its first
  /// hit_blocks) stays indexed, pins and all: earlier passes wrote it. With
  /// `brought_held` its epoch ends as never written: what others computed
  /// over its writes leaves the index too, and whoever took them on
  /// indexes nothing more (forget_built_on, write_lineage.hpp).
  caf::expected<std::uint32_t> discard(request_id id, bool brought_held = true);

  /// Ends `id` only if its cache_id is still `cache_id` (a reclaim after
  /// the handle died must not free a newer request with the same id), as
  /// preempt(id, true) does: its owner or handle went, or nobody received
  /// it (a reply after its caller gave up), so its K/V may never have been
  /// written - the blocks whose last reference goes leave the index, all
  /// but those its admission found cached. 0 if that incarnation ended.
  caf::expected<std::uint32_t> reclaim(request_id id, std::uint64_t cache_id);

  /// release(id), counted as a preemption if `id` was resident (a swapped
  /// or mid-swap request frees no device blocks now: not counted). With
  /// `unindex`, discard(id) instead - but for the blocks its admission
  /// found cached, written by an earlier pass: for a victim chosen at any
  /// moment (the supervisor's), whose own K/V may not have been written.
  caf::expected<std::uint32_t> preempt(request_id id, bool unindex = false);

  // -- draining (block_pool_drain.cpp) ---------------------------------------------

  /// preempt(id, true), but the blocks whose last reference goes do not
  /// come free yet: they drain - no request holds them, nothing may take
  /// them - until end_drain(serial) or end_drains(tag), so that a writer
  /// still writing the victim's K/V (a forward pass under way when the
  /// supervisor chose it) writes into blocks nobody else has. `tag`: who
  /// may end the drain early (the stepper that admitted it; 0: nobody).
  /// The drain's serial is last_drain() (0 when no block drains: nothing
  /// went, or a swapped or mid-swap victim). Errors: preempt's;
  /// invalid_request while a block of its table is in a copy in flight
  /// (settle_copies first: it would come free at the settle, past the
  /// drain).
  caf::expected<std::uint32_t> preempt_draining(request_id id,
                                                std::uint64_t tag);
  /// The serial of the drain the last preempt_draining began, 0 if none.
  std::uint64_t last_drain() const noexcept {
    return last_drain_;
  }
  /// Ends drain `serial` (if it has not ended): its blocks come free.
  /// Returns how many.
  std::uint32_t end_drain(std::uint64_t serial);
  /// Ends every drain tagged `tag` (non-zero); returns how many blocks
  /// came free.
  std::uint32_t end_drains(std::uint64_t tag);
  /// Blocks draining now (neither free, cached nor used).
  std::uint64_t draining_blocks() const noexcept {
    return draining_;
  }
  std::size_t num_drains() const noexcept {
    return drains_.size();
  }

  /// A new request `child` sharing every block of `parent` (copy-on-write on
  /// its first append into the shared last block). Errors: unknown_request,
  /// invalid_request (parent swapped out, or with drafts unsettled),
  /// duplicate_request, out_of_blocks (reserve_expected).
  caf::expected<allocation_outcome> fork(request_id parent, request_id child);

  /// Usage, counters and per-tenant figures (block_pool_stats.cpp).
  pool_stats stats() const;

  /// The time (ns since the epoch) stamped on requests later admitted or
  /// grown (sequence::last_access); set per message: the core reads no clock.
  void set_clock(std::uint64_t ns) noexcept {
    clock_ns_ = ns;
  }
  /// Publishes the id index's table to `hint`, now and as it grows.
  void share_index(std::shared_ptr<index_hint> hint);

  /// What run_step tells its caller beyond the step_result.
  using step_trace = pool_step_trace;

  /// Executes one scheduler step (see messages/step.hpp), filling `trace`
  /// if given (cleared first). A request is extended at most once per
  /// step: a later entry of `extends` for it fails (invalid_request), and
  /// no request the step already extended is chosen as a victim.
  step_result run_step(const step_request& step, bool hold_copies = false,
                       step_trace* trace = nullptr);

  // -- copy-on-write in flight (block_pool_cow.cpp) -------------------------------

  /// The device finished `copies` (from extend or run_step with
  /// hold_copies): `copied` says whether it made them. Made: the extends
  /// that took them enter their filled blocks into the prefix index. Not
  /// made: each such extend is undone - its request holds the shared block
  /// again, its new blocks return, its tokens and hashing state are as
  /// before (a failed extend changes nothing); a request freed or
  /// preempted since has nothing left to undo. Cached blocks the extend
  /// evicted to make room stay evicted (counted, their KV events sent;
  /// the README says so under Faults). Either
  /// way the holds on both blocks of each copy end. Returns the requests
  /// whose extends were undone.
  std::vector<request_id> settle_copies(const std::vector<block_copy>& copies,
                                        bool copied);
  /// Copies taken with hold_copies and not yet settled.
  std::size_t copies_in_flight() const noexcept {
    return pending_cows_.size();
  }

  // -- swapping (block_pool_swap.cpp) --------------------------------------------

  /// Starts moving `id`'s blocks to the host tier: reserves host blocks and
  /// returns the moves for the device; the device blocks stay held until
  /// swap_out_done. Errors: unknown_request, invalid_request (not resident),
  /// out_of_blocks (host tier full).
  caf::expected<std::vector<block_move>> swap_out_begin(request_id id);
  /// The device moved the bytes (ok) or failed (!ok: back to resident) for
  /// incarnation `cache_id` of `id` - live, or released during the move
  /// (then the move's end returns its blocks, even if `id` was admitted
  /// again meanwhile). Returns the device blocks whose last reference went;
  /// `left`, if given, gets the device blocks the request let go (ok only:
  /// the device keeps them closed to writes until told).
  caf::expected<std::uint32_t> swap_out_done(request_id id,
                                             std::uint64_t cache_id, bool ok,
                                             std::vector<block_id>* left
                                             = nullptr);
  /// Starts bringing a swapped request back: a block whose hash is still in
  /// the prefix index is shared again (revived if cached), the others get
  /// fresh device blocks, which the returned moves fill. Errors:
  /// unknown_request, invalid_request (not swapped), out_of_blocks (also
  /// when it would leave less than the admission headroom), quota_exceeded.
  caf::expected<std::vector<block_move>> swap_in_begin(request_id id);
  /// The device moved the bytes (ok: resident again) or failed (!ok: still
  /// swapped; the fresh blocks go back, and revived ones back to the cache,
  /// as its most recently used blocks, at the request's level or the
  /// higher one they kept). Names its incarnation as swap_out_done does.
  caf::expected<std::uint32_t> swap_in_done(request_id id,
                                            std::uint64_t cache_id, bool ok);
  std::uint32_t num_host_blocks() const noexcept {
    return num_host_blocks_;
  }
  std::uint64_t free_host_blocks() const noexcept {
    return host_free_.size();
  }

  // -- policy (block_pool_policy.cpp) --------------------------------------------

  /// Requests to preempt so that about `blocks` blocks come free: lowest
  /// request priority first, then lowest tenant priority, then the tenant
  /// furthest over its fair share, then the newest; never one of a tenant
  /// at or below its (non-zero) reservation.
  /// O(blocks held + requests x log(requests) + victims x tenants).
  std::vector<request_id> choose_victims(std::uint64_t blocks) const;
  /// Whether choose_victims could name anyone: a tenant with live requests
  /// and no reservation, or above it. O(tenants) - what the pool asks
  /// before it wakes the supervisor again within the critical band.
  bool may_name_victims() const noexcept;

  /// Blocks no other request's table holds: what preempting `s` frees. A
  /// copy-on-write copy in flight holds its blocks too, but only until it
  /// lands - that hold makes no block shared.
  std::uint64_t exclusive_blocks(const sequence& s) const noexcept;
  /// The blocks of [first, last) only their one table holds.
  std::uint64_t exclusive_in(const block_id* first,
                             const block_id* last) const noexcept;

  /// Blocks the swaps in flight will free whatever their outcome, or once
  /// they succeed: the exclusive blocks of requests swapping out (live or
  /// ended meanwhile) and of ended requests swapping in. A relief counts
  /// them as going already - else a big swap-out costs an extra victim.
  /// O(ghosts) with no swap-out in flight, else O(live requests).
  std::uint64_t blocks_leaving() const noexcept;

  /// Keeps the cached full blocks of `tokens` (tenant `t`'s namespace) from
  /// eviction until `now_ms + ttl_ms`. Returns how many blocks are pinned.
  /// Errors (nothing pinned then): quota_exceeded past max_pinned_blocks;
  /// out_of_blocks if pinning cached blocks would take what reservations
  /// hold - any tenant's, the pinner's too (a pinned cached block cannot be
  /// taken); invalid_request for a block another reserved tenant is using,
  /// or for a negative token id (named by its index).
  /// Pins give way to reservations: when pinned blocks are let go while the
  /// reservations are short of blocks, as many as they need lose their pins
  /// and are cached like any other (give_way), so the pool always covers
  /// them - with its draining blocks, which cover reservations first (a
  /// tenant whose victim drains may wait for the drain's end; the others
  /// keep the free blocks).
  /// `salt`: the cache_salt the prefix was allocated under.
  caf::expected<std::uint32_t> pin(std::uint16_t t,
                                   const std::vector<token_id>& tokens,
                                   std::uint64_t ttl_ms, std::uint64_t now_ms,
                                   std::uint64_t salt = 0);

  /// Lets the pin on pin's chain of `tokens` go now: the one whose prefix
  /// ends at the chain's deepest pinned block. Its blocks lose their pins,
  /// deepest first, but for those another pin still covers: one whose
  /// prefix ends higher up the chain (an operator's system prompt under an
  /// ended session's), or hangs below it off the chain - those blocks keep
  /// their pins, until the latest of the pins still over them ends. A pin
  /// whose time ran out (by expire_pins' latest now) covers nothing, but
  /// is still the one a list of its length names. With no pin of the
  /// list's length there, every pin ending there goes. Returns how many
  /// lost their pins (0: none pinned, or pinning disabled).
  /// Errors: unknown_tenant; invalid_request for a negative token id.
  /// O(tokens + pins x log(chain)); block_pool_policy.cpp.
  caf::expected<std::uint32_t> unpin(std::uint16_t t,
                                     const std::vector<token_id>& tokens,
                                     std::uint64_t salt = 0);

  /// Cached blocks that are pinned (cached_blocks() counts the others).
  std::uint64_t pinned_cached_blocks() const noexcept;

  /// Unpins blocks whose time ran out; returns how many. A pin that ended
  /// at a block a later pin keeps stays listed there, as ended (unpin).
  /// O(1) until the earliest pin's deadline (every hot message calls it),
  /// then O(pins).
  std::uint32_t expire_pins(std::uint64_t now_ms);
  std::uint64_t pinned_blocks() const noexcept {
    return pinned_.size();
  }
  /// The tenant index of `name` ("" = the one named "default", else the
  /// first).
  caf::expected<std::uint16_t> tenant_index(const std::string& name) const;

  /// Calls f(hash, block) for every prefix-index entry.
  template <class F>
  void for_each_indexed(F&& f) const {
    index_.for_each([&](std::uint32_t b) { f(blocks_[b].hash.lo, b); });
  }

  /// Entries in the prefix index.
  std::size_t index_size() const noexcept {
    return index_.size();
  }

  // -- cache ---------------------------------------------------------------------

  /// Evicts up to `n` cached blocks, least valuable first; returns how many.
  std::uint32_t evict(std::uint32_t n);

  /// Turns recording of index changes (take_events) on or off. Off drops
  /// what was recorded and not taken: those changes, and every one until
  /// recording is on again, go unheard. On returns whether any did since
  /// recording was last on (then the pool counts a batch nobody heard, so
  /// a subscriber joining after them sees a gap in seq).
  bool record_events(bool on) noexcept {
    bool missed = false;
    if (on) {
      missed = unheard_;
      unheard_ = false;
    } else {
      unheard_ = unheard_ || !events_.empty();
      events_.clear();
    }
    record_events_ = on;
    return missed;
  }
  /// Index changes since the last take_events().
  std::vector<index_event> take_events() {
    return std::move(events_);
  }

  // -- queries -------------------------------------------------------------------

  const sequence* find(request_id id) const noexcept;
  /// Request `id` if it is live as incarnation `cache_id`, else null. One
  /// released while a swap was in flight has ended (see ghosts below).
  const sequence* find(request_id id, std::uint64_t cache_id) const noexcept {
    auto seq = find(id);
    return seq != nullptr && seq->cache_id == cache_id ? seq : nullptr;
  }
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
  /// Blocks no request holds and none drains: free or cached.
  std::uint64_t free_blocks() const noexcept {
    return blocks_.size() - used_ - draining_;
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
  /// Requests released while their swap was in flight (release_pending):
  /// ended, out of the id index (the id may be admitted again), holding
  /// their blocks until the device's move ends.
  std::size_t num_ghosts() const noexcept {
    return ghosts_.size();
  }
  template <class F>
  void for_each_ghost(F&& f) const {
    for (auto slot : ghosts_)
      f(seqs_[slot]);
  }

  /// Verifies every invariant in the header comment; O(blocks + table
  /// entries). Returns invariant_violation naming the first broken one.
  /// Not from two threads at once on one pool, const as it is: it counts
  /// into marks_ (the pool actor calls it, one message at a time).
  caf::error check_invariant() const;

private:
  struct checks; ///< check_invariant's parts (block_pool_check.cpp)
  /// Tests only (tests/unit/pool_test_access.hpp): corrupts state on purpose.
  friend struct block_pool_test_access;
  enum class block_state : std::uint8_t { free, cached, used, draining };

  /// Per block, 32 bytes: what every hot path touches. The parent hash
  /// (events only) and pin deadline (pins only) live in side arrays.
  struct block_meta {
    std::uint32_t ref_count = 0;
    std::uint16_t tenant = 0;
    /// The tenant whose request entered it into the index: its removal event
    /// names the same tenant as its stored event, whoever was charged since.
    std::uint16_t stored_by = 0;
    block_state state = block_state::free;
    /// LRU level while cached; while used, the highest level of its holders.
    std::uint8_t level = 0;
    bool indexed = false;
    bool pinned = false; ///< cached but kept off the LRU until its deadline
    /// References held by copies in flight (counted in ref_count too); 32
    /// bits: a block may be the source of >65535 fork copies in one step.
    std::uint32_t holds = 0;
    block_hash hash;
  };
  static_assert(sizeof(block_meta) <= 32, "keep block_meta two to a line");

  // -- helpers (block_pool_core.cpp) ---------------------------------------------

  /// run_step's extends (block_pool_step.cpp); `named`: with token ids.
  void run_extends(const step_request& step, bool named, bool hold_copies,
                   step_trace* trace, step_result& r);

  /// What an allocation would do (lookup included), checked against every
  /// limit; changes nothing. Hit hashes are left in scratch_.
  struct alloc_plan {
    std::uint16_t tenant = 0;
    std::uint64_t tokens = 0;   ///< tokens now (a prefill chunk's: fewer)
    std::uint64_t need = 0;     ///< blocks for them
    std::uint32_t hits = 0;     ///< of which shared from the index
    std::uint64_t revived = 0;  ///< hits on cached (unheld) blocks
    /// Leading hits on cached blocks: written by a pass that ended (a hit
    /// on a block another request holds may be on one its admission just
    /// indexed, unwritten yet). The sequence's hit_blocks.
    std::uint32_t written = 0;
    std::uint64_t pinned = 0;   ///< of which pinned (on no list)
    bool hashing = false;
    block_hash seed;            ///< its chains' root (tenant and salt)
    std::uint64_t expected = 0; ///< tokens promised (reserve_expected)
  };
  caf::expected<alloc_plan> plan_allocation(const allocation_request& req) const;

  /// Whether `req`'s prompt is the memo's.
  bool memo_matches(const allocation_request& req) const noexcept {
    return memo_.valid && !req.prompt.empty() && memo_.prompt == req.prompt;
  }
  caf::expected<std::uint16_t> check(const allocation_request& req,
                                     bool prompt_validated) const;

  /// Blocks tenant `t` may take now: free and cached, less others' reserves.
  std::uint64_t takeable(std::uint16_t t) const noexcept;
  /// Of the blocks tenant `t`'s reservation misses, those the free and
  /// cached blocks must hold back for it: its own draining blocks cover it
  /// first (a victim's drain must not take from everyone else the room its
  /// tenant's reservation is owed - that tenant waits for the drain's end
  /// instead), and no other tenant's (whose drain would make this one
  /// wait).
  std::uint64_t reserve_held(std::uint16_t t) const noexcept {
    auto s = shortfall(t);
    auto d = tenants_[t].draining;
    return s > d ? s - d : 0;
  }
  /// Adds `delta` blocks (+1 or -1) to tenant `t`'s draining ones, keeping
  /// held_total_.
  void add_draining(std::uint16_t t, int delta) noexcept;
  /// Whether tenant `t` may take `n` more blocks (quota and reservations);
  /// the error says which limit. `unlisted` of them (revived pinned blocks)
  /// count toward the quota but come off neither the free nor the LRU list.
  caf::error admit_blocks(std::uint16_t t, std::uint64_t n,
                          std::uint64_t unlisted = 0) const;
  /// Admission headroom: after tenant `t` takes `n` blocks off the lists
  /// (`charged` charged to it, revived pinned ones included), does the
  /// pool still hold the watermark and (reserve_expected) the promised
  /// growth plus `growth` - or, where it already did not, no less of it?
  /// A tenant's promises count only as far as its quota lets it grow.
  caf::error admit_headroom(std::uint16_t t, std::uint64_t n,
                            std::uint64_t growth,
                            std::uint64_t charged) const;
  /// Of `promised` blocks of growth, what tenant `t` could still take
  /// beside `taking` more: all, but for a quota (max_blocks), which holds
  /// it to max_blocks - used - taking. Promises past that can never be
  /// kept, and counted they kept other tenants out while blocks were free.
  std::int64_t usable_promise(std::uint16_t t, std::int64_t promised,
                              std::int64_t taking) const noexcept;
  /// Blocks `seq` is expected to grow by (0 without a promise). A request
  /// swapping in was admitted with its growth, which stays promised while
  /// the device copies (its table is `incoming` then); one swapping out
  /// keeps its promise until the copy succeeded (a failed swap changes
  /// nothing - also not the room later admissions leave it); a swapped or
  /// ended one (a ghost) will not grow.
  std::uint64_t growth(const sequence& seq) const noexcept {
    if (seq.expected_tokens == 0 || seq.release_pending)
      return 0;
    std::size_t held = 0;
    if (seq.where == residency::resident
        || seq.where == residency::swapping_out)
      held = seq.blocks.size();
    else if (seq.where == residency::swapping_in)
      held = seq.incoming.size();
    else
      return 0;
    auto want = blocks_for(seq.expected_tokens);
    return want > held ? want - held : 0;
  }
  /// Counts `seq`'s growth in its tenant's promises (`in`) or out.
  void count_promise(const sequence& seq, bool in) noexcept {
    auto& p = tenants_[seq.tenant].promised;
    p = in ? p + growth(seq) : p - growth(seq);
  }
  /// Keeps the promises right around a change of `seq`: call with the
  /// growth before the change, after it.
  void repromise(const sequence& seq, std::uint64_t before) noexcept {
    if (seq.expected_tokens != 0) {
      auto& p = tenants_[seq.tenant].promised;
      p = p - before + growth(seq);
    }
  }
  void release_now(sequence& seq);
  sequence* find_resident(request_id id, caf::error& err);
  block_id take_block(std::uint16_t t);
  /// Before evicting `b` (the LRU front): prefetches for the next evictions.
  void prefetch_evictions(block_id b) const noexcept;
  void charge(block_id b, std::uint16_t t) noexcept;
  void uncharge(block_id b) noexcept;
  /// One holder less for `b`; the last one caches it (indexed) or frees it.
  void unref(block_id b, std::uint8_t level);
  /// `b` was let go (unref): if it is a listed second copy of prefix `h`,
  /// it is one no more, and the first copy, cached and unpinned, moves to
  /// the LRU's recent end, at `level` at least.
  void refresh_first_copy(block_id b, block_hash h, std::uint8_t level);
  /// Takes `b` off second_copies_ (listed under its hash); false if it was
  /// not there.
  bool drop_second_copy(block_id b);
  /// The LRU evicted the first copy of `h`: a second copy (the lowest
  /// block id), still held, is indexed in its place.
  void promote_second_copy(block_hash h);
  /// evict_one for the LRU's own evictions (take_block, evict), which
  /// promote a second copy.
  void evict_lru(block_id b, std::uint8_t level);
  /// Drops the pin pinned_[i] (the last pin moves to i; a cached block
  /// goes onto the LRU at its level).
  void unpin_at(std::size_t i);
  /// Pins give way to reservations. After `blocks` (a table, head first)
  /// were let go: while the free and evictable blocks do not cover every
  /// reservation's shortfall (a pinned block let go leaves them short by
  /// one if its holder's tenant fell below its reservation), unpins the
  /// pinned cached blocks among them, deepest first, each with the pinned
  /// blocks below it - so what stays pinned is still a prefix a lookup can
  /// reach. O(1) when nothing is short.
  void give_way(const block_id* blocks, std::size_t n);
  /// Unpins `b` (pinned) and, before it, every pinned block below it in
  /// the prefix tree, deepest first. O(pins x depth).
  void unpin_with_descendants(block_id b);
  /// Takes block `b`, in use, out of the prefix index (its pin first, with
  /// the pins below it): its holders keep it, nobody finds it any more.
  void unindex_held(block_id b);
  /// discard of `seq`, away on the host or coming back (a ghost then):
  /// its epoch ends bad, and what it wrote before the swap-out leaves the
  /// index - by the hashes it took along, or forget_built_on's scan if
  /// others took the epoch on.
  caf::expected<std::uint32_t> discard_away(sequence& seq);
  /// Cached `b` leaves the index (a pin first, with the pins below it) and
  /// goes free.
  void free_cached(block_id b);
  /// A discarded epoch `bad` others took on: forget_built_on now, or with
  /// the step's other discards (batched_bad_).
  void forget_spread(write_lineage::token bad);
  /// After discards of requests whose epochs `bad` others acquired: takes
  /// out of the index every block computed over their writes (its deps
  /// hold one), and stops every request that computed over them (its acc
  /// holds one) from indexing what it writes (block_pool_rollback.cpp).
  /// O((blocks + requests) x bad).
  void forget_built_on(std::vector<write_lineage::token> bad);
  /// `seq` computes over K/V nobody wrote: no block of its enters the
  /// index from now on (nor after the undo of a copy in flight).
  void stop_indexing(sequence& seq);
  void evict_one(block_id b, std::uint8_t level);
  /// Enters `b` (held, full) into the prefix index under `h`. Its hash is
  /// indexed already: a first copy cached and unpinned is evicted, `b`
  /// taking its place; a held or pinned one stays, and `b` stays out of
  /// the index, listed in second_copies_.
  void index_block(block_id b, block_hash h, std::uint64_t parent,
                   std::uint16_t t, const token_id* tokens);
  /// Appends `n` token ids to `seq`'s tail (its drafts already counted) and
  /// hashes the blocks they complete.
  void hash_appended(sequence& seq, const token_id* tokens, std::uint64_t n);
  /// Hashes (and indexes) the full blocks of settled tokens in `seq`'s tail.
  void hash_tail(sequence& seq);
  /// The last step of every growth, once its blocks are in place: counts
  /// `n` tokens (the last `drafts` of them drafts) into `seq`, hashing the
  /// named ones or ending the chain at unnamed ones.
  void add_tokens(sequence& seq, std::uint64_t n, const token_id* tokens,
                  std::uint64_t drafts);
  /// Appends without taking a block when the tokens fit the unshared last
  /// block; false (and nothing done) when the full path is needed.
  bool append_in_place(sequence& seq, std::uint64_t n, const token_id* tokens,
                       std::uint64_t drafts = 0);
  std::uint8_t retention_level(const sequence& seq) const noexcept;
  void hold(block_id b, const sequence& seq) noexcept;
  /// `seq` holds indexed block `b` (a hit, a swap-in's share): revived if
  /// cached; what its K/V were computed over joins `took`, which seq then
  /// adopts (write_lineage) - but `own`, the epoch of a swap-in's own (its
  /// block, written before it left, is not another's).
  void share_indexed(block_id b, const sequence& seq,
                     write_lineage::token_set& took,
                     write_lineage::token own = 0);
  /// The token of `seq`'s current epoch (write_lineage).
  write_lineage::token epoch_of(const sequence& seq) const {
    return lineage_.current(seq.cache_id, seq.restarted);
  }
  /// `seq` is back on the device (a swap-in, its engine resuming it): its
  /// epoch ends confirmed, a new one begins.
  void next_epoch(sequence& seq);
  /// `seq` wrote into its blocks [from, to).
  void wrote(sequence& seq, std::size_t from, std::size_t to);
  /// Blocks that hold `tokens` tokens.
  std::uint64_t blocks_for(std::uint64_t tokens) const noexcept {
    return tokens / block_size_ + (tokens % block_size_ != 0);
  }
  /// The root of tenant `t`'s chains under `salt` (cache_salt).
  block_hash seed_of(std::uint16_t t, std::uint64_t salt) const noexcept {
    return salted_seed(tenants_[t].seed, salt);
  }
  /// How many of the prompt's first full blocks (at most `max_hits`) are in
  /// the index, its chain rooted at `seed`; their hashes (and the first
  /// miss's) are left in scratch_.
  std::uint32_t lookup(block_hash seed, const std::vector<token_id>& prompt,
                       std::uint32_t max_hits, bool memo = false) const;
  /// Extends scratch_ to the hashes of the prompt's first `full` blocks.
  void hash_all(block_hash seed, const std::vector<token_id>& prompt,
                std::size_t full) const;
  /// An extend whose copy-on-write copy is in flight: the state to restore
  /// if the copy fails, and the index entries its request's blocks earn
  /// meanwhile (deferred until the copy is made).
  struct pending_cow {
    struct entry {
      std::uint32_t pos = 0; ///< in the request's table
      block_hash hash;
      std::uint64_t parent = 0;
      std::vector<token_id> tokens;
    };
    request_id id = 0;
    std::uint64_t cache_id = 0;
    block_copy copy;
    std::size_t old_blocks = 0; ///< table length before the extend
    std::uint64_t num_tokens = 0;
    bool hashable = false;
    std::uint32_t num_hashed = 0;
    block_hash chain;
    std::vector<token_id> tail;
    std::vector<entry> deferred;
  };
  /// Records an extend of `seq` that is about to copy `copy`.
  void begin_cow(sequence& seq, block_copy copy);
  /// Enters (or, for the request of a copy in flight, defers) block `pos`
  /// of `seq` into the prefix index.
  void index_filled(sequence& seq, std::uint32_t pos, block_hash h,
                    std::uint64_t parent, const token_id* tokens);
  void commit_cow(const pending_cow& p);
  bool undo_cow(pending_cow& p);
  /// Whether a copy in flight from block `b` was made for a request with
  /// more than `fill` tokens in it: should that copy fail, the request
  /// comes back to `b`, so no one may write past `fill` there meanwhile.
  bool copy_reads_past(block_id b, std::uint64_t fill) const;
  /// The indexed block whose hash.lo is `lo`, or prefix_index::npos.
  block_id find_indexed(std::uint64_t lo) const noexcept {
    return index_.find(lo, [this](block_id b) { return blocks_[b].hash.lo; });
  }
  sequence* find_mut(request_id id) noexcept;
  /// Whether `id` is allocated and resident: preempting it frees blocks now.
  /// Would preempting a request of tenant `v` free blocks tenant `t` may
  /// take? Not if `v` is another tenant at or below its reservation (judged
  /// by tenant: a shared block is charged to its first holder's).
  bool frees_for(std::uint16_t t, std::uint16_t v) const noexcept {
    auto reserved = tenants_[v].config.reserved_blocks;
    return v == t || reserved == 0 || tenants_[v].used > reserved;
  }
  bool holds_device_blocks(request_id id) const noexcept {
    auto seq = find(id);
    return seq != nullptr && seq->where == residency::resident;
  }
  sequence& new_sequence(request_id id);
  /// Frees `seq`'s slot, a live request's or a ghost's.
  void drop_sequence(sequence& seq);
  /// The swap in flight of incarnation `cache_id` of `id`: live or a ghost.
  sequence* find_swapping(request_id id, std::uint64_t cache_id) noexcept;
  std::uint64_t shortfall(std::uint16_t t) const noexcept;
  /// exceeds_capacity if a table of `blocks` is more than one request of
  /// tenant `t` may hold (tenant_state::lone_cap); `who` names it.
  caf::error fits_alone(const std::string& who, std::uint16_t t,
                        std::uint64_t blocks) const;

  std::uint32_t block_size_;
  bool prefix_caching_;
  model_config model_;
  std::vector<block_meta> blocks_;
  std::vector<std::uint64_t> parent_;    ///< per block: parent's hash.lo
  std::vector<std::uint64_t> pin_until_; ///< per block: pin deadline (ms)
  std::vector<std::uint32_t> pin_pos_; ///< per block: index in pinned_ (pins)
  free_stack free_;
  lru_lists lru_;
  prefix_index index_; ///< hash.lo -> block
  using sequence_store = chunked_vector<sequence, 12>; ///< 1 MiB chunks
  sequence_store seqs_; ///< by slot; never moved: a sequence& outlives growth
  std::vector<std::uint32_t> free_seq_slots_;
  flat_index seq_index_; ///< request id -> slot in seqs_
  std::shared_ptr<index_hint> hint_; ///< share_index
  std::vector<std::uint32_t> ghosts_; ///< slots of ghosts (for_each_ghost)
  /// Whose unconfirmed writes each block's K/V were computed over.
  write_lineage lineage_;
  /// While run_step discards: the bad epochs whose scan waits for the
  /// last discard (one scan for a failed pass's many); else null.
  std::vector<write_lineage::token>* batched_bad_ = nullptr;
  std::vector<tenant_state> tenants_;
  std::uint16_t default_tenant_ = 0; ///< what "" names (find_tenant(""))
  std::uint64_t used_ = 0;
  std::uint64_t shortfall_total_ = 0; ///< sum over tenants of reserved - used
  /// Sum over tenants of reserve_held: what the free and cached blocks
  /// hold back for reservations.
  std::uint64_t held_total_ = 0;
  std::uint64_t next_cache_id_ = 1;
  std::uint64_t next_admission_ = 1;
  std::uint64_t step_stamp_ = 0; ///< run_step's count (sequence::step_stamp)
  std::uint64_t clock_ns_ = 0;   ///< set_clock
  pool_counters counters_;
  bool record_events_ = false;
  bool unheard_ = false; ///< an index change while recording was off
  std::vector<index_event> events_;
  /// Second copies of indexed prefixes (index_block: the first copy held
  /// or pinned), by hash.lo, while held: what takes the first copy's place
  /// when the LRU evicts it (promote_second_copy), so the blocks indexed
  /// below that hash stay reachable. Empty nearly always.
  struct second_copy {
    block_id block = 0;
    std::uint16_t tenant = 0;     ///< whose request filled it
    std::vector<token_id> tokens; ///< its tokens, for the stored event
  };
  std::unordered_multimap<std::uint64_t, second_copy> second_copies_;
  // Policy state.
  admission_config admission_;
  std::uint64_t watermark_blocks_ = 0;
  std::uint64_t max_pinned_ = 0;
  std::vector<block_id> pinned_;
  /// The pins whose prefix ends at a block, as pin() made them: each known
  /// by its token count (what unpin names it by: an operator's system
  /// prompt and a session's prompt of it and a partial turn end at the
  /// same block), and when it ends. Empty for nearly every pinned block.
  struct pin_end {
    std::vector<std::pair<std::uint64_t, std::uint64_t>> pins; ///< tokens, until
    /// The pin of `tokens` tokens, or pins.end().
    auto of(std::uint64_t tokens) {
      return std::find_if(pins.begin(), pins.end(),
                          [&](const auto& p) { return p.first == tokens; });
    }
    /// The latest end of a pin still running after `now` (0: none is;
    /// live_until(0): the latest of all).
    std::uint64_t live_until(std::uint64_t now) const noexcept {
      std::uint64_t u = 0;
      for (auto& p : pins)
        if (p.second > now)
          u = std::max(u, p.second);
      return u;
    }
  };
  /// Parallel to pinned_: which pins end at each pinned block. A block is
  /// pinned while a pin ends at it or below it (pin_until_ is the latest of
  /// their deadlines) - or, after pins below gave way to reservations, until
  /// its own deadline, with none.
  std::vector<pin_end> pin_ends_;
  /// No pin ends before this (a lower bound of pin_until_ over pinned_,
  /// exact after each expire_pins scan; unpins leave it low, which costs
  /// one scan at most).
  std::uint64_t next_pin_expiry_ = UINT64_MAX;
  /// The latest now_ms expire_pins was given: a pin that ended by then
  /// covers nothing, though its entry stays in pin_ends_ until its block
  /// unpins - so that an unpin naming it finds it, and lets go that one
  /// rather than every pin at its end.
  std::uint64_t pins_now_ms_ = 0;
  std::vector<pending_cow> pending_cows_;
  /// Per swap-in in flight (by cache id): how many of its blocks it shared
  /// at begin. Its end cannot tell them by the index any more: a discard
  /// may take a block another request holds out of it (unindex_held).
  std::vector<std::pair<std::uint64_t, std::uint32_t>> swap_in_shared_;
  /// Requests swapping out (live or ghosts): blocks_leaving scans none
  /// while there are none.
  std::uint32_t swapping_out_ = 0;
  /// Blocks a supervisor's victim let go, kept from reuse a while
  /// (preempt_draining): ref count 0, unindexed, on no list.
  struct drain {
    std::uint64_t serial = 0;
    std::uint64_t tag = 0;
    std::vector<block_id> blocks;
  };
  std::vector<drain> drains_; ///< oldest first
  std::uint64_t draining_ = 0;
  std::uint64_t next_drain_ = 1;
  std::uint64_t last_drain_ = 0;
  /// Frees drains_[i]'s blocks and drops it; returns how many.
  std::uint32_t end_drain_at(std::size_t i);
  // Host tier (swap): free host blocks; the others are swapped requests'.
  std::uint32_t num_host_blocks_ = 0;
  free_stack host_free_;
  mutable std::vector<block_hash> scratch_;
  mutable admission_memo memo_; ///< the last admission that did not fit
  /// check_invariant's count of what each block should be, recomputed from
  /// the tables and lists on every check. Kept between checks, and made
  /// with the pool (so a block count the host cannot keep it for fails at
  /// start): made afresh, a million blocks' worth cost a third of a check
  /// in page faults.
  struct check_mark {
    std::uint32_t refs = 0;     ///< tables holding the block
    std::uint32_t top_fill = 0; ///< most tokens one of them has in it
    std::uint32_t holds = 0;    ///< copies in flight reading or writing it
    std::uint8_t list = 0;      ///< 0 none, 1 free, 2 LRU, 3 draining
    std::uint8_t writers = 0;   ///< tables that may write it in place (to 2)
    std::uint16_t writer_fill = 0; ///< the last such table's tokens in it
  };
  mutable std::vector<check_mark> marks_;
};

} // namespace kvactor::detail
