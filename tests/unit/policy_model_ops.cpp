// The policy model test's operations (the harness: policy_model.hpp): each
// runs on block_pool_core and on pool_reference_model and requires the same
// answer from both; after each, compare() requires the same state and no
// reservation broken.
#include <set>
#include <string>
#include <vector>

#include "policy_model.hpp"

namespace kvactor::test::policy_model {

// -- operations ------------------------------------------------------------------

void harness::expect(const char* op, maybe_errc core, maybe_errc model) {
  POLICY_REQUIRE(core == model,
                 op << ": core " << name(core) << ", model " << name(model));
  ++cov[std::string(op) + ":" + name(core)];
}

void harness::do_allocate() {
  auto req = random_request();
  auto want = model_.allocate(req);
  auto got = core_.allocate(req);
  expect("allocate", code_of(got), want.err);
  if (got)
    POLICY_REQUIRE(got->cache_id == want.cache_id
                     && got->hit_tokens == want.hit_tokens,
                   "allocate hits " << got->hit_tokens << " vs " << want.hit_tokens);
  else if (render(got.error()).find("headroom") != std::string::npos)
    ++cov["headroom refused"];
}

void harness::do_can_allocate() {
  auto req = random_request();
  auto want = model_.can_allocate(req);
  POLICY_REQUIRE(core_.can_allocate(req) == want, "can_allocate");
}

void harness::do_extend(bool named) {
  auto id = live_id();
  auto it = model_.sequences().find(id);
  if (it != model_.sequences().end() && it->second.drafts != 0
      && chance(80)) {
    // Settle its drafts (a request may hold them across swaps).
    auto accepted = below(it->second.drafts + 1);
    auto want = model_.settle_drafts(id, accepted);
    auto got = core_.settle_drafts(id, accepted);
    expect("settle", code_of(got), want.err);
    if (got)
      POLICY_REQUIRE(got->changed == want.changed
                       && got->first_changed == want.first_changed,
                     "settle outcome");
    return;
  }
  std::uint64_t n = chance(60) ? 1 : below(9);
  auto tokens = random_tokens(n);
  std::uint64_t drafts = chance(15) ? below(n + 1) : 0;
  auto want = model_.extend(id, n, named ? &tokens : nullptr, drafts);
  auto got = core_.extend(id, n, named ? tokens.data() : nullptr, false,
                          drafts);
  expect(named ? "append" : "extend", code_of(got), want.err);
  if (got)
    POLICY_REQUIRE(got->changed == want.changed
                     && got->first_changed == want.first_changed
                     && str(got->copies) == str(want.copies),
                   "extend outcome " << str(got->copies));
}

void harness::do_fork() {
  auto parent = live_id();
  auto child = any_id();
  auto want = model_.fork(parent, child);
  auto got = core_.fork(parent, child);
  expect("fork", code_of(got), want.err);
  if (got)
    POLICY_REQUIRE(got->cache_id == want.cache_id, "fork cache_id");
}

void harness::expect_release(const char* op, const caf::expected<std::uint32_t>& got,
                             const test::model_release& want) {
  expect(op, code_of(got), want.err);
  if (got)
    POLICY_REQUIRE(*got == want.freed, op << " freed " << *got << " vs " << want.freed);
}

void harness::do_release() {
  auto id = live_id();
  auto it = model_.sequences().find(id);
  if (it != model_.sequences().end()
      && (it->second.where == residency::swapping_out
          || it->second.where == residency::swapping_in))
    ++cov["release during swap"];
  if (chance(20)) // a failed forward pass: cache nothing it held
    expect_release("discard", core_.discard(id), model_.discard(id));
  else
    expect_release("release", core_.release(id), model_.release(id));
}

void harness::do_preempt() {
  auto id = live_id();
  auto it = model_.sequences().find(id);
  if (it != model_.sequences().end()
      && it->second.where != residency::resident)
    ++cov["preempt while not resident"];
  // The supervisor's way, or an owner's (by id: the random stream, and so
  // the seeds' coverage, stay as they were).
  bool unindex = id % 2 == 1;
  expect_release(unindex ? "preempt unindexing" : "preempt",
                 core_.preempt(id, unindex), model_.preempt(id, unindex));
}

void harness::do_swap() {
  auto r = below(4);
  auto state = static_cast<int>(r == 0   ? residency::resident
                                : r == 1 ? residency::swapped
                                : r == 2 ? residency::swapping_out
                                         : residency::swapping_in);
  auto id = live_id(state);
  if (r < 2) {
    auto want = r == 0 ? model_.swap_out_begin(id) : model_.swap_in_begin(id);
    auto got = r == 0 ? core_.swap_out_begin(id) : core_.swap_in_begin(id);
    expect(r == 0 ? "swap_out_begin" : "swap_in_begin", code_of(got), want.err);
    if (got)
      POLICY_REQUIRE(str(*got) == str(want.moves),
                     "moves " << str(*got) << " vs " << str(want.moves));
    else if (r == 1 && render(got.error()).find("headroom") != std::string::npos)
      ++cov["swap_in headroom refused"];
    if (!got || chance(50))
      return; // stays in flight
    r += 2;
  }
  // The end of a swap names its incarnation: the live one, or one
  // released during the move (a ghost), maybe with its id live again.
  auto live = model_.sequences().find(id);
  auto cache_id = live == model_.sequences().end() ? 0 : live->second.cache_id;
  std::vector<const test::model_sequence*> ghosts;
  for (auto& [cid, g] : model_.ghosts())
    if (static_cast<int>(g.where) == state)
      ghosts.push_back(&g);
  if (!ghosts.empty() && chance(50)) {
    auto& g = *ghosts[below(ghosts.size())];
    id = g.id;
    cache_id = g.cache_id;
    ++cov[model_.sequences().count(id) ? "ghost's swap ends, id live again"
                                       : "ghost's swap ends"];
  }
  bool ok = chance(75);
  auto shared_before = core_.counters().swap_in_shared;
  auto want = r == 2 ? model_.swap_out_done(id, cache_id, ok)
                     : model_.swap_in_done(id, cache_id, ok);
  auto got = r == 2 ? core_.swap_out_done(id, cache_id, ok)
                    : core_.swap_in_done(id, cache_id, ok);
  expect_release(r == 2 ? (ok ? "swap_out_done:ok" : "swap_out_done:failed")
                        : (ok ? "swap_in_done:ok" : "swap_in_done:failed"),
                 got, want);
  if (core_.counters().swap_in_shared > shared_before)
    ++cov["swap_in shared its prefix"];
}

void harness::do_pin() {
  auto t = static_cast<std::uint16_t>(below(3));
  auto prompt = t == 2 ? gamma_prompts_[below(gamma_prompts_.size())]
                       : system_prompts_[below(system_prompts_.size())];
  // Now and then a prefix of it: pins ending above one another's end, or
  // at the same block with another token count.
  if (chance(25))
    prompt.resize(below(prompt.size() + 1));
  else if (chance(15))
    prompt.push_back(static_cast<token_id>(below(1000)));
  auto ttl = below(300);
  std::uint64_t salt = chance(10) ? 7 : 0;
  auto want = model_.pin(t, prompt, ttl, now_ms_, salt);
  auto got = core_.pin(t, prompt, ttl, now_ms_, salt);
  expect("pin", code_of(got), want.first);
  if (got) {
    POLICY_REQUIRE(*got == want.second, "pinned " << *got << " vs " << want.second);
    if (*got > 0)
      ++cov["pinned some"];
  }
}

void harness::do_unpin() {
  // Tenant 3 is no tenant.
  auto t = static_cast<std::uint16_t>(chance(3) ? 3 : below(3));
  auto tokens = t == 2 ? gamma_prompts_[below(gamma_prompts_.size())]
                       : system_prompts_[below(system_prompts_.size())];
  if (chance(30))
    tokens.resize(below(tokens.size() + 1));
  else if (chance(30)) {
    auto more = random_tokens(below(12));
    tokens.insert(tokens.end(), more.begin(), more.end());
  }
  std::uint64_t salt = chance(10) ? 7 : 0;
  auto want = model_.unpin(t, tokens, salt);
  auto got = core_.unpin(t, tokens, salt);
  expect("unpin", code_of(got), want.err);
  if (got) {
    POLICY_REQUIRE(*got == want.unpinned,
                   "unpinned " << *got << " vs " << want.unpinned);
    if (*got > 0)
      ++cov["unpinned some"];
    if (want.kept > 0)
      ++cov["unpin kept an extended prefix"];
  }
}

void harness::do_expire() {
  // A drain's grace runs out: the oldest ends.
  if (!model_.drains().empty()) {
    auto oldest = model_.drains().front();
    auto n = model_.end_drain(oldest);
    POLICY_REQUIRE(core_.end_drain(oldest) == n, "end_drain");
    ++cov["drain ended by time"];
  }
  auto want = model_.expire_pins(now_ms_);
  POLICY_REQUIRE(core_.expire_pins(now_ms_) == want, "expire_pins");
  if (want > 0)
    ++cov["expired"];
}

void harness::do_victims() {
  auto blocks = 1 + below(p_.num_blocks / 4);
  auto want = model_.choose_victims(blocks);
  auto got = core_.choose_victims(blocks);
  POLICY_REQUIRE(got == want, "victims " << str(got) << " vs " << str(want));
  for (auto id : got) {
    auto& s = *core_.find(id);
    auto& t = core_.tenants()[s.tenant];
    // Chosen first, it was above its reservation when chosen.
    if (id == got.front())
      POLICY_REQUIRE(t.used > t.config.reserved_blocks, "victim at reservation");
    // As the supervisor preempts them: out of the prefix index - and, on
    // even operations, draining (pressure.preempt_grace_ms), tagged with
    // one of three steppers.
    if (op_ % 2 == 0) {
      auto tag = 1 + op_ % 3;
      expect_release("victim preempted, draining",
                     core_.preempt_draining(id, tag),
                     model_.preempt_draining(id, tag));
      POLICY_REQUIRE(core_.last_drain() == model_.last_drain(), "last_drain");
      if (model_.last_drain() != 0)
        ++cov["victim drains"];
    } else {
      expect_release("victim preempted", core_.preempt(id, true),
                     model_.preempt(id, true));
    }
  }
  ++cov[got.empty() ? "no victims" : "victims"];
}

void harness::do_evict() {
  auto n = static_cast<std::uint32_t>(below(6));
  POLICY_REQUIRE(core_.evict(n) == model_.evict(n), "evict");
}

void harness::do_step() {
  // A stepper's next step ends its drains.
  auto tag = 1 + op_ % 3;
  auto ended = model_.end_drains(tag);
  POLICY_REQUIRE(core_.end_drains(tag) == ended, "end_drains");
  if (ended > 0)
    ++cov["drain ended by its stepper"];
  step_request step;
  for (auto k = below(3); k > 0; --k)
    step.frees.push_back(live_id());
  std::set<request_id> seen;
  for (auto k = below(6); k > 0; --k) {
    auto id = live_id();
    // An id twice is rare; the second entry fails (at most once a step).
    if (seen.insert(id).second || chance(3))
      step.extends.push_back(extend_op{id, static_cast<std::uint32_t>(
                                             chance(70) ? 1 : below(6))});
  }
  if (chance(60))
    for (auto& op : step.extends) {
      auto t = random_tokens(op.num_tokens);
      step.tokens.insert(step.tokens.end(), t.begin(), t.end());
    }
  for (auto k = below(3); k > 0; --k)
    step.admits.push_back(random_request());
  step.preempt_on_shortage = chance(85);
  step.admit_after_preemption = chance(30);
  auto w = model_.run_step(step);
  auto g = core_.run_step(step);
  auto gs = str(g);
  auto ws = str(w);
  POLICY_REQUIRE(gs == ws, "step\n core  " << gs << "\n model " << ws);
  if (!g.preempted.empty())
    ++cov["step preempted"];
  if (!g.admitted.empty())
    ++cov["step admitted"];
}

// -- checks ----------------------------------------------------------------------

void harness::compare() {
  auto inv = core_.check_invariant();
  POLICY_REQUIRE(!inv, render(inv));
  auto d = test::state_diff(core_, model_, events_, cov);
  POLICY_REQUIRE(d.empty(), d);
  auto r = test::reservations_diff(core_, model_, cov);
  POLICY_REQUIRE(r.empty(), r);
}

} // namespace kvactor::test::policy_model
