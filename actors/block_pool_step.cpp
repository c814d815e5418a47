// block_pool_core::run_step: one scheduler step (frees, extends with vLLM's
// preempt-the-newest policy, first-come-first-served admissions) in one call.
#include "kvactor/actors/block_pool_core.hpp"

#include "kvactor/messages/error.hpp"

namespace kvactor::detail {

step_result block_pool_core::run_step(const step_request& step,
                                      bool hold_copies,
                                      step_trace* trace) {
  step_result r;
  if (trace != nullptr)
    trace->clear();
  for (auto id : step.frees) {
    if (auto n = release(id)) {
      r.freed.push_back(id);
      if (trace != nullptr)
        trace->freed_blocks.push_back(*n);
    } else {
      r.failed.push_back(op_failure{id, std::move(n.error())});
    }
  }
  // Extends, oldest first; victims come from the back of the list.
  auto& ops = step.extends;
  bool named = !step.tokens.empty();
  if (named) {
    std::uint64_t want = 0;
    for (auto& op : ops)
      want += op.num_tokens;
    if (want != step.tokens.size()) {
      // Nothing of the extends can be matched to its tokens: fail them all.
      auto err = make_error(errc::invalid_request,
                            "step: " + std::to_string(step.tokens.size())
                              + " token ids for " + std::to_string(want)
                              + " extended tokens");
      for (auto& op : ops)
        r.failed.push_back(op_failure{op.id, err});
      named = false;
    }
  }
  std::vector<bool> gone(ops.size(), false);
  auto last = ops.size(); // ops[last..] are preempted or hold no device blocks
  std::size_t offset = 0; // of ops[i]'s tokens in step.tokens
  for (std::size_t i = 0; i < ops.size(); offset += ops[i].num_tokens, ++i) {
    if (gone[i] || (!named && !step.tokens.empty()))
      continue;
    auto& op = ops[i];
    auto tokens = named ? step.tokens.data() + offset : nullptr;
    if (auto seq = find_mut(op.id); seq != nullptr
        && seq->where == residency::resident && op.num_tokens > 0
        && append_in_place(*seq, op.num_tokens, tokens))
      continue; // the common case: no block taken, nothing to report
    for (;;) {
      auto res = extend(op.id, op.num_tokens, tokens, hold_copies);
      if (res) {
        if (res->changed) {
          auto& seq = *find(op.id);
          r.changed.push_back(table_delta{
            op.id, res->first_changed,
            std::vector<block_id>(seq.blocks.begin() + res->first_changed,
                                  seq.blocks.end()),
            seq.num_tokens});
          r.copies.insert(r.copies.end(), res->copies.begin(),
                          res->copies.end());
        }
        break;
      }
      if (!step.preempt_on_shortage
          || !has_code(res.error(), errc::out_of_blocks)) {
        r.failed.push_back(op_failure{op.id, std::move(res.error())});
        break;
      }
      // Preempt the newest request of the step that still holds its device
      // blocks. One being swapped or swapped out, or unknown, would free
      // nothing now; it fails on its own extend when its turn comes. Nor
      // would one of another tenant at or below its reservation: its blocks
      // go back to that reservation, not to ops[i]. Failing all, ops[i]
      // itself (resident: its extend ran short).
      while (last > i
             && (gone[last - 1] || !holds_device_blocks(ops[last - 1].id)))
        --last;
      auto t = find(op.id)->tenant;
      auto victim = i;
      for (auto v = last; v-- > i + 1;)
        if (!gone[v] && holds_device_blocks(ops[v].id)
            && frees_for(t, find(ops[v].id)->tenant)) {
          victim = v;
          break;
        }
      gone[victim] = true;
      if (auto freed = preempt(ops[victim].id)) {
        r.preempted.push_back(ops[victim].id);
        if (trace != nullptr)
          trace->preempted_blocks.push_back(*freed);
      } else {
        r.failed.push_back(op_failure{ops[victim].id, std::move(freed.error())});
      }
      if (victim == i)
        break;
    }
  }
  // Admissions, first come first served.
  if (!step.admits.empty()) {
    if (!r.preempted.empty() && !step.admit_after_preemption) {
      r.admission_blocked = true;
      r.blocked = step.admits.front().id;
    } else {
      for (std::uint32_t k = 0; k < step.admits.size(); ++k) {
        auto& req = step.admits[k];
        auto res = allocate(req);
        if (res) {
          r.admitted.push_back(admission{req.id, res->cache_id,
                                         res->hit_tokens,
                                         table(*find(req.id))});
          if (trace != nullptr)
            trace->admitted_at.push_back(k);
        } else if (has_code(res.error(), errc::out_of_blocks)) {
          r.admission_blocked = true;
          r.blocked = req.id;
          break;
        } else {
          r.failed.push_back(op_failure{req.id, std::move(res.error())});
        }
      }
    }
  }
  r.free_blocks = free_blocks();
  r.used_blocks = used_;
  return r;
}

} // namespace kvactor::detail
