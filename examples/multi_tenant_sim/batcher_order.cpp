// batcher: admission order "cached_prefix" - which waiting requests the
// scheduler probes the cache with, and each queue reordered by the answer.
#include "batcher.hpp"

#include <algorithm>

#include "admission_order.hpp"

namespace kvactor::sim {

std::vector<allocation_request> batcher::probe_requests() {
  probed_.clear();
  probed_per_queue_.assign(waiting_.size(), 0);
  std::vector<allocation_request> out;
  if (scenario_.admission != admission_order::cached_prefix
      || running_.size() >= scenario_.max_running)
    return out;
  for (std::size_t w = 0; w < waiting_.size(); ++w) {
    auto n = std::min<std::size_t>(waiting_[w].size(), scenario_.probe_window);
    probed_per_queue_[w] = n;
    for (std::size_t k = 0; k < n; ++k) {
      auto id = waiting_[w][k];
      probed_.push_back(id);
      out.push_back(admission_for(live_.at(id)));
    }
  }
  return out;
}

bool batcher::order_waiting(const std::vector<std::uint64_t>& cached) {
  if (cached.size() != probed_.size())
    return false;
  // The queues change only in this object's own calls: still as probed,
  // unless a call came between (checked, not assumed).
  std::size_t at = 0;
  for (std::size_t w = 0; w < waiting_.size(); ++w) {
    auto n = probed_per_queue_[w];
    auto& q = waiting_[w];
    if (q.size() < n || !std::equal(q.begin(), q.begin() + n, probed_.begin() + at))
      return false;
    at += n;
  }
  at = 0;
  for (std::size_t w = 0; w < waiting_.size(); ++w) {
    auto n = probed_per_queue_[w];
    auto& q = waiting_[w];
    std::vector<admission_candidate> window(n);
    for (std::size_t k = 0; k < n; ++k)
      window[k] = admission_candidate{cached[at + k],
                                      step_ - live_.at(q[k]).req.arrival};
    auto order = cached_prefix_order(window, scenario_.starvation_steps);
    std::vector<request_id> ids(q.begin(), q.begin() + n);
    for (std::size_t k = 0; k < n; ++k)
      q[k] = ids[order[k]];
    at += n;
  }
  probed_.clear();
  return true;
}

std::pair<std::uint64_t, request_id> batcher::turn_of(std::size_t w,
                                                      std::size_t cursor) const {
  auto& q = waiting_[w];
  auto key = [&](request_id id) {
    return std::make_pair(live_.at(id).req.arrival, id);
  };
  auto best = key(q[cursor]);
  if (scenario_.admission != admission_order::cached_prefix)
    return best;
  auto end = std::min<std::size_t>(q.size(), scenario_.probe_window);
  for (auto k = cursor + 1; k < end; ++k)
    best = std::min(best, key(q[k]));
  return best;
}

} // namespace kvactor::sim
