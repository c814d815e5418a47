// The supervisor's reclaim: the blocks of dead handle actors and owners come
// back, a stale handle never reaches a newer incarnation, an owner's watch
// follows its live requests (pressure and GC: supervisor_test.cpp).
#include "fixture.hpp"

#include <caf/all.hpp>

using namespace kvactor;
using namespace kvactor::test;

BOOST_FIXTURE_TEST_SUITE(supervisor, cache_fixture)

BOOST_AUTO_TEST_CASE(a_killed_handle_actor_has_its_blocks_reclaimed) {
  caf::scoped_actor sub{sys};
  subscribe(topic::lifecycle, sub);
  auto a = allocate(1, 9);
  auto b = allocate(2, 4);
  BOOST_REQUIRE(a && b);
  BOOST_TEST(used_blocks() == 4u);
  caf::anon_send_exit(a->handle, caf::exit_reason::kill);
  run();
  auto s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->free_blocks == 63u);
  BOOST_TEST(s->active_caches == 1u);
  BOOST_TEST(outcome(lookup(1)) == "unknown_request");
  BOOST_TEST(outcome(extend(1, 1)) == "unknown_request");
  BOOST_TEST(outcome(free(1)) == "unknown_request");
  auto ended = ended_events(sub);
  BOOST_REQUIRE(ended.size() == 1u);
  BOOST_TEST(ended[0].id == 1u);
  BOOST_TEST(ended[0].reason == end_reason::reclaimed);
  BOOST_TEST(ended[0].blocks_released == 3u);
  // The id can be used again, and the other request is untouched.
  BOOST_TEST(outcome(allocate(1, 4)) == "ok");
  BOOST_TEST(value_or(table(2), block_table{}) == b->table);
}

BOOST_AUTO_TEST_CASE(a_handle_killed_with_a_request_at_the_pool_answers_it) {
  // Killed (or crashed), the handle runs no exit handler: CAF drops its
  // response handlers, and with them the promise of an extend or a stats
  // request it had passed on to the pool. It answers them as it goes.
  auto a = allocate(1, 9);
  BOOST_REQUIRE(a);
  self->send(a->handle, extend_atom::value, std::uint64_t{4});
  self->send(a->handle, stats_atom::value);
  BOOST_REQUIRE(sched.prioritize(a->handle));
  sched.run_once(); // the extend: on to the pool
  BOOST_REQUIRE(sched.prioritize(a->handle));
  sched.run_once(); // the stats: on to the pool
  caf::anon_send_exit(a->handle, caf::exit_reason::kill);
  BOOST_REQUIRE(sched.prioritize(a->handle));
  sched.run_once(); // the kill
  run();
  std::vector<std::string> got;
  for (bool more = true; more;)
    self->receive([&](block_table&) { got.push_back("table"); },
                  [&](cache_handle_stats&) { got.push_back("stats"); },
                  [&](caf::error& err) { got.push_back(render(err)); },
                  caf::after(std::chrono::seconds(0)) >> [&] { more = false; });
  BOOST_REQUIRE_EQUAL(got.size(), 2u);
  for (auto& g : got)
    BOOST_TEST(g.find("shutting_down") != std::string::npos, g);
  BOOST_TEST(got[0].find("extend of request 1") != std::string::npos, got[0]);
  BOOST_TEST(used_blocks() == 0u); // and the request was reclaimed
}

BOOST_AUTO_TEST_CASE(an_exit_message_without_a_reason_still_reclaims) {
  // A handle quits without a reason only when its request ended through the
  // manager; the supervisor skips the reclaim for those. An exit message
  // whose reason is "normal" must not pass for one.
  caf::scoped_actor sub{sys};
  subscribe(topic::lifecycle, sub);
  auto a = allocate(1, 9);
  BOOST_REQUIRE(a);
  caf::anon_send_exit(a->handle, caf::exit_reason::normal);
  run();
  BOOST_TEST(used_blocks() == 0u);
  BOOST_TEST(outcome(lookup(1)) == "unknown_request");
  auto ended = ended_events(sub);
  BOOST_REQUIRE(ended.size() == 1u);
  BOOST_TEST(ended[0].reason == end_reason::reclaimed);
  BOOST_TEST(ended[0].blocks_released == 3u);
}

