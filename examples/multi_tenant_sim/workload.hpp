// workload: the requests a scenario's tenants send, step by step - Poisson
// arrivals (with bursts), prompt and output lengths, shared system prompts.
// Deterministic for a scenario and seed. CAF-free.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "scenario.hpp"

namespace kvactor::sim {

/// One request as the client sends it; its output is decided up front, so
/// a request preempted and recomputed generates the same tokens again.
struct sim_request {
  request_id id = 0;
  std::uint32_t workload = 0; ///< index into scenario::workloads
  std::uint64_t arrival = 0;  ///< step
  kvactor::priority priority = kvactor::priority::normal;
  std::int32_t system_prompt = -1; ///< which one it starts with, -1 = none
  std::vector<token_id> prompt;    ///< system prompt (if any) + its own
  std::vector<token_id> output;
};

class workload_generator {
public:
  explicit workload_generator(const scenario& s);

  /// The requests arriving at `step`, in id order (none from s.steps on).
  /// REQUIRES: called once per step, steps increasing.
  std::vector<sim_request> arrivals(std::uint64_t step);

  /// As arrivals(step), but at most room[w] of workload w's: the rest are
  /// drawn but never generated (no tokens, no id) and counted in
  /// turned_away[w] (resized to the workloads). REQUIRES: one room per
  /// workload.
  std::vector<sim_request> arrivals(std::uint64_t step,
                                    const std::vector<std::uint64_t>& room,
                                    std::vector<std::uint64_t>& turned_away);

  /// Requests generated so far.
  std::uint64_t generated() const noexcept {
    return next_id_ - 1;
  }

private:
  struct source {
    std::mt19937_64 rng;
    std::vector<std::vector<token_id>> system_prompts;
  };

  const scenario& scenario_;
  std::vector<source> sources_; ///< per workload
  request_id next_id_ = 1;
};

} // namespace kvactor::sim
