// The block pool model test's operations (the harness: block_pool_model.hpp):
// each runs on block_pool_core and on pool_reference_model, requires the
// same answer from both and counts what it covered; after each, compare()
// requires the same state.
#include <set>
#include <string>
#include <vector>

#include "block_pool_model.hpp"

namespace kvactor::test::block_pool_model {

// -- operations ------------------------------------------------------------------

void harness::expect_code(const char* op, maybe_errc core, maybe_errc model) {
  MODEL_REQUIRE(core == model, where() << op << ": core " << name(core)
                                               << ", model " << name(model));
  cov_(std::string(op) + ":" + name(core));
}

void harness::do_allocate() {
  auto req = random_request();
  auto want = model_.allocate(req);
  auto got = core_.allocate(req);
  expect_code("allocate", code_of(got ? caf::error{} : got.error()), want.err);
  if (got) {
    MODEL_REQUIRE(got->cache_id == want.cache_id, where() << "cache_id");
    MODEL_REQUIRE(got->hit_tokens == want.hit_tokens,
                          where() << "hit_tokens " << got->hit_tokens << " vs "
                                  << want.hit_tokens);
    if (got->hit_tokens > 0)
      cov_(req.cache_salt != 0 ? "salted prefix hit" : "prefix hit");
    auto seq = core_.find(req.id);
    MODEL_REQUIRE(seq != nullptr
                    && seq->num_tokens == model_.sequences().at(req.id).num_tokens,
                  where() << "tokens admitted");
    if (seq->num_tokens < req.prompt.size())
      cov_(got->hit_tokens > 0 ? "chunk admitted after a hit" : "chunk admitted");
  }
}

void harness::do_can_allocate() {
  auto req = random_request();
  auto want = model_.can_allocate(req);
  MODEL_REQUIRE(core_.can_allocate(req) == want,
                        where() << "can_allocate, model says " << want);
  cov_(want ? "can_allocate:yes" : "can_allocate:no");
}

void harness::do_cached_prefix() {
  auto req = random_request();
  auto want = model_.cached_prefix(req);
  auto got = core_.cached_prefix(req);
  expect_code("cached_prefix", code_of(got), want.first);
  if (got) {
    MODEL_REQUIRE(*got == want.second, where() << "cached_prefix " << *got
                                               << " vs " << want.second);
    if (*got > 0)
      cov_("cached_prefix hit");
  }
}

void harness::do_extend() {
  auto id = live_id();
  auto it = model_.sequences().find(id);
  if (it != model_.sequences().end() && it->second.drafts != 0
      && chance(85))
    return do_settle(id, it->second.drafts);
  std::uint64_t n = chance(60) ? 1 : below(10);
  bool named = chance(65);
  auto tokens = random_tokens(n);
  // Speculative decoding: some extends end in drafts (a few too many).
  std::uint64_t drafts = chance(20) ? below(n + 2) : 0;
  // The pool actor's way: a copy stays held until the device answers.
  bool hold = chance(50);
  auto want = model_.extend(id, n, named ? &tokens : nullptr, drafts, hold);
  auto got = core_.extend(id, n, named ? tokens.data() : nullptr, hold,
                          drafts);
  expect_code("extend", code_of(got ? caf::error{} : got.error()), want.err);
  if (got) {
    MODEL_REQUIRE(got->changed == want.changed, where() << "changed");
    MODEL_REQUIRE(got->first_changed == want.first_changed,
                          where() << "first_changed");
    MODEL_REQUIRE(str(got->copies) == str(want.copies),
                          where() << "copies " << str(got->copies) << " vs "
                                  << str(want.copies));
    if (!got->copies.empty())
      cov_("copy on write");
    if (hold)
      in_flight_ = got->copies;
  }
}

void harness::do_settle(request_id id, std::uint64_t drafts) {
  auto accepted = chance(5) ? drafts + 1 : below(drafts + 1);
  auto want = model_.settle_drafts(id, accepted);
  auto got = core_.settle_drafts(id, accepted);
  expect_code("settle", code_of(got ? caf::error{} : got.error()), want.err);
  if (got) {
    MODEL_REQUIRE(got->changed == want.changed
                    && got->first_changed == want.first_changed,
                  where() << "settle cut " << got->first_changed << " vs "
                          << want.first_changed);
    cov_(accepted == drafts ? "drafts all accepted" : "drafts rejected");
  }
}

void harness::expect_release(const char* op, const caf::expected<std::uint32_t>& got,
                             const test::model_release& want) {
  expect_code(op, code_of(got ? caf::error{} : got.error()), want.err);
  if (got)
    MODEL_REQUIRE(*got == want.freed,
                          where() << op << " freed " << *got << " vs "
                                  << want.freed);
}

void harness::do_release() {
  auto id = live_id();
  if (chance(15)) { // its forward pass failed: cache nothing it held
    auto want = model_.discard(id);
    expect_release("discard", core_.discard(id), want);
    return;
  }
  auto want = model_.release(id);
  expect_release("release", core_.release(id), want);
}

void harness::do_reclaim() {
  auto id = live_id();
  auto it = model_.sequences().find(id);
  std::uint64_t cache_id = it == model_.sequences().end() ? below(1000)
                                                         : it->second.cache_id;
  if (chance(40))
    cache_id += 1 + below(3); // a stale or future incarnation
  if (it != model_.sequences().end())
    cov_(cache_id == it->second.cache_id ? "reclaim:live" : "reclaim:stale");
  auto want = model_.reclaim(id, cache_id);
  expect_release("reclaim", core_.reclaim(id, cache_id), want);
}

void harness::do_preempt() {
  auto id = live_id();
  // The supervisor's way, or an owner's (by id: the random stream, and so
  // the seeds' coverage, stay as they were).
  bool unindex = id % 3 == 1;
  if (unindex && op_ % 2 == 0) {
    // With a grace (pressure.preempt_grace_ms), tagged with one of three
    // steppers (do_step ends their drains, do_evict the oldest).
    auto tag = 1 + op_ % 3;
    auto want = model_.preempt_draining(id, tag);
    expect_release("preempt draining", core_.preempt_draining(id, tag), want);
    MODEL_REQUIRE(core_.last_drain() == model_.last_drain(),
                  where() << "last_drain " << core_.last_drain() << " vs "
                          << model_.last_drain());
    if (model_.last_drain() != 0)
      cov_("drain begun");
    return;
  }
  auto want = model_.preempt(id, unindex);
  expect_release("preempt", core_.preempt(id, unindex), want);
}

void harness::end_drains() {
  if (model_.drains().empty())
    return;
  if (op_ % 2 == 0) { // the grace ran out
    auto oldest = model_.drains().front();
    auto want = model_.end_drain(oldest);
    MODEL_REQUIRE(core_.end_drain(oldest) == want, where() << "end_drain");
    cov_("drain ended by time");
  } else { // a stepper's next step
    auto tag = 1 + op_ % 3;
    auto want = model_.end_drains(tag);
    MODEL_REQUIRE(core_.end_drains(tag) == want, where() << "end_drains");
    if (want > 0)
      cov_("drain ended by its stepper");
  }
}

void harness::do_fork() {
  auto parent = live_id();
  auto child = chance(20) ? live_id() : any_id();
  auto want = model_.fork(parent, child);
  auto got = core_.fork(parent, child);
  expect_code("fork", code_of(got ? caf::error{} : got.error()), want.err);
  if (got)
    MODEL_REQUIRE(got->cache_id == want.cache_id, where() << "cache_id");
}

void harness::do_evict() {
  end_drains();
  auto n = static_cast<std::uint32_t>(below(12));
  auto want = model_.evict(n);
  MODEL_REQUIRE(core_.evict(n) == want, where() << "evict");
}

void harness::do_step() {
  end_drains();
  step_request step;
  std::set<request_id> used;
  for (auto& [id, seq] : model_.sequences())
    if (seq.drafts != 0 && chance(70))
      step.verdicts.push_back(draft_verdict{
        id, static_cast<std::uint32_t>(chance(3) ? seq.drafts + 1
                                                 : below(seq.drafts + 1))});
  if (!step.verdicts.empty() && chance(5)) // a repeat fails alone
    step.verdicts.push_back(step.verdicts[below(step.verdicts.size())]);
  for (auto k = below(3); k > 0; --k)
    step.frees.push_back(live_id());
  if (chance(10)) // a failed pass: up to three, one scan for them all
    for (auto k = 1 + below(3); k > 0; --k)
      step.discards.push_back(live_id());
  for (auto k = below(7); k > 0; --k) {
    extend_op op;
    op.id = live_id();
    if (used.count(op.id)) {
      if (!chance(5))
        continue; // an id twice in one step is rare (and fails)
      cov_("step repeats an id");
    }
    used.insert(op.id);
    op.num_tokens = static_cast<std::uint32_t>(chance(60) ? 1 : below(6));
    if (chance(20))
      op.num_draft = static_cast<std::uint32_t>(below(op.num_tokens + 1));
    step.extends.push_back(op);
    // Now and then the others on its partly filled last block grow in the
    // same step: one copies it (held), the next may write in place, and a
    // failed copy hands the block back to a request with fewer tokens in
    // it than its writer.
    if (chance(25)) {
      auto others = tail_sharers(op.id);
      std::shuffle(others.begin(), others.end(), rng_);
      for (auto other : others)
        if (used.insert(other).second)
          step.extends.push_back(
            extend_op{other, static_cast<std::uint32_t>(1 + below(3)), 0});
    }
  }
  if (chance(60)) {
    for (auto& op : step.extends) {
      auto t = random_tokens(op.num_tokens);
      step.tokens.insert(step.tokens.end(), t.begin(), t.end());
    }
    if (chance(3))
      step.tokens.push_back(1); // one token id too many
  }
  for (auto k = below(4); k > 0; --k)
    step.admits.push_back(random_request());
  step.preempt_on_shortage = chance(85);
  step.admit_after_preemption = chance(25);
  bool hold = chance(50);
  auto want = model_.run_step(step, hold);
  auto got = core_.run_step(step, hold);
  auto& w = want;
  auto& g = got;
  MODEL_REQUIRE(g.freed == w.freed, where() << "step freed");
  MODEL_REQUIRE(g.changed.size() == w.changed.size(),
                        where() << "step changed count " << g.changed.size()
                                << " vs " << w.changed.size());
  for (std::size_t i = 0; i < g.changed.size(); ++i) {
    auto& a = g.changed[i];
    auto& b = w.changed[i];
    MODEL_REQUIRE(a.id == b.id && a.first == b.first
                            && a.blocks == b.blocks
                            && a.num_tokens == b.num_tokens,
                          where() << "step delta " << i << ": " << a.id << "@"
                                  << a.first << str(a.blocks) << " vs " << b.id
                                  << "@" << b.first << str(b.blocks));
  }
  MODEL_REQUIRE(str(g.copies) == str(w.copies), where() << "step copies");
  MODEL_REQUIRE(g.preempted == w.preempted,
                        where() << "step preempted " << str(g.preempted) << " vs "
                                << str(w.preempted));
  MODEL_REQUIRE(g.admitted.size() == w.admitted.size(),
                        where() << "step admitted count");
  for (std::size_t i = 0; i < g.admitted.size(); ++i) {
    auto& a = g.admitted[i];
    auto& b = w.admitted[i];
    MODEL_REQUIRE(a.id == b.id && a.cache_id == b.cache_id
                            && a.hit_tokens == b.hit_tokens && a.table == b.table,
                          where() << "step admission " << i);
  }
  MODEL_REQUIRE(g.failed.size() == w.failed.size(),
                        where() << "step failed count " << g.failed.size()
                                << " vs " << w.failed.size());
  for (std::size_t i = 0; i < g.failed.size(); ++i) {
    MODEL_REQUIRE(g.failed[i].id == w.failed[i].first
                            && code_of(g.failed[i].error) == w.failed[i].second,
                          where() << "step failure " << i << ": "
                                  << render(g.failed[i].error) << " vs "
                                  << to_string(w.failed[i].second));
    cov_(std::string("step failed:") + to_string(w.failed[i].second));
  }
  MODEL_REQUIRE(g.blocked == w.blocked
                          && g.admission_blocked == w.admission_blocked,
                        where() << "step blocked");
  MODEL_REQUIRE(g.free_blocks == w.free_blocks
                          && g.used_blocks == w.used_blocks,
                        where() << "step block counts");
  if (!g.preempted.empty())
    cov_("step preempted");
  if (g.admission_blocked)
    cov_("step admission blocked");
  if (!g.admitted.empty())
    cov_("step admitted");
  if (!g.copies.empty())
    cov_("step copy on write");
  if (hold)
    in_flight_ = g.copies;
  for (auto& d : g.changed)
    if (d.blocks.empty())
      cov_("step verdict cut a table");
}

// -- comparison ------------------------------------------------------------------

void harness::compare() {
  auto inv = core_.check_invariant();
  MODEL_REQUIRE(!inv, where() << render(inv));
  auto d = test::state_diff(core_, model_, events_, cov_.n);
  if (d.empty())
    d = test::references_diff(core_, model_);
  MODEL_REQUIRE(d.empty(), where() << d);
}

} // namespace kvactor::test::block_pool_model