BOOST_AUTO_TEST_CASE(a_stale_handle_cannot_touch_the_next_incarnation) {
  // What a handle sends the pool names the incarnation it serves: were an
  // old handle's extend still in flight when its id is allocated again, it
  // must not grow (or read) the new request.
  BOOST_REQUIRE(allocate(1, 9));
  auto old = lookup(1);
  BOOST_REQUIRE(old);
  BOOST_REQUIRE(free(1));
  auto b = allocate(1, 5);
  BOOST_REQUIRE(b);
  auto stale = old->second.cache_id;
  BOOST_TEST(outcome(ask<extension>(pool, extend_atom::value, request_id{1},
                                    stale, std::uint64_t{4},
                                    std::vector<token_id>{}))
             == "invalid_handle");
  BOOST_TEST(outcome(ask<block_table>(pool, table_atom::value, request_id{1},
                                      stale))
             == "invalid_handle");
  // A free forwarded by the old handle names its incarnation too.
  BOOST_TEST(outcome(ask<std::uint32_t>(mgr, free_atom::value, request_id{1},
                                        stale))
             == "invalid_handle");
  BOOST_TEST(value_or(table(1), block_table{}) == b->table);
  BOOST_TEST(used_blocks() == 2u);
}

BOOST_AUTO_TEST_CASE(a_killed_handle_of_an_ended_request_reclaims_nothing) {
  auto a = allocate(1, 9);
  BOOST_REQUIRE(a);
  BOOST_REQUIRE(free(1));
  auto b = allocate(1, 5); // a new incarnation with the same id
  BOOST_REQUIRE(b);
  caf::anon_send_exit(a->handle, caf::exit_reason::kill);
  run();
  BOOST_TEST(outcome(lookup(1)) == "ok");
  BOOST_TEST(value_or(table(1), block_table{}) == b->table);
  BOOST_TEST(used_blocks() == 2u);
}

BOOST_AUTO_TEST_CASE(an_owner_that_dies_takes_its_requests_with_it) {
  caf::scoped_actor sub{sys};
  subscribe(topic::lifecycle, sub);
  BOOST_REQUIRE(allocate(1, 4)); // owned by the fixture
  {
    caf::scoped_actor owner{sys};
    BOOST_REQUIRE(allocate_from(owner, make_request(cfg, 2, 8)));
    BOOST_REQUIRE(allocate_from(owner, make_request(cfg, 3, 12)));
    auto forked = ask_from<request_handle_actor, block_table>(owner, mgr,
                                                              fork_atom::value,
                                                              request_id{1},
                                                              request_id{4});
    BOOST_REQUIRE(forked);
    BOOST_TEST(used_blocks() == 6u);
  }
  run();
  auto s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->active_caches == 1u);
  BOOST_TEST(s->free_blocks == 63u);
  for (request_id id : {2, 3, 4})
    BOOST_TEST(outcome(lookup(id)) == "unknown_request");
  BOOST_TEST(outcome(lookup(1)) == "ok");
  auto ended = ended_events(sub);
  BOOST_REQUIRE(ended.size() == 3u);
  for (auto& ev : ended)
    BOOST_TEST(ev.reason == end_reason::reclaimed);
}

BOOST_AUTO_TEST_CASE(an_owners_watch_follows_the_count_of_its_live_requests) {
  caf::scoped_actor sub{sys};
  subscribe(topic::lifecycle, sub);
  {
    caf::scoped_actor owner{sys};
    // Two requests, one freed: the watch stays for the other.
    BOOST_REQUIRE(allocate_from(owner, make_request(cfg, 1, 4)));
    BOOST_REQUIRE(allocate_from(owner, make_request(cfg, 2, 4)));
    BOOST_REQUIRE(free(1));
    // All freed, then one more: watched again.
    BOOST_REQUIRE(free(2));
    BOOST_REQUIRE(allocate_from(owner, make_request(cfg, 3, 8)));
    BOOST_REQUIRE(allocate_from(owner, make_request(cfg, 4, 8)));
    BOOST_REQUIRE(free(4));
    BOOST_TEST(used_blocks() == 2u);
  }
  run();
  // Its one live request went with it; the freed ones were not ended twice.
  auto s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->active_caches == 0u);
  BOOST_TEST(s->free_blocks == 64u);
  auto ended = ended_events(sub);
  BOOST_REQUIRE(ended.size() == 4u);
  std::size_t reclaimed = 0;
  for (auto& ev : ended)
    if (ev.reason == end_reason::reclaimed) {
      ++reclaimed;
      BOOST_TEST(ev.id == 3u);
    }
  BOOST_TEST(reclaimed == 1u);
}

BOOST_AUTO_TEST_SUITE_END()
