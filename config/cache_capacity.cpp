// cache_capacity: the block counts a cache_config implies - the pressure
// marks (pressure_mark) and what one request of a tenant may hold and stay
// live (lone_request_cap, tenant_bounds_of); declared in cache_config.hpp.
#include "kvactor/config/cache_config.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace kvactor {

std::uint64_t pressure_mark(double fraction, std::uint64_t num_blocks) noexcept {
  // Less a hair, so 0.95 of 100 blocks is 95 whatever the rounding of 0.95.
  return static_cast<std::uint64_t>(
    std::ceil(fraction * static_cast<double>(num_blocks) - 1e-9));
}

namespace {

/// lone_request_cap, given whether `tenant` shares its prefix namespace
/// with another tenant and the other tenants' reservations together.
std::uint64_t lone_cap(const cache_config& cfg, const tenant_config& tenant,
                       std::uint64_t num_blocks, bool shares,
                       std::uint64_t others) noexcept {
  auto cap = num_blocks;
  if (!shares) {
    // Every block in its tables is charged to it (its namespace is its
    // own): none past its quota, none that other tenants' reservations
    // keep, whatever else is running.
    if (tenant.max_blocks != 0)
      cap = std::min(cap, tenant.max_blocks);
    cap = std::min(cap, num_blocks > others ? num_blocks - others : 0);
  }
  if (!cfg.pressure.preempt_at_critical)
    return cap;
  // Sharing its namespace, a tenant may hold blocks charged to another: its
  // own charge - what its reservation protects - can stay within the
  // reservation however long its table, so only the pool bounds it.
  if (tenant.reserved_blocks > 0 && shares)
    return cap;
  auto critical = pressure_mark(cfg.pressure.critical, num_blocks);
  auto below = critical > 0 ? critical - 1 : 0;
  return std::min(std::max(below, tenant.reserved_blocks), cap);
}

} // namespace

std::uint64_t lone_request_cap(const cache_config& cfg,
                               const tenant_config& tenant,
                               std::uint64_t num_blocks) noexcept {
  bool shares = false;
  std::uint64_t others = 0; // tenant need not be one of cfg.tenants
  for (auto& other : cfg.tenants)
    if (other.name != tenant.name) {
      shares = shares
               || (!tenant.prefix_namespace.empty()
                   && other.prefix_namespace == tenant.prefix_namespace);
      others += other.reserved_blocks;
    }
  return lone_cap(cfg, tenant, num_blocks, shares, others);
}

std::vector<tenant_bounds> tenant_bounds_of(const cache_config& cfg,
                                            std::uint64_t num_blocks) {
  // One pass over the names, not one per tenant (up to 65535 of them).
  std::unordered_map<std::string, std::size_t> holders;
  std::uint64_t reserved_all = 0;
  for (auto& t : cfg.tenants) {
    reserved_all += t.reserved_blocks;
    if (!t.prefix_namespace.empty())
      ++holders[t.prefix_namespace];
  }
  std::vector<tenant_bounds> out;
  out.reserve(cfg.tenants.size());
  for (auto& t : cfg.tenants) {
    tenant_bounds b;
    b.shares_namespace =
      !t.prefix_namespace.empty() && holders[t.prefix_namespace] > 1;
    b.others_reserved = reserved_all - t.reserved_blocks;
    b.lone_cap = lone_cap(cfg, t, num_blocks, b.shares_namespace,
                          b.others_reserved);
    out.push_back(b);
  }
  return out;
}

} // namespace kvactor
