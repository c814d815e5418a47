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
  auto parent = it->second.cache_id;
  std::size_t first = std::min<std::size_t>(keep, table.size());
  std::size_t own_from = std::max<std::size_t>(first, brought);
  // Another request may have built on its own blocks only if it held one.
  bool shared = false;
  if (brought_held)
    for (std::size_t k = own_from; k < table.size(); ++k)
      shared |= blocks_[table[k]].shared;
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
    if (brought_held && m.st == state::used && k >= brought) {
      held.insert(b);
      if (m.key) {
        gone.insert(*m.key);
        unindex_held(b);
      }
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
  // Nothing can be built on its own blocks no other request held.
  if (brought_held && shared)
    forget_built_on(gone, held, parent, own_from);
  return res;
}

void pool_model::forget_built_on(std::set<prefix_key> gone,
                                 std::set<block_id> held,
                                 std::uint64_t parent, std::size_t own_from) {
  // Rounds until nothing more goes: every indexed block whose key extends
  // a gone one's by a block (then theirs, and so on); then every request
  // holding a gone block (or that held one when it moved away) indexes
  // nothing more, and what it indexed after that block goes too. Each
  // round's blocks go in block order, as discard takes its own.
  auto parent_key = [&](const prefix_key& k) {
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
  std::set<std::uint64_t> forks{parent};
  for (;;) {
    std::set<prefix_key> reached = gone;
    std::set<block_id> below;
    for (bool grew = true; grew;) {
      grew = false;
      for (auto& [key, b] : index_)
        if (below.count(b) == 0 && key.second.size() > block_size_
            && reached.count(parent_key(key)) != 0) {
          below.insert(b);
          reached.insert(key);
          grew = true;
        }
    }
    built_on_taken_ += !below.empty();
    take_out(below);
    std::set<block_id> after;
    std::set<std::uint64_t> forked;
    auto visit = [&](model_sequence& s) {
      bool fork = s.forked_from != 0 && forks.count(s.forked_from) != 0;
      if (fork && forks.count(s.cache_id) == 0)
        forked.insert(s.cache_id);
      // Its blocks, or a swap-in's incoming ones: what it indexed past a
      // gone block it holds (past its parent's own, for a fork).
      auto scan = [&](const std::vector<block_id>& table) {
        bool over = false;
        for (std::size_t k = 0; k < table.size(); ++k) {
          over |= fork && k >= own_from;
          if (over && blocks_[table[k]].key)
            after.insert(table[k]);
          over |= held.count(table[k]) != 0;
        }
        return over;
      };
      bool over = scan(s.blocks);
      bool in = scan(s.incoming);
      bool away = false;
      for (std::size_t k = 0; k < s.host_keys.size(); ++k) {
        auto& key = s.host_keys[k];
        away |= fork && k >= own_from;
        if (away && key)
          if (auto i = index_.find(*key); i != index_.end())
            after.insert(i->second);
        away |= key && gone.count(*key) != 0;
      }
      if (!(over || in || away || fork))
        return;
      built_on_stopped_ += s.hashable;
      s.hashable = false;
      for (auto& h : held_)
        if (h.before.id == s.id && h.before.cache_id == s.cache_id)
          h.before.hashable = false;
    };
    // Live requests and ghosts (ended mid-swap: what they indexed goes).
    for (auto& [rid, s] : seqs_)
      visit(s);
    for (auto& [cid, s] : ghosts_)
      visit(s);
    if (after.empty() && forked.empty())
      return;
    forks.insert(forked.begin(), forked.end());
    built_on_taken_ += !after.empty();
    take_out(after);
  }
}

} // namespace kvactor::test
