// The quiet scheduler (tune_for_latency): actors that quit without having
// set a timeout no longer wake the clock thread, while every kind of timer -
// request timeouts, receive timeouts, delayed messages - still fires, and an
// actor that quits with a timer pending still has it cancelled. Systems asking
// for another scheduler keep theirs.
#include <chrono>
#include <cstdint>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/sec.hpp>
#include <caf/send.hpp>

#include "fixture.hpp"
#include "kvactor/actors/quiet_scheduler.hpp"
#include "kvactor/messages/registration.hpp"

using namespace kvtest;
using kvactor::detail::quiet_clock_counts_of;
using namespace std::chrono_literals;

namespace {

struct quiet_system {
  caf::actor_system_config cfg;
  caf::actor_system sys;

  quiet_system() : sys{(kvactor::tune_for_latency(cfg), cfg)} {
    // nop
  }
};

} // namespace

BOOST_FIXTURE_TEST_SUITE(quiet_scheduler_suite, watchdog)

BOOST_AUTO_TEST_CASE(actors_quitting_without_timeouts_do_not_reach_the_clock) {
  quiet_system q;
  BOOST_REQUIRE(quiet_clock_counts_of(q.sys).has_value());
  auto before = *quiet_clock_counts_of(q.sys);
  for (int i = 0; i < 1000; ++i)
    q.sys.spawn([](caf::event_based_actor* self) { self->quit(); });
  q.sys.await_all_actors_done();
  auto after = *quiet_clock_counts_of(q.sys);
  BOOST_TEST(after.skipped - before.skipped >= 1000u);
  BOOST_TEST(after.forwarded == before.forwarded);
}

BOOST_AUTO_TEST_CASE(request_timeouts_fire_and_are_cancelled_at_exit) {
  quiet_system q;
  // Never answers: the request can only end by its timeout.
  auto silent = q.sys.spawn([](caf::event_based_actor*) -> caf::behavior {
    return {[](std::int32_t) -> caf::result<std::int32_t> {
      return caf::delegated<std::int32_t>{};
    }};
  });
  {
    caf::scoped_actor self{q.sys};
    bool timed_out = false;
    self->request(silent, 20ms, std::int32_t{1})
      .receive([](std::int32_t) {},
               [&](caf::error& err) {
                 timed_out = err == caf::sec::request_timeout;
               });
    BOOST_TEST(timed_out);
  }
  // The scoped actor set a timeout: its exit went to the clock.
  BOOST_TEST(quiet_clock_counts_of(q.sys)->forwarded >= 1u);
  caf::anon_send_exit(silent, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_CASE(receive_timeouts_and_delayed_messages_arrive) {
  quiet_system q;
  caf::scoped_actor self{q.sys};
  auto client = caf::actor_cast<caf::actor>(self);
  // Reports its receive timeout, then quits.
  q.sys.spawn([client](caf::event_based_actor* ev) -> caf::behavior {
    return {
      [](std::int32_t) {},
      caf::after(10ms) >> [ev, client] {
        ev->send(client, std::string{"idle"});
        ev->quit();
      },
    };
  });
  caf::delayed_anon_send(client, 15ms, std::int32_t{42});
  std::string idle;
  std::int32_t delayed = 0;
  for (int i = 0; i < 2; ++i)
    self->receive([&](const std::string& s) { idle = s; },
                  [&](std::int32_t x) { delayed = x; },
                  caf::after(5s) >> [] { BOOST_FAIL("a timer did not fire"); });
  BOOST_TEST(idle == "idle");
  BOOST_TEST(delayed == 42);
}

BOOST_AUTO_TEST_CASE(an_actor_quitting_with_a_timer_pending_has_it_cancelled) {
  quiet_system q;
  caf::scoped_actor self{q.sys};
  auto client = caf::actor_cast<caf::actor>(self);
  auto before = *quiet_clock_counts_of(q.sys);
  // Its receive timeout is an hour away when it quits: the cancellation
  // must reach the clock (exactly this one actor's).
  auto sleeper = q.sys.spawn([client](caf::event_based_actor* ev) -> caf::behavior {
    return {
      [ev](std::int32_t) { ev->quit(); },
      caf::after(std::chrono::seconds{3600}) >> [ev, client] {
        ev->send(client, std::string{"woke"});
      },
    };
  });
  self->monitor(sleeper);
  self->send(sleeper, std::int32_t{0});
  self->receive([](const caf::down_msg&) {});
  BOOST_TEST(quiet_clock_counts_of(q.sys)->forwarded - before.forwarded == 1u);
}

BOOST_AUTO_TEST_CASE(other_schedulers_are_left_alone) {
  {
    caf::actor_system_config cfg;
    cfg.set("scheduler.policy", caf::atom("testing"));
    kvactor::tune_for_latency(cfg);
    caf::actor_system sys{cfg};
    BOOST_TEST(!quiet_clock_counts_of(sys).has_value());
    BOOST_TEST(dynamic_cast<caf::scheduler::test_coordinator*>(&sys.scheduler())
               != nullptr);
  }
  caf::actor_system_config plain;
  caf::actor_system sys{plain};
  BOOST_TEST(!quiet_clock_counts_of(sys).has_value());
}

BOOST_AUTO_TEST_SUITE_END()
