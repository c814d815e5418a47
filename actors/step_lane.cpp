// The block pool's side of the step lane: device check, registry effects,
// and the ledger of steppers' requests (step_lane.hpp).
#include "kvactor/actors/step_lane.hpp"

#include <algorithm>
#include <string>

#include "kvactor/messages/error_context.hpp"

namespace kvactor::detail {

std::vector<op_failure> reject_foreign(const storage_info& store,
                                       step_request& step) {
  std::vector<op_failure> out;
  if (store.kind.empty())
    return out;
  auto bad = [&](const allocation_request& r) {
    if (auto err = check_device(store, r)) {
      // Named as the step's other failures are (block_pool_step.cpp).
      out.push_back(op_failure{
        r.id, in_context("admission of request " + std::to_string(r.id), err)});
      return true;
    }
    return false;
  };
  auto& a = step.admits;
  a.erase(std::remove_if(a.begin(), a.end(), bad), a.end());
  return out;
}

step_effects effects_of(const step_request& step, const step_result& res,
                        const block_pool_core::step_trace& trace) {
  auto& admitted_at = trace.admitted_at;
  step_effects fx;
  fx.freed = res.freed;
  fx.preempted = res.preempted;
  fx.freed_blocks = trace.freed_blocks;
  fx.preempted_blocks = trace.preempted_blocks;
  fx.discarded = trace.discarded;
  fx.admitted.reserve(res.admitted.size());
  fx.cache_ids.reserve(res.admitted.size());
  fx.hit_tokens.reserve(res.admitted.size());
  for (std::size_t k = 0; k < res.admitted.size(); ++k) {
    fx.admitted.push_back(without_prompt(step.admits[admitted_at[k]]));
    fx.cache_ids.push_back(res.admitted[k].cache_id);
    fx.hit_tokens.push_back(res.admitted[k].hit_tokens);
  }
  return fx;
}

bool lane_ledger::step_done(const caf::actor_addr& stepper,
                            const step_request& step, const step_result& res,
                            const block_pool_core::step_trace& trace) {
  // Grown by another than its stepper (a failed extend too: it may have
  // been written for): that one's promise no longer covers it. Before the
  // ends and admissions below - an entry the step ends or admits anew
  // is gone or fresh by then. Where this stepper is the only one known,
  // every entry is its own: no look-up per extend. (A null address is
  // never looked up: CAF hashes an actor_addr through its pointer.)
  bool only_one = stepper && steppers_.size() == 1
                  && steppers_.count(stepper) != 0;
  if (!owners_.empty() && !only_one)
    for (auto& e : step.extends) {
      auto i = owners_.find(e.id);
      if (i != owners_.end() && i->second.stepper != stepper)
        i->second.alone = false;
    }
  auto end = [&](request_id id, end_reason why, std::uint32_t released) {
    auto i = owners_.find(id);
    if (i == owners_.end())
      return;
    if (i->second.stepper != stepper)
      tell(i->second, request_ended{id, i->second.cache_id, why, released});
    owners_.erase(i);
  };
  auto frees = res.freed.size() - trace.discarded;
  for (std::size_t k = 0; k < res.freed.size(); ++k)
    end(res.freed[k],
        k < frees ? end_reason::deallocated : end_reason::discarded,
        count_at(trace.freed_blocks, k));
  for (std::size_t k = 0; k < res.preempted.size(); ++k)
    end(res.preempted[k], end_reason::preempted,
        count_at(trace.preempted_blocks, k));
  if (!stepper || res.admitted.empty())
    return false; // an anonymous step owns nothing
  for (auto& a : res.admitted)
    owners_[a.id] = entry{a.cache_id, stepper};
  auto fresh = steppers_.try_emplace(stepper, next_tag_).second;
  next_tag_ += fresh;
  return fresh;
}

void lane_ledger::forget(const caf::actor_addr& stepper) {
  if (steppers_.erase(stepper) == 0)
    return;
  pending_.erase(stepper);
  for (auto i = owners_.begin(); i != owners_.end();) {
    if (i->second.stepper == stepper)
      owners_.erase(i); // the last entry moves into i's place
    else
      ++i;
  }
}

void lane_ledger::ended(request_id id, std::uint64_t cache_id, end_reason why,
                        std::uint32_t released) {
  auto i = owners_.find(id);
  if (i == owners_.end() || i->second.cache_id != cache_id)
    return;
  tell(i->second, request_ended{id, cache_id, why, released});
  owners_.erase(i);
}

void lane_ledger::grown_outside(request_id id, std::uint64_t cache_id) {
  if (owners_.empty())
    return;
  auto i = owners_.find(id);
  if (i != owners_.end() && i->second.cache_id == cache_id)
    i->second.alone = false;
}

caf::actor_addr lane_ledger::stepper_of(request_id id,
                                        std::uint64_t cache_id) const {
  auto i = owners_.find(id);
  if (i == owners_.end() || i->second.cache_id != cache_id || !i->second.alone)
    return {};
  return i->second.stepper;
}

std::uint64_t lane_ledger::drain_tag(const caf::actor_addr& stepper) const {
  // No stepper (a victim admitted by allocate or fork, an anonymous step):
  // no tag - and a null address is never looked up (see take()).
  if (!stepper)
    return 0;
  auto i = steppers_.find(stepper);
  return i == steppers_.end() ? 0 : i->second;
}

void lane_ledger::tell(const entry& e, request_ended ev) {
  pending_[e.stepper].push_back(ev);
}

std::vector<request_ended> lane_ledger::take(const caf::actor_addr& stepper) {
  std::vector<request_ended> out;
  // An anonymous step is owed nothing - and a null address must not be
  // looked up: CAF's hash of an actor_addr reads through its pointer (a
  // pool whose ledger owes anyone anything would crash on it).
  if (!stepper)
    return out;
  auto i = pending_.find(stepper);
  if (i != pending_.end()) {
    out = std::move(i->second);
    pending_.erase(i);
  }
  return out;
}

} // namespace kvactor::detail
