// pool_reference_model: one scheduler step (frees, extends with vLLM's
// preempt-the-newest policy, first-come-first-served admissions), written
// out as messages/step.hpp reads, with block_pool_core.hpp's rule that a
// step extends a request at most once (block_pool_step.cpp is the code it
// checks).
#include "pool_reference_model.hpp"

#include <set>

namespace kvactor::test {

using detail::residency;

// -- steps ------------------------------------------------------------------------------

model_step_result pool_model::run_step(const step_request& step, bool hold) {
  model_step_result r;
  std::set<request_id> settled; // at most once per step
  for (auto& v : step.verdicts) {
    if (seqs_.count(v.id) != 0 && !settled.insert(v.id).second) {
      r.failed.emplace_back(v.id, errc::invalid_request);
      continue;
    }
    auto res = settle_drafts(v.id, v.accepted);
    if (res.err)
      r.failed.emplace_back(v.id, *res.err);
    else if (res.changed)
      r.changed.push_back(table_delta{v.id, res.first_changed, {},
                                      seqs_.at(v.id).num_tokens});
  }
  auto end = [&](request_id id, const model_release& res) {
    if (res.err)
      r.failed.emplace_back(id, *res.err);
    else
      r.freed.push_back(id);
  };
  for (auto id : step.frees)
    end(id, release(id));
  // What was built on the discarded writes goes after the last discard.
  std::set<std::uint64_t> bad;
  batched_bad_ = &bad;
  for (auto id : step.discards)
    end(id, discard(id));
  batched_bad_ = nullptr;
  if (!bad.empty())
    forget_built_on(bad);
  batched_scans_ += bad.size() > 1;
  auto& ops = step.extends;
  // Each extend's own token ids, cut from the flat list (if it is whole).
  std::vector<std::vector<token_id>> tokens(ops.size());
  bool named = !step.tokens.empty();
  std::size_t total = 0;
  for (auto& op : ops)
    total += op.num_tokens;
  if (named && total != step.tokens.size()) {
    for (auto& op : ops)
      r.failed.emplace_back(op.id, errc::invalid_request);
  } else {
    std::size_t offset = 0;
    for (std::size_t i = 0; i < ops.size(); offset += ops[i++].num_tokens)
      if (named)
        tokens[i].assign(step.tokens.begin() + offset,
                         step.tokens.begin() + offset + ops[i].num_tokens);
  }
  std::vector<bool> preempted(ops.size(), false);
  // A request is extended at most once per step: an entry for a live
  // request that an earlier entry named fails, and is never a victim.
  std::vector<bool> repeated(ops.size(), false);
  std::set<request_id> named_once;
  for (std::size_t i = 0; i < ops.size(); ++i)
    if (seqs_.count(ops[i].id) != 0)
      repeated[i] = !named_once.insert(ops[i].id).second;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (preempted[i] || (named && total != step.tokens.size()))
      continue;
    auto& op = ops[i];
    if (repeated[i]) {
      r.failed.emplace_back(op.id, errc::invalid_request);
      continue;
    }
    for (;;) {
      auto res = extend(op.id, op.num_tokens, named ? &tokens[i] : nullptr,
                        op.num_draft, hold);
      if (!res.err) {
        if (res.changed) {
          auto& seq = seqs_.at(op.id);
          r.changed.push_back(table_delta{
            op.id, res.first_changed,
            std::vector<block_id>(seq.blocks.begin() + res.first_changed,
                                  seq.blocks.end()),
            seq.num_tokens});
          r.copies.insert(r.copies.end(), res.copies.begin(), res.copies.end());
        }
        break;
      }
      if (!step.preempt_on_shortage || *res.err != errc::out_of_blocks) {
        r.failed.emplace_back(op.id, *res.err);
        break;
      }
      // The newest request of the list after op, not yet preempted nor
      // named before, that holds device blocks (resident) and whose blocks
      // op may take - its own tenant's, or one over its reservation; else
      // op itself.
      auto resident = [&](request_id id) {
        auto it = seqs_.find(id);
        return it != seqs_.end() && it->second.where == residency::resident;
      };
      auto t = seqs_.at(op.id).tenant;
      auto helps = [&](request_id id) {
        auto v = seqs_.at(id).tenant;
        auto reserved = tenants_[v].config.reserved_blocks;
        return v == t || reserved == 0 || tenants_[v].used > reserved;
      };
      auto victim = i;
      for (auto v = ops.size(); v-- > i + 1;)
        if (!preempted[v] && !repeated[v] && resident(ops[v].id)
            && helps(ops[v].id)) {
          victim = v;
          break;
        }
      preempted[victim] = true;
      auto p = preempt(ops[victim].id);
      if (p.err)
        r.failed.emplace_back(ops[victim].id, *p.err);
      else
        r.preempted.push_back(ops[victim].id);
      if (victim == i)
        break;
    }
  }
  if (!step.admits.empty()) {
    if (!r.preempted.empty() && !step.admit_after_preemption) {
      r.admission_blocked = true;
      r.blocked = step.admits.front().id;
    } else {
      for (auto& req : step.admits) {
        auto res = allocate(req);
        if (!res.err) {
          auto& seq = seqs_.at(req.id);
          r.admitted.push_back(admission{
            req.id, res.cache_id, res.hit_tokens,
            block_table{seq.blocks, seq.num_tokens, block_size_}});
        } else if (*res.err == errc::out_of_blocks) {
          r.admission_blocked = true;
          r.blocked = req.id;
          break;
        } else {
          r.failed.emplace_back(req.id, *res.err);
        }
      }
    }
  }
  r.free_blocks = free_blocks();
  r.used_blocks = used_blocks();
  return r;
}

} // namespace kvactor::test
