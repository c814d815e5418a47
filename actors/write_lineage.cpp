// write_lineage: the sets - written, acquired, inherited, pruned (see the
// header for what they mean).
#include "kvactor/actors/write_lineage.hpp"

namespace kvactor::detail {

void write_lineage::add_live(token_set& into, token t) {
  auto at = live_.find(t);
  if (at == flat_index::npos)
    return;
  if (at != spread_mark)
    live_.assign(t, spread_mark);
  if (std::find(into.begin(), into.end(), t) == into.end())
    into.push_back(t);
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
  auto w = writer_may_live ? writer_[b] : token{0};
  bool from_writer = w != 0 && live(w);
  bool from_set = set_of_[b] != 0;
  if (!from_writer && !from_set) {
    auto it = acc_.find(cache_id);
    return it != acc_.end();
  }
  auto& acc = acc_[cache_id];
  if (from_writer)
    add_live(acc, w);
  if (from_set)
    for (auto t : sets_[set_of_[b]])
      add_live(acc, t);
  if (acc.empty()) {
    acc_.erase(cache_id);
    return false;
  }
  return true;
}

bool write_lineage::inherit(std::uint64_t child, std::uint64_t parent,
                            token parent_token, bool parent_acquired) {
  token_set acc;
  if (parent_acquired)
    if (auto it = acc_.find(parent); it != acc_.end()) {
      prune(it->second);
      acc = it->second;
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
         && std::find(it->second.begin(), it->second.end(), t)
              != it->second.end();
}

write_lineage::token_set write_lineage::deps(block_id b) const {
  token_set out;
  if (writer_[b] != 0)
    out.push_back(writer_[b]);
  for (auto t : sets_[set_of_[b]])
    if (t != writer_[b])
      out.push_back(t);
  return out;
}

write_lineage::token_set write_lineage::acc(std::uint64_t cache_id) const {
  auto it = acc_.find(cache_id);
  return it == acc_.end() ? token_set{} : it->second;
}

} // namespace kvactor::detail
