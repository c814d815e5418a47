// The step lane's steppers: each step reply reports the stepper's requests
// ended elsewhere, once and in order; a stepper owns what it admits and takes
// it along when it goes; a lane holder steps and does nothing else (the
// registry kept: step_lane_test.cpp).
#include "fixture.hpp"
#include "lane_fixture.hpp"

#include "kvactor/actors/step_lane.hpp"

#include <caf/all.hpp>

using namespace kvactor;
using namespace kvactor::test;

BOOST_FIXTURE_TEST_SUITE(step_lane, lane_fixture)

// A stepper learns in its next step reply which of the requests its steps
// admitted ended by other hands - in order with what that step did, where
// the manager's notices may come later.

BOOST_AUTO_TEST_CASE(a_step_reply_reports_the_steppers_requests_ended_elsewhere) {
  step_request admit;
  admit.admits = {make_request(cfg, 1, 4), make_request(cfg, 2, 4),
                  make_request(cfg, 3, 4)};
  auto first = lane_step(self, admit);
  BOOST_REQUIRE(first && first->admitted.size() == 3u);
  BOOST_REQUIRE(allocate(4, 4)); // through the manager: no stepper's
  caf::scoped_actor other{sys};
  BOOST_REQUIRE(preempt_from(other, 1));
  BOOST_REQUIRE(ask_from<std::uint32_t>(other, mgr, free_atom::value,
                                        request_id{2}));
  BOOST_REQUIRE(preempt_from(other, 4));
  // Another stepper frees 3 in its step: ours hears of it, that one not.
  step_request theirs;
  theirs.frees = {3};
  auto res = lane_step(other, theirs);
  BOOST_REQUIRE(res);
  BOOST_TEST(res->ended.empty());
  res = lane_step(self, step_request{});
  BOOST_REQUIRE(res);
  BOOST_REQUIRE(res->ended.size() == 3u);
  BOOST_TEST(res->ended[0].id == 1u);
  BOOST_TEST(res->ended[0].cache_id == first->admitted[0].cache_id);
  BOOST_TEST(res->ended[0].reason == end_reason::preempted);
  BOOST_TEST(res->ended[0].blocks_released == 1u);
  BOOST_TEST(res->ended[1].id == 2u);
  BOOST_TEST(res->ended[1].reason == end_reason::deallocated);
  BOOST_TEST(res->ended[2].id == 3u);
  BOOST_TEST(res->ended[2].reason == end_reason::deallocated);
  BOOST_TEST(res->ended[2].blocks_released == 1u); // by the other's step
  // Told once; what its own steps end is in freed / preempted instead.
  admit.admits = {make_request(cfg, 5, 4)};
  BOOST_REQUIRE(lane_step(self, admit));
  step_request end;
  end.frees = {5};
  res = lane_step(self, end);
  BOOST_REQUIRE(res);
  BOOST_TEST(res->freed == std::vector<request_id>{5});
  BOOST_TEST(res->ended.empty());
}

BOOST_AUTO_TEST_CASE(a_step_reply_tells_a_discard_elsewhere_from_a_free) {
  // Another stepper's step discards one of ours and frees another; the
  // manager discards a third: each is reported with how it ended.
  step_request admit;
  admit.admits = {make_request(cfg, 1, 4), make_request(cfg, 2, 4),
                  make_request(cfg, 3, 4)};
  BOOST_REQUIRE(lane_step(self, admit));
  caf::scoped_actor other{sys};
  step_request theirs;
  theirs.frees = {1};
  theirs.discards = {2};
  BOOST_REQUIRE(lane_step(other, theirs));
  BOOST_REQUIRE(ask_from<std::uint32_t>(other, mgr, discard_atom::value,
                                        request_id{3}));
  auto res = lane_step(self, step_request{});
  BOOST_REQUIRE(res);
  BOOST_REQUIRE(res->ended.size() == 3u);
  BOOST_TEST(res->ended[0].id == 1u);
  BOOST_TEST(res->ended[0].reason == end_reason::deallocated);
  BOOST_TEST(res->ended[1].id == 2u);
  BOOST_TEST(res->ended[1].reason == end_reason::discarded);
  BOOST_TEST(res->ended[1].blocks_released == 1u);
  BOOST_TEST(res->ended[2].id == 3u);
  BOOST_TEST(res->ended[2].reason == end_reason::discarded);
}

