// write_lineage: the sets - written, acquired, inherited, pruned (see the
// header for what they mean).
#include "kvactor/actors/write_lineage.hpp"

#include <iterator>

namespace kvactor::detail {

write_lineage::token write_lineage::restart(std::uint64_t cache_id) {
  // Numbers repeat after 2^32 - 3 swap-ins: never one a live epoch holds
  // (an ended one's may linger in a block's deps or as its writer - a
  // discard then takes out more than it must, never less, and never frees
  // a held block: discard_away unindexes those; the invariant check may
  // then name such a cached block's writer as live, a false alarm).
  auto n = restarts_;
  while (live(token{n} << 1 | 1))
    n = n == flat_index::max_value ? 0 : n + 1;
  restarts_ = n == flat_index::max_value ? 0 : n + 1;
  if (!restarted_.assign(cache_id, n))
    restarted_.insert(cache_id, n);
  auto t = token{n} << 1 | 1;
  begin(t);
  return t;
}

void write_lineage::add_live(token_set& into, token t) {
  auto pos = std::lower_bound(into.begin(), into.end(), t);
  if (pos != into.end() && *pos == t)
    return; // marked spread when it came
  auto at = live_.find(t);
  if (at == flat_index::npos)
    return;
  if (at != spread_mark)
    live_.assign(t, spread_mark);
  into.insert(pos, t);
}

void write_lineage::prune(token_set& s) const {
  s.erase(std::remove_if(s.begin(), s.end(),
                         [this](token t) { return !live(t); }),
          s.end());
}

bool write_lineage::wrote_first(block_id b, token writer,
                                std::uint64_t cache_id, bool acquired) {
  auto& r = recs_[b];
  r.writer = writer;
  acc_entry* acc = nullptr;
  if (acquired)
    if (auto it = acc_.find(cache_id); it != acc_.end())
      acc = &it->second;
  if (acc == nullptr) {
    unref_set(r.set);
    r.set = 0;
    return false;
  }
  if (acc->set == 0) { // its first write since the acc changed
    if (free_sets_.empty()) {
      acc->set = static_cast<std::uint32_t>(sets_.size());
      sets_.emplace_back();
      set_refs_.push_back(0);
    } else {
      acc->set = free_sets_.back();
      free_sets_.pop_back();
    }
    sets_[acc->set] = acc->tokens;
    set_refs_[acc->set] = 1; // the entry's
  }
  if (r.set != acc->set) {
    unref_set(r.set);
    r.set = acc->set;
    ++set_refs_[r.set];
  }
  return true;
}

void write_lineage::take_on(token_set& took, block_id b,
                            bool writer_may_live) {
  auto& r = recs_[b];
  if (writer_may_live && r.writer != 0)
    add_live(took, r.writer);
  if (r.set != 0)
    for (auto t : sets_[r.set])
      add_live(took, t);
}

bool write_lineage::adopt(std::uint64_t cache_id, token_set took) {
  auto it = acc_.find(cache_id);
  if (it == acc_.end()) {
    if (took.empty())
      return false;
    acc_.emplace(cache_id, acc_entry{std::move(took), 0});
    return true;
  }
  auto& e = it->second;
  changed(e);
  prune(e.tokens); // what it took on before may have ended since
  token_set merged;
  merged.reserve(e.tokens.size() + took.size());
  std::set_union(e.tokens.begin(), e.tokens.end(), took.begin(), took.end(),
                 std::back_inserter(merged));
  if (merged.empty()) {
    acc_.erase(it);
    return false;
  }
  e.tokens = std::move(merged);
  return true;
}

bool write_lineage::inherit(std::uint64_t child, std::uint64_t parent,
                            token parent_token, bool parent_acquired) {
  token_set acc;
  if (parent_acquired)
    if (auto it = acc_.find(parent); it != acc_.end()) {
      acc = it->second.tokens; // sorted; its ended tokens dropped below
      prune(acc);
    }
  add_live(acc, parent_token);
  if (acc.empty())
    return false;
  auto& e = acc_[child];
  changed(e);
  e.tokens = std::move(acc);
  return true;
}

bool write_lineage::acquired(std::uint64_t cache_id, token t) const {
  auto it = acc_.find(cache_id);
  return it != acc_.end()
         && std::binary_search(it->second.tokens.begin(),
                               it->second.tokens.end(), t);
}

bool write_lineage::acquired_any(std::uint64_t cache_id,
                                 const token_set& bad) const {
  auto it = acc_.find(cache_id);
  if (it == acc_.end())
    return false;
  for (auto t : it->second.tokens)
    if (std::binary_search(bad.begin(), bad.end(), t))
      return true;
  return false;
}

write_lineage::token_set write_lineage::deps(block_id b) const {
  token_set out = sets_[recs_[b].set];
  auto w = recs_[b].writer;
  if (w != 0) {
    auto pos = std::lower_bound(out.begin(), out.end(), w);
    if (pos == out.end() || *pos != w)
      out.insert(pos, w);
  }
  return out;
}

write_lineage::token_set write_lineage::acc(std::uint64_t cache_id) const {
  auto it = acc_.find(cache_id);
  return it == acc_.end() ? token_set{} : it->second.tokens;
}

} // namespace kvactor::detail
