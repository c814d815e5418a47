// block_pool_core: copy-on-write copies in flight. An extend that replaces
// a shared, partially filled last block by a private copy (extend or
// run_step with hold_copies) stays undoable until the device has copied:
//  - both blocks of the copy stay held, so neither changes owner meanwhile;
//  - the blocks its request fills meanwhile wait to enter the prefix index,
//    because their contents build on the copy (a block indexed before it
//    exists could be served to another request);
//  - if the copy fails, the extend is undone: a failed operation changes
//    nothing, and no block changes owner.
// The block pool actor settles a step's copies before it handles another
// message, so nothing but the rest of that step touches the request between
// the extend and settle_copies.
#include "kvactor/actors/block_pool_core.hpp"

#include <algorithm>
#include <cassert>

namespace kvactor::detail {

void block_pool_core::begin_cow(sequence& seq, block_copy copy) {
  pending_cow p;
  p.id = seq.id;
  p.cache_id = seq.cache_id;
  p.copy = copy;
  p.old_blocks = seq.blocks.size();
  p.num_tokens = seq.num_tokens;
  p.hashable = seq.hashable;
  p.num_hashed = seq.num_hashed;
  p.chain = seq.chain;
  p.tail = seq.tail;
  pending_cows_.push_back(std::move(p));
  seq.cow_pending = true;
}

void block_pool_core::index_filled(sequence& seq, std::uint32_t pos,
                                   block_hash h, std::uint64_t parent,
                                   const token_id* tokens) {
  if (!seq.cow_pending) {
    index_block(seq.blocks[pos], h, parent, seq.tenant, tokens);
    return;
  }
  // The newest record of this incarnation is the one in flight.
  auto i = std::find_if(pending_cows_.rbegin(), pending_cows_.rend(),
                        [&](const pending_cow& p) {
                          return p.id == seq.id && p.cache_id == seq.cache_id;
                        });
  assert(i != pending_cows_.rend());
  i->deferred.push_back(
    pending_cow::entry{pos, h, parent, {tokens, tokens + block_size_}});
}

bool block_pool_core::copy_reads_past(block_id b, std::uint64_t fill) const {
  // A step's copies at most: a short list.
  return std::any_of(pending_cows_.begin(), pending_cows_.end(),
                     [&](const pending_cow& p) {
                       return p.copy.src == b
                              && p.num_tokens % block_size_ > fill;
                     });
}

void block_pool_core::commit_cow(const pending_cow& p) {
  auto seq = find_mut(p.id);
  if (seq == nullptr || seq->cache_id != p.cache_id)
    return; // freed or preempted since: its blocks went back unindexed
  seq->cow_pending = false;
  for (auto& e : p.deferred)
    index_block(seq->blocks[e.pos], e.hash, e.parent, seq->tenant,
                e.tokens.data());
}

bool block_pool_core::undo_cow(pending_cow& p) {
  auto seq = find_mut(p.id);
  if (seq == nullptr || seq->cache_id != p.cache_id)
    return false; // freed or preempted since: nothing of it is left
  auto before = growth(*seq);
  // As far as the counters go, the blocks it took were never taken (the
  // copy's destination comes free with its hold, in settle_copies).
  auto taken = seq->blocks.size() - p.old_blocks + 1;
  counters_.blocks_allocated -= taken;
  counters_.blocks_freed -= taken;
  // Blocks taken since the copy (by this extend or a later one of the same
  // step) return to the pool: none is indexed, their hashing was deferred.
  while (seq->blocks.size() > p.old_blocks) {
    unref(seq->blocks.back(), seq->level);
    seq->blocks.pop_back();
  }
  // The shared block again, instead of the copy that never was made. The
  // source is still held (so still in use); the copy's hold frees it later.
  auto& last = seq->blocks.back();
  assert(last == p.copy.dst);
  ++blocks_[p.copy.src].ref_count;
  last = p.copy.src;
  unref(p.copy.dst, seq->level);
  seq->num_tokens = p.num_tokens;
  seq->hashable = p.hashable;
  seq->num_hashed = p.num_hashed;
  seq->chain = p.chain;
  seq->tail = std::move(p.tail);
  // Its extends since found no drafts unsettled (an extend with some
  // fails): whatever drafts it holds came with them, and go with them.
  counters_.draft_tokens -= seq->drafts;
  seq->drafts = 0;
  seq->tail_shared = true;
  seq->cow_pending = false;
  --counters_.cow_copies;
  repromise(*seq, before);
  return true;
}

std::vector<request_id>
block_pool_core::settle_copies(const std::vector<block_copy>& copies,
                               bool copied) {
  // A step of many forks settles thousands of copies at once: the copies'
  // destinations sorted, each pending copy looked up, O((K + C) log C).
  std::vector<block_id> dsts;
  dsts.reserve(copies.size());
  for (auto& c : copies)
    dsts.push_back(c.dst);
  std::sort(dsts.begin(), dsts.end());
  auto settled = [&](const pending_cow& p) {
    return std::binary_search(dsts.begin(), dsts.end(), p.copy.dst);
  };
  std::vector<request_id> undone;
  if (copied) {
    for (auto& p : pending_cows_)
      if (settled(p))
        commit_cow(p);
  } else {
    // Newest first: each undo restores the state its extend found.
    for (auto i = pending_cows_.rbegin(); i != pending_cows_.rend(); ++i)
      if (settled(*i) && undo_cow(*i))
        undone.push_back(i->id);
  }
  pending_cows_.erase(std::remove_if(pending_cows_.begin(), pending_cows_.end(),
                                     settled),
                      pending_cows_.end());
  // The holds end; a block whose last reference this was goes back.
  for (auto& c : copies)
    for (auto b : {c.src, c.dst}) {
      --blocks_[b].holds;
      unref(b, blocks_[b].level);
      give_way(&b, 1);
    }
  return undone;
}

} // namespace kvactor::detail
