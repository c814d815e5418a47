// Probes of the manager's registry, owners and lifecycle events against
// interleavings the other tests do not force: owners that die with a fork in
// flight or a request swapped out, subscribers that subscribe twice or die.
#include "fixture.hpp"
#include "spawn_fn.hpp"

#include <caf/all.hpp>

using namespace kvactor;
using namespace kvactor::test;

namespace {

struct probe_fixture : cache_fixture {
  probe_fixture() : cache_fixture(host_tier_config()) {
  }

  /// Runs one message of `whom` (which must have one waiting).
  template <class Handle>
  void step(const Handle& whom) {
    BOOST_REQUIRE(sched.prioritize(whom));
    sched.run_once();
  }

  std::uint64_t active() {
    return must(stats()).active_caches;
  }
};

} // namespace

BOOST_FIXTURE_TEST_SUITE(registry_interleavings_suite, probe_fixture)

BOOST_AUTO_TEST_CASE(an_owner_dying_with_a_fork_in_flight_leaves_nothing) {
  run();
  BOOST_REQUIRE(allocate(1, 8));
  auto owner = spawn_fn(sys, [](caf::event_based_actor* me) -> caf::behavior {
    me->set_default_handler(caf::drop);
    return {[](caf::unit_t) {}};
  });
  caf::send_as(owner, mgr, fork_atom::value, request_id{1}, request_id{2});
  step(mgr); // fork -> the pool
  caf::anon_send_exit(owner, caf::exit_reason::kill);
  run();
  BOOST_TEST(outcome(lookup(2)) == "unknown_request");
  BOOST_TEST(active() == 1u);
  BOOST_TEST(outcome(free(1)) == "ok");
  BOOST_TEST(used_blocks() == 0u);
}

BOOST_AUTO_TEST_CASE(a_lifecycle_subscriber_owner_dying_with_an_allocate_in_flight_leaves_nothing) {
  run();
  caf::scoped_actor sub{sys};
  auto owner = spawn_fn(sys, [](caf::event_based_actor* me) -> caf::behavior {
    me->set_default_handler(caf::drop);
    return {[](caf::unit_t) {}};
  });
  caf::send_as(owner, mgr, subscribe_atom::value, topic::lifecycle, owner);
  run();
  subscribe(topic::lifecycle, sub);
  caf::send_as(owner, mgr, allocate_atom::value, make_request(cfg, 7, 5));
  step(mgr); // allocate -> the pool
  caf::anon_send_exit(owner, caf::exit_reason::kill);
  step(owner);
  step(mgr); // the down (a subscriber only, no request yet)
  run();
  BOOST_TEST(outcome(lookup(7)) == "unknown_request");
  BOOST_TEST(active() == 0u);
  BOOST_TEST(used_blocks() == 0u);
  auto ended = ended_events(sub);
  BOOST_REQUIRE(ended.size() == 1u);
  BOOST_TEST(ended[0].reason == end_reason::reclaimed);
}

BOOST_AUTO_TEST_CASE(subscribing_twice_to_lifecycle_tells_each_end_once) {
  caf::scoped_actor sub{sys};
  subscribe(topic::lifecycle, sub);
  subscribe(topic::lifecycle, sub);
  BOOST_REQUIRE(allocate(1, 4));
  BOOST_REQUIRE(allocate(2, 4));
  BOOST_TEST(outcome(free(2)) == "ok");
  BOOST_TEST(outcome(free(1)) == "ok");
  auto ended = ended_events(sub);
  BOOST_REQUIRE(ended.size() == 2u);
  BOOST_TEST(ended[0].id == 2u);
  BOOST_TEST(ended[1].id == 1u);
  // Unsubscribed once: no more events.
  unsubscribe(topic::lifecycle, sub);
  BOOST_REQUIRE(allocate(3, 4));
  BOOST_TEST(outcome(free(3)) == "ok");
  BOOST_TEST(ended_events(sub).empty());
}

BOOST_AUTO_TEST_CASE(an_owner_dying_with_its_request_swapped_out_frees_both_tiers) {
  run();
  auto owner = spawn_fn(sys, [](caf::event_based_actor* me) -> caf::behavior {
    me->set_default_handler(caf::drop);
    return {[](caf::unit_t) {}};
  });
  caf::send_as(owner, mgr, allocate_atom::value, make_request(cfg, 1, 8));
  run();
  BOOST_REQUIRE(active() == 1u);
  BOOST_TEST(outcome(ask<std::uint32_t>(mgr, swap_out_atom::value, request_id{1})) == "ok");
  auto s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->host_free_blocks == 6u);
  caf::anon_send_exit(owner, caf::exit_reason::kill);
  run();
  s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->active_caches == 0u);
  BOOST_TEST(s->host_free_blocks == 8u);
  BOOST_TEST(used_blocks() == 0u);
}

