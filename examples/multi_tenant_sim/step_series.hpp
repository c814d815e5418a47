// step_series: the run's time series, bounded. A scenario may run 2^64
// steps, and a row per step would hold gigabytes and write a CSV and plot
// as large, so the series keeps at most `cap` rows: once full it coarsens -
// adjacent rows merge into one (step_sample's merge rules, run_figures.hpp)
// and each row then stands for twice the steps - so that it stays evenly
// spaced over the run at whatever resolution fits. The figures the summary
// and report.json take from every step (series_totals) are kept beside the
// rows, exactly, so they are the same at any resolution. Header-only (the
// sim library's source list is examples/CMakeLists.txt's); CAF-free.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "run_figures.hpp"

namespace kvactor::sim {

/// Rows a run's time series keeps at most unless told otherwise (batcher,
/// simulate): 2^16 rows are about 10 MiB in memory and a 5 MiB CSV with a
/// few tenants - finer than any plot draws - and a run of up to 65536 busy
/// steps (the default scenario's 4240, say) keeps a row per step.
inline constexpr std::size_t default_series_cap = std::size_t{1} << 16;

/// The fewest rows a series may be capped at: two buckets hold any run
/// (a bucket stands for up to 2^63 steps).
inline constexpr std::size_t min_series_cap = 2;

/// Merges `later` into `row` (the row just before it): step_sample's rules.
inline void merge_sample(step_sample& row, const step_sample& later) {
  auto steps = row.steps + later.steps;
  auto skipped = row.skipped && later.skipped;
  auto admitted = row.admitted + later.admitted;
  auto finished = row.finished + later.finished;
  auto preempted = row.preempted + later.preempted;
  row = later; // the levels: the state after the row's last step
  row.steps = steps;
  row.skipped = skipped;
  row.admitted = admitted;
  row.finished = finished;
  row.preempted = preempted;
}

class step_series {
public:
  /// `cap`: rows kept at most (min_series_cap at least).
  explicit step_series(std::size_t cap = default_series_cap)
    : cap_(std::max(cap, min_series_cap)) {
  }

  std::size_t cap() const noexcept {
    return cap_;
  }
  bool empty() const noexcept {
    return rows_.empty();
  }
  const std::vector<step_sample>& rows() const noexcept {
    return rows_;
  }
  /// The last row: the state after the last step sampled.
  const step_sample& back() const {
    return rows_.back();
  }
  const series_totals& totals() const noexcept {
    return totals_;
  }
  /// Hands the rows over (the series is done with).
  std::vector<step_sample> take_rows() {
    return std::move(rows_);
  }

  /// The row of a step run (`s.steps` 1, the step after the last sampled).
  void add(step_sample s) {
    count(s);
    feed(std::move(s));
    fit();
  }

  /// An idle gap's `n` steps from `first` on, all in the state `state`
  /// (nothing admitted, finished or preempted in them). `continues`: the
  /// last rows are of the same gap, skipped in an earlier call. Until the
  /// series coarsens the gap keeps a row at its first step and one for the
  /// rest (batcher::skip_idle); then its steps fill the buckets it spans.
  void add_gap(step_sample state, std::uint64_t first, std::uint64_t n,
               bool continues) {
    if (n == 0)
      return;
    state.skipped = true;
    state.admitted = state.finished = state.preempted = 0;
    state.step = first + n - 1;
    state.steps = n;
    count(state);
    if (totals_.row_steps > 1) {
      feed(std::move(state));
    } else if (continues && rows_.size() >= 2 && rows_.back().skipped
               && rows_[rows_.size() - 2].skipped) {
      merge_sample(rows_.back(), state); // the rest row grows
    } else if (continues) {
      rows_.push_back(std::move(state)); // a gap's first row had no rest yet
    } else {
      auto rest = state;
      state.step = first;
      state.steps = 1;
      rows_.push_back(std::move(state));
      if (n > 1) {
        rest.steps = n - 1;
        rows_.push_back(std::move(rest));
      }
    }
    fit();
  }

private:
  /// The exact figures: every step counted as it comes.
  void count(const step_sample& s) {
    totals_.steps += s.steps;
    totals_.used_peak = std::max(totals_.used_peak, s.used_blocks);
    totals_.used_sum += double(s.used_blocks) * double(s.steps);
    totals_.steps_at[static_cast<int>(s.pressure) & 3] += s.steps;
  }

  /// Whether the last row's bucket has room for more steps (steps are
  /// numbered from 0: bucket k stands for steps k*W ... (k+1)*W - 1).
  bool open() const noexcept {
    return !rows_.empty() && (rows_.back().step + 1) % totals_.row_steps != 0;
  }

  /// Appends `s` at the current bucket width: a row that is not skipped
  /// lies within one bucket (it was made at this width or a finer one) and
  /// joins the open one or starts the next; a skipped row's constant state
  /// is cut at bucket bounds, its whole buckets kept as one skipped row of
  /// them all (evenly spaced still: each stands for as many steps, the
  /// same state), merged into a skipped row before it (only a gap's rows
  /// are skipped, and a step runs between two gaps).
  void feed(step_sample s) {
    auto w = totals_.row_steps;
    if (!s.skipped) {
      if (open())
        merge_sample(rows_.back(), s);
      else
        rows_.push_back(std::move(s));
      return;
    }
    auto first = s.step + 1 - s.steps;
    auto n = s.steps;
    auto piece = [&](std::uint64_t k) {
      auto p = s;
      p.step = first + k - 1;
      p.steps = k;
      first += k;
      n -= k;
      return p;
    };
    if (open()) {
      auto room = w - (rows_.back().step + 1) % w;
      merge_sample(rows_.back(), piece(std::min(n, room)));
    }
    if (auto whole = n / w * w; whole > 0) {
      auto p = piece(whole);
      if (!rows_.empty() && rows_.back().skipped && !open())
        merge_sample(rows_.back(), p);
      else
        rows_.push_back(std::move(p));
    }
    if (n > 0)
      rows_.push_back(piece(n)); // an open bucket: the next steps join it
  }

  /// Coarsens until the rows fit: each round doubles the steps a bucket
  /// stands for and merges the rows into the wider buckets - adjacent
  /// pairs, where the series was evenly spaced.
  void fit() {
    while (rows_.size() > cap_ && totals_.row_steps < (std::uint64_t{1} << 63)) {
      totals_.row_steps *= 2;
      auto old = std::move(rows_);
      rows_.clear();
      rows_.reserve(cap_ / 2 + 2);
      for (auto& r : old)
        feed(std::move(r));
    }
  }

  std::size_t cap_;
  std::vector<step_sample> rows_;
  series_totals totals_;
};

} // namespace kvactor::sim
