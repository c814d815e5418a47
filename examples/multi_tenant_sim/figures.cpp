// figures: the overall row, mean blocks and steps at each level.
#include "figures.hpp"

#include <iterator>

namespace kvactor::sim {

tenant_figures overall_of(const sim_outcome& r) {
  tenant_figures all;
  all.name = "overall";
  for (auto& f : r.tenants) {
    all.arrived += f.arrived;
    all.admitted += f.admitted;
    all.readmitted += f.readmitted;
    all.finished += f.finished;
    all.rejected += f.rejected;
    all.turned_away += f.turned_away;
    all.prompt_tokens += f.prompt_tokens;
    all.generated_tokens += f.generated_tokens;
    all.prefill_tokens += f.prefill_tokens;
    all.hit_tokens += f.hit_tokens;
    all.preempted_in_step += f.preempted_in_step;
    all.preempted_by_cache += f.preempted_by_cache;
    all.preempted_by_quota += f.preempted_by_quota;
    all.swaps += f.swaps;
    all.swap_ins += f.swap_ins;
    all.drafts.add(f.drafts);
    all.conv.add(f.conv);
    all.queue_delay.insert(all.queue_delay.end(), f.queue_delay.begin(),
                           f.queue_delay.end());
    all.unadmitted += f.unadmitted;
    all.in_progress += f.in_progress;
    all.unadmitted_wait = std::max(all.unadmitted_wait, f.unadmitted_wait);
    all.latency.insert(all.latency.end(), f.latency.begin(), f.latency.end());
  }
  // From the totals, not the rows: a coarse row has lost its steps' peak.
  all.blocks_peak = r.series.used_peak;
  all.blocks_sum = r.series.used_sum;
  return all;
}

std::uint64_t sampled_steps(const sim_outcome& r) {
  return r.series.steps;
}

double mean_blocks(const tenant_figures& f, const sim_outcome& r) {
  auto n = sampled_steps(r);
  return n == 0 ? 0.0 : f.blocks_sum / double(n);
}

std::vector<std::uint64_t> steps_at_levels(const sim_outcome& r) {
  return std::vector<std::uint64_t>(std::begin(r.series.steps_at),
                                    std::end(r.series.steps_at));
}

} // namespace kvactor::sim
