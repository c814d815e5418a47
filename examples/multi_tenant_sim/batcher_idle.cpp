// batcher_idle: skipping idle gaps. With nothing running, waiting or owed to
// the cache, a step sends an empty message and samples the state it found,
// which nothing changes until a request arrives; a conversation may think
// for 2^24 steps. Stepping through such a gap cost a step message, a stats
// round trip and a sample per step (millions of each), so the clock jumps
// over a long one instead, as the replay's does (bench/replay_scheduler.cpp
// skip_idle_steps), and the gap keeps two rows of the time series (until
// the series coarsens: step_series).
#include "batcher.hpp"

namespace kvactor::sim {

std::uint64_t batcher::skip_idle(std::uint64_t min_gap,
                                 std::uint64_t max_draw_steps) {
  // The last step run began idle and ended so, with nothing arriving: its
  // sample (the last row's state) is the state every step until the next
  // arrival would find.
  if (!quiet_ || !idle() || done() || series_.empty())
    return 0;
  auto limit = ~std::uint64_t{0}; // draining: only follow-ups arrive
  if (step_ < scenario_.steps) {
    // New arrivals are drawn step by step (bounded per call); they end at
    // `steps`, where a run without drain ends.
    auto to_end = scenario_.steps - step_;
    limit = step_ + std::min(to_end, std::max(max_draw_steps, min_gap));
  }
  // A gap skipped in more than one call (a bounded draw, a stop at
  // `steps`) goes on from the last: it keeps a row at each end (before the
  // series coarsens). Known here, not from the rows, which may be merged.
  auto goes_on = in_gap_;
  auto next = gen_.next_arrival(step_, limit);
  // A short gap is stepped through: it costs little, and a busy run's time
  // series keeps a row per step. (What was drawn is kept for its steps.)
  auto shortest = goes_on ? 1 : std::max<std::uint64_t>(min_gap, 1);
  if (next <= step_ || next - step_ < shortest)
    return 0;
  auto gap = next - step_;
  auto row = series_.back();
  series_.add_gap(row, step_, gap, goes_on);
  in_gap_ = true;
  // The tenants' mean blocks count every step, skipped ones too.
  for (std::size_t w = 0; w < figures_.size() && w < row.tenants.size(); ++w)
    figures_[w].blocks_sum += double(row.tenants[w].blocks) * double(gap);
  step_ = next;
  skipped_ += gap;
  return gap;
}

} // namespace kvactor::sim
