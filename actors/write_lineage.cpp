// write_lineage: the sets - written, acquired, inherited, pruned (see the
// header for what they mean).
#include "kvactor/actors/write_lineage.hpp"

namespace kvactor::detail {

write_lineage::token write_lineage::restart(std::uint64_t cache_id) {
  // Numbers repeat after 2^32 - 3 swap-ins: never one a live epoch holds
  // (an ended one's may linger in a cached block's deps - a discard then
  // takes out more than it must, never less).
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

void write_lineage::drop_set(block_id b) noexcept {
  sets_[set_of_[b]].clear();
  free_sets_.push_back(set_of_[b]);
  set_of_[b] = 0;
}

bool write_lineage::wrote(block_id b, token writer, std::uint64_t cache_id,
                          bool acquired) {
  if (writer != 0 && writer_[b] == writer)
    return acquired; // this epoch wrote it before: over the same acc
  writer_[b] = writer;
  token_set* acc = nullptr;
  if (acquired) {
    auto it = acc_.find(cache_id);
    if (it != acc_.end()) {
      prune(it->second);
      if (it->second.empty())
        acc_.erase(it);
      else
        acc = &it->second;
    }
  }
  if (acc == nullptr) {
    if (set_of_[b] != 0)
      drop_set(b);
    return false;
  }
  if (set_of_[b] == 0) {
    if (free_sets_.empty()) {
      set_of_[b] = static_cast<std::uint32_t>(sets_.size());
      sets_.emplace_back();
    } else {
      set_of_[b] = free_sets_.back();
      free_sets_.pop_back();
    }
  }
  sets_[set_of_[b]] = *acc;
  return true;
}

bool write_lineage::acquire(std::uint64_t cache_id, block_id b,
                            bool writer_may_live) {
  auto it = acc_.find(cache_id);
  token_set fresh;
  auto& acc = it != acc_.end() ? it->second : fresh;
  if (writer_may_live && writer_[b] != 0)
    add_live(acc, writer_[b]);
  if (set_of_[b] != 0)
    for (auto t : sets_[set_of_[b]])
      add_live(acc, t);
  if (it != acc_.end())
    return true;
  if (fresh.empty())
    return false;
  acc_.emplace(cache_id, std::move(fresh));
  return true;
}

bool write_lineage::inherit(std::uint64_t child, std::uint64_t parent,
                            token parent_token, bool parent_acquired) {
  token_set acc;
  if (parent_acquired)
    if (auto it = acc_.find(parent); it != acc_.end()) {
      prune(it->second);
      acc = it->second; // sorted, as prune keeps it
    }
  add_live(acc, parent_token);
  if (acc.empty())
    return false;
  acc_[child] = std::move(acc);
  return true;
}

bool write_lineage::acquired(std::uint64_t cache_id, token t) const {
  auto it = acc_.find(cache_id);
  return it != acc_.end()
         && std::binary_search(it->second.begin(), it->second.end(), t);
}

bool write_lineage::acquired_any(std::uint64_t cache_id,
                                 const token_set& bad) const {
  auto it = acc_.find(cache_id);
  if (it == acc_.end())
    return false;
  for (auto t : it->second)
    if (std::binary_search(bad.begin(), bad.end(), t))
      return true;
  return false;
}

write_lineage::token_set write_lineage::deps(block_id b) const {
  token_set out = sets_[set_of_[b]];
  if (writer_[b] != 0) {
    auto pos = std::lower_bound(out.begin(), out.end(), writer_[b]);
    if (pos == out.end() || *pos != writer_[b])
      out.insert(pos, writer_[b]);
  }
  return out;
}

write_lineage::token_set write_lineage::acc(std::uint64_t cache_id) const {
  auto it = acc_.find(cache_id);
  return it == acc_.end() ? token_set{} : it->second;
}

} // namespace kvactor::detail
