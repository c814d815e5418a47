// The statistics value types (messages/types.hpp) as JSON, for logs, the
// simulator's reports and HTTP endpoints; and the usage fraction they imply.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include "kvactor/messages/types.hpp"

namespace kvactor {

/// Every field under its own name; `pressure` as its to_string name
/// ("medium"); `tenants` as an array of tenant_usage objects.
nlohmann::json to_json(const cache_manager_stats& x);

/// {"memory_freed", "caches_freed", "blocks_reclaimed", "gc_time_ms"}.
nlohmann::json to_json(const cache_gc_stats& x);

/// {"memory_bytes", "blocks_allocated", "tokens_stored", "utilization",
/// "last_access", "prefix_hit_tokens"}.
nlohmann::json to_json(const cache_handle_stats& x);

/// Every field of tenant_usage under its own name.
nlohmann::json to_json(const tenant_usage& x);

/// Fraction of device blocks in use: (total_blocks - free_blocks) /
/// total_blocks, in [0, 1]; cached free blocks count as free, draining ones
/// (not free until their drain ends) as in use. 0 when the pool
/// has no blocks (or, inconsistently, more free blocks than blocks).
double usage_fraction(const cache_manager_stats& x) noexcept;

} // namespace kvactor
