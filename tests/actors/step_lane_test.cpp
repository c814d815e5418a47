// The step lane: steps sent straight to the pool (the address the manager
// hands out) keep the manager's registry as steps through the manager do -
// admitted requests have handles and owners, ended ones are gone and their
// subscribers told - and this before the step's reply, as seen by anything
// the scheduler sends the manager afterwards (what each stepper is told and
// owns: step_lane_steppers_test.cpp).
#include "fixture.hpp"
#include "lane_fixture.hpp"

#include "kvactor/actors/step_lane.hpp"

#include <caf/all.hpp>

using namespace kvactor;
using namespace kvactor::test;

BOOST_FIXTURE_TEST_SUITE(step_lane, lane_fixture)

BOOST_AUTO_TEST_CASE(the_manager_hands_out_the_pool_as_the_step_lane) {
  BOOST_TEST((caf::actor_cast<caf::actor_addr>(lane)
              == caf::actor_cast<caf::actor_addr>(pool)));
}

BOOST_AUTO_TEST_CASE(a_lane_admission_is_registered_before_the_reply_arrives) {
  step_request req;
  req.admits = {make_request(cfg, 1, 6),
                make_prompt_request(cfg, 2, make_tokens(9, 1))};
  // Only the step is sent and run: the lookups below are the next messages
  // the manager sees, so the registry must already hold what the step did.
  auto res = lane_step(self, req);
  BOOST_REQUIRE_MESSAGE(res, outcome(res));
  BOOST_REQUIRE(res->admitted.size() == 2u);
  for (auto& a : res->admitted) {
    auto found = lookup(a.id);
    BOOST_REQUIRE_MESSAGE(found, outcome(found));
    BOOST_TEST(found->second.cache_id == a.cache_id);
    BOOST_TEST(found->second.request.prompt.empty()); // not kept
    BOOST_TEST(value_or(handle_table(found->first), block_table{}) == a.table);
  }
  auto s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->active_caches == 2u);
  // The handle serves the request like one the manager admitted.
  auto h = lookup(1);
  BOOST_REQUIRE(h);
  BOOST_TEST(value_or(handle_extend(h->first, 3), block_table{}).num_tokens == 9u);
}

BOOST_AUTO_TEST_CASE(lane_frees_and_preemptions_end_handles_and_reach_subscribers) {
  auto r1 = allocate(1, 4 * 62);
  auto r2 = allocate(2, 8);
  BOOST_REQUIRE(r1 && r2);
  caf::scoped_actor sub{sys};
  subscribe(topic::lifecycle, sub);
  self->monitor(r2->handle);
  step_request req;
  req.extends = {extend_op{1, 4}, extend_op{2, 1}}; // 1 needs 2's blocks: 2 goes
  auto res = lane_step(self, req);
  BOOST_REQUIRE_MESSAGE(res, outcome(res));
  BOOST_TEST(res->preempted == std::vector<request_id>{2});
  BOOST_TEST(outcome(lookup(2)) == "unknown_request");
  BOOST_TEST(received_down(self, r2->handle.address()));
  step_request end;
  end.frees = {1};
  res = lane_step(self, end);
  BOOST_REQUIRE_MESSAGE(res, outcome(res));
  BOOST_TEST(res->freed == std::vector<request_id>{1});
  BOOST_TEST(outcome(lookup(1)) == "unknown_request");
  auto ended = ended_events(sub);
  BOOST_REQUIRE(ended.size() == 2u);
  BOOST_TEST(ended[0].id == 2u);
  BOOST_TEST(ended[0].reason == end_reason::preempted);
  BOOST_TEST(ended[1].id == 1u);
  BOOST_TEST(ended[1].reason == end_reason::deallocated);
  BOOST_TEST(preempt_notices(self).empty()); // the stepper decided
  auto s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->active_caches == 0u);
}

