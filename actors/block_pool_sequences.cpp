// block_pool_core: the request table - finding, creating and dropping
// sequences - and a request's end (release, reclaim, preempt; a release
// while a swap is in flight leaves a ghost that the swap's end drops) and
// fork.
#include "kvactor/actors/block_pool_core.hpp"

#include <algorithm>
#include <cassert>

#include "kvactor/messages/error.hpp"

namespace kvactor::detail {

// -- sequences ------------------------------------------------------------------------

namespace {

/// Starts fetching a sequence's second cache line alongside the first, which
/// the caller reads at once: the two misses overlap instead of following one
/// another (a short block table and an extend's fields span both).
inline void fetch_hot_lines(const sequence* seq) noexcept {
  __builtin_prefetch(reinterpret_cast<const char*>(seq) + 64);
}

} // namespace

const sequence* block_pool_core::find(request_id id) const noexcept {
  auto slot = seq_index_.find(id);
  if (slot == flat_index::npos)
    return nullptr;
  fetch_hot_lines(&seqs_[slot]);
  return &seqs_[slot];
}

sequence* block_pool_core::find_mut(request_id id) noexcept {
  auto slot = seq_index_.find(id);
  if (slot == flat_index::npos)
    return nullptr;
  fetch_hot_lines(&seqs_[slot]);
  return &seqs_[slot];
}

void block_pool_core::share_index(std::shared_ptr<index_hint> hint) {
  hint_ = std::move(hint);
  if (hint_)
    hint_->publish(seq_index_);
}

sequence& block_pool_core::new_sequence(request_id id) {
  std::uint32_t slot;
  if (!free_seq_slots_.empty()) {
    slot = free_seq_slots_.back();
    free_seq_slots_.pop_back();
  } else {
    slot = static_cast<std::uint32_t>(seqs_.size());
    seqs_.emplace_back();
  }
  seq_index_.insert(id, slot);
  if (hint_)
    hint_->publish(seq_index_); // it may have grown
  auto& seq = seqs_[slot];
  seq.id = id;
  seq.cache_id = next_cache_id_++;
  seq.admitted = next_admission_++;
  seq.blocks.clear();
  seq.tail.clear();
  seq.hashable = false;
  seq.num_hashed = 0;
  seq.tail_shared = false;
  seq.cow_pending = false;
  seq.where = residency::resident;
  seq.release_pending = false;
  seq.hit_blocks = 0;
  seq.brought_from = 0;
  seq.drafts = 0;
  seq.expected_tokens = 0;
  seq.step_stamp = 0;
  seq.last_access = clock_ns_;
  seq.host_blocks.clear();
  seq.host_hashes.clear();
  seq.incoming.clear();
  seq.restarted = false;
  seq.acquired = false;
  lineage_.begin(epoch_of(seq));
  return seq;
}

void block_pool_core::drop_sequence(sequence& seq) {
  std::uint32_t slot;
  if (seq.release_pending) {
    auto g = std::find_if(ghosts_.begin(), ghosts_.end(),
                          [&](std::uint32_t s) { return &seqs_[s] == &seq; });
    assert(g != ghosts_.end()); // check_invariant: ghosts_ lists every ghost
    slot = *g;
    ghosts_.erase(g);
  } else {
    slot = seq_index_.take(seq.id);
    assert(&seqs_[slot] == &seq); // check_invariant: the index names it
  }
  seq.blocks.clear();
  seq.tail.clear();
  seq.host_blocks.clear();
  seq.host_hashes.clear();
  seq.incoming.clear();
  seq.where = residency::resident;
  seq.release_pending = false;
  seq.expected_tokens = 0;
  // Ended (if resident): confirmed, unless a discard ended it as bad.
  lineage_.end(epoch_of(seq));
  if (seq.acquired || seq.restarted)
    lineage_.forget(seq.cache_id);
  seq.acquired = false;
  seq.restarted = false;
  free_seq_slots_.push_back(slot);
}

sequence* block_pool_core::find_swapping(request_id id,
                                         std::uint64_t cache_id) noexcept {
  auto seq = find_mut(id);
  if (seq != nullptr && seq->cache_id == cache_id)
    return seq;
  for (auto slot : ghosts_)
    if (seqs_[slot].id == id && seqs_[slot].cache_id == cache_id)
      return &seqs_[slot];
  return nullptr;
}

block_table block_pool_core::table(const sequence& seq) const {
  return block_table{{seq.blocks.begin(), seq.blocks.end()}, seq.num_tokens,
                     block_size_};
}

// -- release, reclaim, preempt, fork --------------------------------------------------

void block_pool_core::release_now(sequence& seq) {
  count_promise(seq, false);
  auto level = retention_level(seq);
  // Last block first: among blocks released together, the tail of a
  // sequence is the least likely to be shared again, so it is evicted first.
  // unref's metadata and links are fetched `ahead` blocks early; the first
  // `ahead` all at once (a short table's whole release overlaps its misses).
  constexpr std::ptrdiff_t ahead = 4;
  auto n = static_cast<std::ptrdiff_t>(seq.blocks.size());
  auto fetch = [&](std::ptrdiff_t k) {
    auto b = seq.blocks[static_cast<std::size_t>(k)];
    __builtin_prefetch(&blocks_[b], 1);
    lru_.prefetch(b);
  };
  for (auto k = n - 1; k >= 0 && k >= n - ahead; --k)
    fetch(k);
  for (auto k = n - 1; k >= 0; --k) {
    if (k >= ahead)
      fetch(k - ahead);
    unref(seq.blocks[static_cast<std::size_t>(k)], level);
  }
  for (auto i = seq.incoming.rbegin(); i != seq.incoming.rend(); ++i)
    unref(*i, level);
  give_way(seq.blocks.data(), seq.blocks.size());
  give_way(seq.incoming.data(), seq.incoming.size());
  for (auto h : seq.host_blocks)
    host_free_.push(h);
  seq.incoming.clear();
  seq.host_blocks.clear();
  seq.host_hashes.clear();
  if (!seq.release_pending) // a ghost stopped counting when it ended
    --tenants_[seq.tenant].active;
  drop_sequence(seq);
}

caf::expected<std::uint32_t> block_pool_core::release(request_id id) {
  auto seq = find_mut(id);
  if (seq == nullptr)
    return make_error(errc::unknown_request, req_name(id) + " is not allocated");
  if (seq->where == residency::swapping_out
      || seq->where == residency::swapping_in) {
    // The device is still moving its bytes: the request ends now, its
    // blocks return when the move ends. Out of the id index, the id may be
    // admitted again meanwhile.
    ghosts_.push_back(seq_index_.take(id));
    count_promise(*seq, false); // a ghost will not grow
    seq->release_pending = true;
    lineage_.end(epoch_of(*seq)); // ended: confirmed (a ghost writes nothing)
    --tenants_[seq->tenant].active;
    return std::uint32_t{0};
  }
  auto before = counters_.blocks_freed;
  release_now(*seq);
  return static_cast<std::uint32_t>(counters_.blocks_freed - before);
}

caf::expected<std::uint32_t> block_pool_core::reclaim(request_id id,
                                                      std::uint64_t cache_id) {
  auto seq = find(id, cache_id);
  if (seq == nullptr)
    return std::uint32_t{0};
  // Its owner or handle went, or nobody got it: its K/V may never have
  // been written, and nobody will write them - also not into the blocks it
  // brought that others hold. What stays indexed is its written hits.
  return discard(id);
}

caf::expected<std::uint32_t> block_pool_core::preempt(request_id id,
                                                      bool unindex) {
  auto seq = find(id);
  if (seq == nullptr)
    return make_error(errc::unknown_request, req_name(id) + " is not allocated");
  auto t = seq->tenant;
  // A preemption counts only if it frees device blocks now: a swapped
  // request holds none, and one mid-swap keeps its blocks until the move
  // ends (its swap was already the pool's answer to pressure). Either
  // still ends, as preempted, for its owner.
  bool resident = seq->where == residency::resident;
  // A victim's blocks others hold stay indexed: a step's pass that
  // admitted it still writes its K/V (the README's supervisor section).
  auto res = unindex ? discard(id, false) : release(id);
  if (!res)
    return res;
  if (resident) {
    ++counters_.preemptions;
    ++tenants_[t].preemptions;
  }
  return res;
}

caf::expected<allocation_outcome> block_pool_core::fork(request_id parent,
                                                        request_id child) {
  caf::error err;
  auto* par = find_resident(parent, err);
  if (par == nullptr)
    return make_error(static_cast<errc>(err.code()),
                      "fork parent: " + context_of(err));
  if (par->drafts != 0)
    return make_error(errc::invalid_request,
                      "fork parent: " + req_name(parent) + " has "
                        + std::to_string(par->drafts)
                        + " draft tokens unsettled: settle them first");
  if (find(child) != nullptr)
    return make_error(errc::duplicate_request,
                      req_name(child) + " is already allocated");
  // Under reserve_expected the child is admitted like any request: it
  // takes no block now, but expects its parent's growth and, sharing a
  // partly filled last block, a private copy of it on its first append.
  // (A watermark alone holds: nothing is taken.)
  if (auto err2 = admission_.policy != "reserve_expected"
                    ? caf::error{}
                    : admit_headroom(par->tenant, 0,
                                     growth(*par)
                                       + (par->num_tokens % block_size_ != 0),
                                     0))
    return make_error(errc::out_of_blocks,
                      "fork of " + req_name(parent) + ": "
                        + context_of(err2));
  auto& c = new_sequence(child); // sequences never move: par stays valid
  auto& p = *par;
  c.tenant = p.tenant;
  c.priority = p.priority;
  c.level = p.level;
  c.num_tokens = p.num_tokens;
  c.max_tokens = p.max_tokens;
  c.expected_tokens = p.expected_tokens;
  c.blocks = p.blocks;
  // It computes over what its parent wrote, and what that was computed over.
  c.acquired = lineage_.inherit(c.cache_id, p.cache_id, epoch_of(p),
                                p.acquired);
  c.hashable = p.hashable;
  c.num_hashed = p.num_hashed;
  // The blocks its parent's admission found cached are its first too, and
  // as surely written. Not the parent's own: nothing tells the pool its
  // pass ran (a fork may come before it), so an end that cannot know its
  // K/V were written (a reclaim, the supervisor's) leaves only these.
  c.hit_blocks = p.hit_blocks;
  // Its own blocks begin past its parent's full ones: a partly filled last
  // block it shares is the child's too once it writes there in place (the
  // parent's copy of it may fail and leave the parent on it), so a discard
  // of the child takes it out of the index though the parent holds it.
  c.brought_from = static_cast<std::uint16_t>(
    std::min<std::uint64_t>(p.num_tokens / block_size_, 65535));
  c.chain = p.chain;
  c.tail = p.tail;
  p.tail_shared = c.tail_shared = p.num_tokens % block_size_ != 0;
  for (auto b : c.blocks)
    hold(b, c);
  count_promise(c, true);
  ++counters_.allocations;
  ++tenants_[c.tenant].active;
  return allocation_outcome{c.cache_id, 0};
}

} // namespace kvactor::detail
