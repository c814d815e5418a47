// pool_reference_model: taking back what was not rightly computed, as
// block_pool_rollback.cpp does - draft tokens settled (the accepted ones'
// full blocks indexed, the rejected ones' empty blocks freed) and requests
// discarded (nothing they let go stays indexed).
#include "pool_reference_model.hpp"

#include <algorithm>

namespace kvactor::test {

using detail::residency;

void pool_model::index_settled(model_sequence& seq, std::size_t from) {
  // Every block of settled tokens (drafts excluded) from block `from` on.
  auto after = (seq.tokens.size() - seq.drafts) / block_size_;
  for (auto i = from; i < after; ++i)
    index(seq.blocks[i],
          key_of(seq.tenant, seq.salt, seq.tokens, (i + 1) * block_size_),
          seq.tenant);
}

model_extension pool_model::settle_drafts(request_id id,
                                          std::uint64_t accepted) {
  auto it = seqs_.find(id);
  if (it == seqs_.end())
    return {errc::unknown_request};
  auto& seq = it->second;
  if (seq.where != residency::resident || accepted > seq.drafts)
    return {errc::invalid_request};
  auto rejected = seq.drafts - accepted;
  auto from = (seq.num_tokens - seq.drafts) / block_size_;
  seq.drafts = 0;
  seq.num_tokens -= rejected;
  counters_.drafts_rejected += rejected;
  if (seq.hashable) {
    seq.tokens.resize(seq.tokens.size() - rejected);
    index_settled(seq, from);
  }
  model_extension out;
  auto keep = blocks_for(seq.num_tokens, block_size_);
  out.first_changed = static_cast<std::uint32_t>(keep);
  out.changed = keep < seq.blocks.size();
  while (seq.blocks.size() > keep) {
    auto b = seq.blocks.back();
    seq.blocks.pop_back();
    unref(b, seq.level);
  }
  return out;
}

model_release pool_model::discard(request_id id, bool brought_held) {
  auto it = seqs_.find(id);
  if (it == seqs_.end())
    return release(id);
  // Away or coming back, its epoch is live still: what it wrote before it
  // left goes (a victim's is a release).
  if (it->second.where == residency::swapped
      || it->second.where == residency::swapping_in)
    return brought_held ? discard_away(it->second) : release(id);
  // Being swapped out, its epoch is live: as resident (its ghost frees
  // what it unindexes when the move ends; those it holds alone leave the
  // index now).
  // Its admission's written hits stay (earlier passes wrote them).
  auto keep = it->second.hit_blocks;
  auto table = it->second.blocks;
  auto brought = it->second.brought_from;
  // Its epoch ends bad - a victim's (!brought_held) confirmed: a pass
  // still writes it.
  auto bad = it->second.epoch;
  bool spread = brought_held && end_epoch(it->second);
  bool ghost = it->second.where == residency::swapping_out;
  auto res = release(id);
  // What went cached leaves the index, in table order (pins first go, with
  // the pinned blocks below); so does what it brought that others hold.
  for (std::size_t k = std::min<std::size_t>(keep, table.size());
       k < table.size(); ++k) {
    auto b = table[k];
    auto& m = blocks_[b];
    // A ghost's blocks it alone holds it lets go last when the copy ends:
    // out of the index now, as cached ones of a resident request would be.
    bool alone = ghost && m.st == state::used && m.refs == 1;
    if (alone || (brought_held && m.st == state::used && k >= brought)) {
      if (m.key)
        unindex_held(b);
      m.copy_of.reset(); // a second copy no more
      continue;
    }
    if (m.st != state::cached)
      continue;
    free_cached(b);
  }
  // Nothing was built on its writes unless another request acquired them.
  if (spread)
    forget_spread(bad);
  return res;
}

void pool_model::free_cached(block_id b) {
  if (blocks_[b].pinned)
    unpin_with_descendants(b);
  evict_block(b);
  free_.push_back(b);
}

void pool_model::forget_spread(std::uint64_t bad) {
  if (batched_bad_ != nullptr)
    batched_bad_->insert(bad);
  else
    forget_built_on({bad});
}

model_release pool_model::discard_away(model_sequence& seq) {
  auto id = seq.id;
  auto bad = seq.epoch;
  bool spread = end_epoch(seq);
  // Not spread: nobody else holds what it wrote; cached (or its ghost's
  // share, coming back), found by the keys it took along, its own if its
  // epoch wrote them.
  std::vector<block_id> own;
  if (!spread)
    for (auto& k : seq.host_keys) {
      if (!k)
        continue;
      auto i = index_.find(*k);
      if (i != index_.end() && blocks_[i->second].writer == bad)
        own.push_back(i->second);
    }
  auto res = release(id);
  for (auto b : own) {
    auto& m = blocks_[b];
    if (m.st != state::cached) { // its ghost's share, coming back
      unindex_held(b);
      continue;
    }
    free_cached(b);
  }
  if (spread)
    forget_spread(bad);
  return res;
}

} // namespace kvactor::test
