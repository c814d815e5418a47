// pool_reference_model: what a request may ask, where a prefix is found,
// and one block at a time - taken, shared, let go, indexed, evicted - as the
// operations (pool_reference_model.cpp and the rest) use them.
#include "pool_reference_model.hpp"

#include <algorithm>
#include <cstdint>

namespace kvactor::test {

maybe_errc pool_model::check(const allocation_request& req,
                             std::uint16_t& t) const {
  // "" names the tenant called "default", or the first if none is.
  t = 0;
  const std::string name = req.tenant.empty() ? "default" : req.tenant;
  bool found = false;
  for (std::size_t i = 0; i < tenants_.size() && !found; ++i)
    if (tenants_[i].config.name == name) {
      t = static_cast<std::uint16_t>(i);
      found = true;
    }
  if (!found && !req.tenant.empty())
    return errc::unknown_tenant;
  if (req.num_layers != model_.num_layers || req.num_heads != model_.num_kv_heads
      || req.head_dim != model_.head_dim || req.dtype != model_.dtype
      || req.max_sequence_length == 0)
    return errc::invalid_request;
  if (!req.prompt.empty() && req.initial_tokens != 0
      && req.initial_tokens != req.prompt.size())
    return errc::invalid_request;
  if (req.prefill_chunk != 0 && req.prompt.empty())
    return errc::invalid_request;
  for (auto tok : req.prompt)
    if (tok < 0)
      return errc::invalid_request;
  auto n = req.prompt.empty() ? req.initial_tokens : req.prompt.size();
  if (n > req.max_sequence_length)
    return errc::exceeds_max_sequence_length;
  return std::nullopt;
}

prefix_key pool_model::key_of(std::uint16_t t, std::uint64_t salt,
                              const std::vector<token_id>& tokens,
                              std::size_t len) const {
  // A salt makes a namespace of its own ("\x01" keeps it off real names).
  auto ns = tenants_[t].ns;
  if (salt != 0)
    ns += "\x01" + std::to_string(salt);
  return {ns, std::vector<token_id>(tokens.begin(), tokens.begin() + len)};
}

std::uint32_t pool_model::hits(std::uint16_t t, std::uint64_t salt,
                               const std::vector<token_id>& prompt) const {
  // The last prompt token is always computed: at most (len - 1) / bs hits.
  auto max_hits = (prompt.size() - 1) / block_size_;
  std::uint32_t h = 0;
  while (h < max_hits && index_.count(key_of(t, salt, prompt, (h + 1) * block_size_)))
    ++h;
  return h;
}

void pool_model::evict_block(block_id b) {
  auto& m = blocks_[b];
  lru_[m.level].remove(b);
  index_.erase(*m.key);
  events_.push_back(model_event{false, *m.key, b, m.stored_by});
  m.key.reset();
  m.st = state::free;
  ++counters_.evictions;
}

void pool_model::evict_from_lru(block_id b) {
  auto key = *blocks_[b].key;
  evict_block(b);
  // A second copy still held (the lowest block id) takes its place.
  for (block_id d = 0; d < blocks_.size(); ++d) {
    auto& m = blocks_[d];
    if (m.copy_of && *m.copy_of == key && m.st == state::used && !m.key) {
      index_[key] = d;
      m.key = key;
      m.stored_by = m.copy_tenant;
      m.copy_of.reset();
      ++counters_.blocks_cached;
      events_.push_back(model_event{true, key, d, m.stored_by});
      return;
    }
  }
}

void pool_model::unindex_held(block_id b) {
  auto& m = blocks_[b];
  if (m.pinned)
    unpin_with_descendants(b);
  index_.erase(*m.key);
  events_.push_back(model_event{false, *m.key, b, m.stored_by});
  m.key.reset();
  m.copy_of.reset();
}

block_id pool_model::take(std::uint16_t t, std::size_t level) {
  block_id b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else {
    std::size_t level = 0;
    while (lru_[level].empty())
      ++level;
    b = lru_[level].front();
    evict_from_lru(b);
  }
  auto& m = blocks_[b];
  m.st = state::used;
  m.refs = 1;
  m.copy_of.reset();
  m.writer = 0; // nothing written into it yet
  m.deps.clear();
  m.tenant = t;
  m.level = level;
  ++tenants_[t].used;
  ++counters_.blocks_allocated;
  return b;
}

void pool_model::unref(block_id b, std::size_t level) {
  auto& m = blocks_[b];
  if (--m.refs > 0)
    return;
  --tenants_[m.tenant].used;
  ++counters_.blocks_freed;
  if (m.key) {
    m.st = state::cached;
    m.level = std::max(m.level, level);
    if (!m.pinned)
      lru_[m.level].push_back(b);
  } else {
    m.st = state::free;
    free_.push_back(b);
    // A second copy let go: the first copy, if cached and unpinned, moves
    // to its LRU level's recent end - after the blocks this release cached
    // below it.
    if (m.copy_of) {
      auto copy_of = *m.copy_of;
      m.copy_of.reset(); // free: no copy of anything
      auto i = index_.find(copy_of);
      if (i != index_.end()) {
        auto& f = blocks_[i->second];
        if (f.st == state::cached && !f.pinned) {
          lru_[f.level].remove(i->second);
          f.level = std::max(f.level, level);
          lru_[f.level].push_back(i->second);
        }
      }
    }
  }
}

void pool_model::index(block_id b, prefix_key key, std::uint16_t t) {
  // Computed twice: a first copy cached and unpinned is evicted, this one
  // taking its place; a held or pinned one serves hits, this one is a
  // second copy.
  auto first = index_.find(key);
  if (first != index_.end()) {
    auto o = first->second;
    if (blocks_[o].st != state::cached || blocks_[o].pinned) {
      blocks_[b].copy_of = key;
      blocks_[b].copy_tenant = t;
      return;
    }
    blocks_[b].level = std::max(blocks_[b].level, blocks_[o].level);
    evict_block(o);
    free_.push_back(o);
  }
  if (blocks_[b].key)
    throw std::logic_error("model: indexing a block that is indexed");
  index_[key] = b;
  blocks_[b].key = key;
  blocks_[b].stored_by = t;
  ++counters_.blocks_cached;
  events_.push_back(model_event{true, std::move(key), b, t});
}

void pool_model::share(block_id b, model_sequence& seq) {
  auto& m = blocks_[b];
  acquire(seq, b);
  if (m.st == state::cached) {
    if (!m.pinned)
      lru_[m.level].remove(b);
    m.st = state::used;
    m.tenant = seq.tenant; // revived: keeps its level, raised below
    ++tenants_[seq.tenant].used;
  }
  m.level = std::max(m.level, seq.level);
  ++m.refs;
}

} // namespace kvactor::test