BOOST_AUTO_TEST_CASE(a_preemption_in_another_steppers_step_is_reported_to_the_owner) {
  caf::scoped_actor a{sys};
  step_request admit;
  admit.admits = {make_request(cfg, 1, 4 * 62), make_request(cfg, 2, 8)};
  auto mine = lane_step(a, admit);
  BOOST_REQUIRE(mine && mine->admitted.size() == 2u);
  // Another stepper grows 1 past the pool: its step preempts 2, the newest
  // of its extends.
  step_request grow;
  grow.extends = {extend_op{1, 4}, extend_op{2, 1}};
  auto theirs = lane_step(self, grow);
  BOOST_REQUIRE(theirs);
  BOOST_TEST(theirs->preempted == std::vector<request_id>{2});
  BOOST_TEST(theirs->ended.empty());
  auto res = lane_step(a, step_request{});
  BOOST_REQUIRE(res);
  BOOST_REQUIRE(res->ended.size() == 1u);
  BOOST_TEST(res->ended[0].id == 2u);
  BOOST_TEST(res->ended[0].cache_id == mine->admitted[1].cache_id);
  BOOST_TEST(res->ended[0].reason == end_reason::preempted);
  step_request end;
  end.frees = {1};
  BOOST_REQUIRE(lane_step(a, end));
}

BOOST_AUTO_TEST_CASE(an_anonymous_step_owns_nothing_and_is_told_nothing) {
  step_request admit;
  admit.admits = {make_request(cfg, 1, 4)};
  caf::anon_send(lane, step_atom::value, admit);
  run();
  auto found = lookup(1);
  BOOST_REQUIRE_MESSAGE(found, outcome(found)); // registered, unowned
  BOOST_REQUIRE(preempt(1));
  // Whoever steps next is not owed request 1's end.
  auto res = lane_step(self, step_request{});
  BOOST_REQUIRE(res);
  BOOST_TEST(res->ended.empty());
  BOOST_TEST(used_blocks() == 0u);
}

BOOST_AUTO_TEST_CASE(an_anonymous_step_while_a_stepper_is_owed_ends_leaves_the_pool_up) {
  // Our step admits 1, the manager preempts it: we are owed its end. An
  // anonymous step then asks the ledger what it is owed - by a null
  // address, which must not be looked up among the steppers (CAF's hash of
  // an actor_addr reads through it).
  step_request admit;
  admit.admits = {make_request(cfg, 1, 4)};
  auto mine = lane_step(self, admit);
  BOOST_REQUIRE(mine && mine->admitted.size() == 1u);
  BOOST_REQUIRE(preempt(1));
  step_request anon;
  anon.admits = {make_request(cfg, 2, 4)};
  caf::anon_send(lane, step_atom::value, anon);
  run();
  BOOST_REQUIRE_MESSAGE(lookup(2), "the anonymous step admitted nothing");
  auto res = lane_step(self, step_request{});
  BOOST_REQUIRE_MESSAGE(res, outcome(res));
  BOOST_REQUIRE(res->ended.size() == 1u);
  BOOST_TEST(res->ended[0].id == 1u);
  BOOST_TEST(res->ended[0].cache_id == mine->admitted[0].cache_id);
  BOOST_REQUIRE(free(2));
}

