// Who may do what: the messages that end, reclaim, preempt or redirect are
// taken from the peers that should send them - a handle's end from the
// manager, a reclaim only for a handle that went, the supervisor's timer
// and usage from itself and the pool, the pool's supervisor once - since
// the supervisor's and the pool's addresses are no secret (a gc reply
// comes from the one, the step lane is the other). (The supervisor's
// preemptions hit the incarnations it chose: stale_victim_test.cpp.)
#include "fixture.hpp"

#include <caf/all.hpp>

using namespace kvactor;
using namespace kvactor::test;

namespace {

/// Request 1 (9 tokens, 3 blocks), live: its allocation and lookup.
struct peers_fixture : cache_fixture {
  std::pair<allocated, std::pair<request_handle_actor, request_info>>
  live_request() {
    auto a = allocate(1, 9);
    BOOST_REQUIRE(a);
    auto info = lookup(1);
    BOOST_REQUIRE(info);
    return {*a, *info};
  }
};

} // namespace

BOOST_FIXTURE_TEST_SUITE(peers, peers_fixture)

BOOST_AUTO_TEST_CASE(only_the_manager_ends_handles_and_only_the_supervisor_reclaims) {
  auto [a, info] = live_request();
  caf::scoped_actor stranger{sys};
  // Either would leave request 1 live without a handle, or end it under
  // its owner: both are ignored.
  stranger->send(a.handle, end_atom::value, end_reason::deallocated);
  stranger->send(mgr, reclaim_atom::value, request_id{1},
                 info.second.cache_id);
  run();
  BOOST_TEST(outcome(lookup(1)) == "ok");
  BOOST_TEST(value_or(table(1), block_table{}) == a.table);
  BOOST_TEST(outcome(extend(1, 4)) == "ok");
  BOOST_TEST(used_blocks() == 4u);
}

BOOST_AUTO_TEST_CASE(the_supervisor_and_the_pool_act_only_on_their_own_peers) {
  // The supervisor's address is no secret (a gc reply comes from it), nor
  // the pool's (the step lane): what they act on must come from whom it
  // should, or from a handle that did go.
  auto [a, info] = live_request();
  caf::scoped_actor stranger{sys};
  stranger->send(mgr, gc_atom::value);
  run();
  caf::strong_actor_ptr sup_ptr;
  stranger->receive([&](cache_gc_stats&) { sup_ptr = stranger->current_sender(); },
                    [&](caf::error& err) { BOOST_FAIL(render(err)); });
  auto sup = caf::actor_cast<caf::actor>(sup_ptr);
  BOOST_REQUIRE(sup);
  // A relayed reclaim of a request whose handle lives: ignored.
  stranger->send(sup, reclaim_atom::value, request_id{1},
                 info.second.cache_id);
  run();
  BOOST_TEST(outcome(lookup(1)) == "ok");
  BOOST_TEST(used_blocks() == 3u);
  // A stray tick starts no timer chain (GC runs on demand here).
  BOOST_REQUIRE(!sched.has_pending_timeout());
  stranger->send(sup, tick_atom::value);
  run();
  BOOST_TEST(!sched.has_pending_timeout());
  // The pool's reports cannot be diverted: the supervisor still hears of
  // real usage (62 of 64 blocks: critical).
  stranger->send(pool, subscribe_atom::value,
                 caf::actor_cast<supervisor_actor>(stranger));
  run();
  BOOST_REQUIRE(allocate(2, 4 * 59));
  auto level = [&] {
    auto out = memory_pressure::low;
    stranger->send(sup, pressure_atom::value);
    run();
    stranger->receive([&](memory_pressure l) { out = l; },
                      [&](caf::error& err) { BOOST_FAIL(render(err)); });
    return out;
  };
  BOOST_TEST(level() == memory_pressure::critical);
  // And a forged usage report moves no pressure level.
  stranger->send(sup, usage_atom::value, pool_usage{0, 0, 64});
  run();
  BOOST_TEST(level() == memory_pressure::critical);
  // Nor does a forged level sent to the manager change what its stats say
  // (it took any sender's word, out-of-range levels too).
  BOOST_TEST(must(stats()).pressure
             == memory_pressure::critical);
  stranger->send(mgr, pressure_atom::value,
                 pressure_event{static_cast<memory_pressure>(77),
                                memory_pressure::low, 0, 64});
  run();
  BOOST_TEST(must(stats()).pressure
             == memory_pressure::critical);
}

BOOST_AUTO_TEST_SUITE_END()

