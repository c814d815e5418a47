// block_pool_core::stats: the pool's figures (usage, counters, per tenant)
// as the pool actor reports them to the manager.
#include "kvactor/actors/block_pool_core.hpp"

namespace kvactor::detail {

pool_stats block_pool_core::stats() const {
  pool_stats s;
  auto& c = counters();
  s.total_blocks = num_blocks();
  s.used_blocks = used_blocks();
  s.cached_blocks = cached_blocks() + pinned_cached_blocks();
  s.active_requests = num_sequences();
  s.allocations = c.allocations;
  s.allocation_failures = c.allocation_failures;
  s.blocks_allocated = c.blocks_allocated;
  s.prefix_hit_blocks = c.prefix_hit_blocks;
  s.blocks_freed = c.blocks_freed;
  s.blocks_cached = c.blocks_cached;
  s.evictions = c.evictions;
  s.cow_copies = c.cow_copies;
  s.preemptions = c.preemptions;
  s.query_tokens = c.query_tokens;
  s.hit_tokens = c.hit_tokens;
  s.swap_outs = c.swap_outs;
  s.swap_ins = c.swap_ins;
  s.swap_in_shared = c.swap_in_shared;
  s.draft_tokens = c.draft_tokens;
  s.draft_tokens_rejected = c.drafts_rejected;
  s.host_total_blocks = num_host_blocks();
  s.host_free_blocks = free_host_blocks();
  s.pinned_blocks = pinned_blocks();
  s.draining_blocks = draining_blocks();
  for (auto& ts : tenants()) {
    tenant_usage u;
    u.name = ts.config.name;
    u.blocks_used = ts.used;
    u.max_blocks = ts.config.max_blocks;
    u.reserved_blocks = ts.config.reserved_blocks;
    u.active_requests = ts.active;
    u.prefix_query_tokens = ts.query_tokens;
    u.prefix_hit_tokens = ts.hit_tokens;
    u.preemptions = ts.preemptions;
    u.allocation_failures = ts.failures;
    s.tenants.push_back(std::move(u));
  }
  return s;
}

} // namespace kvactor::detail