BOOST_AUTO_TEST_CASE(the_lane_sender_owns_what_it_admits) {
  caf::scoped_actor sub{sys};
  subscribe(topic::lifecycle, sub);
  BOOST_REQUIRE(allocate(1, 4)); // owned by the fixture
  {
    caf::scoped_actor owner{sys};
    step_request req;
    req.admits = {make_request(cfg, 2, 8), make_request(cfg, 3, 12)};
    auto res = lane_step(owner, req);
    BOOST_REQUIRE_MESSAGE(res, outcome(res));
    BOOST_REQUIRE(res->admitted.size() == 2u);
    BOOST_TEST(used_blocks() == 6u);
  }
  run(); // the owner is gone: its requests go with it
  for (request_id id : {2, 3})
    BOOST_TEST(outcome(lookup(id)) == "unknown_request");
  BOOST_TEST(outcome(lookup(1)) == "ok");
  BOOST_TEST(used_blocks() == 1u);
  auto ended = ended_events(sub);
  BOOST_REQUIRE(ended.size() == 2u);
  for (auto& ev : ended)
    BOOST_TEST(ev.reason == end_reason::reclaimed);
}

BOOST_AUTO_TEST_CASE(an_admit_for_another_device_fails_alone_on_either_path) {
  auto foreign = make_request(cfg, 2, 4);
  foreign.device = device{device_kind::cuda, 0};
  for (bool through_lane : {true, false}) {
    step_request req;
    req.admits = {make_request(cfg, 1, 4), foreign, make_request(cfg, 3, 4)};
    auto res = through_lane ? lane_step(self, req) : step(req);
    BOOST_REQUIRE_MESSAGE(res, outcome(res));
    BOOST_REQUIRE(res->admitted.size() == 2u);
    BOOST_TEST(res->admitted[0].id == 1u);
    BOOST_TEST(res->admitted[1].id == 3u);
    BOOST_REQUIRE(res->failed.size() == 1u);
    BOOST_TEST(res->failed[0].id == 2u);
    BOOST_TEST(outcome(res->failed[0].error) == "invalid_request");
    auto text = render(res->failed[0].error);
    BOOST_TEST(text.find("(admission of request 2: ") != std::string::npos, text);
    BOOST_TEST(text.find("cuda:0") != std::string::npos, text);
    BOOST_TEST(text.find("cpu") != std::string::npos, text);
    BOOST_TEST(outcome(lookup(2)) == "unknown_request");
    BOOST_TEST(used_blocks() == 2u);
    step_request end;
    end.frees = {1, 3};
    BOOST_REQUIRE(lane_step(self, end));
    BOOST_TEST(used_blocks() == 0u);
  }
}

BOOST_AUTO_TEST_CASE(the_effects_are_in_the_managers_mailbox_when_the_reply_is_out) {
  step_request req;
  req.admits = {make_request(cfg, 1, 6)};
  auto res = pool_only_step(req);
  BOOST_REQUIRE(res.admitted.size() == 1u);
  // Sent after the reply arrived, before the manager ran at all.
  auto found = lookup(1);
  BOOST_REQUIRE_MESSAGE(found, outcome(found));
  BOOST_TEST(found->second.cache_id == res.admitted[0].cache_id);
}

// The manager's registry follows the pool some messages late. What the
// manager decides on an entry it still holds must not reach the newer
// incarnation a scheduler gave the same id meanwhile.

