// The preempt message, whoever asks (a step's preemptions included), and the
// lifecycle notifications that tell each end with its reason.
#include "fixture.hpp"
#include "step_ops.hpp"

#include <caf/all.hpp>

using namespace kvactor;
using namespace kvactor::test;

BOOST_FIXTURE_TEST_SUITE(step, cache_fixture)

BOOST_AUTO_TEST_CASE(preempt_frees_and_tells_the_owner_when_someone_else_asks) {
  auto a = allocate(1, 9);
  BOOST_REQUIRE(a);
  self->monitor(a->handle);
  caf::scoped_actor other{sys};
  caf::scoped_actor sub{sys};
  subscribe(topic::lifecycle, sub);
  auto released = preempt_from(other, 1);
  BOOST_TEST(value_or(released, 0u) == 3u);
  BOOST_TEST(outcome(lookup(1)) == "unknown_request");
  BOOST_TEST(used_blocks() == 0u);
  auto notices = preempt_notices(self);
  BOOST_REQUIRE(notices.size() == 1u);
  BOOST_TEST(notices[0].id == 1u);
  BOOST_TEST(notices[0].reason == end_reason::preempted);
  BOOST_TEST(notices[0].blocks_released == 3u);
  BOOST_TEST(notices[0].cache_id != 0u);
  BOOST_TEST(preempt_notices(other).empty());
  BOOST_TEST(received_down(self, a->handle.address()));
  auto ended = ended_events(sub);
  BOOST_REQUIRE(ended.size() == 1u);
  BOOST_TEST(ended[0].reason == end_reason::preempted);
  auto s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->preemption_count == 1u);
  BOOST_TEST(outcome(preempt(1)) == "unknown_request");
}

BOOST_AUTO_TEST_CASE(a_step_that_preempts_another_owners_request_tells_that_owner) {
  // Request 1 is self's (allocated through the manager); another actor's
  // step runs short and preempts it: self hears of it, as from a preempt
  // through the manager. The stepper learns it from its result alone.
  BOOST_REQUIRE(allocate(1, 9, 1000)); // 3 blocks
  caf::scoped_actor stepper{sys};
  step_request admit;
  admit.admits = {make_request(cfg, 2, 4, 1000)};
  auto res = ask_from<step_result>(stepper, mgr, step_atom::value, admit);
  BOOST_REQUIRE(res);
  step_request grow_both;
  grow_both.extends = {grow(2, 4 * 62), grow(1, 1)}; // 2 needs what 1 holds
  res = ask_from<step_result>(stepper, mgr, step_atom::value, grow_both);
  BOOST_REQUIRE(res);
  BOOST_TEST(std::get<0>(*res).preempted == std::vector<request_id>{1});
  auto notices = preempt_notices(self);
  BOOST_REQUIRE(notices.size() == 1u);
  BOOST_TEST(notices[0].id == 1u);
  BOOST_TEST(notices[0].reason == end_reason::preempted);
  BOOST_TEST(notices[0].blocks_released == 3u);
  BOOST_TEST(preempt_notices(stepper).empty());
}

BOOST_AUTO_TEST_CASE(preempt_by_the_owner_sends_it_no_notice) {
  BOOST_REQUIRE(allocate(1, 5));
  BOOST_TEST(value_or(preempt(1), 0u) == 2u);
  BOOST_TEST(preempt_notices(self).empty());
  BOOST_TEST(outcome(lookup(1)) == "unknown_request");
}

// -- lifecycle notifications -------------------------------------------------------------

BOOST_AUTO_TEST_CASE(lifecycle_subscribers_hear_every_end_with_its_reason) {
  caf::scoped_actor sub{sys};
  subscribe(topic::lifecycle, sub);
  subscribe(topic::lifecycle, sub); // twice: still one subscription
  for (request_id id = 1; id <= 5; ++id)
    BOOST_REQUIRE(allocate(id, 4));
  BOOST_REQUIRE(free(1));
  BOOST_REQUIRE(preempt(2));
  step_request req;
  req.frees = {3};
  BOOST_REQUIRE(step(req));
  auto h4 = lookup(4);
  BOOST_REQUIRE(h4);
  caf::anon_send_exit(h4->first, caf::exit_reason::kill);
  run();
  auto ended = ended_events(sub);
  BOOST_REQUIRE(ended.size() == 4u);
  BOOST_TEST(ended[0].id == 1u);
  BOOST_TEST(ended[0].reason == end_reason::deallocated);
  BOOST_TEST(ended[0].blocks_released == 1u);
  BOOST_TEST(ended[1].id == 2u);
  BOOST_TEST(ended[1].reason == end_reason::preempted);
  BOOST_TEST(ended[1].blocks_released == 1u);
  BOOST_TEST(ended[2].id == 3u);
  BOOST_TEST(ended[2].reason == end_reason::deallocated);
  BOOST_TEST(ended[2].blocks_released == 1u); // counted by the step
  BOOST_TEST(ended[3].id == 4u);
  BOOST_TEST(ended[3].reason == end_reason::reclaimed);
  BOOST_TEST(ended[3].blocks_released == 1u);
  unsubscribe(topic::lifecycle, sub);
  BOOST_REQUIRE(free(5));
  BOOST_TEST(ended_events(sub).empty());
}

BOOST_AUTO_TEST_SUITE_END()
