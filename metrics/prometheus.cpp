// to_prometheus: a snapshot of cache_manager_stats through a throwaway
// prometheus-cpp registry and its text serializer.
#include "kvactor/metrics/prometheus.hpp"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "kvactor/metrics/stats_json.hpp"

namespace kvactor {

namespace {

using prometheus::Registry;

// HELP texts hold no backslash and no newline: prometheus-cpp 1.0 writes them
// unescaped.

void gauge(Registry& reg, const char* name, const char* help, double value) {
  prometheus::BuildGauge()
    .Name(name)
    .Help(help)
    .Register(reg)
    .Add({})
    .Set(value);
}

void counter(Registry& reg, const char* name, const char* help,
             std::uint64_t value) {
  prometheus::BuildCounter()
    .Name(name)
    .Help(help)
    .Register(reg)
    .Add({})
    .Increment(static_cast<double>(value));
}

struct tenant_metric {
  const char* name;
  const char* help;
  bool is_counter;
  std::uint64_t tenant_usage::*field;
};

constexpr tenant_metric tenant_metrics[] = {
  {"kvactor:tenant_blocks_used", "Device blocks charged to the tenant.", false,
   &tenant_usage::blocks_used},
  {"kvactor:tenant_max_blocks", "The tenant's block quota (0 = none).", false,
   &tenant_usage::max_blocks},
  {"kvactor:tenant_reserved_blocks",
   "Blocks guaranteed to the tenant (reserved minimum).", false,
   &tenant_usage::reserved_blocks},
  {"kvactor:tenant_active_requests", "The tenant's live requests.", false,
   &tenant_usage::active_requests},
  {"kvactor:tenant_prefix_cache_queries_total",
   "The tenant's prefix cache queries, in prompt tokens looked up.", true,
   &tenant_usage::prefix_query_tokens},
  {"kvactor:tenant_prefix_cache_hits_total",
   "The tenant's prefix cache hits, in prompt tokens found cached.", true,
   &tenant_usage::prefix_hit_tokens},
  {"kvactor:tenant_num_preemptions_total",
   "Preemptions of the tenant's requests.", true, &tenant_usage::preemptions},
  {"kvactor:tenant_allocation_failures_total",
   "The tenant's failed allocations.", true,
   &tenant_usage::allocation_failures},
};

void add_tenants(Registry& reg, const std::vector<tenant_usage>& tenants) {
  if (tenants.empty())
    return;
  for (auto& m : tenant_metrics) {
    if (m.is_counter) {
      auto& family =
        prometheus::BuildCounter().Name(m.name).Help(m.help).Register(reg);
      for (auto& t : tenants)
        family.Add({{"tenant", t.name}})
          .Increment(static_cast<double>(t.*m.field));
    } else {
      auto& family =
        prometheus::BuildGauge().Name(m.name).Help(m.help).Register(reg);
      for (auto& t : tenants)
        family.Add({{"tenant", t.name}}).Set(static_cast<double>(t.*m.field));
    }
  }
}

} // namespace

std::string to_prometheus(const cache_manager_stats& s) {
  Registry reg;
  gauge(reg, "kvactor:kv_cache_usage_perc",
        "KV-cache usage: fraction of device blocks in use (0..1).",
        usage_fraction(s));
  gauge(reg, "kvactor:num_blocks", "Device blocks in the pool.",
        static_cast<double>(s.total_blocks));
  gauge(reg, "kvactor:num_free_blocks",
        "Device blocks no request holds and none drains, cached ones "
        "included.",
        static_cast<double>(s.free_blocks));
  gauge(reg, "kvactor:num_draining_blocks",
        "Device blocks preempted requests let go, not free until their "
        "writers are done (pressure.preempt_grace_ms).",
        static_cast<double>(s.draining_blocks));
  gauge(reg, "kvactor:num_cached_blocks",
        "Free device blocks that still hold a findable prefix.",
        static_cast<double>(s.cached_blocks));
  gauge(reg, "kvactor:num_host_blocks", "Host-tier blocks for swapping.",
        static_cast<double>(s.host_total_blocks));
  gauge(reg, "kvactor:num_free_host_blocks", "Free host-tier blocks.",
        static_cast<double>(s.host_free_blocks));
  gauge(reg, "kvactor:memory_bytes", "Bytes of all device blocks.",
        static_cast<double>(s.total_memory_bytes));
  gauge(reg, "kvactor:used_memory_bytes", "Bytes of device blocks in use.",
        static_cast<double>(s.used_memory_bytes));
  gauge(reg, "kvactor:num_active_caches", "Live requests (KV caches).",
        static_cast<double>(s.active_caches));
  gauge(reg, "kvactor:memory_pressure",
        "Memory pressure level: 0 low, 1 medium, 2 high, 3 critical.",
        static_cast<double>(s.pressure));
  counter(reg, "kvactor:prefix_cache_queries_total",
          "Prefix cache queries, in prompt tokens looked up.",
          s.prefix_query_tokens);
  counter(reg, "kvactor:prefix_cache_hits_total",
          "Prefix cache hits, in prompt tokens found cached.",
          s.prefix_hit_tokens);
  counter(reg, "kvactor:num_preemptions_total", "Preemptions of requests.",
          s.preemption_count);
  counter(reg, "kvactor:evictions_total", "Cached free blocks evicted.",
          s.eviction_count);
  counter(reg, "kvactor:allocations_total", "Successful allocations.",
          s.allocation_count);
  counter(reg, "kvactor:allocation_failures_total", "Failed allocations.",
          s.allocation_failures);
  counter(reg, "kvactor:blocks_allocated_total", "Fresh blocks handed out.",
          s.blocks_allocated);
  counter(reg, "kvactor:prefix_hit_blocks_total",
          "Blocks shared from the prefix index.", s.prefix_hit_blocks);
  counter(reg, "kvactor:blocks_freed_total",
          "Blocks whose last reference was released.", s.blocks_freed);
  counter(reg, "kvactor:blocks_cached_total",
          "Full blocks entered into the prefix index.", s.blocks_cached);
  counter(reg, "kvactor:cow_copies_total", "Copy-on-write block copies.",
          s.cow_copies);
  counter(reg, "kvactor:swap_outs_total",
          "Requests swapped out to the host tier (not those that ended "
          "during the copy).", s.swap_out_count);
  counter(reg, "kvactor:swap_ins_total",
          "Requests swapped back in from the host tier.", s.swap_in_count);
  counter(reg, "kvactor:swap_in_shared_blocks_total",
          "Blocks a swap-in shared again from the device's prefix cache "
          "instead of copying them from the host tier.",
          s.swap_in_shared_blocks);
  counter(reg, "kvactor:draft_tokens_total",
          "Tokens extended as drafts (speculative decoding).",
          s.draft_tokens);
  counter(reg, "kvactor:draft_tokens_rejected_total",
          "Draft tokens the verification rejected.", s.draft_tokens_rejected);
  add_tenants(reg, s.tenants);
  return prometheus::TextSerializer{}.Serialize(reg.Collect());
}

} // namespace kvactor
