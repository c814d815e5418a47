// pool_reference_model: taking back what was not rightly computed, as
// block_pool_rollback.cpp does - draft tokens settled (the accepted ones'
// full blocks indexed, the rejected ones' empty blocks freed) and requests
// discarded (nothing they let go stays indexed).
#include "pool_reference_model.hpp"

#include <algorithm>
#include <set>

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

model_release pool_model::discard(request_id id, std::uint32_t keep,
                                  bool brought_held) {
  auto it = seqs_.find(id);
  if (it == seqs_.end() || it->second.where != residency::resident)
    return release(id);
  auto table = it->second.blocks;
  auto brought = it->second.brought_from;
  auto res = release(id);
  // What went cached leaves the index, in table order (pins first go, with
  // the pinned blocks below); so does what it brought that others hold.
  // Its own (from `brought` on) were never written: what others built on
  // them goes too.
  std::set<prefix_key> gone;
  std::set<block_id> held;
  for (std::size_t k = std::min<std::size_t>(keep, table.size());
       k < table.size(); ++k) {
    auto b = table[k];
    auto& m = blocks_[b];
    if (brought_held && m.st == state::used && m.key && k >= brought) {
      gone.insert(*m.key);
      held.insert(b);
      unindex_held(b);
      continue;
    }
    if (m.st != state::cached)
      continue;
    if (k >= brought)
      gone.insert(*m.key);
    if (m.pinned)
      unpin_with_descendants(b);
    evict_block(b);
    free_.push_back(b);
  }
  if (brought_held)
    forget_built_on(gone, held);
  return res;
}

void pool_model::forget_built_on(std::set<prefix_key> gone,
                                 std::set<block_id> held) {
  // Rounds until nothing more goes: every indexed block whose key extends
  // a gone one's by a block (then theirs, and so on); then every request
  // holding a gone block (or that held one when it moved away) indexes
  // nothing more, and what it indexed after that block goes too. Each
  // round's blocks go in block order, as discard takes its own.
  auto parent = [&](const prefix_key& k) {
    return prefix_key{k.first, std::vector<token_id>(
                                 k.second.begin(),
                                 k.second.end() - std::min<std::size_t>(
                                   block_size_, k.second.size()))};
  };
  auto take_out = [&](const std::set<block_id>& out) {
    for (auto b : out) {
      auto& m = blocks_[b];
      if (!m.key)
        continue;
      gone.insert(*m.key);
      if (m.st == state::cached) {
        if (m.pinned)
          unpin_with_descendants(b);
        evict_block(b);
        free_.push_back(b);
      } else {
        held.insert(b);
        unindex_held(b);
      }
    }
  };
  for (;;) {
    std::set<prefix_key> reached = gone;
    std::set<block_id> below;
    for (bool grew = true; grew;) {
      grew = false;
      for (auto& [key, b] : index_)
        if (below.count(b) == 0 && key.second.size() > block_size_
            && reached.count(parent(key)) != 0) {
          below.insert(b);
          reached.insert(key);
          grew = true;
        }
    }
    built_on_taken_ += !below.empty();
    take_out(below);
    std::set<block_id> after;
    for (auto& [rid, s] : seqs_) {
      bool over = false;
      for (auto b : s.blocks) {
        if (over && blocks_[b].key)
          after.insert(b);
        over |= held.count(b) != 0;
      }
      bool in = false;
      for (auto b : s.incoming) {
        if (in && blocks_[b].key)
          after.insert(b);
        in |= held.count(b) != 0;
      }
      bool away = false;
      for (auto& k : s.host_keys) {
        if (away && k)
          if (auto i = index_.find(*k); i != index_.end())
            after.insert(i->second);
        away |= k && gone.count(*k) != 0;
      }
      if (!(over || in || away))
        continue;
      built_on_stopped_ += s.hashable;
      s.hashable = false;
      for (auto& h : held_)
        if (h.before.id == s.id && h.before.cache_id == s.cache_id)
          h.before.hashable = false;
    }
    if (after.empty())
      return;
    built_on_taken_ += 1;
    take_out(after);
  }
}

} // namespace kvactor::test
