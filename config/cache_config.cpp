// cache_config: the embedded default, the JSON writer and tenant lookup.
// The range checks live in validate_config.cpp, the JSON reader in
// parse_config.cpp, the block counts pressure and tenants imply in
// cache_capacity.cpp.
#include "kvactor/config/cache_config.hpp"

#include <nlohmann/json.hpp>

namespace kvactor {

// -- cache_config -------------------------------------------------------------

const tenant_config* cache_config::find_tenant(const std::string& name) const {
  if (name.empty()) {
    for (auto& t : tenants)
      if (t.name == "default")
        return &t;
    return tenants.empty() ? nullptr : &tenants.front();
  }
  for (auto& t : tenants)
    if (t.name == name)
      return &t;
  return nullptr;
}

bool operator==(const cache_config& x, const cache_config& y) {
  return x.block_size == y.block_size && x.model == y.model
         && x.layout == y.layout && x.storage == y.storage
         && x.num_gpu_blocks == y.num_gpu_blocks
         && x.gpu_memory_utilization == y.gpu_memory_utilization
         && x.num_host_blocks == y.num_host_blocks
         && x.prefix_caching == y.prefix_caching && x.pressure == y.pressure
         && x.gc_interval_ms == y.gc_interval_ms
         && x.gc_check_interval_ms == y.gc_check_interval_ms
         && x.tenants == y.tenants
         && x.scheduler_threads == y.scheduler_threads
         && x.device_index == y.device_index
         && x.device_timeout_ms == y.device_timeout_ms
         && x.admission == y.admission
         && x.max_pinned_blocks == y.max_pinned_blocks;
}
// -- JSON ---------------------------------------------------------------------

const char* default_config_json() noexcept {
  // DESIGN.md's config with a small model on host storage, so it runs
  // without a GPU. One block holds 16 tokens x 4 layers x 4 heads x 64 dims x
  // 2 bytes x (K, V) = 64 KiB: 16 MiB of device-tier blocks, 4 MiB of host
  // tier - small enough that the example reaches every pressure level.
  return R"({
  "block_size": 16,
  "model": {
    "num_layers": 4, "num_kv_heads": 4, "head_dim": 64, "dtype": "fp16"
  },
  "layout": "paged",
  "storage": "host",
  "num_gpu_blocks": 256,
  "gpu_memory_utilization": 0.9,
  "num_host_blocks": 64,
  "prefix_caching": true,
  "pressure": {
    "medium": 0.6, "high": 0.8, "critical": 0.95, "hysteresis": 0.05,
    "evict_cached_at_high": true, "preempt_at_critical": true,
    "preempt_grace_ms": 0
  },
  "admission": {
    "policy": "immediate", "watermark": 0.0, "default_expected_output": 256
  },
  "max_pinned_blocks": 64,
  "gc_interval_ms": 1000,
  "gc_check_interval_ms": 60000,
  "tenants": [{"name": "default"}],
  "scheduler_threads": 0,
  "device_index": 0,
  "device_timeout_ms": 30000
}
)";
}

nlohmann::json to_json(const cache_config& cfg) {
  using nlohmann::json;
  json tenants = json::array();
  for (auto& t : cfg.tenants)
    tenants.push_back(json{{"name", t.name},
                           {"max_blocks", t.max_blocks},
                           {"reserved_blocks", t.reserved_blocks},
                           {"priority", to_string(t.priority)},
                           {"prefix_namespace", t.prefix_namespace}});
  return json{
    {"block_size", cfg.block_size},
    {"model",
     {{"num_layers", cfg.model.num_layers},
      {"num_kv_heads", cfg.model.num_kv_heads},
      {"head_dim", cfg.model.head_dim},
      {"dtype", to_string(cfg.model.dtype)}}},
    {"layout", cfg.layout},
    {"storage", cfg.storage},
    {"num_gpu_blocks", cfg.num_gpu_blocks},
    {"gpu_memory_utilization", cfg.gpu_memory_utilization},
    {"num_host_blocks", cfg.num_host_blocks},
    {"prefix_caching", cfg.prefix_caching},
    {"pressure",
     {{"medium", cfg.pressure.medium},
      {"high", cfg.pressure.high},
      {"critical", cfg.pressure.critical},
      {"hysteresis", cfg.pressure.hysteresis},
      {"evict_cached_at_high", cfg.pressure.evict_cached_at_high},
      {"preempt_at_critical", cfg.pressure.preempt_at_critical},
      {"preempt_grace_ms", cfg.pressure.preempt_grace_ms}}},
    {"admission",
     {{"policy", cfg.admission.policy},
      {"watermark", cfg.admission.watermark},
      {"default_expected_output", cfg.admission.default_expected_output}}},
    {"max_pinned_blocks", cfg.max_pinned_blocks},
    {"gc_interval_ms", cfg.gc_interval_ms},
    {"gc_check_interval_ms", cfg.gc_check_interval_ms},
    {"tenants", std::move(tenants)},
    {"scheduler_threads", cfg.scheduler_threads},
    {"device_index", cfg.device_index},
    {"device_timeout_ms", cfg.device_timeout_ms},
  };
}

} // namespace kvactor
