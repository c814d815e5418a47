// The accounting invariant as the actors report it: a pool whose books are
// broken (corrupted here on purpose, through the tests' friend of the
// pool's core) answers a check and an on-demand GC with
// invariant_violation, and a periodic GC - which answers nobody - stops the
// cache with a reason naming the violation. The unit suite shows which
// corruptions the check catches (block_pool_check_*_test.cpp); this one,
// that what it finds reaches someone.
#include "fixture.hpp"

#include <string>

#include <caf/all.hpp>

#include "kvactor/actors/block_pool_state.hpp"

#include "../unit/pool_test_access.hpp"

using namespace kvactor;
using namespace kvactor::test;

namespace {

using access = detail::block_pool_test_access;

/// The core of the pool actor `pool` (the deterministic scheduler runs
/// nothing while the test holds it).
detail::block_pool_core& core_of(const block_pool_actor& pool) {
  auto* a = caf::actor_cast<caf::abstract_actor*>(pool);
  using pool_type = block_pool_actor::stateful_base<detail::block_pool_state>;
  auto* p = dynamic_cast<pool_type*>(a);
  BOOST_REQUIRE(p != nullptr);
  return p->state.core();
}

bool names(const caf::error& err, errc code, const std::string& part) {
  return has_code(err, code) && render(err).find(part) != std::string::npos;
}

} // namespace

BOOST_AUTO_TEST_SUITE(invariant_guard)

BOOST_FIXTURE_TEST_CASE(a_check_and_a_gc_report_broken_books, cache_fixture) {
  auto a = allocate(1, 8);
  BOOST_REQUIRE(a);
  auto b = a->table.blocks.at(0);
  auto& meta = access::meta(core_of(pool), b);
  ++meta.ref_count; // a holder nobody is
  auto ok = ask<bool>(pool, check_atom::value);
  BOOST_REQUIRE(!ok);
  BOOST_TEST(names(ok.error(), errc::invariant_violation, "ref count 2"),
             render(ok.error()));
  auto g = gc();
  BOOST_REQUIRE(!g);
  BOOST_TEST(names(g.error(), errc::invariant_violation, "ref count 2"),
             render(g.error()));
  // The cache goes on (the caller was told): repaired, the books check.
  --meta.ref_count;
  auto again = ask<bool>(pool, check_atom::value);
  BOOST_TEST(static_cast<bool>(again),
             (again ? std::string{"ok"} : render(again.error())));
  BOOST_REQUIRE(free(1));
}

BOOST_AUTO_TEST_CASE(a_periodic_gc_that_finds_them_stops_the_cache) {
  // timer_config's GC runs every 50 ms: the scheduler's clock fires it.
  cache_fixture timed{timer_config()};
  timed.check_on_exit = false; // the cache stops
  auto a = timed.allocate(1, 8);
  BOOST_REQUIRE(a);
  ++access::meta(core_of(timed.pool), a->table.blocks.at(0)).ref_count;
  timed.self->monitor(timed.mgr);
  timed.sched.trigger_timeouts();
  timed.run();
  caf::error reason;
  bool down = false;
  timed.self->receive(
    [&](caf::down_msg& dm) {
      down = true;
      reason = dm.reason;
    },
    caf::after(std::chrono::seconds(0)) >> [] {});
  BOOST_REQUIRE_MESSAGE(down, "the manager did not stop");
  BOOST_TEST(names(reason, errc::shutting_down, "its supervisor ended"),
             render(reason));
  BOOST_TEST(render(reason).find("invariant_violation") != std::string::npos,
             render(reason));
  BOOST_TEST(render(reason).find("periodic GC") != std::string::npos,
             render(reason));
  // Every request ended with it: its handle answers no more.
  BOOST_TEST(!timed.handle_table(a->handle));
}

BOOST_AUTO_TEST_CASE(a_timer_pass_checks_only_every_gc_check_interval) {
  // Every 50 ms a pass, every 100 ms a check: passes 1, 3, 5... check. The
  // books break after the first: the second pass runs on, the third stops
  // the cache. (The check holds the pool for a scan of it all: 0.1 s at
  // 1M blocks, every second by default before.)
  auto c = timer_config();
  c.gc_check_interval_ms = 100;
  cache_fixture timed{c};
  timed.check_on_exit = false; // the cache stops
  timed.self->monitor(timed.mgr);
  auto stopped = [&] {
    bool down = false;
    timed.self->receive([&](caf::down_msg&) { down = true; },
                        caf::after(std::chrono::seconds(0)) >> [] {});
    return down;
  };
  BOOST_REQUIRE(timed.sched.trigger_timeout()); // pass 1: checked, fine
  timed.run();
  BOOST_REQUIRE(!stopped());
  auto a = timed.allocate(1, 8);
  BOOST_REQUIRE(a);
  ++access::meta(core_of(timed.pool), a->table.blocks.at(0)).ref_count;
  BOOST_REQUIRE(timed.sched.trigger_timeout()); // pass 2: no check
  timed.run();
  BOOST_TEST(!stopped());
  BOOST_REQUIRE(timed.sched.trigger_timeout()); // pass 3: checked
  timed.run();
  BOOST_TEST(stopped());
}

BOOST_AUTO_TEST_SUITE_END()
