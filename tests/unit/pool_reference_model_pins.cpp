// pool_reference_model: pins with a time to live (let go early by unpin, and
// how they give way to reservations), and the choice of preemption victims
// (lowest priority first, then the tenant furthest over its fair share, then
// the newest), written out as block_pool_core.hpp documents them
// (block_pool_policy.cpp is the code it checks).
#include "pool_reference_model.hpp"

#include <algorithm>
#include <numeric>

namespace kvactor::test {

using detail::residency;

// -- pins and victims -------------------------------------------------------------------

std::vector<block_id> pool_model::chain(std::uint16_t t, std::uint64_t salt,
                                        const std::vector<token_id>& tokens) const {
  std::vector<block_id> found;
  for (std::size_t len = block_size_; len <= tokens.size(); len += block_size_) {
    auto it = index_.find(key_of(t, salt, tokens, len));
    if (it == index_.end())
      break;
    found.push_back(it->second);
  }
  return found;
}

std::pair<maybe_errc, std::uint32_t>
pool_model::pin(std::uint16_t t, const std::vector<token_id>& tokens,
                std::uint64_t ttl_ms, std::uint64_t now_ms, std::uint64_t salt) {
  if (t >= tenants_.size())
    return {errc::unknown_tenant, 0};
  for (auto tok : tokens)
    if (tok < 0)
      return {errc::invalid_request, 0};
  if (max_pinned_ == 0)
    return {errc::quota_exceeded, 0};
  auto found = chain(t, salt, tokens);
  std::uint64_t fresh = 0;
  std::uint64_t off_lru = 0;
  for (auto b : found) {
    auto& m = blocks_[b];
    if (!m.pinned && m.st == state::used && m.tenant != t
        && tenants_[m.tenant].config.reserved_blocks > 0)
      return {errc::invalid_request, 0}; // another reserved tenant's block
    fresh += !m.pinned;
    off_lru += !m.pinned && m.st == state::cached;
  }
  if (pinned_.size() + fresh > max_pinned_)
    return {errc::quota_exceeded, 0};
  // Pinned cached blocks cannot be taken: never those reservations need
  // (anyone's, the pinner's own too) - but for those each tenant's own
  // draining blocks cover, which come free soon.
  auto by_tenant = reserve_held();
  auto held = std::accumulate(by_tenant.begin(), by_tenant.end(), std::uint64_t{0});
  auto spare = takeable_blocks() > held ? takeable_blocks() - held : 0;
  if (off_lru > spare)
    return {errc::out_of_blocks, 0};
  for (auto b : found) {
    auto& m = blocks_[b];
    m.pin_until = std::max(m.pin_until, now_ms + ttl_ms);
    if (m.pinned)
      continue;
    m.pinned = true;
    pinned_.push_back(b);
    if (m.st == state::cached)
      lru_[m.level].remove(b);
  }
  if (!found.empty()) {
    auto& end = blocks_[found.back()];
    bool found = false;
    for (auto& p : end.pin_ends)
      if (p.first == tokens.size()) {
        p.second = std::max(p.second, now_ms + ttl_ms);
        found = true;
      }
    if (!found)
      end.pin_ends.emplace_back(tokens.size(), now_ms + ttl_ms);
  }
  return {std::nullopt, static_cast<std::uint32_t>(found.size())};
}

std::uint32_t pool_model::expire_pins(std::uint64_t now_ms) {
  // Deepest first - depth: how many of the expired blocks' keys are a
  // prefix of its own -, then by block id; each joins its LRU level's most
  // recently used end, so eviction takes an expired chain from its tail.
  pins_now_ = std::max(pins_now_, now_ms); // pins ended by then cover nothing
  std::vector<block_id> expired;
  for (auto b : pinned_)
    if (blocks_[b].pin_until <= now_ms)
      expired.push_back(b);
  auto ancestor = [&](block_id a, block_id b) { // a's key a proper prefix of b's
    auto& ka = *blocks_[a].key;
    auto& kb = *blocks_[b].key;
    return ka.first == kb.first && ka.second.size() < kb.second.size()
           && std::equal(ka.second.begin(), ka.second.end(), kb.second.begin());
  };
  std::vector<std::pair<std::size_t, block_id>> order; // depth, block
  for (auto b : expired)
    order.emplace_back(std::count_if(expired.begin(), expired.end(),
                                     [&](block_id a) { return ancestor(a, b); }),
                       b);
  std::sort(order.begin(), order.end(), [](auto& x, auto& y) {
    return x.first != y.first ? x.first > y.first : x.second < y.second;
  });
  for (auto& o : order)
    drop_pin(o.second);
  return static_cast<std::uint32_t>(order.size());
}

void pool_model::give_way(const std::vector<block_id>& table) {
  // Reservations come first: while the blocks anyone may take fall short
  // of them, the table's pinned cached blocks lose their pins, last first.
  for (auto b = table.rbegin(); b != table.rend(); ++b) {
    auto by_tenant = reserve_held();
    if (takeable_blocks()
        >= std::accumulate(by_tenant.begin(), by_tenant.end(), std::uint64_t{0}))
      return;
    auto& m = blocks_[*b];
    if (m.pinned && m.st == state::cached)
      unpin_with_descendants(*b);
  }
}

model_unpin pool_model::unpin(std::uint16_t t, const std::vector<token_id>& tokens,
                              std::uint64_t salt) {
  if (t >= tenants_.size())
    return {errc::unknown_tenant};
  for (auto tok : tokens)
    if (tok < 0)
      return {errc::invalid_request};
  auto found = chain(t, salt, tokens);
  // The pin ending at the deepest pinned block goes, ended or not. From
  // there up, the first block another pin still covers - one ending at it
  // whose time has not run out, or a pinned child left (another prefix's,
  // the chain's own deeper blocks being unpinned by then) - stays, and so
  // does everything above it.
  model_unpin out;
  std::vector<block_id> kept; // deepest first
  bool deepest = true;
  auto live = [&](const std::pair<std::uint64_t, std::uint64_t>& p) {
    return p.second > pins_now_;
  };
  for (auto b = found.rbegin(); b != found.rend(); ++b) {
    auto& m = blocks_[*b];
    if (!m.pinned)
      continue;
    if (deepest) { // this tokens' pin goes; with none of its count, all
      auto same = std::find_if(m.pin_ends.begin(), m.pin_ends.end(),
                               [&](auto& p) { return p.first == tokens.size(); });
      if (same != m.pin_ends.end())
        m.pin_ends.erase(same);
      else
        m.pin_ends.clear();
    }
    deepest = false;
    if (out.kept > 0 || std::any_of(m.pin_ends.begin(), m.pin_ends.end(), live)
        || std::any_of(pinned_.begin(), pinned_.end(),
                       [&](block_id x) { return is_child(x, *b); })) {
      ++out.kept;
      kept.push_back(*b);
      continue;
    }
    drop_pin(*b);
    ++out.unpinned;
  }
  // Each kept block is pinned until the latest pin still over it ends: one
  // ending at it or at a kept block below it, or a pinned branch off the
  // chain from either (pinned until the latest pin below it).
  std::uint64_t until = 0;
  for (auto b : kept) {
    auto& m = blocks_[b];
    for (auto& p : m.pin_ends)
      if (live(p))
        until = std::max(until, p.second);
    for (auto x : pinned_)
      if (is_child(x, b)
          && std::find(kept.begin(), kept.end(), x) == kept.end())
        until = std::max(until, blocks_[x].pin_until);
    m.pin_until = until;
  }
  return out;
}

bool pool_model::is_child(block_id x, block_id b) const {
  auto& key = *blocks_[b].key;
  auto& k = blocks_[x].key;
  return x != b && k && k->first == key.first
         && k->second.size() == key.second.size() + block_size_
         && std::equal(key.second.begin(), key.second.end(), k->second.begin());
}

void pool_model::unpin_with_descendants(block_id b) {
  // Every pinned block whose key extends b's by one block first (their own
  // below them first), scanning the pins from the start after each - the
  // pool's order, which decides the LRU's.
  for (std::size_t i = 0; i < pinned_.size(); ++i)
    if (is_child(pinned_[i], b)) {
      unpin_with_descendants(pinned_[i]);
      i = static_cast<std::size_t>(-1);
    }
  drop_pin(b);
}

void pool_model::drop_pin(block_id b) {
  auto& m = blocks_[b];
  m.pinned = false;
  m.pin_until = 0;
  m.pin_ends.clear();
  // As the pool does (the order decides later expiries' LRU order): the
  // last pin takes its place.
  *std::find(pinned_.begin(), pinned_.end(), b) = pinned_.back();
  pinned_.pop_back();
  if (m.st == state::cached)
    lru_[m.level].push_back(b);
}

std::vector<request_id> pool_model::choose_victims(std::uint64_t blocks) const {
  // Candidates: resident requests holding blocks no one else holds.
  struct candidate {
    const model_sequence* seq;
    std::uint64_t own;
  };
  std::vector<candidate> cands;
  for (auto& [id, seq] : seqs_) {
    if (seq.where != residency::resident)
      continue;
    std::uint64_t own = 0;
    for (auto b : seq.blocks)
      own += blocks_[b].refs - holds(b) == 1; // a copy's hold shares nothing
    if (own > 0)
      cands.push_back({&seq, own});
  }
  std::vector<std::uint64_t> used;
  for (auto& ts : tenants_)
    used.push_back(ts.used);
  auto equal = blocks_.size() / std::max<std::size_t>(tenants_.size(), 1);
  std::vector<request_id> out;
  std::uint64_t freed = 0;
  while (freed < blocks) {
    // Lowest request priority, lowest tenant priority, furthest over the
    // fair share (max(reservation, equal split)), newest; the fair share is
    // measured after the victims chosen so far.
    auto rank = [&](const candidate& c) {
      auto& ts = tenants_[c.seq->tenant];
      auto fair = std::max<std::uint64_t>(ts.config.reserved_blocks, equal);
      auto over = static_cast<std::int64_t>(used[c.seq->tenant])
                  - static_cast<std::int64_t>(fair);
      return std::make_tuple(static_cast<int>(c.seq->priority),
                             static_cast<int>(ts.config.priority), -over,
                             ~c.seq->admitted);
    };
    const candidate* best = nullptr;
    for (auto& c : cands) {
      auto t = c.seq->tenant;
      auto reserved = tenants_[t].config.reserved_blocks;
      if (reserved != 0 && used[t] <= reserved)
        continue; // never at or below its reservation, if it has one
      if (std::find(out.begin(), out.end(), c.seq->id) != out.end())
        continue;
      if (best == nullptr || rank(c) < rank(*best))
        best = &c;
    }
    if (best == nullptr)
      break;
    out.push_back(best->seq->id);
    freed += best->own;
    auto& u = used[best->seq->tenant];
    u -= std::min(u, best->own);
  }
  return out;
}

} // namespace kvactor::test
