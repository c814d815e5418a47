// batcher: preemption "swap" - victims to the host tier once the step's
// bytes are written, back (before new admissions of their priority) once
// they fit; recompute when the host tier is full.
#include "batcher.hpp"

#include <algorithm>

#include "kvactor/messages/error.hpp"

namespace kvactor::sim {

std::vector<request_id> batcher::swap_victims() {
  std::vector<request_id> out;
  for (auto& [id, workload] : shortage_) {
    auto i = live_.find(id);
    if (i == live_.end() || !i->second.running)
      continue; // already a victim of an earlier shortage
    auto victim = newest_of(workload);
    if (victim == 0)
      victim = id;
    auto& v = live_.at(victim);
    stop_running(victim);
    v.swapped = true;
    swapping_out_.push_back(victim);
    out.push_back(victim);
  }
  shortage_.clear();
  return out;
}

void batcher::swapped_out(request_id id) {
  auto& l = live_.at(id);
  insert_sorted(swapped_, id);
  ++figures_[l.req.workload].swaps;
  ++step_preempted_;
}

caf::error batcher::swap_out_failed(request_id id, const caf::error& err) {
  if (fatal(err))
    return make_error(errc::device_failure, "swap out of request "
                                              + std::to_string(id) + ": "
                                              + render(err));
  auto& l = live_.at(id);
  l.swapped = false;
  swapping_out_.erase(std::remove(swapping_out_.begin(), swapping_out_.end(), id),
                      swapping_out_.end());
  ++step_preempted_;
  if (has_code(err, errc::unknown_request)) {
    requeue_front(l); // the supervisor preempted it meanwhile
    ++figures_[l.req.workload].preempted_by_cache;
    ++preempted_mid_swap_;
    return caf::none;
  }
  if (!has_code(err, errc::out_of_blocks))
    warn("swap out failed, recomputing: request " + std::to_string(id) + ": "
         + render(err));
  // The host tier is full: recompute it instead.
  drop_drafts(l);
  ++figures_[l.req.workload].preempted_in_step;
  freeing_blocks_ += l.table.num_blocks();
  to_free_.push_back(id);
  limbo_.push_back(id);
  return caf::none;
}

std::optional<request_id> batcher::next_swap_in() {
  // Only in a step that preempted nothing; oldest (highest priority) first,
  // as many as fit next to the running requests' growth for a step or two.
  if (swapped_.empty() || !swapping_out_.empty() || step_preempted_ > 0
      || swap_ins_ >= scenario_.max_admits_per_step
      || running_.size() >= scenario_.max_running)
    return std::nullopt;
  auto id = swapped_.front();
  auto& l = live_.at(id);
  auto need = l.table.num_blocks();
  // Room for the running requests' growth: a block or two each (with their
  // drafts), and the rest of the prompts still prefilling (this one's too).
  auto per_step = std::uint64_t{1} + scenario_.draft_tokens;
  auto headroom = 2 * blocks_for(running_.size() * per_step, cfg_.block_size)
                  + prefill_owed() + l.owed_blocks(cfg_.block_size);
  // With nothing running (nor coming in) the first always tries, as the
  // first admission does: it may hold more than the admission mark allows,
  // and waiting would never make room - the cache says whether it fits.
  bool alone = running_.empty() && swap_in_used_ == 0;
  if (!alone && swap_in_used_ + need + headroom + above_limit_ > last_free_)
    return std::nullopt;
  swap_in_used_ += need;
  ++swap_ins_;
  return id;
}

void batcher::swapped_in(request_id id, const block_table& table) {
  auto& l = live_.at(id);
  swapped_.erase(std::remove(swapped_.begin(), swapped_.end(), id),
                 swapped_.end());
  if (table.num_tokens != l.held()) // drafts unsettled included
    inconsistent("request " + std::to_string(id) + ": swapped in with "
         + std::to_string(table.num_tokens) + " tokens, expected "
         + std::to_string(l.held()));
  l.swapped = false;
  l.table = table;
  l.running = true;
  insert_sorted(running_, id); // its admission order stands
  ++figures_[l.req.workload].swap_ins;
  verify_next_ = id;
}

caf::expected<bool> batcher::swap_in_failed(request_id id, const caf::error& err) {
  if (fatal(err))
    return make_error(errc::device_failure, "swap in of request "
                                              + std::to_string(id) + ": "
                                              + render(err));
  auto need = live_.at(id).table.num_blocks();
  swap_in_used_ = swap_in_used_ > need ? swap_in_used_ - need : 0;
  if (has_code(err, errc::out_of_blocks) || has_code(err, errc::quota_exceeded))
    return false; // try again in a later step
  // Gone from the cache (the supervisor preempted it): recompute it.
  auto& l = live_.at(id);
  swapped_.erase(std::remove(swapped_.begin(), swapped_.end(), id),
                 swapped_.end());
  l.swapped = false;
  requeue_front(l);
  if (has_code(err, errc::unknown_request))
    ++figures_[l.req.workload].preempted_by_cache;
  else
    warn("swap in failed, recomputing: request " + std::to_string(id) + ": "
         + render(err));
  return true;
}

} // namespace kvactor::sim
