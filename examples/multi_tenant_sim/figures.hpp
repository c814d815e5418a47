// figures: what the summary table and report.json both derive from a
// run's figures - percentiles, the overall row, mean blocks, steps at each
// pressure level. What they take from every step comes from the run's
// series_totals, never the time series' rows, which may be coarse: the
// figures are the same whatever its cap. CAF-free.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "scheduler.hpp"

namespace kvactor::sim {

inline constexpr const char* level_names[] = {"low", "medium", "high",
                                              "critical"};

/// Nearest-rank percentile of `xs` (sorted copy); 0 when empty.
template <class T>
double percentile(std::vector<T> xs, double q) {
  if (xs.empty())
    return 0;
  std::sort(xs.begin(), xs.end());
  auto rank = static_cast<std::size_t>(q * xs.size() + 0.999999);
  return static_cast<double>(xs[std::clamp<std::size_t>(rank, 1, xs.size()) - 1]);
}

/// The figures of all tenants together (queue delays and latencies merged).
tenant_figures overall_of(const sim_outcome& r);

/// The steps the samples stand for (series_totals::steps) - the steps run.
std::uint64_t sampled_steps(const sim_outcome& r);

/// A tenant's mean blocks over the run's sampled steps.
double mean_blocks(const tenant_figures& f, const sim_outcome& r);

/// Steps spent at each pressure level (skipped idle steps included).
std::vector<std::uint64_t> steps_at_levels(const sim_outcome& r);

} // namespace kvactor::sim
