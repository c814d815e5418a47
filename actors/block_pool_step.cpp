// block_pool_core::run_step: one scheduler step (frees, extends with vLLM's
// preempt-the-newest policy, first-come-first-served admissions) in one call.
#include "kvactor/actors/block_pool_core.hpp"

#include <algorithm>

#include "kvactor/messages/error.hpp"
#include "kvactor/messages/error_context.hpp"

namespace kvactor::detail {

namespace {

// What run_extends knows of each entry besides a live request's slot (a
// slot is below 2^32 - 3: no pool holds four billion requests at once).
constexpr std::uint32_t unknown = flat_index::npos - 2; ///< no live request
constexpr std::uint32_t repeated = flat_index::npos - 1; ///< its id came before
constexpr std::uint32_t gone = flat_index::npos;         ///< preempted

/// The failure of a step's `op` on request `id`: `err` with its context led
/// by both ("free of request 7: request 7 is not allocated"). One step may
/// fail a verdict, a free, a discard and an extend of the same id with
/// errors that read alike from below, and some (a quota's, a shortage's)
/// name no request at all. The code stays.
op_failure failed_op(const char* op, request_id id, const caf::error& err) {
  return op_failure{id, in_context(std::string{op} + " of " + req_name(id), err)};
}

} // namespace

void block_pool_core::run_extends(const step_request& step, bool named,
                                  bool hold_copies, step_trace* trace,
                                  step_result& r) {
  auto& ops = step.extends;
  // A request is extended at most once per step: its first entry names it,
  // a later one fails. Each entry's request is looked up once, here, and
  // stamped with the step (O(1) per entry, no set), so the victim scan -
  // which only looks past the current entry, at first entries - never
  // picks a request this step already extended, nor the current one: a
  // `changed` entry never names blocks that went to another request.
  // Nothing admits during the extends, so the slots stay valid; a
  // preempted request's entry is marked gone (a later entry for it is a
  // repeat).
  ++step_stamp_;
  std::vector<std::uint32_t> slot(ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i) {
    auto s = seq_index_.find(ops[i].id);
    if (s == flat_index::npos) {
      slot[i] = unknown;
    } else if (seqs_[s].step_stamp == step_stamp_) {
      slot[i] = repeated;
    } else {
      seqs_[s].step_stamp = step_stamp_;
      slot[i] = s;
    }
  }
  // Whether preempting entry v's request frees device blocks now.
  auto resident = [&](std::size_t v) {
    return slot[v] < unknown && seqs_[slot[v]].where == residency::resident;
  };
  auto last = ops.size(); // ops[last..] are preempted or hold no device blocks
  std::size_t offset = 0; // of ops[i]'s tokens in step.tokens
  for (std::size_t i = 0; i < ops.size(); offset += ops[i].num_tokens, ++i) {
    auto& op = ops[i];
    if (slot[i] == gone)
      continue;
    if (slot[i] == repeated) {
      r.failed.push_back(failed_op(
        "extend", op.id,
        make_error(errc::invalid_request,
                   req_name(op.id)
                     + " appears twice in the step's extends: a request is "
                       "extended at most once per step")));
      continue;
    }
    auto tokens = named ? step.tokens.data() + offset : nullptr;
    if (slot[i] != unknown && resident(i) && op.num_tokens > 0
        && append_in_place(seqs_[slot[i]], op.num_tokens, tokens,
                           op.num_draft)) {
      seqs_[slot[i]].last_access = clock_ns_;
      continue; // the common case: no block taken, nothing to report
    }
    // Where the victim scan for ops[i] goes on from: the entries it passed
    // would free nothing for ops[i] and still would not after a victim's
    // preemption (which only lowers its own tenant's use), so each retry
    // scans on from the last victim - O(n) for all of ops[i]'s retries.
    auto cursor = last;
    for (;;) {
      auto res = extend(op.id, op.num_tokens, tokens, hold_copies,
                        op.num_draft);
      if (res) {
        if (res->changed) {
          auto& seq = seqs_[slot[i]];
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
        r.failed.push_back(failed_op("extend", op.id, std::move(res.error())));
        break;
      }
      // Preempt the newest request of the step that still holds its device
      // blocks and that the step has yet to extend. One being swapped or
      // swapped out, or unknown, would free nothing now; it fails on its
      // own extend when its turn comes. Nor would one of another tenant at
      // or below its reservation: its blocks go back to that reservation,
      // not to ops[i]. Failing all, ops[i] itself (resident: its extend
      // ran short).
      while (last > i + 1 && !resident(last - 1))
        --last;
      cursor = std::min(cursor, last);
      auto t = seqs_[slot[i]].tenant;
      auto victim = i;
      for (auto v = cursor; v-- > i + 1;)
        if (resident(v) && frees_for(t, seqs_[slot[v]].tenant)) {
          victim = v;
          break;
        }
      cursor = victim;
      slot[victim] = gone;
      if (auto freed = preempt(ops[victim].id)) {
        r.preempted.push_back(ops[victim].id);
        if (trace != nullptr)
          trace->preempted_blocks.push_back(*freed);
      } else {
        r.failed.push_back(
          failed_op("preemption", ops[victim].id, std::move(freed.error())));
      }
      if (victim == i)
        break;
    }
  }
}

step_result block_pool_core::run_step(const step_request& step,
                                      bool hold_copies,
                                      step_trace* trace) {
  step_result r;
  if (trace != nullptr)
    trace->clear();
  // A request's drafts are settled at most once per step, as it is
  // extended at most once: a second verdict would be judged against what
  // the first left (no drafts), succeeding as a no-op or failing on a
  // count the scheduler never saw - its intent lost either way.
  ++step_stamp_;
  for (auto& v : step.verdicts) {
    auto s = seq_index_.find(v.id);
    if (s != flat_index::npos) {
      if (seqs_[s].step_stamp == step_stamp_) {
        r.failed.push_back(failed_op(
          "verdict", v.id,
          make_error(errc::invalid_request,
                     req_name(v.id)
                       + " appears twice in the step's verdicts: a "
                         "request's drafts are settled at most once per "
                         "step")));
        continue;
      }
      seqs_[s].step_stamp = step_stamp_;
    }
    if (auto res = settle_drafts(v.id, v.accepted)) {
      // Settled, the request is live: its slot is the one found above
      // (a verdict adds and drops no sequence), no second lookup.
      if (res->changed)
        r.changed.push_back(table_delta{
          v.id, res->first_changed, {}, seqs_[s].num_tokens});
    } else {
      r.failed.push_back(failed_op("verdict", v.id, std::move(res.error())));
    }
  }
  auto end = [&](const char* op, request_id id,
                 caf::expected<std::uint32_t> n) {
    if (n) {
      r.freed.push_back(id);
      if (trace != nullptr)
        trace->freed_blocks.push_back(*n);
    } else {
      r.failed.push_back(failed_op(op, id, std::move(n.error())));
    }
  };
  for (auto id : step.frees)
    end("free", id, release(id));
  auto frees_end = r.freed.size();
  // A failed pass discards many: what was built on their writes goes in
  // one scan of the pool, after the last. The same blocks leave the index
  // as with one discard after another; a block a later discard let go is
  // cached first and then evicted (counted in evictions), where one by one
  // it left the index held - and the free stack's order may differ.
  std::vector<write_lineage::token> bad;
  {
    struct unbatch { // never left pointing at `bad`, whatever is thrown
      std::vector<write_lineage::token>*& at;
      ~unbatch() {
        at = nullptr;
      }
    } after{batched_bad_};
    batched_bad_ = &bad;
    for (auto id : step.discards)
      end("discard", id, discard(id));
  }
  if (trace != nullptr)
    trace->discarded = static_cast<std::uint32_t>(r.freed.size() - frees_end);
  if (!bad.empty())
    forget_built_on(std::move(bad));
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
        r.failed.push_back(failed_op("extend", op.id, err));
      named = false;
    }
  }
  if (named || step.tokens.empty())
    run_extends(step, named, hold_copies, trace, r);
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
          r.failed.push_back(failed_op("admission", req.id,
                                       std::move(res.error())));
        }
      }
    }
  }
  r.free_blocks = free_blocks();
  r.used_blocks = used_;
  return r;
}

} // namespace kvactor::detail
