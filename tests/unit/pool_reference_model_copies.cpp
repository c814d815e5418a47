// pool_reference_model: copy-on-write copies held until the device answers
// (extend and run_step with hold), as block_pool_core.hpp's contract reads:
// both blocks of a copy in flight stay in use; a made copy lets its
// request's filled blocks into the index; a failed one puts its request
// back as the extend found it - a snapshot, not a reversal step by step.
#include "pool_reference_model.hpp"

#include <algorithm>

namespace kvactor::test {

std::uint32_t pool_model::holds(block_id b) const {
  std::uint32_t n = 0;
  for (auto& h : held_)
    n += (h.copy.src == b) + (h.copy.dst == b);
  return n;
}

const pool_model::held_copy*
pool_model::copy_of(const model_sequence& seq) const {
  for (auto& h : held_)
    if (h.before.id == seq.id && h.before.cache_id == seq.cache_id)
      return &h;
  return nullptr;
}

const char* pool_model::copy_reason(const model_sequence& seq) const {
  // Only a partly filled block it came onto by a fork or a failed copy is
  // one it may not own; it owns it once no one else may read it.
  auto fill = seq.num_tokens % block_size_;
  if (fill == 0 || !seq.shared_tail)
    return nullptr;
  auto b = seq.blocks.back();
  auto& m = blocks_[b];
  if (m.refs - holds(b) > 1)
    return "copy: another table holds the tail";
  // An indexed block is never written again: it came back to this request
  // by a failed copy, its other holder having filled it meanwhile.
  if (m.key)
    return "copy: the tail is indexed";
  // A copy in flight from it for a request with more tokens in it: that
  // request comes back to it if the copy fails.
  for (auto& h : held_)
    if (h.copy.src == b && h.before.num_tokens % block_size_ > fill)
      return "copy: a held copy reads past the tail";
  return nullptr;
}

bool pool_model::undo(const held_copy& h) {
  auto it = seqs_.find(h.before.id);
  if (it == seqs_.end() || it->second.cache_id != h.before.cache_id)
    return false; // ended since: its blocks went back with it
  auto& seq = it->second;
  // The blocks the extend took were never handed out: neither taken nor
  // freed, the copy's destination included (its hold ends below).
  counters_.blocks_allocated -= h.taken;
  counters_.blocks_freed -= h.taken;
  for (auto i = seq.blocks.size(); i-- > h.before.blocks.size();)
    unref(seq.blocks[i], seq.level);
  ++blocks_[h.copy.src].refs;
  unref(h.copy.dst, seq.level);
  counters_.draft_tokens -= seq.drafts - h.before.drafts;
  --counters_.cow_copies;
  seq = h.before;
  return true;
}

std::vector<request_id>
pool_model::settle_copies(const std::vector<block_copy>& copies, bool copied) {
  auto settled = [&](const held_copy& h) {
    return std::any_of(copies.begin(), copies.end(),
                       [&](const block_copy& c) { return c.dst == h.copy.dst; });
  };
  std::vector<request_id> undone;
  if (copied) {
    // The blocks its extend filled enter the index now (none if it ended).
    for (auto& h : held_) {
      auto it = seqs_.find(h.before.id);
      if (settled(h) && it != seqs_.end()
          && it->second.cache_id == h.before.cache_id && it->second.hashable)
        index_settled(it->second, h.before.num_tokens / block_size_);
    }
  } else {
    // Newest first, so that each undo finds the pool its extend left.
    for (auto h = held_.rbegin(); h != held_.rend(); ++h)
      if (settled(*h) && undo(*h))
        undone.push_back(h->before.id);
  }
  held_.erase(std::remove_if(held_.begin(), held_.end(), settled), held_.end());
  for (auto& c : copies)
    for (auto b : {c.src, c.dst}) {
      unref(b, blocks_[b].level);
      give_way({b});
    }
  return undone;
}

} // namespace kvactor::test
