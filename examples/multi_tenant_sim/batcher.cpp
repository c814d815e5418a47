// batcher: waiting queues, the running list, preemption bookkeeping, figures.
//
// A request's life: waiting (in its tenant's queue) -> running (admitted:
// its prompt is prefilled, then one token per step) -> finished (freed in
// the next step's message). Preempted by recompute it goes back to the
// front of its queue and is admitted again with its prompt and the output
// sampled so far; swapped out it waits in the host tier and runs again once
// swapped in. While running, the cache holds its prompt and every sampled
// token but the last, which the next step's extend appends. With
// prefill_chunk the prompt comes in chunks: the admission holds the cached
// prefix and the first chunk, each later step's extend adds the next one,
// and the step that adds the last samples the first output token. With
// draft_tokens a decoding request's extend carries drafts after its pending
// token, and samples the ones the verifier accepts too (batcher_drafts.cpp).
#include "batcher.hpp"

#include <algorithm>

#include "kvactor/messages/error.hpp"

namespace kvactor::sim {

namespace {

constexpr std::size_t max_warnings = 20;

} // namespace

std::uint64_t batcher::blocks_for(std::uint64_t tokens,
                                  std::uint32_t block_size) noexcept {
  return (tokens + block_size - 1) / block_size;
}

bool batcher::fatal(const caf::error& err) noexcept {
  return has_code(err, errc::device_failure) || has_code(err, errc::shutting_down)
         || has_code(err, errc::invariant_violation);
}

batcher::batcher(const scenario& s, const cache_config& effective,
                 kvactor::device dev, bool track_data,
                 std::size_t series_cap)
  : scenario_(s),
    cfg_(effective),
    device_(dev),
    track_data_(track_data),
    gen_(s),
    waiting_(s.workloads.size()),
    tenant_blocks_(s.workloads.size(), 0),
    tenant_quota_(s.workloads.size(), 0),
    last_free_(effective.num_gpu_blocks),
    verifier_(s.seed, s.draft_tokens, s.draft_acceptance),
    series_(series_cap) {
  for (std::size_t i = 0; i < s.workloads.size(); ++i) {
    tenant_figures f;
    f.name = s.workloads[i].tenant;
    f.priority = s.workloads[i].priority;
    if (auto t = effective.find_tenant(f.name))
      tenant_quota_[i] = t->max_blocks;
    figures_.push_back(std::move(f));
  }
  auto total = effective.num_gpu_blocks;
  auto limit = static_cast<std::uint64_t>(admission_limit(s) * double(total));
  above_limit_ = total - std::min(total, limit);
}

bool batcher::done() const noexcept {
  if (step_ < scenario_.steps)
    return false;
  if (!scenario_.drain)
    return true;
  // Sessions opened before `steps` go on: their follow-ups still arrive.
  return running_.empty() && swapped_.empty() && to_free_.empty()
         && limbo_.empty() && waiting() == 0 && gen_.pending_follow_ups() == 0;
}

bool batcher::idle() const noexcept {
  return running_.empty() && swapped_.empty() && swapping_out_.empty()
         && to_free_.empty() && limbo_.empty() && finish_verdicts_.empty()
         && external_.empty() && waiting() == 0;
}

std::size_t batcher::waiting() const noexcept {
  std::size_t n = 0;
  for (auto& q : waiting_)
    n += q.size();
  return n;
}

std::vector<tenant_figures> batcher::final_figures() const {
  auto out = figures_;
  for (auto& kvp : live_) {
    auto& l = kvp.second;
    auto& f = out[l.req.workload];
    if (l.admitted_once) {
      ++f.in_progress;
      continue;
    }
    ++f.unadmitted;
    f.unadmitted_wait = std::max(f.unadmitted_wait, step_ - l.req.arrival);
  }
  return out;
}

void batcher::warn(std::string text) {
  if (warnings_.size() < max_warnings)
    warnings_.push_back(std::move(text));
}

void batcher::inconsistent(std::string text) {
  ++inconsistencies_;
  warn(std::move(text));
}

bool batcher::running_before(const live& x, const live& y) const noexcept {
  // Highest priority first, then admission order: the cache preempts from
  // the back, so the lowest-priority, newest request goes first.
  if (x.req.priority != y.req.priority)
    return x.req.priority > y.req.priority;
  return x.seq < y.seq;
}

void batcher::insert_sorted(std::vector<request_id>& xs, request_id id) {
  auto at = std::upper_bound(xs.begin(), xs.end(), id,
                             [&](request_id x, request_id y) {
                               return running_before(live_.at(x), live_.at(y));
                             });
  xs.insert(at, id);
}

bool batcher::finishes_now(const live& l) const noexcept {
  auto accepted = l.unsettled ? l.accepted : 0; // this step's drafts
  return l.computed_at == step_ && !l.prefilling()
         && l.generated + 1 + accepted == l.req.output.size();
}

void batcher::start_step() {
  step_admitted_ = step_finished_ = step_preempted_ = 0;
  swap_in_used_ = 0;
  swap_ins_ = 0;
  process_external();
  auto was_idle = idle();
  room_.resize(waiting_.size());
  for (std::size_t w = 0; w < waiting_.size(); ++w)
    room_[w] = scenario_.max_waiting > waiting_[w].size()
                 ? scenario_.max_waiting - waiting_[w].size()
                 : 0;
  std::vector<std::uint64_t> follow_ups_away;
  for (auto& r : gen_.arrivals(step_, room_, turned_away_, &follow_ups_away)) {
    auto id = r.id;
    auto w = r.workload;
    ++figures_[w].arrived;
    if (conversing(w))
      ++(r.conv.follow_up() ? figures_[w].conv.follow_ups
                            : figures_[w].conv.first_turns);
    live l;
    l.req = std::move(r);
    live_.emplace(id, std::move(l));
    waiting_[w].push_back(id);
  }
  for (std::size_t w = 0; w < turned_away_.size(); ++w) {
    auto& f = figures_[w];
    f.arrived += turned_away_[w];
    f.turned_away += turned_away_[w];
    if (!conversing(w))
      continue;
    f.conv.follow_ups += follow_ups_away[w];
    f.conv.follow_ups_turned_away += follow_ups_away[w];
    f.conv.first_turns += turned_away_[w] - follow_ups_away[w];
  }
  // Arrivals wait (or were turned away): either way not a quiet step.
  quiet_start_ = was_idle && waiting() == 0
                 && std::all_of(turned_away_.begin(), turned_away_.end(),
                                [](std::uint64_t n) { return n == 0; });
}

step_request batcher::begin_step() {
  step_request out;
  out.frees.swap(to_free_);
  sent_frees_ = out.frees;
  // Requests that finished with drafts unsettled: settled before the free.
  for (auto& v : finish_verdicts_)
    out.verdicts.push_back(draft_verdict{v.id, v.accepted});
  sent_verdicts_.swap(finish_verdicts_);
  finish_verdicts_.clear();
  auto freeing = freeing_blocks_;
  freeing_blocks_ = 0;
  sent_extends_ = running_;
  main_message_ = true;
  out.extends.reserve(running_.size());
  out.tokens.reserve(running_.size());
  std::uint64_t new_blocks = 0;
  auto bs = cfg_.block_size;
  for (auto id : running_) {
    auto& l = live_.at(id);
    // Last step's drafts are settled first, in the same message.
    freeing += send_verdict(l, out);
    draw_drafts(l);
    // Room for the token sampled last step, whose K/V this step computes,
    // and its drafts, or for the prompt's next chunk; named, so that full
    // blocks enter the prefix index in the step that writes them.
    auto held = l.in_cache();
    auto n = l.next_extend(scenario_.prefill_chunk);
    out.extends.push_back(extend_op{id, static_cast<std::uint32_t>(n),
                                    static_cast<std::uint32_t>(l.drafts.size())});
    for (auto pos = held; pos < held + n; ++pos)
      out.tokens.push_back(l.held_token(pos));
    // A prefill's chunk is part of what it owes (counted below).
    if (!l.prefilling())
      new_blocks += blocks_for(held + n, bs) - blocks_for(held, bs);
  }
  new_blocks += prefill_owed();
  // Recompute: the cache preempts the newest when an extend lacks a block
  // and then admits nothing. Swap: an extend that lacks a block fails alone,
  // the scheduler swaps out a victim, and admissions wait for a follow-up
  // that is sent only if every extend went through.
  out.preempt_on_shortage = !swap_mode();
  out.admit_after_preemption = false;
  if (!swap_mode()) {
    // Free blocks once this step's frees returned theirs (an upper bound:
    // shared blocks stay) and its extends took theirs.
    auto room = last_free_ + freeing;
    admit(out, room > new_blocks ? room - new_blocks : 0);
  } else {
    sent_admits_.clear();
  }
  return out;
}

step_request batcher::more_admits() {
  step_request out;
  sent_frees_.clear();
  sent_extends_.clear();
  auto owed = prefill_owed();
  admit(out, last_free_ > owed ? last_free_ - owed : 0);
  return out;
}

void batcher::stop_running(request_id id) {
  auto i = std::find(running_.begin(), running_.end(), id);
  if (i != running_.end())
    running_.erase(i);
  auto& l = live_.at(id);
  if (l.running && l.prefilling())
    ++preempted_mid_prefill_;
  l.running = false;
}

void batcher::requeue_front(live& l) {
  drop_drafts(l); // admitted again, it prefills what it sampled
  waiting_[l.req.workload].push_front(l.req.id);
}

void batcher::free_and_requeue(request_id id) {
  // Freed in the next step's message, queued again once that went through
  // (so that the free and its next admission never share a message).
  auto& l = live_.at(id);
  stop_running(id);
  drop_drafts(l);
  freeing_blocks_ += l.table.num_blocks();
  to_free_.push_back(id);
  limbo_.push_back(id);
}

request_id batcher::newest_of(std::int64_t workload) const {
  // running_ is in extend order: the last is the lowest-priority, newest.
  // One that finishes this step frees its blocks anyway.
  for (auto i = running_.rbegin(); i != running_.rend(); ++i) {
    auto& l = live_.at(*i);
    if (workload >= 0 && l.req.workload != workload)
      continue;
    if (finishes_now(l))
      continue;
    return *i;
  }
  return 0;
}
void batcher::end_step() {
  auto sample = [&](live& l) {
    // The token computed this step yields the next one, after the drafts
    // the verifier accepted (this step's, if unsettled).
    std::uint64_t n = 1 + (l.unsettled ? l.accepted : 0);
    auto& f = figures_[l.req.workload];
    if (l.decoded_at == step_) {
      ++f.drafts.decode_steps;
      f.drafts.decode_tokens += n;
    }
    l.generated += n;
    f.generated_tokens += n;
  };
  std::size_t kept = 0;
  for (auto id : running_) {
    auto i = live_.find(id);
    auto& l = i->second;
    auto& f = figures_[l.req.workload];
    if (l.computed_at != step_ || l.prefilling()) {
      // Its extend failed, or its prompt is not all in yet: no new token.
      running_[kept++] = id;
      continue;
    }
    sample(l);
    if (l.generated == l.req.output.size()) {
      if (l.unsettled) // all accepted: drafts_for never drafts past the end
        finish_verdicts_.push_back(sent_verdict{
          id, l.req.workload, static_cast<std::uint32_t>(l.drafts.size()),
          l.accepted});
      ++f.finished;
      ++step_finished_;
      f.latency.push_back(static_cast<std::uint32_t>(step_ - l.req.arrival + 1));
      freeing_blocks_ += l.table.num_blocks();
      to_free_.push_back(id);
      if (conversing(l.req.workload) && l.req.conv.last())
        ++f.conv.sessions_completed;
      gen_.finished(std::move(l.req), step_); // its session's next turn
      live_.erase(i);
    } else {
      running_[kept++] = id;
    }
  }
  running_.resize(kept);
  // Swapped out after computing this step's token (or its prompt's last
  // chunk): it samples the next one too (victims never finish this step,
  // see newest_of).
  for (auto id : swapping_out_) {
    auto& l = live_.at(id);
    if (l.swapped && l.computed_at == step_ && !l.prefilling())
      sample(l);
  }
  swapping_out_.clear();
  if (running_.empty() && to_free_.empty() && step_admitted_ == 0
      && swap_ins_ == 0 && (waiting() > 0 || !swapped_.empty()))
    ++stalled_;
  else
    stalled_ = 0;
  quiet_ = quiet_start_ && idle();
  ++step_;
}

void batcher::record(const cache_manager_stats& st, memory_pressure level) {
  step_sample s;
  s.step = step_;
  s.waiting = static_cast<std::uint32_t>(waiting());
  s.running = static_cast<std::uint32_t>(running_.size());
  s.swapped = static_cast<std::uint32_t>(swapped_.size());
  s.admitted = step_admitted_;
  s.finished = 0;
  for (auto id : running_)
    if (finishes_now(live_.at(id)))
      ++s.finished; // finishes in end_step
  s.preempted = step_preempted_;
  s.used_blocks = st.total_blocks - st.free_blocks;
  s.cached_blocks = st.cached_blocks;
  s.total_blocks = st.total_blocks;
  s.pressure = level;
  s.hit_rate = total_prefill_ == 0 ? 0.0
                                   : double(total_hits_) / double(total_prefill_);
  s.tenants.resize(figures_.size());
  std::vector<std::uint32_t> running_of(figures_.size(), 0);
  for (auto id : running_)
    ++running_of[live_.at(id).req.workload];
  for (std::size_t w = 0; w < figures_.size(); ++w) {
    auto& ts = s.tenants[w];
    ts.waiting = static_cast<std::uint32_t>(waiting_[w].size());
    ts.running = running_of[w];
    for (auto& u : st.tenants)
      if (u.name == figures_[w].name)
        ts.blocks = u.blocks_used;
    tenant_blocks_[w] = ts.blocks;
    auto& f = figures_[w];
    f.blocks_peak = std::max(f.blocks_peak, ts.blocks);
    f.blocks_sum += double(ts.blocks);
  }
  series_.add(std::move(s));
  in_gap_ = false;
}

std::optional<verify_target> batcher::pick_verify(std::uint64_t k) {
  process_external(); // a request preempted since may hold nothing now
  if (running_.empty())
    return std::nullopt;
  auto id = running_[k % running_.size()];
  if (verify_next_ != 0) {
    // Prefer the request swapped in last: its bytes made the round trip.
    if (auto i = live_.find(verify_next_); i != live_.end() && i->second.running)
      id = verify_next_;
    verify_next_ = 0;
  }
  auto& l = live_.at(id);
  verify_target out;
  out.id = l.req.id;
  out.cache_id = l.cache_id;
  out.table = l.table;
  auto n = l.table.num_tokens;
  out.tokens.reserve(n);
  for (std::uint64_t pos = 0; pos < n; ++pos)
    out.tokens.push_back(l.held_token(pos));
  return out;
}

} // namespace kvactor::sim
