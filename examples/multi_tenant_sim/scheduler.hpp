// scheduler: runs a scenario - starts the cache in an actor system of its
// own and drives it with a scheduler actor that owns the simulated clock and
// sends one step message per step (none for idle gaps, which it skips) -
// and returns what happened. CAF-free
// header: only scheduler.cpp sees the actors.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "batcher.hpp"
#include "kvactor/config/cache_config.hpp"
#include "kvactor/messages/types.hpp"
#include "progress.hpp"
#include "scenario.hpp"

namespace kvactor::sim {

/// What a run did (also when it was interrupted or failed midway).
struct sim_outcome {
  bool started = false;     ///< the cache started
  bool interrupted = false; ///< stopped early by the interrupt flag
  std::string error;        ///< non-empty: the run failed (why)
  /// The scenario does not fit the pool as started (check_fits, with
  /// num_gpu_blocks 0 sized from device memory), or its cache config is
  /// one the storage refused at start (invalid_config): `error` says
  /// where; no step ran.
  bool bad_scenario = false;
  cache_config effective;   ///< as started (num_gpu_blocks as allocated)
  std::string storage;      ///< the backend that ran: none, host, cuda
  std::string device;       ///< "cpu", "cuda:0"
  std::uint64_t bytes_per_block = 0;
  std::uint64_t steps = 0;  ///< steps completed (skipped idle steps too)
  /// Of those, idle steps skipped: no message sent, sampled in at most two
  /// rows per gap (batcher::skip_idle).
  std::uint64_t idle_steps_skipped = 0;
  std::vector<tenant_figures> tenants;
  /// The time series: at most simulate's series_cap rows (step_series).
  std::vector<step_sample> samples;
  /// What the figures take from every sampled step, however coarse the
  /// rows (figures.hpp).
  series_totals series;
  std::vector<std::string> warnings;
  bool have_final_stats = false;
  cache_manager_stats final_stats;
  /// The pool's accounting invariant, checked once the run ended (the
  /// block pool's check_atom): whether it was, and what broke if it did.
  bool invariant_checked = false;
  std::string invariant_error;
  /// Why the check could not run (a timeout, the pool gone), if it did not.
  std::string invariant_unchecked;
  std::uint64_t pressure_entered[4] = {}; ///< changes into each level
  std::uint64_t ended_before_free = 0;    ///< batcher::ended_before_free
  std::uint64_t preempted_mid_swap = 0;   ///< batcher::preempted_mid_swap
  std::uint64_t chunk_extends = 0;        ///< batcher::chunk_extends
  std::uint64_t preempted_mid_prefill = 0; ///< batcher::preempted_mid_prefill
  std::vector<double> step_round_trip_us; ///< per step message sent
  /// Admission order cached_prefix: probes sent (one per step at most) and
  /// those the cache refused (that step admitted in queue order).
  std::uint64_t probes = 0;
  std::uint64_t probe_failures = 0;
  std::uint64_t tokens_written = 0;       ///< K/V rows written (all layers)
  std::uint64_t bytes_written = 0;
  std::uint64_t verify_checks = 0;
  std::uint64_t verify_failures = 0;
  /// The scenario's verify_every: with storage that holds bytes, a run
  /// that had it on and read nothing back checked nothing (failed_checks).
  std::uint64_t verify_every = 0;
  /// Verifies due (every verify_every steps) that read nothing back, by
  /// why: nothing was running, the request picked held no tokens, it ended
  /// (the supervisor preempted it) before its table came, or the pool's
  /// table disagreed with the simulator's (an inconsistency too).
  struct verify_skips {
    std::uint64_t nothing_running = 0;
    std::uint64_t no_tokens = 0;
    std::uint64_t ended = 0;
    std::uint64_t table_disagreed = 0;
    std::uint64_t total() const noexcept {
      return nothing_running + no_tokens + ended + table_disagreed;
    }
  } verify_skipped;
  /// Replies that disagreed with what the simulator asked for
  /// (batcher::inconsistencies); each is among the warnings too.
  std::uint64_t inconsistencies = 0;
  double wall_s = 0;
};

/// Runs `s` to its end, until `interrupted` turns true (checked once per
/// step), or until the cache fails. Reports progress to `bar`. The time
/// series keeps at most `series_cap` rows (step_series).
sim_outcome simulate(const scenario& s, const std::atomic<bool>& interrupted,
                     progress& bar, std::size_t series_cap = default_series_cap);

} // namespace kvactor::sim
