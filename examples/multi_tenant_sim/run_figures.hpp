// run_figures: what a simulation counts - each tenant's figures over the
// run, and the state after each step (the time series). Plain values,
// kept by the batcher and read by the reports.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "conversation.hpp"
#include "drafts.hpp"
#include "kvactor/messages/types.hpp"

namespace kvactor::sim {

/// One tenant's figures over the run.
struct tenant_figures {
  std::string name;
  kvactor::priority priority = kvactor::priority::normal;
  std::uint64_t arrived = 0;
  std::uint64_t admitted = 0;   ///< first admissions
  std::uint64_t readmitted = 0; ///< admissions after a preemption
  std::uint64_t finished = 0;
  std::uint64_t rejected = 0;         ///< refused by the cache for good
  std::uint64_t turned_away = 0;      ///< arrived to a full queue (max_waiting)
  std::uint64_t prompt_tokens = 0;    ///< prompts of first admissions
  std::uint64_t generated_tokens = 0; ///< output tokens decoded
  std::uint64_t prefill_tokens = 0;   ///< prompts of every admission
  std::uint64_t hit_tokens = 0;       ///< of those, found in the prefix cache
  std::uint64_t preempted_in_step = 0;  ///< by the step's shortage policy
  std::uint64_t preempted_by_cache = 0; ///< by the supervisor (critical)
  std::uint64_t preempted_by_quota = 0; ///< its extend hit max_blocks
  std::uint64_t swaps = 0;              ///< swap-outs (preemption "swap")
  std::uint64_t swap_ins = 0;
  std::vector<std::uint32_t> queue_delay; ///< steps, arrival -> admission
  /// Never admitted when the figures were taken (an interrupted or
  /// undrained run), and the longest of their waits so far, in steps:
  /// queue_delay counts admitted requests only.
  std::uint64_t unadmitted = 0;
  std::uint64_t unadmitted_wait = 0;
  /// Admitted but not finished when the figures were taken (an interrupted
  /// or undrained run): running, swapped out, or waiting to be admitted
  /// again. arrived = finished + rejected + turned_away + unadmitted + this.
  std::uint64_t in_progress = 0;
  std::vector<std::uint32_t> latency;     ///< steps, arrival -> finished
  std::uint64_t blocks_peak = 0;          ///< blocks charged to the tenant
  double blocks_sum = 0;                  ///< over the steps, for the mean
  draft_figures drafts;                   ///< speculative decoding
  conversation_figures conv;              ///< turns of sessions

  std::uint64_t preemptions() const noexcept {
    return preempted_in_step + preempted_by_cache + preempted_by_quota;
  }
  double hit_rate() const noexcept {
    return prefill_tokens == 0 ? 0.0 : double(hit_tokens) / double(prefill_tokens);
  }
};

struct tenant_sample {
  std::uint32_t waiting = 0;
  std::uint32_t running = 0;
  std::uint64_t blocks = 0; ///< charged to the tenant (manager's stats)
};

/// The state after one step - or, for a row of a skipped idle gap
/// (batcher::skip_idle), after each of `steps` steps (the gap's first
/// step's row stands for it alone, the last step's row for the rest) - or,
/// once the series has coarsened (step_series: at most a fixed number of
/// rows, default_series_cap), what `steps` steps did, ending at `step`.
///
/// Merging a row into the one before it (merge_sample): `step` is the
/// later's, `steps` the sum; `skipped` only if both were (an idle gap's
/// steps alone). Counts of what happened in the steps - admitted,
/// finished, preempted - are summed. Levels - waiting, running, swapped,
/// the blocks, total_blocks, pressure, hit_rate (cumulative already) and
/// every tenant_sample field - take the later row's value: a row holds the
/// state after its last step, as a row of one step does, and a skipped
/// gap goes on from the last row's state. The figures printed from the
/// samples (the pool's blocks mean and peak, steps at each pressure level,
/// steps sampled) need every step, so they are kept apart, exactly
/// (series_totals): the summary and report.json do not depend on the cap.
struct step_sample {
  std::uint64_t step = 0;
  std::uint64_t steps = 1; ///< steps this row stands for
  bool skipped = false;    ///< a row of a skipped idle gap
  std::uint32_t waiting = 0;
  std::uint32_t running = 0;
  std::uint32_t swapped = 0; ///< requests in the host tier
  // 64 bits: a coarse row sums them over up to 2^63 steps.
  std::uint64_t admitted = 0;
  std::uint64_t finished = 0;
  /// Recomputed or swapped out this step (report.json counts the two
  /// apart: preemptions, swaps).
  std::uint64_t preempted = 0;
  std::uint64_t used_blocks = 0;
  std::uint64_t cached_blocks = 0;
  std::uint64_t total_blocks = 0;
  memory_pressure pressure = memory_pressure::low;
  double hit_rate = 0; ///< cumulative: hit tokens / prefilled prompt tokens
  std::vector<tenant_sample> tenants;
};

/// What the summary and report.json take from every sampled step, counted
/// as the steps come (step_series), so that they are the same however
/// coarse the rows kept: a merged row has lost its steps' peak and levels.
struct series_totals {
  std::uint64_t steps = 0;     ///< steps sampled (skipped idle steps too)
  std::uint64_t used_peak = 0; ///< the pool's blocks in use, most
  double used_sum = 0;         ///< the pool's blocks in use, summed over steps
  std::uint64_t steps_at[4] = {}; ///< steps at each pressure level
  /// Steps each row stands for (a power of two): 1 until the series
  /// coarsened (but a skipped gap's rows); a row of a skipped idle gap may
  /// stand for a whole number of them, the last row for fewer (its bucket
  /// still open).
  std::uint64_t row_steps = 1;
};

} // namespace kvactor::sim
