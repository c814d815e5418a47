// The random actor model's step operation: a random step (frees, extends,
// admits) through the lane or the manager, simulated on a copy of the model
// and checked against the reply - outcomes, tables, fresh blocks, usage,
// the registry right after, and the ends the reply owes the stepper.
#include "random_model.hpp"

namespace kvactor::test::model {

void random_model::op_step() {
  op_name_ = "step";
  step_request req;
  for (auto n = pick(0, 2); n > 0; --n)
    req.frees.push_back(some_id());
  for (auto n = pick(0, 4); n > 0; --n) {
    extend_op op;
    op.id = some_id();
    op.num_tokens = static_cast<std::uint32_t>(pick(0, 12));
    req.extends.push_back(op);
  }
  for (auto n = pick(0, 3); n > 0; --n) {
    auto tokens = pick(0, 40);
    req.admits.push_back(make_request(cfg, any_id(), tokens,
                                      chance(0.05) ? pick(1, 40)
                                                   : tokens + pick(1, 60)));
  }
  req.preempt_on_shortage = chance(0.8);
  req.admit_after_preemption = chance(0.3);
  // Half the steps take the lane the manager hands out (straight to the
  // pool), half go through the manager: both keep its registry.
  bool lane = chance(0.5);
  if (lane)
    op_name_ = "step_lane";
  auto res = lane ? ask<step_result>(lane_, step_atom::value, req) : step(req);
  // Simulate the step (messages/step.hpp) on a copy of the model. Blocks a
  // request takes during the step are counted in `fresh` (their ids come
  // with the reply); a copy-on-write drops the shared last block from the
  // request's own list.
  struct delta {
    request_id id;
    std::uint32_t first;
    std::uint64_t num_tokens;
    std::size_t num_blocks;
  };
  std::vector<delta> deltas;
  std::vector<request_id> freed, preempted, admitted;
  std::multiset<std::pair<request_id, std::string>> failed;
  request_id blocked = 0;
  auto sim = live_;
  std::map<request_id, std::uint64_t> fresh;
  // A copy-on-write holds both its blocks until the device copied them,
  // after the step: the source (its id is known) and the fresh destination
  // (counted per request). Neither comes free before, even if released.
  std::vector<block_id> held_src;
  std::map<request_id, std::uint64_t> held_dst;
  std::uint64_t released_dst = 0;
  auto sim_refs = [&](bool with_holds) {
    ref_counts out(total_blocks, 0);
    for (auto& [id, r] : sim)
      for (auto b : r.blocks)
        ++out.at(b);
    for (auto& [id, t] : orphans_)
      for (auto b : t.blocks)
        ++out.at(b);
    if (with_holds)
      for (auto b : held_src)
        ++out.at(b);
    return out;
  };
  std::uint64_t free_now = total_blocks - held(sim_refs(true));
  auto release = [&](request_id id) {
    auto r = sim_refs(true);
    std::uint64_t n = fresh[id] - held_dst[id];
    released_dst += held_dst[id];
    for (auto b : sim.at(id).blocks)
      if (r.at(b) == 1)
        ++n;
    fresh.erase(id);
    held_dst.erase(id);
    sim.erase(id);
    free_now += n;
  };
  for (auto id : req.frees) {
    if (sim.count(id) == 0) {
      failed.emplace(id, "unknown_request");
      continue;
    }
    release(id);
    freed.push_back(id);
  }
  auto& ops = req.extends;
  std::vector<bool> gone(ops.size(), false);
  // A request is extended at most once per step: an entry for a live
  // request an earlier entry named fails with invalid_request and is never
  // a victim (some_id picks ids again often enough to cover it).
  std::vector<bool> repeated(ops.size(), false);
  std::set<request_id> named_once;
  for (std::size_t i = 0; i < ops.size(); ++i)
    if (sim.count(ops[i].id) != 0)
      repeated[i] = !named_once.insert(ops[i].id).second;
  auto last = ops.size();
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (gone[i])
      continue;
    auto& op = ops[i];
    if (repeated[i]) {
      failed.emplace(op.id, "invalid_request");
      continue;
    }
    for (;;) {
      auto it = sim.find(op.id);
      if (it == sim.end()) {
        failed.emplace(op.id, "unknown_request");
        break;
      }
      auto& r = it->second;
      if (op.num_tokens == 0)
        break;
      if (r.tokens + op.num_tokens > r.max_len) {
        failed.emplace(op.id, "exceeds_max_sequence_length");
        break;
      }
      auto have = r.blocks.size() + fresh[op.id];
      auto add = blocks_for(r.tokens + op.num_tokens, bs) - have;
      // The last block is copied if it is partly filled and shared; one
      // taken in this step is private.
      bool cow = r.tokens % bs != 0 && fresh[op.id] == 0
                 && sim_refs(false).at(r.blocks.back()) > 1;
      if (add + cow <= free_now) {
        free_now -= add + cow;
        if (cow) {
          held_src.push_back(r.blocks.back());
          ++held_dst[op.id];
          r.blocks.pop_back();
        }
        fresh[op.id] += add + cow;
        r.tokens += op.num_tokens;
        if (add + cow > 0)
          deltas.push_back(delta{op.id, static_cast<std::uint32_t>(have - cow),
                                 r.tokens, blocks_for(r.tokens, bs)});
        break;
      }
      if (!req.preempt_on_shortage) {
        failed.emplace(op.id, "out_of_blocks");
        break;
      }
      // The newest request of the step that holds blocks (messages/step.hpp):
      // an unknown one is passed over and fails on its own extend. (Nothing
      // here is ever swapped.)
      while (last > i
             && (gone[last - 1] || repeated[last - 1]
                 || sim.count(ops[last - 1].id) == 0))
        --last;
      auto victim = last - 1;
      gone[victim] = true;
      auto vid = ops[victim].id;
      release(vid);
      preempted.push_back(vid);
      if (victim == i)
        break;
    }
  }
  if (!req.admits.empty()) {
    if (!preempted.empty() && !req.admit_after_preemption) {
      blocked = req.admits.front().id;
    } else {
      for (auto& a : req.admits) {
        if (a.initial_tokens > a.max_sequence_length) {
          failed.emplace(a.id, "exceeds_max_sequence_length");
          continue;
        }
        if (sim.count(a.id) != 0) {
          failed.emplace(a.id, "duplicate_request");
          continue;
        }
        auto need = blocks_for(a.initial_tokens, bs);
        if (need > free_now) {
          blocked = a.id;
          break;
        }
        free_now -= need;
        model_request r;
        r.tokens = a.initial_tokens;
        r.max_len = a.max_sequence_length;
        sim[a.id] = r;
        fresh[a.id] = need;
        admitted.push_back(a.id);
      }
    }
  }
  // The copies are done when the reply comes: their holds are gone.
  {
    auto with = sim_refs(true);
    held_src.clear();
    auto without = sim_refs(false);
    for (std::size_t b = 0; b < total_blocks; ++b)
      if (with.at(b) > 0 && without.at(b) == 0)
        ++free_now;
    free_now += released_dst;
  }
  // Compare.
  expect_outcome(res, "ok");
  expect(res->freed == freed, "freed ids differ");
  expect(res->preempted == preempted, "preempted ids differ");
  std::vector<request_id> got_admitted;
  for (auto& a : res->admitted)
    got_admitted.push_back(a.id);
  expect(got_admitted == admitted, "admitted ids differ");
  std::multiset<std::pair<request_id, std::string>> got_failed;
  for (auto& f : res->failed)
    got_failed.emplace(f.id, outcome(f.error));
  expect(got_failed == failed, "failed operations differ");
  expect(res->blocked == blocked, "blocked id differs");
  expect(res->admission_blocked == (blocked != 0), "admission_blocked");
  expect(res->free_blocks == free_now, "free blocks after the step: "
                                         + std::to_string(res->free_blocks)
                                         + ", expected "
                                         + std::to_string(free_now));
  expect(res->used_blocks + res->free_blocks == total_blocks, "free + used");
  expect(res->changed.size() == deltas.size(),
         std::to_string(res->changed.size()) + " tables changed, expected "
           + std::to_string(deltas.size()));
  for (std::size_t k = 0; k < deltas.size(); ++k) {
    auto& d = res->changed[k];
    auto& w = deltas[k];
    expect(d.id == w.id && d.first == w.first && d.num_tokens == w.num_tokens
             && d.first + d.blocks.size() == w.num_blocks,
           "delta " + std::to_string(k) + " of request " + std::to_string(d.id)
             + " differs");
  }
  // Apply: ended requests go, grown ones take their new blocks in order,
  // admitted ones come in with their tables.
  for (auto id : freed)
    live_.erase(id);
  for (auto id : preempted)
    live_.erase(id);
  for (auto& d : res->changed) {
    auto i = live_.find(d.id);
    if (i == live_.end())
      continue; // grown, then preempted later in the step
    auto& b = i->second.blocks;
    b.resize(d.first);
    b.insert(b.end(), d.blocks.begin(), d.blocks.end());
  }
  for (auto& [id, r] : live_) {
    auto& s = sim.at(id);
    if (s.tokens != r.tokens) {
      r.tokens = s.tokens;
      r.doc = -1;
    }
  }
  for (auto& a : res->admitted) {
    auto& sa = sim.at(a.id);
    model_request r;
    r.tokens = sa.tokens;
    r.max_len = sa.max_len;
    r.blocks = a.table.blocks;
    r.stepped = a.cache_id;
    live_[a.id] = std::move(r);
  }
  // Told of what ended elsewhere since the last step, once.
  std::vector<std::string> got_ended, want_ended;
  for (auto& e : res->ended)
    got_ended.push_back(std::to_string(e.id) + "@" + std::to_string(e.cache_id)
                        + ":" + to_string(e.reason));
  for (auto& [id, cache_id, why] : ended_elsewhere_)
    want_ended.push_back(std::to_string(id) + "@" + std::to_string(cache_id)
                         + ":" + to_string(why));
  expect(got_ended == want_ended, "the step reply's ended differs: "
                                    + std::to_string(got_ended.size())
                                    + " ends, expected "
                                    + std::to_string(want_ended.size()));
  ended_elsewhere_.clear();
  // Every block taken in the step is private to its request.
  auto after = refs();
  for (auto& a : res->admitted)
    for (auto b : a.table.blocks)
      expect(after.at(b) == 1, "an admitted request's block is shared");
  for (auto& d : res->changed)
    for (auto b : d.blocks)
      if (live_.count(d.id) != 0)
        expect(after.at(b) == 1, "a grown request's new block is shared");
  for (auto& [id, r] : live_)
    expect(r.blocks.size() == blocks_for(r.tokens, bs),
           "request " + std::to_string(id) + " holds "
             + std::to_string(r.blocks.size()) + " blocks for "
             + std::to_string(r.tokens) + " tokens after the step");
  expect(held(after) == res->used_blocks,
         "used blocks after the step: model " + std::to_string(held(after))
           + ", reply " + std::to_string(res->used_blocks));
  // The registry followed before the reply: ended requests are gone, the
  // admitted ones have handles serving their incarnation.
  // (An id may end and be admitted again in one step.)
  for (auto ids : {&res->freed, &res->preempted})
    for (auto id : *ids)
      if (live_.count(id) == 0)
        expect_outcome(lookup(id), "unknown_request");
  for (auto& a : res->admitted) {
    auto l = lookup(a.id);
    expect(l && l->second.cache_id == a.cache_id,
           "admitted request " + std::to_string(a.id) + " not registered");
  }
}

} // namespace kvactor::test::model
