// replay_scheduler: waiting queue, running list, preemption bookkeeping.
#include "bench/replay_scheduler.hpp"

#include <algorithm>
#include <stdexcept>

#include "kvactor/messages/error.hpp"

namespace kvactor::bench {

replay_scheduler::replay_scheduler(const trace& tr, const cache_config& cfg,
                                   std::size_t max_admits)
  : trace_(tr), max_admits_(max_admits), generated_(tr.requests.size(), 0) {
  proto_.max_sequence_length = tr.max_model_len;
  proto_.num_layers = cfg.model.num_layers;
  proto_.num_heads = cfg.model.num_kv_heads;
  proto_.head_dim = cfg.model.head_dim;
  proto_.dtype = cfg.model.dtype;
}

bool replay_scheduler::done() const noexcept {
  return next_arrival_ == trace_.requests.size() && waiting_.empty()
         && running_.empty() && to_free_.empty();
}

allocation_request replay_scheduler::admission_for(std::uint32_t index) const {
  // A preempted request recomputes everything it had: prompt and the output
  // sampled so far (whose full blocks may still be cached).
  auto& r = trace_.requests[index];
  auto req = proto_;
  req.id = r.id;
  req.prompt.reserve(r.prompt.size() + generated_[index]);
  req.prompt = r.prompt;
  req.prompt.insert(req.prompt.end(), r.output.begin(),
                    r.output.begin() + generated_[index]);
  return req;
}

void replay_scheduler::admit_from_head(step_request& out) {
  // Send the waiting head, and after it only as many as could fit even
  // without prefix hits (hits only lower the need): admission stops at the
  // first that does not fit, so sending more would only copy prompts. If
  // all sent get in, the follow-up message tries the next ones.
  sent_admits_.clear();
  std::uint64_t need = 0;
  for (std::size_t i = 0; i < waiting_.size() && i < max_admits_; ++i) {
    auto idx = waiting_[i];
    auto len = trace_.requests[idx].prompt.size() + generated_[idx];
    need += (len + trace_.block_size - 1) / trace_.block_size;
    if (i > 0 && need > last_free_)
      break;
    sent_admits_.push_back(idx);
    out.admits.push_back(admission_for(idx));
  }
}

void replay_scheduler::skip_idle_steps() {
  // Nothing running, waiting or to free: every step until the next arrival
  // would be an empty message that changes nothing, so the clock jumps
  // there. The skipped steps still count as the loop ran them: each one a
  // step and a usage sample of what the last reply said (nothing is held
  // then, so zero) - arithmetically, so a gap of 10^12 steps costs nothing.
  auto& reqs = trace_.requests;
  if (!running_.empty() || !waiting_.empty() || !to_free_.empty()
      || next_arrival_ == reqs.size())
    return;
  auto next = reqs[next_arrival_].arrival_step;
  if (next <= step_)
    return;
  auto gap = next - step_;
  used_sum_ += gap * last_used_;
  used_samples_ += gap;
  peak_used_ = std::max(peak_used_, last_used_);
  step_ = next;
}

step_request replay_scheduler::begin_step() {
  skip_idle_steps();
  auto& reqs = trace_.requests;
  while (next_arrival_ < reqs.size() && reqs[next_arrival_].arrival_step <= step_)
    waiting_.push_back(static_cast<std::uint32_t>(next_arrival_++));
  // Nothing left to arrive, wait or run: this message only frees what
  // finished in the last step. REPLAY.md's loop frees those in that step
  // (its item 5), as vLLM v1 does in update_from_output, and ends there;
  // the step message carries frees at its start, so they ride on one more
  // message - the loop's close, not a step of it (end_step counts none).
  closing_ = next_arrival_ == reqs.size() && waiting_.empty() && running_.empty();
  step_request out;
  out.frees.swap(to_free_);
  out.extends.reserve(running_.size());
  out.tokens.reserve(running_.size());
  for (auto i : running_) {
    // Room for the token sampled last step, whose K/V this step computes.
    out.extends.push_back(extend_op{reqs[i].id, 1});
    out.tokens.push_back(reqs[i].output[generated_[i] - 1]);
  }
  out.preempt_on_shortage = true;
  out.admit_after_preemption = false;
  admit_from_head(out);
  return out;
}

step_request replay_scheduler::more_admits() {
  step_request out;
  admit_from_head(out);
  return out;
}

bool replay_scheduler::apply(const step_result& res) {
  if (!res.failed.empty())
    throw std::runtime_error("the cache refused an operation: "
                             + render(res.failed.front().error));
  // Preempted requests leave the running list and go back to the head of
  // the waiting queue, the first preempted (newest) deepest.
  for (auto id : res.preempted) {
    auto i = std::find_if(running_.begin(), running_.end(), [&](auto idx) {
      return trace_.requests[idx].id == id;
    });
    if (i == running_.end())
      throw std::runtime_error("the cache preempted a request that is not running");
    waiting_.push_front(*i);
    running_.erase(i);
    ++preemptions_;
  }
  std::size_t admitted = 0;
  for (auto& a : res.admitted) {
    auto idx = sent_admits_[admitted];
    if (trace_.requests[idx].id != a.id)
      throw std::runtime_error("the cache admitted out of queue order");
    waiting_.pop_front();
    running_.push_back(idx);
    ++admitted;
  }
  last_used_ = res.used_blocks;
  last_free_ = res.free_blocks;
  return res.preempted.empty() && admitted == sent_admits_.size()
         && admitted > 0 && !waiting_.empty();
}

void replay_scheduler::end_step() {
  // Every scheduled request samples its next token; complete ones finish.
  std::size_t kept = 0;
  for (auto idx : running_) {
    auto& r = trace_.requests[idx];
    if (++generated_[idx] == r.output.size()) {
      to_free_.push_back(r.id);
      ++finished_;
    } else {
      running_[kept++] = idx;
    }
  }
  running_.resize(kept);
  if (closing_)
    return;
  // The step's usage: after its cache work, before its finished requests
  // are freed - the most it held (they held their blocks all through it).
  peak_used_ = std::max(peak_used_, last_used_);
  used_sum_ += last_used_;
  ++used_samples_;
  ++step_;
}

} // namespace kvactor::bench