BOOST_AUTO_TEST_CASE(a_lane_holder_cannot_admit_end_fork_or_swap_requests_directly) {
  // The lane is the pool's address: what only the manager may ask is
  // refused from anyone else, the request untouched - and an allocate
  // outside a step admits nothing (it would be a request without a
  // handle, unknown to the registry).
  step_request admit;
  admit.admits = {make_request(cfg, 1, 4)};
  auto res = lane_step(self, admit);
  BOOST_REQUIRE(res && res->admitted.size() == 1u);
  auto cid = res->admitted[0].cache_id;
  auto raw = caf::actor_cast<caf::actor>(lane);
  auto refused = [&](auto... xs) {
    caf::error err;
    self->send(raw, xs...);
    run();
    self->receive([&](caf::error& e) { err = std::move(e); },
                  [&](caf::message& m) {
                    BOOST_ERROR("accepted: " << caf::to_string(m));
                  },
                  caf::after(std::chrono::seconds(0)) >> [] {
                    BOOST_ERROR("no reply");
                  });
    return outcome(err);
  };
  BOOST_TEST(refused(free_atom::value, request_id{1}, cid) == "invalid_request");
  BOOST_TEST(refused(preempt_atom::value, request_id{1}, cid) == "invalid_request");
  BOOST_TEST(refused(reclaim_atom::value, request_id{1}, cid) == "invalid_request");
  BOOST_TEST(refused(fork_atom::value, request_id{1}, cid, request_id{2})
             == "invalid_request");
  BOOST_TEST(refused(swap_out_atom::value, request_id{1}, cid) == "invalid_request");
  BOOST_TEST(refused(swap_out_atom::value, request_id{1}, cid, true) == "invalid_request");
  BOOST_TEST(refused(swap_in_atom::value, request_id{1}, cid, false) == "invalid_request");
  BOOST_TEST(refused(allocate_atom::value, make_request(cfg, 2, 4))
             == "invalid_request");
  BOOST_TEST(outcome(lookup(2)) == "unknown_request");
  auto found = lookup(1);
  BOOST_REQUIRE(found);
  BOOST_TEST(found->second.cache_id == cid);
  BOOST_TEST(used_blocks() == 1u);
}

BOOST_AUTO_TEST_CASE(a_stepper_that_goes_takes_its_lane_requests_with_it) {
  {
    caf::scoped_actor stepper{sys};
    step_request admit;
    admit.admits = {make_request(cfg, 1, 4), make_request(cfg, 2, 4)};
    BOOST_REQUIRE(lane_step(stepper, admit));
    BOOST_REQUIRE(preempt(1)); // owed to the stepper now
  }
  run(); // it went: its requests are reclaimed, what it was owed dropped
  BOOST_TEST(used_blocks() == 0u);
  BOOST_TEST(outcome(lookup(2)) == "unknown_request");
  // A new stepper starts clean.
  step_request admit;
  admit.admits = {make_request(cfg, 3, 4)};
  auto res = lane_step(self, admit);
  BOOST_REQUIRE(res);
  BOOST_TEST(res->ended.empty());
}

