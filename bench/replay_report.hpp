// replay_report: what the replayer measures and prints - latencies of each
// kind of operation, a run's figures, the JSON line REPLAY.md specifies, and
// the median of repeated runs. Shared by the replayer's three modes.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/replay_scheduler.hpp"
#include "bench/trace.hpp"
#include "kvactor/config/cache_config.hpp"
#include "kvactor/messages/types.hpp"

namespace kvactor::bench {

using clock_type = std::chrono::steady_clock;

inline double ms(clock_type::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

/// Latencies of one kind of operation, in microseconds. A sample may stand
/// for several operations (the step message's amortized figure for each it
/// carried): one weighted entry per message rather than one per operation,
/// so that recording a million extends does not itself grow megabytes of
/// vectors, page faults and cache misses between the steps being timed.
struct latencies {
  std::uint64_t calls = 0;
  std::vector<std::pair<double, std::uint64_t>> us; ///< value, weight

  void add(double micros, std::uint64_t weight = 1) {
    if (weight > 0)
      us.emplace_back(micros, weight);
  }

  /// calls, mean_us, p50_us, p99_us (null without samples).
  nlohmann::json to_json();
};

struct run_figures {
  double bookkeeping_ms = 0;
  double wall_ms = 0;
  /// Step mode: after the last step's reply, until the manager took in
  /// every step's effects (its registry work, which ran behind the steps).
  double registry_tail_ms = 0;
  /// alloc counts attempted admissions; free the frees of finished
  /// requests; preempt (facade mode) the preemption calls.
  latencies alloc, extend, free, preempt, message;
  /// Facade mode: the stats call after each step (the usage figures),
  /// outside bookkeeping_ms - but work the step's calls left queued at the
  /// handle actors runs while it waits, so it is timed and printed apart
  /// (stats_ms, stats).
  latencies stats;
  double stats_ms = 0;
};

/// What a replay runs against.
struct replay_options {
  cache_config cache;          ///< num_gpu_blocks: the usable blocks
  std::uint32_t pool_blocks = 0; ///< as given (trace header or --num-blocks)
  /// Held back from the pool, as vLLM's BlockPool holds back its null block
  /// (block 0, the target of padded slots): with the same usable blocks the
  /// same policy makes the same decisions. --all-blocks sets it to 0.
  std::uint32_t reserved_blocks = 1;
  std::size_t max_admits = 8;
};

/// The cache a replay of `tr` uses: bookkeeping only, `num_blocks` usable,
/// REPLAY.md's lazy LRU eviction, preemption left to the scheduler.
cache_config config_for(const trace& tr, std::uint32_t num_blocks);

/// REPLAY.md's JSON line for one run of `mode`; "interrupted" is true if
/// the run stopped before `sched` was done (Ctrl-C): its figures are those
/// of the steps that ran.
nlohmann::json report(const std::string& mode, const trace& tr,
                      const replay_options& opt, const replay_scheduler& sched,
                      const cache_manager_stats& st, run_figures& fig);

/// Runs `run` `n` times; the median run's report (by bookkeeping time),
/// with "repeat" and every run's "bookkeeping_ms_runs" in run order. Every
/// run must make the same decisions. A run whose report says "interrupted"
/// ends the repetition: its report is the answer (with the runs' times so
/// far), as far as it went.
template <class Run>
nlohmann::json repeated(std::size_t n, Run run) {
  auto ms_of = [](const nlohmann::json& r) {
    return r["total_bookkeeping_ms"].get<double>();
  };
  std::vector<nlohmann::json> runs;
  std::vector<double> all;
  for (std::size_t i = 0; i < n; ++i) {
    runs.push_back(run());
    all.push_back(ms_of(runs.back()));
    if (runs.back().value("interrupted", false)) {
      auto out = runs.back();
      if (n > 1) {
        out["repeat"] = n;
        out["bookkeeping_ms_runs"] = all;
      }
      return out;
    }
  }
  std::sort(runs.begin(), runs.end(),
            [&](auto& x, auto& y) { return ms_of(x) < ms_of(y); });
  auto out = runs[n / 2];
  if (n == 1)
    return out;
  for (auto& r : runs)
    for (auto key : {"preemptions", "finished", "steps", "block_ops",
                     "prefix_hit_rate", "peak_blocks_used", "avg_blocks_used"})
      if (r[key] != out[key])
        throw std::runtime_error(std::string{"runs disagree on "} + key);
  out["repeat"] = n;
  out["bookkeeping_ms_runs"] = all;
  return out;
}

} // namespace kvactor::bench
