// The step lane: steps sent straight to the pool (the address the manager
// hands out) keep the manager's registry as steps through the manager do -
// admitted requests have handles and owners, ended ones are gone and their
// subscribers told - and this before the step's reply, as seen by anything
// the scheduler sends the manager afterwards.
#include "fixture.hpp"

#include <caf/all.hpp>

using namespace kvactor;
using namespace kvactor::test;

namespace {

extend_op grow(request_id id, std::uint32_t n) {
  extend_op op;
  op.id = id;
  op.num_tokens = n;
  return op;
}

struct lane_fixture : cache_fixture {
  lane_fixture() {
    auto got = ask<step_actor>(mgr, step_atom::value);
    BOOST_REQUIRE_MESSAGE(got, outcome(got));
    lane = *got;
  }

  caf::expected<step_result> lane_step(caf::scoped_actor& from,
                                       step_request req) {
    auto res = ask_from<step_result>(from, lane, step_atom::value,
                                     std::move(req));
    if (!res)
      return std::move(res.error());
    return std::move(std::get<0>(*res));
  }

  step_actor lane;
};

} // namespace

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
  req.extends = {grow(1, 4), grow(2, 1)}; // 1 needs 2's blocks: 2 goes
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

BOOST_AUTO_TEST_SUITE_END()
