// The replayer's figures and its JSON line (replay_report.hpp).
#include "bench/replay_report.hpp"

namespace kvactor::bench {

nlohmann::json latencies::to_json() {
  nlohmann::json out{{"calls", calls}};
  if (us.empty()) {
    out["mean_us"] = out["p50_us"] = out["p99_us"] = nullptr;
    return out;
  }
  std::sort(us.begin(), us.end());
  double sum = 0;
  std::uint64_t total = 0;
  for (auto& [x, w] : us) {
    sum += x * double(w);
    total += w;
  }
  // The first sample whose cumulative weight passes q of the total.
  auto pick = [&](double q) {
    auto rank = static_cast<std::uint64_t>(q * double(total));
    std::uint64_t seen = 0;
    for (auto& [x, w] : us) {
      seen += w;
      if (seen > rank)
        return x;
    }
    return us.back().first;
  };
  out["mean_us"] = sum / double(total);
  out["p50_us"] = pick(0.50);
  out["p99_us"] = pick(0.99);
  return out;
}

cache_config config_for(const trace& tr, std::uint32_t num_blocks) {
  cache_config cfg;
  cfg.block_size = tr.block_size;
  cfg.model = model_config{1, 1, 8, dtype::fp16};
  cfg.storage = "none"; // bookkeeping only
  cfg.num_gpu_blocks = num_blocks;
  cfg.gc_interval_ms = 0;
  // REPLAY.md's policy evicts cached blocks only when an allocation needs
  // them (least recently used first).
  cfg.pressure.evict_cached_at_high = false;
  cfg.pressure.preempt_at_critical = false; // the scheduler preempts
  return cfg;
}

nlohmann::json report(const std::string& mode, const trace& tr,
                      const replay_options& opt, const replay_scheduler& sched,
                      const cache_manager_stats& st, run_figures& fig) {
  auto block_ops = st.blocks_allocated + st.prefix_hit_blocks + st.blocks_freed
                   + st.blocks_cached + st.eviction_count;
  nlohmann::json out{
    {"impl", "kvactor"},
    {"mode", mode},
    {"trace", tr.path},
    {"requests", tr.requests.size()},
    {"block_size", opt.cache.block_size},
    {"num_blocks", opt.pool_blocks},
    {"usable_blocks", opt.cache.num_gpu_blocks},
    {"steps", sched.steps()},
    {"total_bookkeeping_ms", fig.bookkeeping_ms},
    {"replay_wall_ms", fig.wall_ms},
    {"block_ops", block_ops},
    {"block_ops_by_kind", {{"allocated", st.blocks_allocated},
                           {"prefix_hits", st.prefix_hit_blocks},
                           {"freed", st.blocks_freed},
                           {"cached", st.blocks_cached},
                           {"evicted", st.eviction_count}}},
    {"ops_per_sec", fig.bookkeeping_ms > 0
                      ? block_ops / (fig.bookkeeping_ms / 1000.0)
                      : 0.0},
    {"allocate", fig.alloc.to_json()},
    {"extend", fig.extend.to_json()},
    {"free", fig.free.to_json()},
    {"prefix_hit_rate", st.cache_hit_rate},
    {"peak_blocks_used", sched.peak_blocks_used()},
    {"avg_blocks_used", sched.avg_blocks_used()},
    {"preemptions", sched.preemptions()},
    {"finished", sched.finished()},
    {"interrupted", !sched.done()},
  };
  if (mode == "step") {
    // No operation has a latency of its own here: allocate / extend / free
    // show the calls and each message's round trip divided by the
    // operations it carried as the mean; percentiles of that would not be
    // latencies, so they are null - `messages` has the round trips.
    out["latency"] = "amortized_per_op";
    for (auto key : {"allocate", "extend", "free"})
      out[key]["p50_us"] = out[key]["p99_us"] = nullptr;
    out["messages"] = fig.message.to_json();
    out["registry_tail_ms"] = fig.registry_tail_ms;
  } else if (mode == "facade") {
    out["latency"] = "per_call";
    out["preempt"] = fig.preempt.to_json();
    out["stats_ms"] = fig.stats_ms;
    out["stats"] = fig.stats.to_json();
  }
  return out;
}

} // namespace kvactor::bench
