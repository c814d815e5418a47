// A message a cache actor has no handler for must not stop it: an error that
// arrives as a plain message - not as the answer to a request - is dropped,
// anything else is answered with unexpected_message. CAF 0.17 hands such a message to the
// actor's error handler, whose default quits with that error; and an
// event-based client that sends to the manager without a request and has no
// handler for the reply answers it with exactly that (its default handler
// returns sec::unexpected_message, which goes back to the sender). One
// careless client would stop the whole cache.
#include "fixture.hpp"
#include "spawn_fn.hpp"

#include <memory>
#include <string>

#include <caf/all.hpp>

using namespace kvactor;
using namespace kvactor::test;

BOOST_FIXTURE_TEST_SUITE(stray_messages, cache_fixture)

BOOST_AUTO_TEST_CASE(stray_errors_stop_no_cache_actor) {
  auto a = allocate(1, 5);
  BOOST_REQUIRE(a);
  auto stray = caf::make_error(caf::sec::unexpected_message);
  auto to = [&](const auto& dest) {
    self->send(caf::actor_cast<caf::actor>(dest), stray);
  };
  to(mgr);
  to(a->handle);
  to(pool);
  to(sup);
  to(cache.device);
  run();
  // Each still answers.
  BOOST_TEST(outcome(stats()) == "ok");
  BOOST_TEST(outcome(handle_table(a->handle)) == "ok");
  BOOST_TEST(outcome(ask<pool_stats>(pool, stats_atom::value)) == "ok");
  BOOST_TEST(outcome(gc()) == "ok"); // the supervisor, through the pool
  BOOST_TEST(outcome(ask<storage_info>(cache.device, info_atom::value)) == "ok");
}

BOOST_AUTO_TEST_CASE(a_client_without_a_handler_for_the_reply_stops_nothing) {
  // Sends a free without a request; the reply (a block count) finds no
  // handler, and CAF's default answers the manager with an error (and
  // prints "*** unexpected message": expected in this test's output).
  auto a = allocate(1, 5);
  BOOST_REQUIRE(a);
  auto careless = spawn_fn(sys, [](caf::event_based_actor* self) -> caf::behavior {
    return {[self](const kv_cache_manager_actor& mgr, request_id id) {
      self->send(mgr, free_atom::value, id);
    }};
  });
  self->send(careless, mgr, request_id{1});
  run();
  BOOST_TEST(must(stats()).active_caches == 0u);
  BOOST_TEST(outcome(allocate(2, 5)) == "ok");
  caf::anon_send_exit(careless, caf::exit_reason::user_shutdown);
  run();
}

BOOST_AUTO_TEST_CASE(an_unknown_message_is_answered_with_unexpected_message) {
  auto a = allocate(1, 5);
  BOOST_REQUIRE(a);
  // A request of a type nobody handles, from an event-based actor (the
  // fixture's helpers send without a request).
  auto ask_unknown = [&](const auto& dest) {
    auto out = std::make_shared<std::string>("no reply");
    auto to = caf::actor_cast<caf::actor>(dest);
    spawn_fn(sys, [to, out](caf::event_based_actor* asker) {
      asker->request(to, caf::infinite, std::string{"what is this"})
        .then([out](const std::string&) { *out = "ok"; },
              [out](caf::error& err) { *out = outcome(err); });
    });
    run();
    return *out;
  };
  BOOST_TEST(ask_unknown(mgr) == "unexpected_message");
  BOOST_TEST(ask_unknown(a->handle) == "unexpected_message");
  BOOST_TEST(ask_unknown(pool) == "unexpected_message");
  BOOST_TEST(ask_unknown(sup) == "unexpected_message");
  BOOST_TEST(ask_unknown(cache.device) == "unexpected_message");
  // And sent without a request, no answer comes and nothing stops.
  self->send(caf::actor_cast<caf::actor>(mgr), std::string{"hello"});
  run();
  BOOST_TEST(outcome(stats()) == "ok");
  BOOST_TEST(outcome(handle_table(a->handle)) == "ok");
}

BOOST_AUTO_TEST_CASE(a_null_subscriber_is_refused_or_ignored_not_monitored) {
  // CAF 0.17's monitor dereferences a null handle: a subscribe naming one
  // (any peer can send it, the middleman carries it) crashed the process.
  auto a = allocate(1, 5);
  BOOST_REQUIRE(a);
  caf::actor none;
  for (auto t : {topic::pressure, topic::lifecycle, topic::kv_events}) {
    self->send(mgr, subscribe_atom::value, t, none);
    self->send(pool, subscribe_atom::value, t, none);
    self->send(mgr, unsubscribe_atom::value, t, none);
  }
  run();
  auto level = ask<memory_pressure>(sup, subscribe_atom::value, none);
  BOOST_REQUIRE(!level);
  BOOST_TEST(outcome(level) == "invalid_request");
  BOOST_TEST(render(level.error()).find("null actor handle") != std::string::npos);
  // Everything still answers, and the request's end tells nobody.
  BOOST_TEST(outcome(stats()) == "ok");
  BOOST_TEST(outcome(free(1)) == "ok");
  BOOST_TEST(outcome(allocate(2, 5)) == "ok");
}

BOOST_AUTO_TEST_SUITE_END()
