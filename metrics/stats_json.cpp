// JSON forms of the statistics value types.
#include "kvactor/metrics/stats_json.hpp"

#include <nlohmann/json.hpp>

namespace kvactor {

nlohmann::json to_json(const tenant_usage& x) {
  return nlohmann::json{
    {"name", x.name},
    {"blocks_used", x.blocks_used},
    {"max_blocks", x.max_blocks},
    {"reserved_blocks", x.reserved_blocks},
    {"active_requests", x.active_requests},
    {"prefix_query_tokens", x.prefix_query_tokens},
    {"prefix_hit_tokens", x.prefix_hit_tokens},
    {"preemptions", x.preemptions},
    {"allocation_failures", x.allocation_failures},
  };
}

nlohmann::json to_json(const cache_manager_stats& x) {
  auto tenants = nlohmann::json::array();
  for (auto& t : x.tenants)
    tenants.push_back(to_json(t));
  return nlohmann::json{
    {"total_memory_bytes", x.total_memory_bytes},
    {"used_memory_bytes", x.used_memory_bytes},
    {"active_caches", x.active_caches},
    {"total_blocks", x.total_blocks},
    {"free_blocks", x.free_blocks},
    {"cache_hit_rate", x.cache_hit_rate},
    {"eviction_count", x.eviction_count},
    {"allocation_count", x.allocation_count},
    {"allocation_failures", x.allocation_failures},
    {"cached_blocks", x.cached_blocks},
    {"pressure", to_string(x.pressure)},
    {"preemption_count", x.preemption_count},
    {"swap_out_count", x.swap_out_count},
    {"swap_in_count", x.swap_in_count},
    {"swap_in_shared_blocks", x.swap_in_shared_blocks},
    {"block_size", x.block_size},
    {"prefix_query_tokens", x.prefix_query_tokens},
    {"prefix_hit_tokens", x.prefix_hit_tokens},
    {"host_total_blocks", x.host_total_blocks},
    {"host_free_blocks", x.host_free_blocks},
    {"tenants", std::move(tenants)},
    {"blocks_allocated", x.blocks_allocated},
    {"prefix_hit_blocks", x.prefix_hit_blocks},
    {"blocks_freed", x.blocks_freed},
    {"blocks_cached", x.blocks_cached},
    {"cow_copies", x.cow_copies},
    {"draft_tokens", x.draft_tokens},
    {"draft_tokens_rejected", x.draft_tokens_rejected},
    {"draining_blocks", x.draining_blocks},
  };
}

nlohmann::json to_json(const cache_gc_stats& x) {
  return nlohmann::json{
    {"memory_freed", x.memory_freed},
    {"caches_freed", x.caches_freed},
    {"blocks_reclaimed", x.blocks_reclaimed},
    {"gc_time_ms", x.gc_time_ms},
  };
}

nlohmann::json to_json(const cache_handle_stats& x) {
  return nlohmann::json{
    {"memory_bytes", x.memory_bytes},
    {"blocks_allocated", x.blocks_allocated},
    {"tokens_stored", x.tokens_stored},
    {"utilization", x.utilization},
    {"last_access", x.last_access},
    {"prefix_hit_tokens", x.prefix_hit_tokens},
  };
}

double usage_fraction(const cache_manager_stats& x) noexcept {
  if (x.total_blocks == 0 || x.free_blocks > x.total_blocks)
    return 0.0;
  return static_cast<double>(x.total_blocks - x.free_blocks)
         / static_cast<double>(x.total_blocks);
}

} // namespace kvactor
