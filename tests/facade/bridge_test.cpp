// The blocking bridge under timeouts that race their replies: every call
// returns - its own reply or request_timeout, never another call's reply -
// and none hangs (the watchdog ends a hang). Replies take 30-70 us and the
// caller allows none at all beyond the bridge's 50 us spin, so a reply often
// arrives just as its caller gives up, and late replies land while later
// calls wait. A reply trim runs on the replier's thread, and only on replies
// that reach their caller in time.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <new>
#include <thread>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/sec.hpp>

#include "fixture.hpp"
#include "kvactor/actors/blocking_bridge.hpp"
#include "spawn_fn.hpp"

using namespace kvtest;

namespace {

caf::behavior slow_echo(caf::event_based_actor*) {
  return {[](std::int32_t x) {
    auto until = std::chrono::steady_clock::now()
                 + std::chrono::microseconds{30 + (x * 7919) % 41};
    while (std::chrono::steady_clock::now() < until) {
    }
    return x;
  }};
}

/// Replies after `x` microseconds.
caf::behavior sleepy_echo(caf::event_based_actor*) {
  return {[](std::int32_t x) {
    std::this_thread::sleep_for(std::chrono::microseconds{x});
    return x;
  }};
}

std::atomic<std::thread::id> trimmed_on;
std::atomic<int> trims{0};

/// Halves an int32 reply, noting where it ran.
void halve(caf::message& reply) {
  trimmed_on = std::this_thread::get_id();
  ++trims;
  if (reply.match_elements<std::int32_t>())
    reply = caf::make_message(reply.get_as<std::int32_t>(0) / 2);
}

/// A trim that runs out of memory.
void throw_bad_alloc(caf::message&) {
  throw std::bad_alloc{};
}

} // namespace

BOOST_FIXTURE_TEST_SUITE(blocking_bridge_suite, watchdog)

BOOST_AUTO_TEST_CASE(timeouts_racing_their_replies_neither_hang_nor_mix_replies) {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  auto echo = caf::actor_cast<caf::strong_actor_ptr>(spawn_fn(sys, slow_echo));
  std::size_t answered = 0;
  std::size_t timed_out = 0;
  {
    kvactor::detail::blocking_bridge bridge{sys};
    for (std::int32_t i = 0; i < 20000; ++i) {
      auto res = bridge.call(echo, caf::make_message(i),
                             std::chrono::milliseconds{0});
      if (res) {
        BOOST_REQUIRE(res->match_elements<std::int32_t>());
        BOOST_REQUIRE_EQUAL(res->get_as<std::int32_t>(0), i);
        ++answered;
      } else {
        BOOST_REQUIRE(res.error() == caf::sec::request_timeout);
        ++timed_out;
      }
    }
    // An unlimited wait still gets its reply.
    auto res = bridge.call(echo, caf::make_message(std::int32_t{-1}),
                           std::chrono::milliseconds::max());
    BOOST_REQUIRE(res);
    BOOST_TEST(res->get_as<std::int32_t>(0) == -1);
  }
  BOOST_TEST_MESSAGE(answered << " answered, " << timed_out << " timed out");
  BOOST_TEST(answered + timed_out == 20000u);
  caf::anon_send_exit(echo, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_CASE(a_reply_is_trimmed_on_the_repliers_thread_unless_late) {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  auto echo = caf::actor_cast<caf::strong_actor_ptr>(spawn_fn(sys, sleepy_echo));
  kvactor::detail::blocking_bridge bridge{sys};
  trims = 0;
  auto res = bridge.call(echo, caf::make_message(std::int32_t{10}),
                         std::chrono::milliseconds::max(), nullptr, halve);
  BOOST_REQUIRE(res);
  BOOST_REQUIRE(res->match_elements<std::int32_t>());
  BOOST_TEST(res->get_as<std::int32_t>(0) == 5);
  BOOST_TEST(trims == 1);
  BOOST_TEST((trimmed_on.load() != std::this_thread::get_id()));
  // Late: the undo handler gets the reply whole, and the trim never runs.
  std::promise<std::int32_t> late;
  auto got = late.get_future();
  res = bridge.call(echo, caf::make_message(std::int32_t{20000}),
                    std::chrono::milliseconds{1},
                    [&late](caf::message& m) {
                      late.set_value(m.get_as<std::int32_t>(0));
                    },
                    halve);
  BOOST_REQUIRE(!res);
  BOOST_TEST((res.error() == caf::sec::request_timeout));
  BOOST_TEST(got.get() == 20000);
  BOOST_TEST(trims == 1);
  caf::anon_send_exit(echo, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_CASE(a_trim_that_throws_fails_its_call_and_spares_the_replier) {
  // The trim runs inside the replier's enqueue: a throw there would kill
  // the replier (in a cache, the manager or the pool). The caller gets an
  // error instead of waiting for good, and the replier answers on.
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  auto echo = caf::actor_cast<caf::strong_actor_ptr>(spawn_fn(sys, sleepy_echo));
  kvactor::detail::blocking_bridge bridge{sys};
  auto res = bridge.call(echo, caf::make_message(std::int32_t{10}),
                         std::chrono::milliseconds::max(), nullptr,
                         throw_bad_alloc);
  BOOST_REQUIRE(!res);
  BOOST_TEST((res.error() == caf::sec::runtime_error), caf::to_string(res.error()));
  res = bridge.call(echo, caf::make_message(std::int32_t{20}),
                    std::chrono::milliseconds::max());
  BOOST_REQUIRE(res);
  BOOST_TEST(res->get_as<std::int32_t>(0) == 20);
  caf::anon_send_exit(echo, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_SUITE_END()
