// pool_reference_model: quotas, reservations and admission headroom - which
// blocks a tenant may take, and whether the watermark and the promised growth
// still fit - recomputed from scratch on every call.
#include "pool_reference_model.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace kvactor::test {

using detail::residency;

std::uint64_t pool_model::shortfall() const {
  std::uint64_t n = 0;
  for (auto& ts : tenants_)
    if (ts.used < ts.config.reserved_blocks)
      n += ts.config.reserved_blocks - ts.used;
  return n;
}

std::vector<std::uint64_t> pool_model::reserve_held() const {
  // A tenant's draining blocks (those last charged to it) cover its own
  // reservation first - they come free soon - and no other tenant's.
  std::vector<std::uint64_t> drained(tenants_.size(), 0);
  for (auto& b : blocks_)
    if (b.st == state::draining)
      ++drained[b.tenant];
  std::vector<std::uint64_t> held(tenants_.size(), 0);
  for (std::size_t u = 0; u < tenants_.size(); ++u) {
    auto& ts = tenants_[u];
    auto miss = ts.used < ts.config.reserved_blocks
                  ? ts.config.reserved_blocks - ts.used
                  : 0;
    held[u] = miss > drained[u] ? miss - drained[u] : 0;
  }
  return held;
}

std::uint64_t pool_model::takeable(std::uint16_t t) const {
  std::uint64_t held = 0; // what other tenants' reservations hold back
  auto by_tenant = reserve_held();
  for (std::size_t u = 0; u < tenants_.size(); ++u)
    if (u != t)
      held += by_tenant[u];
  auto avail = takeable_blocks();
  return avail > held ? avail - held : 0;
}

maybe_errc pool_model::admit(std::uint16_t t, std::uint64_t n,
                             std::uint64_t unlisted) const {
  if (n == 0)
    return std::nullopt;
  auto& ts = tenants_[t];
  if (ts.config.max_blocks != 0 && ts.used + n > ts.config.max_blocks)
    return errc::quota_exceeded;
  if (n - unlisted > takeable(t))
    return errc::out_of_blocks;
  return std::nullopt;
}

std::uint64_t pool_model::growth(const model_sequence& seq) const {
  if (seq.expected_tokens == 0)
    return 0;
  // Resident, or swapping in: admitted with its growth, which stays
  // promised while the device copies; swapping out: promised until the
  // copy succeeded. (A ghost is no sequence here.)
  std::size_t held = 0;
  if (seq.where == residency::resident || seq.where == residency::swapping_out)
    held = seq.blocks.size();
  else if (seq.where == residency::swapping_in)
    held = seq.incoming.size();
  else
    return 0;
  auto want = blocks_for(seq.expected_tokens, block_size_);
  return want > held ? want - held : 0;
}

maybe_errc pool_model::headroom(std::uint16_t t, std::uint64_t n,
                                std::uint64_t own_growth,
                                std::uint64_t charged) const {
  bool reserve = admission_.policy == "reserve_expected";
  if (watermark_blocks_ == 0 && !reserve)
    return std::nullopt;
  // Per tenant: its promised growth and its reservation's shortfall (free
  // blocks only it may take). The watermark and what each tenant's
  // promises exceed its shortfall by must fit in the free blocks no
  // reservation holds - or, where they did not before, fit no worse.
  using i64 = std::int64_t;
  std::vector<i64> promised(tenants_.size(), 0);
  std::vector<i64> short_of(tenants_.size(), 0);
  if (reserve)
    for (auto& [id, seq] : seqs_)
      promised[seq.tenant] += static_cast<i64>(growth(seq));
  i64 held = 0;
  auto by_tenant = reserve_held();
  for (std::size_t u = 0; u < tenants_.size(); ++u) {
    short_of[u] = static_cast<i64>(by_tenant[u]);
    held += short_of[u];
  }
  // A tenant grows no further than its quota: promises past it are
  // never kept. `taking`: blocks the admitting tenant `t` is charged now.
  auto lack = [&](i64 shared, i64 taking) {
    i64 out = static_cast<i64>(watermark_blocks_) - shared;
    for (std::size_t u = 0; u < tenants_.size(); ++u) {
      auto& ts = tenants_[u];
      auto p = promised[u];
      if (ts.config.max_blocks != 0)
        p = std::min(p, std::max<i64>(static_cast<i64>(ts.config.max_blocks)
                                        - static_cast<i64>(ts.used)
                                        - (u == t ? taking : 0),
                                      0));
      out += std::max<i64>(p - short_of[u], 0);
    }
    return out;
  };
  auto shared = static_cast<i64>(takeable_blocks()) - held;
  auto before = lack(shared, 0);
  auto from_own = std::min(static_cast<i64>(n), short_of[t]);
  short_of[t] -= from_own;
  promised[t] += reserve ? static_cast<i64>(own_growth) : 0;
  auto after = lack(shared - (static_cast<i64>(n) - from_own),
                    static_cast<i64>(charged));
  if (after > std::max<i64>(before, 0))
    return errc::out_of_blocks;
  return std::nullopt;
}

} // namespace kvactor::test
