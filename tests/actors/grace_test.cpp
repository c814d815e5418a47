// pressure.preempt_grace_ms: the blocks of the supervisor's victims drain -
// no request holds them, none may take them - until the grace runs out or
// the victim's stepper promises its earlier steps' K/V are written (if no
// one else grew it), so that a forward pass still writing a victim's K/V
// writes into blocks nobody else has yet. Timers fire on the deterministic scheduler's
// trigger_timeouts().
#include "fixture.hpp"
#include "lane_fixture.hpp"

#include <caf/all.hpp>

using namespace kvactor;
using namespace kvactor::test;

namespace {

cache_config grace_config() {
  auto c = small_config();
  c.pressure.preempt_at_critical = true;
  c.pressure.preempt_grace_ms = 50;
  return c;
}

struct grace_fixture : lane_fixture {
  grace_fixture() : lane_fixture(grace_config()) {
  }
};

/// A low-priority request of 10 blocks: the supervisor's first victim.
allocation_request low_priority(const cache_config& cfg, request_id id) {
  auto req = make_request(cfg, id, 4 * 10);
  req.priority = priority::low;
  return req;
}

/// 2 came in by a stepper's step, then grew by another stepper's step
/// (`by_step`) or through the manager: the first stepper's promise that
/// its earlier steps are written says nothing of that other writer's pass,
/// which may still be writing 2's K/V - only the grace ends the drain.
void another_writer_grew_the_victim(grace_fixture& f, bool by_step) {
  caf::scoped_actor stepper{f.sys};
  caf::scoped_actor second{f.sys};
  BOOST_REQUIRE(f.allocate(1, 4 * 30));
  step_request admit;
  admit.admits = {low_priority(f.cfg, 2)};
  auto first = f.lane_step(stepper, admit);
  BOOST_REQUIRE(first);
  BOOST_REQUIRE(first->admitted.size() == 1u);
  if (by_step) {
    step_request grow;
    grow.extends = {extend_op{2, 1, 0}};
    auto grown = f.lane_step(second, grow);
    BOOST_REQUIRE(grown);
    BOOST_REQUIRE(grown->failed.empty());
  } else {
    BOOST_REQUIRE(f.extend(2, 1));
  }
  BOOST_REQUIRE(f.allocate(3, 4 * 10));
  BOOST_REQUIRE(f.allocate(4, 4 * 10)); // 61 blocks: critical, 2 drains
  auto s = f.stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->draining_blocks == 11u);
  step_request promise;
  promise.earlier_steps_written = true;
  BOOST_REQUIRE(f.lane_step(stepper, promise));
  s = f.stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->draining_blocks == 11u);
  f.sched.trigger_timeouts();
  f.run();
  s = f.stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->draining_blocks == 0u);
}

} // namespace

BOOST_FIXTURE_TEST_SUITE(grace, grace_fixture)

BOOST_AUTO_TEST_CASE(a_victims_blocks_drain_until_the_grace_runs_out) {
  BOOST_REQUIRE(allocate(1, 4 * 30));
  BOOST_REQUIRE(allocate(low_priority(cfg, 2)));
  BOOST_REQUIRE(allocate(3, 4 * 10));
  BOOST_REQUIRE(allocate(4, 4 * 11)); // 61 blocks: critical
  auto notices = preempt_notices(self);
  BOOST_REQUIRE(notices.size() == 1u);
  BOOST_TEST(notices[0].id == 2u);
  BOOST_TEST(notices[0].blocks_released == 10u);
  auto s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->draining_blocks == 10u);
  BOOST_TEST(s->free_blocks == 3u);
  BOOST_TEST(s->preemption_count == 1u);
  BOOST_TEST(s->pressure == memory_pressure::high); // 51 in use: no more victims
  // Nobody takes them meanwhile, and a stray tick does not end the drain.
  BOOST_TEST(outcome(allocate(5, 4 * 4)) == "out_of_blocks");
  self->send(pool, tick_atom::value, std::uint64_t{1});
  run();
  s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->draining_blocks == 10u);
  // The grace ran out.
  sched.trigger_timeouts();
  run();
  s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->draining_blocks == 0u);
  BOOST_TEST(s->free_blocks == 13u);
  BOOST_REQUIRE(allocate(5, 4 * 4));
}

