// batcher: admissions - what the waiting heads ask the cache for, which of
// them the step sends (the blocks they may take, the tenants' quotas), and
// what running prefills still owe.
#include "batcher.hpp"

#include <algorithm>

namespace kvactor::sim {

allocation_request batcher::admission_for(const live& l) const {
  // A preempted request recomputes everything it had: its prompt and the
  // output sampled so far (whose full blocks may still be cached).
  allocation_request req;
  req.id = l.req.id;
  req.max_sequence_length = l.req.prompt.size() + l.req.output.size();
  req.num_layers = cfg_.model.num_layers;
  req.num_heads = cfg_.model.num_kv_heads;
  req.head_dim = cfg_.model.head_dim;
  req.dtype = cfg_.model.dtype;
  req.device = device_;
  req.priority = l.req.priority;
  req.tenant = figures_[l.req.workload].name;
  req.prompt.reserve(l.req.prompt.size() + l.generated);
  req.prompt = l.req.prompt;
  req.prompt.insert(req.prompt.end(), l.req.output.begin(),
                    l.req.output.begin() + l.generated);
  req.initial_tokens = req.prompt.size();
  req.expected_output_tokens = l.req.output.size() - l.generated;
  req.prefill_chunk = scenario_.prefill_chunk;
  return req;
}

std::uint64_t batcher::admitted_tokens(std::uint64_t len,
                                       std::uint64_t hit_tokens) const noexcept {
  auto chunk = scenario_.prefill_chunk;
  return chunk == 0 || len - hit_tokens <= chunk ? len : hit_tokens + chunk;
}

void batcher::admit(step_request& out, std::uint64_t budget) {
  // The waiting heads in order of priority, then arrival (turn_of: with
  // cached_prefix a queue takes its turn by its oldest request, and sends
  // its head, ordered by order_waiting), as long as they fit in `budget`
  // (the free blocks, less what running prefills still
  // owe, see prefill_owed) less the blocks above the admit_up_to mark,
  // counting no prefix hits. A chunked admission takes its first chunk's
  // blocks now but is counted whole: the rest of its prompt comes within
  // a few steps, a chunk a step, not a token. Without a mark ("full") and
  // without chunks the first is sent even if it seems too big (hits may
  // make it fit), unless it was refused at a budget at least as large;
  // after it only what fits (admission stops at the first that does not
  // fit, so sending more would only copy prompts). Chunked, the cache
  // refuses only a first chunk that does not fit, which says nothing about
  // the prompt: the first goes only if it fits. With nothing running the
  // first always goes. A tenant near its quota is passed over (its
  // allocation would fail alone) unless it runs nothing, so that it still
  // makes progress.
  sent_admits_.clear();
  budget = budget > above_limit_ ? budget - above_limit_ : 0;
  budget_ = budget;
  auto n = waiting_.size();
  std::vector<std::size_t> cursor(n, 0);
  std::vector<bool> skip(n, false);
  std::vector<std::uint64_t> running_of(n, 0);
  for (auto id : running_)
    ++running_of[live_.at(id).req.workload];
  auto est = tenant_blocks_;
  if (chunked())
    prefill_owed(&est); // the tenant's running prefills grow into its quota
  std::uint64_t need_total = 0;
  auto bs = cfg_.block_size;
  while (sent_admits_.size() < scenario_.max_admits_per_step
         && running_.size() + sent_admits_.size() < scenario_.max_running) {
    const live* best = nullptr;
    std::size_t best_w = 0;
    std::pair<std::uint64_t, request_id> best_turn;
    for (std::size_t w = 0; w < n; ++w) {
      if (skip[w] || cursor[w] >= waiting_[w].size())
        continue;
      auto& l = live_.at(waiting_[w][cursor[w]]);
      auto turn = turn_of(w, cursor[w]);
      if (!best || l.req.priority > best->req.priority
          || (l.req.priority == best->req.priority && turn < best_turn)) {
        best = &l;
        best_w = w;
        best_turn = turn;
      }
    }
    if (!best)
      break;
    // Swapped requests come back before new ones of their priority or less.
    if (!swapped_.empty()
        && best->req.priority <= live_.at(swapped_.front()).req.priority)
      break;
    auto need = blocks_for(best->req.prompt.size() + best->generated, bs);
    auto quota = tenant_quota_[best_w];
    // Room for the tenant's running requests to grow a block each.
    if (quota != 0 && running_of[best_w] > 0
        && est[best_w] + need + running_of[best_w] > quota) {
      skip[best_w] = true;
      continue;
    }
    if (sent_admits_.empty()) {
      if (need > budget && !running_.empty()
          && (above_limit_ > 0 || chunked()
              || (best->req.id == blocked_id_ && budget <= blocked_budget_)))
        break;
    } else if (need_total + need > budget) {
      break;
    }
    need_total += need;
    est[best_w] += need;
    ++running_of[best_w];
    ++cursor[best_w];
    sent_admits_.push_back(best->req.id);
    out.admits.push_back(admission_for(*best));
  }
}

std::uint64_t batcher::prefill_owed(std::vector<std::uint64_t>* per_workload) const {
  std::uint64_t owed = 0;
  for (auto id : running_) {
    auto& l = live_.at(id);
    auto n = l.owed_blocks(cfg_.block_size);
    owed += n;
    if (per_workload != nullptr)
      (*per_workload)[l.req.workload] += n;
  }
  return owed;
}

} // namespace kvactor::sim
