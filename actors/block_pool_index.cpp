// block_pool_core's prefix-index side of block movement: blocks entering
// the index (index_block, with a block computed twice: a first copy nobody
// holds gives way, a held one keeps a second copy that takes its place if
// the LRU evicts it) and leaving it (evictions, unindex_held). Taking and
// releasing blocks is in block_pool_core.cpp.
#include "kvactor/actors/block_pool_core.hpp"

#include <algorithm>

namespace kvactor::detail {

void block_pool_core::evict_one(block_id b, std::uint8_t level) {
  auto& m = blocks_[b];
  lru_.remove(b, level);
  index_.erase(m.hash.lo, b);
  m.indexed = false;
  m.state = block_state::free;
  ++counters_.evictions;
  if (record_events_)
    events_.push_back(index_event{false, m.hash.lo, parent_[b], b, m.stored_by, {}});
  else
    unheard_ = true;
}

void block_pool_core::unindex_held(block_id b) {
  auto& m = blocks_[b];
  if (m.pinned)
    unpin_with_descendants(b);
  index_.erase(m.hash.lo, b);
  m.indexed = false;
  if (record_events_)
    events_.push_back(index_event{false, m.hash.lo, parent_[b], b, m.stored_by, {}});
  else
    unheard_ = true;
}

void block_pool_core::prefetch_evictions(block_id b) const noexcept {
  // Evicting a block touches three scattered places: its metadata, its LRU
  // links and its index slot (found from the hash in its metadata). While
  // `b` is evicted, ask for the index slot of the block evicted next (its
  // metadata was asked for one eviction earlier) and for the metadata and
  // links of the block after that: a run of evictions overlaps its misses.
  auto n1 = lru_.next(b);
  if (n1 == no_block)
    return;
  if (blocks_[n1].indexed)
    index_.prefetch(blocks_[n1].hash.lo);
  auto n2 = lru_.next(n1);
  if (n2 == no_block)
    return;
  __builtin_prefetch(&blocks_[n2], 1);
  lru_.prefetch(n2);
}

bool block_pool_core::drop_second_copy(block_id b) {
  auto range = second_copies_.equal_range(blocks_[b].hash.lo);
  for (auto i = range.first; i != range.second; ++i)
    if (i->second.block == b) {
      second_copies_.erase(i);
      return true;
    }
  return false;
}

void block_pool_core::refresh_first_copy(block_id b, block_hash h,
                                         std::uint8_t level) {
  // Only a second copy still listed: one computed over K/V a discard
  // found bad, or of a request that indexes nothing more, was dropped.
  if (!drop_second_copy(b))
    return;
  // Its holder's later blocks were indexed as the first copy's children,
  // and cached by this same release, deepest first: the first copy takes
  // this one's place in that order - after them on the LRU, evicted after
  // them - or it would go first and leave them cached where no lookup
  // reaches. (Held, it is released later, after them anyway; pinned, it
  // stays.)
  auto o = find_indexed(h.lo);
  if (o == no_block)
    return;
  auto& f = blocks_[o];
  if (f.hash.hi != h.hi || f.state != block_state::cached || f.pinned)
    return;
  lru_.remove(o, f.level);
  f.level = std::max(f.level, level);
  lru_.push_back(o, f.level);
}

void block_pool_core::evict_lru(block_id b, std::uint8_t level) {
  auto h = blocks_[b].hash;
  evict_one(b, level);
  if (!second_copies_.empty())
    promote_second_copy(h);
}

void block_pool_core::promote_second_copy(block_hash h) {
  auto range = second_copies_.equal_range(h.lo);
  auto best = second_copies_.end();
  for (auto i = range.first; i != range.second; ++i) {
    auto& m = blocks_[i->second.block];
    if (m.hash.hi == h.hi && m.state == block_state::used && !m.indexed
        && (best == second_copies_.end() || i->second.block < best->second.block))
      best = i;
  }
  if (best == second_copies_.end())
    return;
  auto d = best->second.block;
  auto& m = blocks_[d];
  index_.insert(h.lo, d, [this](block_id x) { return blocks_[x].hash.lo; });
  m.indexed = true;
  m.stored_by = best->second.tenant;
  ++counters_.blocks_cached;
  if (record_events_)
    events_.push_back(index_event{true, h.lo, parent_[d], d, m.stored_by,
                                  std::move(best->second.tokens)});
  else
    unheard_ = true;
  second_copies_.erase(best);
}

void block_pool_core::index_block(block_id b, block_hash h,
                                  std::uint64_t parent, std::uint16_t t,
                                  const token_id* tokens) {
  auto& m = blocks_[b];
  if (m.indexed)
    return;
  m.hash = h;
  parent_[b] = parent;
  auto key = [this](block_id x) { return blocks_[x].hash.lo; };
  if (!index_.insert(h.lo, b, key)) {
    // Computed twice: two requests filled identical blocks, or a prompt
    // recomputes its last full block (a hit never covers a prompt's last
    // token). The request's later blocks are indexed as children of this
    // hash, so the copy it holds should be the indexed one: a first copy
    // nobody holds or pins - evicted before them, it would leave them
    // cached out of any lookup's reach - is evicted now, this one taking
    // its place. A held or pinned first copy serves later hits; this one
    // stays out of the index, listed as a second copy (unref, evict_lru).
    auto o = find_indexed(h.lo);
    auto& f = blocks_[o];
    if (f.hash.hi != h.hi)
      return; // another prefix's hash.lo: no copy of anything
    if (f.state != block_state::cached || f.pinned) {
      second_copies_.emplace(
        h.lo, second_copy{b, t, {tokens, tokens + block_size_}});
      return;
    }
    // In its place at its level too: a low request recomputing a critical
    // one's prompt must not make that prefix the first to go.
    m.level = std::max(m.level, f.level);
    evict_one(o, f.level);
    free_.push(o);
    index_.insert(h.lo, b, key);
  }
  m.indexed = true;
  m.stored_by = t;
  ++counters_.blocks_cached;
  if (record_events_)
    events_.push_back(index_event{true, h.lo, parent, b, t,
                                  {tokens, tokens + block_size_}});
  else
    unheard_ = true;
}

// -- eviction -------------------------------------------------------------------------

std::uint32_t block_pool_core::evict(std::uint32_t n) {
  std::uint32_t done = 0;
  std::size_t level = 0;
  for (; done < n; ++done) {
    auto b = lru_.front(level);
    if (b == no_block)
      break;
    prefetch_evictions(b);
    evict_lru(b, static_cast<std::uint8_t>(level));
    free_.push(b);
  }
  return done;
}

} // namespace kvactor::detail