BOOST_AUTO_TEST_CASE(a_steppers_next_step_ends_its_victims_drain) {
  caf::scoped_actor stepper{sys};
  BOOST_REQUIRE(allocate(1, 4 * 30));
  step_request admit;
  admit.admits = {low_priority(cfg, 2)};
  auto first = lane_step(stepper, admit);
  BOOST_REQUIRE(first);
  BOOST_REQUIRE(first->admitted.size() == 1u);
  BOOST_REQUIRE(allocate(3, 4 * 10));
  BOOST_REQUIRE(allocate(4, 4 * 11)); // critical: 2 goes, and drains
  auto s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->draining_blocks == 10u);
  // Another stepper's step ends nothing of it, even with the promise; nor
  // does its own next step without it (the facade's never has it).
  step_request promise;
  promise.earlier_steps_written = true;
  BOOST_REQUIRE(lane_step(self, promise));
  auto told = lane_step(stepper, step_request{});
  BOOST_REQUIRE(told);
  BOOST_REQUIRE(told->ended.size() == 1u);
  BOOST_TEST(told->ended[0].id == 2u);
  BOOST_TEST(told->ended[0].reason == end_reason::preempted);
  s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->draining_blocks == 10u);
  // Its own step promising its earlier steps' K/V are written ends it, and
  // may admit into those blocks at once.
  step_request next;
  next.admits = {make_request(cfg, 5, 4 * 8)};
  next.earlier_steps_written = true;
  auto res = lane_step(stepper, next);
  BOOST_REQUIRE(res);
  BOOST_TEST(res->admitted.size() == 1u);
  BOOST_TEST(!res->admission_blocked);
  s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->draining_blocks == 0u);
  BOOST_TEST(s->free_blocks == 5u);
  // The drain's timer comes later and finds it gone.
  sched.trigger_timeouts();
  run();
  s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->free_blocks == 5u);
}

BOOST_AUTO_TEST_CASE(a_victim_another_stepper_grew_drains_until_the_grace_ends) {
  another_writer_grew_the_victim(*this, true);
}

BOOST_AUTO_TEST_CASE(a_victim_grown_through_the_manager_drains_until_the_grace_ends) {
  another_writer_grew_the_victim(*this, false);
}

BOOST_AUTO_TEST_CASE(a_victim_no_stepper_admitted_drains_while_steppers_exist) {
  // A stepper is known (it admitted request 1), and the victim came in by
  // allocate: its drain has no stepper's tag, and neither that stepper's
  // promise nor an anonymous one ends it - only the grace. (The pool used
  // to look the victim's null stepper up and crash.)
  caf::scoped_actor stepper{sys};
  step_request admit;
  admit.admits = {make_request(cfg, 1, 4 * 30)};
  auto first = lane_step(stepper, admit);
  BOOST_REQUIRE(first);
  BOOST_REQUIRE(first->admitted.size() == 1u);
  BOOST_REQUIRE(allocate(low_priority(cfg, 2)));
  BOOST_REQUIRE(allocate(3, 4 * 10));
  BOOST_REQUIRE(allocate(4, 4 * 11)); // critical: 2 goes, and drains
  auto notices = preempt_notices(self);
  BOOST_REQUIRE(notices.size() == 1u);
  BOOST_TEST(notices[0].id == 2u);
  auto s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->draining_blocks == 10u);
  step_request promise;
  promise.earlier_steps_written = true;
  BOOST_REQUIRE(lane_step(stepper, promise));
  caf::anon_send(lane, step_atom::value, promise); // no sender at all
  run();
  s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->draining_blocks == 10u);
  sched.trigger_timeouts();
  run();
  s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->draining_blocks == 0u);
  BOOST_TEST(s->free_blocks == 13u);
}

BOOST_AUTO_TEST_SUITE_END()
