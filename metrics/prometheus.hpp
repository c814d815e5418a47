// cache_manager_stats in Prometheus' text exposition format (version 0.0.4),
// for a /metrics endpoint. prometheus-cpp renders it; its headers stay private.
#pragma once

#include <string>

#include "kvactor/messages/types.hpp"

namespace kvactor {

/// Renders one snapshot. Every call builds a fresh registry, so counters carry
/// the snapshot's totals (prometheus-cpp counters only increase). Metrics,
/// each with HELP and TYPE lines:
///
/// Pool gauges (vLLM's name where vLLM has one):
///   kvactor:kv_cache_usage_perc    fraction of blocks in use, 0..1
///                                  (usage_fraction: cached blocks are free)
///   kvactor:num_blocks, kvactor:num_free_blocks, kvactor:num_cached_blocks,
///   kvactor:num_draining_blocks
///   kvactor:num_host_blocks, kvactor:num_free_host_blocks
///   kvactor:memory_bytes, kvactor:used_memory_bytes
///   kvactor:num_active_caches      live requests
///   kvactor:memory_pressure        0 low, 1 medium, 2 high, 3 critical
/// Pool counters:
///   kvactor:prefix_cache_queries_total  prompt tokens looked up
///   kvactor:prefix_cache_hits_total     of which found cached
///   kvactor:num_preemptions_total
///   kvactor:evictions_total, kvactor:allocations_total,
///   kvactor:allocation_failures_total, kvactor:swap_outs_total,
///   kvactor:swap_ins_total, kvactor:swap_in_shared_blocks_total
/// Block counters (each block operation of REPLAY.md's count):
///   kvactor:blocks_allocated_total, kvactor:prefix_hit_blocks_total,
///   kvactor:blocks_freed_total, kvactor:blocks_cached_total,
///   kvactor:cow_copies_total
/// Speculative decoding:
///   kvactor:draft_tokens_total, kvactor:draft_tokens_rejected_total
/// Per tenant, label `tenant` (families left out when stats has no tenants):
///   gauges   kvactor:tenant_blocks_used, kvactor:tenant_max_blocks (0 = no
///            quota), kvactor:tenant_reserved_blocks,
///            kvactor:tenant_active_requests
///   counters kvactor:tenant_prefix_cache_queries_total,
///            kvactor:tenant_prefix_cache_hits_total,
///            kvactor:tenant_num_preemptions_total,
///            kvactor:tenant_allocation_failures_total
///
/// Counter names: prometheus-cpp 1.0 prints a family's name verbatim, adding
/// no `_total`. vLLM registers `vllm:prefix_cache_queries` through Python's
/// prometheus_client, which does add it, so vLLM's scrape shows
/// `vllm:prefix_cache_queries_total`. kvactor names its counter families with
/// the suffix, so its lines match vLLM's with the prefix swapped, and the
/// TYPE lines name the same series.
///
/// Values are the snapshot's numbers as doubles (exact up to 2^53). Throws
/// only std::bad_alloc.
std::string to_prometheus(const cache_manager_stats& stats);

} // namespace kvactor
