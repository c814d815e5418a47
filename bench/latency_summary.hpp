// Latency samples of the benchmark programs: percentiles and one JSON object
// (calls, mean_us, p50_us, p90_us, p99_us, max_us) per operation. The q-th
// percentile is the sample at rank floor(q * n) of the sorted samples.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvactor::bench {

inline double percentile(std::vector<double> xs, double q) {
  if (xs.empty())
    return 0;
  std::sort(xs.begin(), xs.end());
  return xs[std::min(xs.size() - 1, static_cast<std::size_t>(q * xs.size()))];
}

inline nlohmann::json latency_summary(std::vector<double> us) {
  if (us.empty())
    return {{"calls", 0}};
  std::sort(us.begin(), us.end());
  double sum = 0;
  for (auto x : us)
    sum += x;
  auto pick = [&](double q) {
    return us[std::min(us.size() - 1, static_cast<std::size_t>(q * us.size()))];
  };
  return {{"calls", us.size()},
          {"mean_us", sum / static_cast<double>(us.size())},
          {"p50_us", pick(0.5)},
          {"p90_us", pick(0.9)},
          {"p99_us", pick(0.99)},
          {"max_us", us.back()}};
}

} // namespace kvactor::bench
