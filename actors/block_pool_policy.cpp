// block_pool_core: who to preempt under critical pressure, and pinned
// prefixes with a time to live (pinned, unpinned early, expired).
#include "kvactor/actors/block_pool_core.hpp"

#include <algorithm>
#include <string>

#include "kvactor/actors/token_ids.hpp"
#include "kvactor/messages/error.hpp"

namespace kvactor::detail {

caf::expected<std::uint16_t>
block_pool_core::tenant_index(const std::string& name) const {
  if (name.empty())
    return default_tenant_;
  for (std::size_t i = 0; i < tenants_.size(); ++i)
    if (tenants_[i].config.name == name)
      return static_cast<std::uint16_t>(i);
  return make_error(errc::unknown_tenant,
                    "tenant '" + name + "' is not configured");
}

std::uint64_t block_pool_core::exclusive_blocks(const sequence& s) const noexcept {
  return exclusive_in(s.blocks.data(), s.blocks.data() + s.blocks.size());
}

std::uint64_t block_pool_core::exclusive_in(const block_id* first,
                                            const block_id* last) const noexcept {
  std::uint64_t mine = 0;
  for (auto b = first; b != last; ++b)
    mine += blocks_[*b].ref_count - blocks_[*b].holds == 1;
  return mine;
}

std::uint64_t block_pool_core::blocks_leaving() const noexcept {
  std::uint64_t n = 0;
  if (swapping_out_ != 0) // else no scan: it runs per landing preemption
    for_each_sequence([&](const sequence& s) {
      if (s.where == residency::swapping_out)
        n += exclusive_blocks(s);
    });
  // A ghost's blocks go at its swap's end, whatever the outcome: those it
  // had (swapping out) or those it was given (swapping in).
  for_each_ghost([&](const sequence& s) {
    n += s.where == residency::swapping_in
           ? exclusive_in(s.incoming.data(), s.incoming.data() + s.incoming.size())
           : exclusive_blocks(s);
  });
  return n;
}

bool block_pool_core::may_name_victims() const noexcept {
  // choose_victims' filter, without looking at a request.
  for (auto& ts : tenants_)
    if (ts.active > 0
        && (ts.config.reserved_blocks == 0 || ts.used > ts.config.reserved_blocks))
      return true;
  return false;
}

std::vector<request_id> block_pool_core::choose_victims(std::uint64_t blocks) const {
  // A tenant's fair share: its reservation, or an equal split of the pool
  // if that is more.
  auto n_tenants = static_cast<std::uint64_t>(tenants_.size());
  auto equal = blocks_.size() / std::max<std::uint64_t>(n_tenants, 1);
  struct candidate {
    const sequence* seq;
    std::uint64_t exclusive; ///< blocks only it holds: what preempting frees
  };
  // Per tenant, its candidates best last: the lowest request priority,
  // then the newest. Within a tenant nothing else differs (the tenant's
  // priority and overshoot are its own), so each round's best is one of
  // the tenants' last candidates: O(requests log requests) in all, then
  // O(tenants) a victim, however many requests are live.
  std::vector<std::vector<candidate>> by_tenant(tenants_.size());
  for_each_sequence([&](const sequence& s) {
    if (s.where != residency::resident)
      return;
    auto mine = exclusive_blocks(s);
    if (mine > 0)
      by_tenant[s.tenant].push_back(candidate{&s, mine});
  });
  for (auto& cands : by_tenant)
    std::sort(cands.begin(), cands.end(),
              [](const candidate& a, const candidate& b) {
                if (a.seq->priority != b.seq->priority)
                  return a.seq->priority > b.seq->priority;
                return a.seq->admitted < b.seq->admitted;
              });
  std::vector<std::uint64_t> used(tenants_.size());
  for (std::size_t t = 0; t < tenants_.size(); ++t)
    used[t] = tenants_[t].used;
  auto over = [&](std::uint16_t t) {
    auto fair = std::max(tenants_[t].config.reserved_blocks, equal);
    return static_cast<std::int64_t>(used[t]) - static_cast<std::int64_t>(fair);
  };
  std::vector<request_id> out;
  std::uint64_t freed = 0;
  // Greedy: each round takes the best candidate under the usage left by the
  // rounds before (so one tenant's overshoot shrinks as it loses requests).
  while (freed < blocks) {
    constexpr auto none = static_cast<std::size_t>(-1);
    auto best = none;
    for (std::size_t t = 0; t < by_tenant.size(); ++t) {
      if (by_tenant[t].empty())
        continue;
      // Never at or below its reservation - if it has one (as frees_for
      // judges): `used` is an estimate, and a tenant without one whose
      // estimate reached 0 (a victim's exclusive blocks may be charged to
      // another tenant, the first toucher) still has requests to offer.
      auto reserved = tenants_[t].config.reserved_blocks;
      if (reserved != 0 && used[t] <= reserved)
        continue;
      if (best == none) {
        best = t;
        continue;
      }
      auto& x = *by_tenant[t].back().seq;
      auto& y = *by_tenant[best].back().seq;
      auto px = std::make_tuple(x.priority, tenants_[x.tenant].config.priority);
      auto py = std::make_tuple(y.priority, tenants_[y.tenant].config.priority);
      if (px != py) {
        if (px < py)
          best = t;
        continue;
      }
      auto ox = over(x.tenant);
      auto oy = over(y.tenant);
      if (ox != oy) {
        if (ox > oy)
          best = t;
        continue;
      }
      if (x.admitted > y.admitted)
        best = t;
    }
    if (best == none)
      break;
    auto victim = by_tenant[best].back();
    by_tenant[best].pop_back();
    out.push_back(victim.seq->id);
    freed += victim.exclusive;
    auto& u = used[best];
    u -= std::min(u, victim.exclusive);
  }
  return out;
}

caf::expected<std::uint32_t>
block_pool_core::pin(std::uint16_t t, const std::vector<token_id>& tokens,
                     std::uint64_t ttl_ms, std::uint64_t now_ms,
                     std::uint64_t salt) {
  // Bad input first, whatever the config: a caller learns what it got
  // wrong before it learns that pinning is off.
  if (t >= tenants_.size())
    return make_error(errc::unknown_tenant, "no tenant " + std::to_string(t));
  if (auto err = negative_token(tokens, [] { return std::string{"pin: tokens"}; }))
    return err;
  if (max_pinned_ == 0)
    return make_error(errc::quota_exceeded,
                      "pinning is disabled (max_pinned_blocks is 0)");
  // Every full block of `tokens` that is in the index, from the start.
  auto full = static_cast<std::uint32_t>(tokens.size() / block_size_);
  auto hits = lookup(seed_of(t, salt), tokens, full);
  std::uint64_t fresh = 0;
  std::uint64_t off_lru = 0; // cached blocks that stop being takeable
  for (std::uint32_t i = 0; i < hits; ++i) {
    auto b = find_indexed(scratch_[i].lo);
    auto& m = blocks_[b];
    // A block in use by another tenant with a reservation: once that tenant
    // let it go, a pin would keep it from serving the reservation.
    if (!m.pinned && m.state == block_state::used && m.tenant != t
        && tenants_[m.tenant].config.reserved_blocks > 0)
      return make_error(errc::invalid_request,
                        "cannot pin block " + std::to_string(b)
                          + ": it is in use by tenant '"
                          + tenants_[m.tenant].config.name
                          + "', which has a reservation");
    fresh += !m.pinned;
    off_lru += !m.pinned && m.state == block_state::cached;
  }
  if (pinned_.size() + fresh > max_pinned_)
    return make_error(errc::quota_exceeded,
                      "pinning " + std::to_string(fresh) + " more blocks would "
                        + "exceed max_pinned_blocks "
                        + std::to_string(max_pinned_) + " ("
                        + std::to_string(pinned_.size()) + " pinned)");
  // A pinned cached block can no longer be taken: pinning it takes it, as
  // far as reservations are concerned - the pinner's own too, or another
  // reserved tenant would find its share gone to the pinner's shortfall.
  auto avail = static_cast<std::uint64_t>(free_.size() + lru_.size());
  auto held = held_total_;
  auto spare = avail > held ? avail - held : 0;
  if (off_lru > spare)
    return make_error(errc::out_of_blocks,
                      "pinning " + std::to_string(off_lru)
                        + " cached blocks would take blocks held for "
                          "reservations (" + std::to_string(avail)
                        + " free or evictable, " + std::to_string(held)
                        + " held)");
  // Saturating: a time to live past the end of the clock pins for good.
  auto until = ttl_ms > UINT64_MAX - now_ms ? UINT64_MAX : now_ms + ttl_ms;
  for (std::uint32_t i = 0; i < hits; ++i) {
    auto b = find_indexed(scratch_[i].lo);
    auto& m = blocks_[b];
    pin_until_[b] = std::max(pin_until_[b], until);
    next_pin_expiry_ = std::min(next_pin_expiry_, until);
    if (m.pinned)
      continue;
    m.pinned = true;
    pin_pos_[b] = static_cast<std::uint32_t>(pinned_.size());
    pinned_.push_back(b);
    pin_ends_.emplace_back();
    if (m.state == block_state::cached)
      lru_.remove(b, m.level);
  }
  // The pin itself, where its prefix ends: what unpin lets go. Pinned
  // again by the same tokens, it lasts the longer of the two.
  if (hits > 0) {
    auto& end = pin_ends_[pin_pos_[find_indexed(scratch_[hits - 1].lo)]];
    auto same = end.of(tokens.size());
    if (same != end.pins.end())
      same->second = std::max(same->second, until);
    else
      end.pins.emplace_back(tokens.size(), until);
  }
  return hits;
}

caf::expected<std::uint32_t>
block_pool_core::unpin(std::uint16_t t, const std::vector<token_id>& tokens,
                       std::uint64_t salt) {
  // Pinning disabled is no error here: nothing is pinned, so nothing goes
  // (a session's cleanup need not know how the pool is configured).
  if (t >= tenants_.size())
    return make_error(errc::unknown_tenant, "no tenant " + std::to_string(t));
  if (auto err = negative_token(tokens, [] { return std::string{"unpin: tokens"}; }))
    return err;
  // pin's chain: every full block of `tokens` in the index, from the start.
  // Its pinned blocks are a prefix of it (pins are prefix-closed).
  auto full = static_cast<std::uint32_t>(tokens.size() / block_size_);
  auto hits = lookup(seed_of(t, salt), tokens, full);
  std::vector<block_id> chain;
  for (std::uint32_t i = 0; i < hits; ++i) {
    auto b = find_indexed(scratch_[i].lo);
    if (!blocks_[b].pinned)
      break;
    chain.push_back(b);
  }
  if (chain.empty())
    return 0u;
  // The pin of these tokens, ending at the chain's deepest pinned block,
  // goes - known by its token count, even if its time ran out (an ended
  // pin stays listed for this: forgotten, the fallback below would let go
  // a live pin ending there); with none of that count, every pin ending
  // there (a longer or shorter list names the chain it finds).
  {
    auto& end = pin_ends_[pin_pos_[chain.back()]];
    auto same = end.of(tokens.size());
    if (same != end.pins.end())
      end.pins.erase(same);
    else
      end.pins.clear();
  }
  // `keep` chain blocks stay pinned: those down to the deepest one another
  // pin still covers - one ending there whose time has not run out, or a
  // pinned child off the chain (another pinned prefix extends it there).
  // `still[d]`: the latest deadline among the pins that keep chain[d] and
  // what is above it.
  std::size_t keep = 0;
  std::vector<std::uint64_t> still(chain.size(), 0);
  for (std::size_t d = 0; d < chain.size(); ++d) {
    auto live = pin_ends_[pin_pos_[chain[d]]].live_until(pins_now_ms_);
    if (live != 0) {
      keep = d + 1;
      still[d] = live;
    }
  }
  // One pass over the pins, each parent looked up among the chain's hashes.
  std::vector<std::pair<std::uint64_t, std::uint32_t>> at; // hash.lo, depth
  for (std::uint32_t i = 0; i < chain.size(); ++i)
    at.emplace_back(blocks_[chain[i]].hash.lo, i);
  std::sort(at.begin(), at.end());
  for (auto c : pinned_) {
    auto j = std::lower_bound(at.begin(), at.end(),
                              std::make_pair(parent_[c], std::uint32_t{0}));
    if (j == at.end() || j->first != parent_[c])
      continue;
    auto depth = j->second;
    if (depth + 1 >= chain.size() || chain[depth + 1] != c) {
      keep = std::max<std::size_t>(keep, depth + 1);
      // Its own deadline is the latest of the pins below it.
      still[depth] = std::max(still[depth], pin_until_[c]);
    }
  }
  // Deepest first, as give_way lets pins go: each cached block joins the
  // LRU's most recently used end (unpin_at, where expiry puts them too),
  // the deeper ones before their ancestors, so eviction takes a chain from
  // its tail and what stays cached is still a prefix a lookup can reach.
  // The MRU end and not the front: an unpinned prefix is an ordinary
  // cached prefix again, which a request may still hit - evict() drops it
  // if wanted.
  for (auto i = chain.size(); i > keep; --i)
    unpin_at(pin_pos_[chain[i - 1]]);
  // What stays ends with the latest pin still over it (not the one that
  // went, if that was later): an ancestor never before its descendants.
  std::uint64_t until = 0;
  for (auto d = keep; d-- > 0;) {
    until = std::max(until, still[d]);
    pin_until_[chain[d]] = until;
    next_pin_expiry_ = std::min(next_pin_expiry_, until);
  }
  return static_cast<std::uint32_t>(chain.size() - keep);
}

void block_pool_core::unpin_at(std::size_t i) {
  auto b = pinned_[i];
  auto& m = blocks_[b];
  m.pinned = false;
  pin_until_[b] = 0;
  pinned_[i] = pinned_.back();
  pin_pos_[pinned_[i]] = static_cast<std::uint32_t>(i);
  pinned_.pop_back();
  pin_ends_[i] = std::move(pin_ends_.back());
  pin_ends_.pop_back();
  if (m.state == block_state::cached)
    lru_.push_back(b, m.level);
}

void block_pool_core::give_way(const block_id* blocks, std::size_t n) {
  while (n > 0 && free_.size() + lru_.size() < held_total_) {
    auto b = blocks[--n];
    auto& m = blocks_[b];
    if (m.pinned && m.state == block_state::cached)
      unpin_with_descendants(b);
  }
}

void block_pool_core::unpin_with_descendants(block_id b) {
  // Pins keep a chain's ancestors pinned at least as long as its
  // descendants (a pin takes every block from the start; expiry keeps the
  // longest time): were b unpinned alone, a pinned block below it - held
  // by a table released earlier - could outlive the way to it. So what
  // hangs below b goes first, deepest first, and is evicted first.
  // One scan for b's pinned children, then each child's subtree: the
  // subtrees are disjoint (an indexed hash names one block, so a block has
  // one parent), and unpinning one leaves the others pinned.
  auto h = blocks_[b].hash.lo;
  std::vector<block_id> children;
  for (auto c : pinned_)
    if (c != b && parent_[c] == h)
      children.push_back(c);
  for (auto c : children)
    if (blocks_[c].pinned)
      unpin_with_descendants(c);
  unpin_at(pin_pos_[b]);
}

std::uint64_t block_pool_core::pinned_cached_blocks() const noexcept {
  std::uint64_t n = 0;
  for (auto b : pinned_)
    n += blocks_[b].state == block_state::cached;
  return n;
}

std::uint32_t block_pool_core::expire_pins(std::uint64_t now_ms) {
  // The expired pins go deepest first, as unpin and give_way let them go:
  // each joins the LRU's most recently used end, so eviction takes a chain
  // from its tail and what stays cached is still a prefix a lookup reaches.
  // pinned_'s order is no chain order (unpin_at moves its last entry), and
  // taken in that order a chain's root could go first and be evicted first.
  // A block's descendants expire no later than it (a pin takes every block
  // from the start, and keeps the longest time), so the depth that orders
  // them is the count of expired ancestors; ties by block id.
  pins_now_ms_ = std::max(pins_now_ms_, now_ms);
  if (now_ms < next_pin_expiry_)
    return 0;
  std::vector<std::pair<std::uint64_t, block_id>> expired; // hash.lo, block
  next_pin_expiry_ = UINT64_MAX;
  for (auto b : pinned_) {
    if (pin_until_[b] <= now_ms)
      expired.emplace_back(blocks_[b].hash.lo, b);
    else
      next_pin_expiry_ = std::min(next_pin_expiry_, pin_until_[b]);
  }
  if (expired.empty())
    return 0;
  std::sort(expired.begin(), expired.end());
  constexpr auto none = static_cast<std::size_t>(-1);
  auto expired_parent = [&](std::size_t i) {
    auto h = parent_[expired[i].second];
    auto j = std::lower_bound(expired.begin(), expired.end(),
                              std::make_pair(h, block_id{0}));
    return j != expired.end() && j->first == h
             ? static_cast<std::size_t>(j - expired.begin())
             : none;
  };
  // Each depth once: up from a block to the first whose depth is known (or
  // to a root), then down again.
  constexpr auto unknown = static_cast<std::uint32_t>(-1);
  std::vector<std::uint32_t> depth(expired.size(), unknown);
  std::vector<std::size_t> path;
  for (std::size_t i = 0; i < expired.size(); ++i) {
    std::uint32_t d = 0;
    for (auto j = i; depth[j] == unknown;) {
      path.push_back(j);
      j = expired_parent(j);
      if (j == none || path.size() > expired.size()) // a root (or a cycle,
        break;                                         // were hashes to collide)
      if (depth[j] != unknown)
        d = depth[j] + 1;
    }
    for (auto k = path.rbegin(); k != path.rend(); ++k)
      depth[*k] = d++;
    path.clear();
  }
  std::vector<std::pair<std::uint32_t, block_id>> order; // depth, block
  for (std::size_t i = 0; i < expired.size(); ++i)
    order.emplace_back(depth[i], expired[i].second);
  std::sort(order.begin(), order.end(), [](auto& a, auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  for (auto& o : order)
    unpin_at(pin_pos_[o.second]);
  return static_cast<std::uint32_t>(order.size());
}

} // namespace kvactor::detail