BOOST_AUTO_TEST_CASE(a_free_decided_on_a_late_registry_spares_a_newer_incarnation) {
  step_request admit;
  admit.admits = {make_request(cfg, 1, 4)};
  auto first = lane_step(self, admit);
  BOOST_REQUIRE(first && first->admitted.size() == 1u);
  caf::scoped_actor client{sys};
  client->send(mgr, free_atom::value, request_id{1}); // sees incarnation 1
  step_request end;
  end.frees = {1};
  BOOST_TEST(pool_only_step(end).freed == std::vector<request_id>{1});
  auto again = pool_only_step(admit);
  BOOST_REQUIRE(again.admitted.size() == 1u);
  auto second = again.admitted[0].cache_id;
  BOOST_REQUIRE(second != first->admitted[0].cache_id);
  run(); // the client's free, then both steps' effects
  caf::error err;
  client->receive([](std::uint32_t) { BOOST_ERROR("the free succeeded"); },
                  [&](caf::error& e) { err = std::move(e); },
                  caf::after(std::chrono::seconds(0)) >> [] {
                    BOOST_ERROR("no reply to the free");
                  });
  BOOST_TEST(outcome(err) == "unknown_request");
  auto found = lookup(1);
  BOOST_REQUIRE_MESSAGE(found, outcome(found));
  BOOST_TEST(found->second.cache_id == second);
  BOOST_TEST(used_blocks() == 1u);
}

BOOST_AUTO_TEST_CASE(a_reclaim_decided_on_a_late_registry_spares_a_newer_incarnation) {
  step_request admit;
  admit.admits = {make_request(cfg, 1, 4)};
  auto first = lane_step(self, admit);
  BOOST_REQUIRE(first && first->admitted.size() == 1u);
  // The supervisor reports a dead handle of incarnation 1.
  caf::send_as(sup, mgr, reclaim_atom::value, request_id{1},
               first->admitted[0].cache_id);
  step_request end;
  end.frees = {1};
  pool_only_step(end);
  auto again = pool_only_step(admit);
  BOOST_REQUIRE(again.admitted.size() == 1u);
  run();
  auto found = lookup(1);
  BOOST_REQUIRE_MESSAGE(found, outcome(found));
  BOOST_TEST(found->second.cache_id == again.admitted[0].cache_id);
  BOOST_TEST(used_blocks() == 1u);
}

struct swap_lane_fixture : lane_fixture {
  swap_lane_fixture() : lane_fixture(host_tier_config()) {
  }
};

BOOST_FIXTURE_TEST_CASE(a_free_decided_on_a_late_registry_fails_if_a_step_freed_it_mid_swap,
                        swap_lane_fixture) {
  step_request admit;
  admit.admits = {make_request(cfg, 1, 8)};
  auto first = lane_step(self, admit);
  BOOST_REQUIRE(first && first->admitted.size() == 1u);
  caf::scoped_actor swapper{sys};
  swapper->send(mgr, swap_out_atom::value, request_id{1});
  // The manager asks the pool, the pool begins the swap: the device's copy
  // comes next.
  BOOST_REQUIRE(sched.prioritize(mgr));
  sched.run_once();
  BOOST_REQUIRE(sched.prioritize(pool));
  sched.run_once();
  caf::scoped_actor client{sys};
  client->send(mgr, free_atom::value, request_id{1}); // sees it live
  // A step frees it mid-swap: deferred until the copy ends, but ended now.
  step_request end;
  end.frees = {1};
  BOOST_TEST(pool_only_step(end).freed == std::vector<request_id>{1});
  run(); // the copy, the client's free, the step's effects
  caf::error err;
  client->receive([](std::uint32_t) { BOOST_ERROR("ended twice"); },
                  [&](caf::error& e) { err = std::move(e); },
                  caf::after(std::chrono::seconds(0)) >> [] {
                    BOOST_ERROR("no reply to the free");
                  });
  BOOST_TEST(outcome(err) == "unknown_request");
  // The swap's requester learns its request ended while the copy ran.
  std::string swap_reply = "none";
  swapper->receive([&](std::uint32_t) { swap_reply = "ok"; },
                   [&](caf::error& e) { swap_reply = render(e); },
                   caf::after(std::chrono::seconds(0)) >> [] {});
  BOOST_TEST(swap_reply.find("ended before its swap-out was answered")
               != std::string::npos,
             swap_reply);
  BOOST_TEST(outcome(lookup(1)) == "unknown_request");
  BOOST_TEST(used_blocks() == 0u);
  auto s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->free_blocks == s->total_blocks);
}

BOOST_AUTO_TEST_SUITE_END()