BOOST_AUTO_TEST_CASE(the_ledger_tells_each_end_once_to_its_stepper_and_forgets_the_gone) {
  detail::lane_ledger l;
  caf::scoped_actor a{sys};
  caf::scoped_actor b{sys};
  step_result r;
  r.admitted = {admission{1, 11, 0, {}}, admission{2, 12, 0, {}}};
  detail::block_pool_core::step_trace none;
  BOOST_TEST(l.step_done(a->address(), step_request{}, r, none)); // new: to be monitored
  r.admitted = {admission{3, 13, 0, {}}};
  BOOST_TEST(!l.step_done(a->address(), step_request{}, r, none));
  BOOST_TEST(l.size() == 3u);
  l.ended(1, 11, end_reason::preempted, 1);
  l.ended(1, 11, end_reason::preempted, 1); // told once
  l.ended(2, 99, end_reason::deallocated, 1); // another incarnation
  BOOST_TEST(l.untold() == 1u);
  step_result theirs;
  theirs.freed = {2};
  detail::block_pool_core::step_trace counts;
  counts.freed_blocks = {5};
  BOOST_TEST(!l.step_done(b->address(), step_request{}, theirs, counts)); // b admitted none
  BOOST_TEST(l.take(b->address()).empty());
  auto told = l.take(a->address());
  BOOST_REQUIRE(told.size() == 2u);
  BOOST_TEST(told[0].id == 1u);
  BOOST_TEST(told[0].reason == end_reason::preempted);
  BOOST_TEST(told[1].id == 2u);
  BOOST_TEST(told[1].cache_id == 12u);
  BOOST_TEST(told[1].reason == end_reason::deallocated);
  BOOST_TEST(told[1].blocks_released == 5u); // as b's step counted
  BOOST_TEST(l.untold() == 0u);
  BOOST_TEST(l.size() == 1u); // 3
  // Its own step's ends are not owed to it.
  step_result own;
  own.preempted = {3};
  l.step_done(a->address(), step_request{}, own, none);
  BOOST_TEST(l.untold() == 0u);
  BOOST_TEST(l.size() == 0u);
  // A stepper that goes leaves nothing behind.
  r.admitted = {admission{4, 14, 0, {}}};
  l.step_done(a->address(), step_request{}, r, none);
  l.ended(4, 14, end_reason::reclaimed, 1);
  BOOST_TEST(l.untold() == 1u);
  l.forget(a->address());
  BOOST_TEST(l.untold() == 0u);
  BOOST_TEST(l.size() == 0u);
  BOOST_TEST(l.steppers() == 0u);
}

BOOST_AUTO_TEST_CASE(the_ledger_names_a_stepper_only_while_it_alone_grew_its_request) {
  // Whose promise covers every write into a request (the drain tag of a
  // supervisor's victim): its stepper's, until another stepper's step or a
  // handle grows it.
  detail::lane_ledger l;
  caf::scoped_actor a{sys};
  caf::scoped_actor b{sys};
  step_result r;
  r.admitted = {admission{1, 11, 0, {}}, admission{2, 12, 0, {}},
                admission{3, 13, 0, {}}};
  detail::block_pool_core::step_trace none;
  l.step_done(a->address(), step_request{}, r, none);
  step_request own;
  own.extends = {extend_op{1, 1, 0}};
  l.step_done(a->address(), own, step_result{}, none);
  BOOST_TEST((l.stepper_of(1, 11) == a->address()));
  step_request theirs;
  theirs.extends = {extend_op{2, 1, 0}};
  l.step_done(b->address(), theirs, step_result{}, none);
  BOOST_TEST(!l.stepper_of(2, 12));
  l.grown_outside(3, 99); // another incarnation: not this one
  BOOST_TEST((l.stepper_of(3, 13) == a->address()));
  l.grown_outside(3, 13);
  BOOST_TEST(!l.stepper_of(3, 13));
  BOOST_TEST((l.stepper_of(1, 11) == a->address()));
}

BOOST_AUTO_TEST_CASE(step_effects_from_anyone_but_the_pool_are_ignored) {
  BOOST_REQUIRE(allocate(1, 4));
  caf::scoped_actor stranger{sys};
  step_effects fx;
  fx.freed = {1};
  stranger->send(mgr, step_atom::value, fx, caf::actor{});
  run();
  BOOST_TEST(outcome(lookup(1)) == "ok");
  // Nor can anyone re-point the pool's registry.
  caf::anon_send(caf::actor_cast<caf::actor>(pool), registry_atom::value,
                 caf::actor_cast<caf::actor>(stranger), storage_info{});
  run();
  step_request admit;
  admit.admits = {make_request(cfg, 2, 4)};
  BOOST_REQUIRE(lane_step(self, admit));
  BOOST_TEST(outcome(lookup(2)) == "ok");
}

BOOST_AUTO_TEST_SUITE_END()
