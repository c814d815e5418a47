// pool_reference_model: epochs and what each block's K/V were computed
// over, as write_lineage.hpp defines them - with plain sets and a counter
// for tokens, where the core packs them (block_pool_core's lineage_).
#include "pool_reference_model.hpp"

namespace kvactor::test {

void pool_model::begin_epoch(model_sequence& seq) {
  seq.epoch = next_epoch_++;
  live_epochs_[seq.epoch] = false;
}

bool pool_model::end_epoch(model_sequence& seq) {
  auto it = live_epochs_.find(seq.epoch);
  if (it == live_epochs_.end())
    return false;
  bool spread = it->second;
  live_epochs_.erase(it);
  return spread;
}

void pool_model::add_live(std::set<std::uint64_t>& into, std::uint64_t t) {
  auto it = live_epochs_.find(t);
  if (it == live_epochs_.end())
    return;
  it->second = true;
  into.insert(t);
}

void pool_model::wrote(model_sequence& seq, std::size_t from, std::size_t to) {
  for (auto i = seq.acc.begin(); i != seq.acc.end();)
    i = live_epochs_.count(*i) ? std::next(i) : seq.acc.erase(i);
  for (auto k = from; k < to; ++k) {
    blocks_[seq.blocks[k]].writer = seq.epoch;
    blocks_[seq.blocks[k]].deps = seq.acc;
  }
}

void pool_model::acquire(model_sequence& seq, block_id b) {
  auto& m = blocks_[b];
  // Its writer's epoch, if live: it holds the block, or let it go at a
  // swap-out (its epoch goes on away) - not the sharer's own, coming back.
  if (m.writer != seq.epoch)
    add_live(seq.acc, m.writer);
  for (auto t : m.deps)
    add_live(seq.acc, t);
}

void pool_model::forget_built_on(const std::set<std::uint64_t>& bad) {
  auto over_bad = [&](const std::set<std::uint64_t>& s) {
    for (auto t : s)
      if (bad.count(t))
        return true;
    return false;
  };
  bool took = false;
  for (block_id b = 0; b < blocks_.size(); ++b) {
    auto& m = blocks_[b];
    if (!m.key || (bad.count(m.writer) == 0 && !over_bad(m.deps)))
      continue;
    took = true;
    if (m.st == state::cached) {
      free_cached(b);
    } else {
      unindex_held(b);
    }
  }
  built_on_taken_ += took;
  // A second copy computed over them never takes a first copy's place.
  for (auto& m : blocks_)
    if (m.copy_of && (bad.count(m.writer) != 0 || over_bad(m.deps)))
      m.copy_of.reset();
  auto visit = [&](model_sequence& s) {
    if (!over_bad(s.acc))
      return;
    built_on_stopped_ += s.hashable;
    s.hashable = false;
    for (auto b : s.blocks) // nor one of a request that indexes nothing more
      blocks_[b].copy_of.reset();
    for (auto& h : held_)
      if (h.before.id == s.id && h.before.cache_id == s.cache_id)
        h.before.hashable = false;
  };
  for (auto& [rid, s] : seqs_)
    visit(s);
  for (auto& [cid, s] : ghosts_)
    visit(s);
}

} // namespace kvactor::test