BOOST_AUTO_TEST_CASE(a_handle_killed_mid_swap_ends_its_request_once) {
  caf::scoped_actor sub{sys};
  subscribe(topic::lifecycle, sub);
  auto a = allocate(1, 8);
  BOOST_REQUIRE(a);
  caf::scoped_actor client{sys};
  client->send(mgr, swap_out_atom::value, request_id{1});
  step(mgr);  // -> the pool
  step(pool); // reserved: moves -> manager
  step(mgr);  // -> the device
  caf::anon_send_exit(a->handle, caf::exit_reason::kill);
  run_except(cache.device.address()); // reclaimed before the copy ends
  BOOST_TEST(active() == 0u);
  run();
  auto r = reply_to<std::uint32_t>(client);
  BOOST_TEST(outcome(r) != "ok"); // ended during the move
  auto s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->active_caches == 0u);
  BOOST_TEST(s->host_free_blocks == 8u);
  BOOST_TEST(used_blocks() == 0u);
  auto ended = ended_events(sub);
  BOOST_REQUIRE(ended.size() == 1u);
  BOOST_TEST(ended[0].reason == end_reason::reclaimed);
}

BOOST_AUTO_TEST_CASE(a_dead_lifecycle_subscriber_is_dropped_and_others_still_hear) {
  caf::scoped_actor sub{sys};
  subscribe(topic::lifecycle, sub);
  auto dead = spawn_fn(sys, [](caf::event_based_actor* me) -> caf::behavior {
    me->set_default_handler(caf::drop);
    return {[](caf::unit_t) {}};
  });
  caf::anon_send(mgr, subscribe_atom::value, topic::lifecycle, dead);
  run();
  caf::anon_send_exit(dead, caf::exit_reason::kill);
  run();
  BOOST_REQUIRE(allocate(1, 4));
  BOOST_TEST(outcome(free(1)) == "ok");
  BOOST_TEST(ended_events(sub).size() == 1u);
}

BOOST_AUTO_TEST_CASE(unsubscribing_the_manager_from_pressure_keeps_its_stats_level) {
  // The manager's own pressure subscription feeds stats().pressure; a client
  // naming the manager in an unsubscribe (its handle is public) froze it.
  self->send(mgr, unsubscribe_atom::value, topic::pressure,
             caf::actor_cast<caf::actor>(mgr));
  run();
  for (request_id id = 1; id <= 40; ++id)
    BOOST_REQUIRE(allocate(id, 4)); // one block each: 40 of 64 is medium
  BOOST_TEST(value_or(ask<memory_pressure>(sup, pressure_atom::value),
                      memory_pressure::low)
             == memory_pressure::medium);
  auto s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->pressure == memory_pressure::medium);
}

BOOST_AUTO_TEST_CASE(a_swap_sent_before_the_allocates_reply_says_so) {
  // A swap names the incarnation it moves from start to end, which the
  // registry has not got while the admission is in flight: it is refused
  // saying so (it said "not allocated"), and changes nothing. The calls
  // that leave the incarnation to the pool still work.
  caf::scoped_actor client{sys};
  auto alloc = client->request(mgr, caf::infinite, allocate_atom::value,
                               make_request(cfg, 7, 8));
  auto swap = client->request(mgr, caf::infinite, swap_out_atom::value,
                              request_id{7});
  auto table = client->request(mgr, caf::infinite, table_atom::value,
                               request_id{7});
  run();
  alloc.receive([](request_handle_actor&, block_table&) {},
                [](caf::error& err) { BOOST_FAIL(render(err)); });
  std::string got = "no reply";
  swap.receive([&](std::uint32_t) { got = "ok"; },
               [&](caf::error& err) { got = render(err); });
  BOOST_TEST(got.find("unknown_request (swap-out of request 7: its admission "
                      "is still in flight")
               != std::string::npos,
             got);
  table.receive([](block_table&) {},
                [](caf::error& err) { BOOST_FAIL(render(err)); });
  // Answered, it swaps.
  BOOST_TEST(outcome(ask<std::uint32_t>(mgr, swap_out_atom::value,
                                        request_id{7}))
             == "ok");
}

BOOST_AUTO_TEST_SUITE_END()
