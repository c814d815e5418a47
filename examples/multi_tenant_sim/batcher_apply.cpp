// batcher: applying the cache's replies - verdicts, failures, preemptions,
// table changes, admissions - and the supervisor's preemption notices.
#include "batcher.hpp"

#include <algorithm>
#include <unordered_set>
#include <vector>

#include "kvactor/messages/error.hpp"

namespace kvactor::sim {

caf::expected<bool> batcher::apply(const step_result& res) {
  auto main_message = main_message_;
  main_message_ = false;
  std::unordered_set<request_id> frees(sent_frees_.begin(), sent_frees_.end());
  std::unordered_set<request_id> extends(sent_extends_.begin(),
                                         sent_extends_.end());
  std::unordered_set<request_id> failed;
  // First what came of the verdicts, which the cache ran first.
  auto verdict_failure = settle_verdicts(res);
  // Extends refused at their tenant's quota (recompute mode): each makes
  // room once the step's outcome is applied (see below).
  std::vector<request_id> at_quota;
  // Our requests the supervisor preempted before this step: in the reply,
  // so in order with what the step did (the manager's notice may follow).
  for (auto& e : res.ended)
    if (e.reason == end_reason::preempted)
      external_.emplace_back(e.id, e.cache_id);
  for (std::size_t k = 0; k < res.failed.size(); ++k) {
    if (verdict_failure[k])
      continue;
    auto& f = res.failed[k];
    failed.insert(f.id);
    auto what = "request " + std::to_string(f.id) + ": " + render(f.error);
    if (fatal(f.error))
      return make_error(errc::device_failure, "the cache failed: " + what);
    if (frees.count(f.id)) {
      // Finished (or freed by us to recompute) but already preempted by
      // the cache. A finished one has left live_.
      if (!has_code(f.error, errc::unknown_request))
        inconsistent("free failed: " + what);
      else if (live_.count(f.id) == 0)
        ++ended_before_free_;
    } else if (extends.count(f.id)) {
      auto i = live_.find(f.id);
      if (i == live_.end() || !i->second.running)
        continue;
      auto& l = i->second;
      if (has_code(f.error, errc::unknown_request)) {
        // Preempted by the supervisor; its notice may still be on the way.
        stop_running(f.id);
        requeue_front(l);
        ++figures_[l.req.workload].preempted_by_cache;
        ++step_preempted_;
        continue;
      }
      auto quota = has_code(f.error, errc::quota_exceeded);
      if (swap_mode() && (quota || has_code(f.error, errc::out_of_blocks))) {
        // A victim is swapped out once the step's bytes are written; this
        // one keeps its pending token and extends again next step.
        shortage_.emplace_back(f.id, quota ? std::int64_t{l.req.workload} : -1);
        continue;
      }
      if (quota) {
        at_quota.push_back(f.id);
      } else {
        // Recomputed like a step's victim, and counted as one (the
        // tenant's figures add up to the time series' column).
        ++figures_[l.req.workload].preempted_in_step;
        ++step_preempted_;
        inconsistent("extend failed, recomputing: " + what);
        free_and_requeue(f.id);
      }
    } else if (auto i = live_.find(f.id); i != live_.end() && !i->second.running) {
      // An admission. Over quota it waits; refused for good it is dropped.
      if (has_code(f.error, errc::quota_exceeded))
        continue;
      warn("admission refused, request dropped: " + what);
      auto& l = i->second;
      auto& q = waiting_[l.req.workload];
      q.erase(std::remove(q.begin(), q.end(), f.id), q.end());
      ++figures_[l.req.workload].rejected;
      live_.erase(i);
    }
  }
  // Preempted requests go back to the head of their queue, the first
  // preempted (the newest) deepest.
  std::unordered_set<std::size_t> made_room; // workloads the step preempted in
  for (auto id : res.preempted) {
    auto i = live_.find(id);
    if (i == live_.end() || !i->second.running)
      continue;
    made_room.insert(i->second.req.workload);
    stop_running(id);
    requeue_front(i->second);
    ++figures_[i->second.req.workload].preempted_in_step;
    ++step_preempted_;
  }
  for (auto& d : res.changed) {
    auto i = live_.find(d.id);
    if (i == live_.end())
      continue;
    auto& t = i->second.table;
    t.blocks.resize(d.first);
    t.blocks.insert(t.blocks.end(), d.blocks.begin(), d.blocks.end());
    t.num_tokens = d.num_tokens;
  }
  // Every extend that went through computed its request's pending token,
  // or its prompt's next chunk (also in a request picked just now to make
  // room at its quota: the blocks it filled stay cached once freed, so
  // their bytes must be right). begin_step sized each from the same state.
  std::unordered_set<request_id> preempted(res.preempted.begin(),
                                           res.preempted.end());
  for (auto id : sent_extends_) {
    auto i = live_.find(id);
    if (i == live_.end())
      continue;
    auto& l = i->second;
    if (failed.count(id) || preempted.count(id)) {
      l.drafts.clear(); // none reached the cache; the next step draws anew
      continue;
    }
    auto pos = l.in_cache();
    auto n = l.next_extend(scenario_.prefill_chunk);
    // A table without a delta (no new block) still shows the old count.
    if (l.table.num_tokens != pos + n && l.table.num_tokens != pos) {
      inconsistent("request " + std::to_string(id) + ": table holds "
           + std::to_string(l.table.num_tokens) + " tokens, expected "
           + std::to_string(pos + n));
    }
    l.table.num_tokens = pos + n;
    l.computed_at = step_;
    if (l.prefilling()) {
      l.prefilled += n;
      ++chunk_extends_;
    } else {
      l.decoded_at = step_;
      // Its drafts are the cache's until next step's verdict.
      l.unsettled = !l.drafts.empty();
      figures_[l.req.workload].drafts.draft_tokens += l.drafts.size();
    }
    if (track_data_)
      for (auto k = pos; k < pos + n; ++k)
        computed_.push_back(computed_token{
          id, static_cast<std::int64_t>(l.table.slot(k)), l.held_token(k),
          static_cast<std::uint32_t>(k)});
  }
  sent_extends_.clear();
  // The step preempts only for a pool shortage: at its tenant's quota the
  // newest request of the tenant makes room (recomputed later); the refused
  // one keeps its pending token and extends again next step. Chosen now,
  // with the step's preemptions gone from the running list and its tokens
  // computed, so that neither a request the cache already preempted nor one
  // finishing this step is picked. A tenant the step preempted in has room
  // already: its refused extend just tries again.
  for (auto id : at_quota) {
    auto i = live_.find(id);
    if (i == live_.end() || !i->second.running)
      continue; // made room for an earlier one of the list
    auto workload = i->second.req.workload;
    if (made_room.count(workload) != 0)
      continue;
    auto victim = newest_of(workload);
    ++step_preempted_;
    ++figures_[workload].preempted_by_quota;
    free_and_requeue(victim != 0 ? victim : id);
  }
  std::size_t admitted = 0;
  for (auto& a : res.admitted) {
    auto i = live_.find(a.id);
    if (i == live_.end())
      return make_error(errc::invalid_request,
                        "the cache admitted unknown request "
                          + std::to_string(a.id));
    auto& l = i->second;
    auto& f = figures_[l.req.workload];
    auto& q = waiting_[l.req.workload];
    q.erase(std::remove(q.begin(), q.end(), a.id), q.end());
    auto len = l.req.prompt.size() + l.generated;
    if (!l.admitted_once) {
      l.admitted_once = true;
      ++f.admitted;
      f.queue_delay.push_back(static_cast<std::uint32_t>(step_ - l.req.arrival));
      f.prompt_tokens += l.req.prompt.size();
      auto& c = f.conv;
      if (!conversing(l.req.workload)) {
        // Sessions' figures only for workloads that hold conversations.
      } else if (l.req.conv.follow_up()) {
        c.follow_up_prompt_tokens += len;
        c.follow_up_hit_tokens += a.hit_tokens;
        c.history_tokens += l.req.conv.history;
      } else {
        c.first_prompt_tokens += len;
        c.first_hit_tokens += a.hit_tokens;
      }
    } else {
      ++f.readmitted;
    }
    f.prefill_tokens += len;
    f.hit_tokens += a.hit_tokens;
    total_prefill_ += len;
    total_hits_ += a.hit_tokens;
    l.cache_id = a.cache_id;
    l.table = a.table;
    l.running = true;
    l.computed_at = step_;
    l.seq = ++seq_;
    // Chunked, the rest of the prompt follows in later steps' extends.
    l.prefill_len = len;
    l.prefilled = admitted_tokens(len, a.hit_tokens);
    insert_sorted(running_, a.id);
    ++admitted;
    ++step_admitted_;
    if (a.table.num_tokens != l.prefilled)
      inconsistent("request " + std::to_string(a.id) + ": admitted with "
           + std::to_string(a.table.num_tokens) + " tokens, expected "
           + std::to_string(l.prefilled));
    if (track_data_) {
      // Prefill computes what the prefix cache did not have.
      for (auto pos = a.hit_tokens; pos < l.prefilled && pos < l.table.num_tokens;
           ++pos)
        computed_.push_back(computed_token{
          a.id, static_cast<std::int64_t>(l.table.slot(pos)), l.token_at(pos),
          static_cast<std::uint32_t>(pos)});
    }
  }
  // Requests we freed ourselves may be admitted again from now on.
  for (auto id : sent_frees_) {
    auto i = std::find(limbo_.begin(), limbo_.end(), id);
    if (i == limbo_.end())
      continue;
    limbo_.erase(i);
    requeue_front(live_.at(id));
  }
  sent_frees_.clear();
  process_external();
  last_free_ = res.free_blocks;
  if (res.admission_blocked && res.preempted.empty() && !sent_admits_.empty()
      && res.blocked == sent_admits_.front()) {
    blocked_id_ = res.blocked;
    blocked_budget_ = budget_;
  }
  auto room = waiting() > 0 && running_.size() < scenario_.max_running;
  if (swap_mode() && main_message)
    return room && shortage_.empty();
  return room && res.preempted.empty() && !sent_admits_.empty()
         && admitted == sent_admits_.size();
}
void batcher::preempted_elsewhere(request_id id, std::uint64_t cache_id) {
  external_.emplace_back(id, cache_id);
}

void batcher::process_external() {
  // A preemption the pool made before one of our steps is in that step's
  // reply (`ended`; the manager's notice may come later, and finds the
  // request requeued), so applying these after each reply leaves no request
  // we think runs on blocks that an allocation of ours already handed to
  // someone else. Its
  // computed tokens are still written: the blocks it filled may be cached
  // (and found by a prompt) before the write, and one reallocated since
  // gets its new owner's tokens later in the same write (see computed()).
  for (auto& [id, cache_id] : external_) {
    auto i = live_.find(id);
    if (i == live_.end() || i->second.cache_id != cache_id)
      continue; // finished, or a later incarnation
    auto& l = i->second;
    if (l.running) {
      stop_running(id);
    } else if (l.swapped
               && std::find(swapped_.begin(), swapped_.end(), id)
                    != swapped_.end()) {
      swapped_.erase(std::remove(swapped_.begin(), swapped_.end(), id),
                     swapped_.end());
      l.swapped = false;
    } else {
      continue; // already requeued (or being swapped out: that fails)
    }
    requeue_front(l);
    ++figures_[l.req.workload].preempted_by_cache;
    ++step_preempted_;
  }
  external_.clear();
}

} // namespace kvactor::sim
