// The supervisor's victims are chosen a round trip before their preemption
// lands, and checked again then: a victim that ended and came back (a new
// incarnation nobody chose), or whose preemption no longer relieves
// anything - memory came free meanwhile, it went to the host tier, its
// blocks became shared, its tenant fell to its reservation - lives on. Blocks a swap-out in flight takes away
// count as relief already (and a failed swap-out still gets one). And a
// relief brings usage out of critical, not only under the high mark, when
// the hysteresis is wider than the gap between the two.
#include "fixture.hpp"
#include "slow_storage.hpp"

#include <caf/all.hpp>

#include "kvactor/config/cache_config.hpp"

using namespace kvactor;
using namespace kvactor::test;

namespace {

struct stale_victim_fixture : cache_fixture {
  static cache_config config() {
    auto c = small_config();
    c.pressure.preempt_at_critical = true;
    c.num_host_blocks = 16;
    return c;
  }
  explicit stale_victim_fixture(cache_config c = config())
    : cache_fixture(std::move(c)) {
  }

  /// 1: 30 blocks, 2 (low priority): 10, 3: 10; then 4: 11 - 61 of 64,
  /// critical. The supervisor has asked the pool for victims (2) and is
  /// held with the answer in its mailbox.
  void reach_critical_with_the_victims_held() {
    BOOST_REQUIRE(allocate(1, 4 * 30));
    auto low = make_request(cfg, 2, 4 * 10);
    low.priority = priority::low;
    BOOST_REQUIRE(allocate(low));
    BOOST_REQUIRE(allocate(3, 4 * 10));
    auto held = sup.address();
    self->send(mgr, allocate_atom::value, make_request(cfg, 4, 4 * 11));
    run_except(held);
    BOOST_REQUIRE(sched.prioritize(sup));
    sched.run_once(); // the usage report: critical, victims asked for
    run_except(held);
    BOOST_REQUIRE((reply_to<request_handle_actor, block_table>(self)));
    // (No used_blocks() here: it runs every actor, the supervisor too.)
  }
};

} // namespace

BOOST_FIXTURE_TEST_SUITE(stale_victims, stale_victim_fixture)

BOOST_AUTO_TEST_CASE(a_victim_is_spared_once_memory_came_free_meanwhile) {
  reach_critical_with_the_victims_held();
  // 3 ends: 51 blocks, under the high mark (52) - nothing to relieve.
  self->send(mgr, free_atom::value, request_id{3});
  run_except(sup.address());
  BOOST_REQUIRE(reply_to<std::uint32_t>(self));
  run(); // the supervisor preempts 2: refused
  BOOST_TEST(outcome(lookup(2)) == "ok");
  BOOST_TEST(preempt_notices(self).empty());
  BOOST_TEST(used_blocks() == 51u);
  BOOST_TEST(must(stats()).preemption_count == 0u);
}

BOOST_AUTO_TEST_CASE(a_victim_swapped_out_meanwhile_keeps_its_host_copy) {
  reach_critical_with_the_victims_held();
  // 2 goes to the host tier: its device blocks leave with the copy.
  self->send(mgr, swap_out_atom::value, request_id{2});
  run_except(sup.address());
  BOOST_REQUIRE(reply_to<std::uint32_t>(self));
  run(); // the supervisor preempts 2: refused, its host copy kept
  BOOST_TEST(outcome(lookup(2)) == "ok");
  BOOST_TEST(preempt_notices(self).empty());
  auto s = must(stats());
  BOOST_TEST(s.host_free_blocks == 6u);
  // And it comes back.
  auto back = ask<block_table>(mgr, swap_in_atom::value, request_id{2});
  BOOST_TEST(outcome(back) == "ok");
}

BOOST_AUTO_TEST_CASE(a_victim_whose_blocks_became_shared_is_spared_for_another) {
  reach_critical_with_the_victims_held();
  // 2 forks: every block it holds is shared with the child now, so its end
  // would free none. Usage is still critical: the supervisor looks again,
  // and the next victim (the newest with blocks of its own, 4) goes.
  self->send(mgr, fork_atom::value, request_id{2}, request_id{5});
  run_except(sup.address());
  BOOST_REQUIRE((reply_to<request_handle_actor, block_table>(self)));
  run();
  BOOST_TEST(outcome(lookup(2)) == "ok");
  BOOST_TEST(outcome(lookup(5)) == "ok");
  auto notices = preempt_notices(self);
  BOOST_REQUIRE(notices.size() == 1u);
  BOOST_TEST(notices[0].id == 4u);
  BOOST_TEST(used_blocks() == 50u);
}

BOOST_AUTO_TEST_CASE(a_victim_refused_as_stale_is_taken_when_named_again) {
  // 2 forks while its preemption is on the way: refused, its blocks all
  // shared. The fork ends before the next round: 2 holds them alone again
  // and the pool names it again. The supervisor took it for a victim it
  // could not preempt and ended the rounds: 61 of 64 blocks, critical,
  // until some later change.
  reach_critical_with_the_victims_held();
  auto held = sup.address();
  self->send(mgr, fork_atom::value, request_id{2}, request_id{5});
  run_except(held);
  BOOST_REQUIRE((reply_to<request_handle_actor, block_table>(self)));
  BOOST_REQUIRE(sched.prioritize(sup));
  sched.run_once(); // the victims [2]: its preemption goes out, refused
  run_except(held);
  self->send(mgr, free_atom::value, request_id{5});
  run_except(held);
  BOOST_REQUIRE(reply_to<std::uint32_t>(self));
  run();
  BOOST_TEST(outcome(lookup(2)) == "unknown_request");
  BOOST_TEST(must(stats()).preemption_count == 1u);
  BOOST_TEST(used_blocks() == 51u);
}

BOOST_AUTO_TEST_CASE(a_victim_spared_by_a_free_is_taken_after_a_step_refills) {
  // 3 ends (51 blocks): 2's preemption is refused. Before the refusal is
  // back, a scheduler's step admits 5: 61 blocks, critical again, and the
  // round after names 2 again - which the supervisor skipped.
  reach_critical_with_the_victims_held();
  auto held = sup.address();
  self->send(mgr, free_atom::value, request_id{3});
  run_except(held);
  BOOST_REQUIRE(reply_to<std::uint32_t>(self));
  BOOST_REQUIRE(sched.prioritize(sup));
  sched.run_once(); // the victims [2]: on to the manager
  BOOST_REQUIRE(sched.prioritize(mgr));
  sched.run_once(); // on to the pool
  BOOST_REQUIRE(sched.prioritize(pool));
  sched.run_once(); // refused (51 < 52); the refusal waits at the manager
  step_request admit;
  admit.admits.push_back(make_request(cfg, 5, 4 * 10));
  self->send(pool, step_atom::value, admit);
  BOOST_REQUIRE(sched.prioritize(pool));
  sched.run_once();
  run();
  bool stepped = false;
  self->receive([&](step_result& r) { stepped = r.admitted.size() == 1u; },
                [](caf::error&) {}, caf::after(std::chrono::seconds(0)) >> [] {});
  BOOST_REQUIRE(stepped);
  BOOST_TEST(outcome(lookup(2)) == "unknown_request");
  BOOST_TEST(must(stats()).preemption_count == 1u);
  BOOST_TEST(used_blocks() == 51u);
}

BOOST_AUTO_TEST_CASE(a_victim_that_ended_and_came_back_is_not_preempted) {
  // The supervisor names victims by incarnation: between the pool's choice
  // and the preempt reaching the manager, the victim's id may end and be
  // admitted again - a request nobody chose.
  reach_critical_with_the_victims_held();
  // Meanwhile 2 ends and comes back, small: no longer critical.
  self->send(mgr, free_atom::value, request_id{2});
  run_except(sup.address());
  self->send(mgr, allocate_atom::value, make_request(cfg, 2, 4));
  run_except(sup.address());
  run(); // the supervisor preempts (2, its old cache id): refused
  BOOST_TEST(outcome(lookup(2)) == "ok");
  BOOST_TEST(value_or(table(2), block_table{}).num_tokens == 4u);
  BOOST_TEST(preempt_notices(self).empty());
  for (request_id id : {1, 3, 4})
    BOOST_TEST(outcome(lookup(id)) == "ok");
}

BOOST_AUTO_TEST_CASE(an_orphan_named_as_victim_again_and_again_ends_the_rounds) {
  // A request the pool holds and the manager does not know (an orphan,
  // until a GC sweep) is refused every time it is named: a round that
  // named only victims the round before could not preempt starts no other
  // (after the retry of refused rounds, the pool named the orphan for
  // ever, and the scheduler never went idle).
  BOOST_REQUIRE(allocate(1, 4 * 30));
  auto low = make_request(cfg, 2, 4 * 10);
  low.priority = priority::low;
  BOOST_REQUIRE(orphan(low));
  BOOST_REQUIRE(allocate(3, 4 * 10));
  self->send(mgr, allocate_atom::value, make_request(cfg, 4, 4 * 11));
  constexpr std::size_t limit = 100000;
  BOOST_REQUIRE_MESSAGE(sched.run(limit) < limit, "the scheduler never went idle");
  BOOST_REQUIRE((reply_to<request_handle_actor, block_table>(self)));
  BOOST_TEST(used_blocks() == 61u);
  // The sweep reclaims it; the pressure falls with it.
  auto swept = gc();
  BOOST_REQUIRE(swept);
  BOOST_TEST(swept->caches_freed == 1u);
  BOOST_TEST(used_blocks() == 51u);
  for (request_id id : {1, 3, 4})
    BOOST_TEST(outcome(lookup(id)) == "ok");
}

namespace {

/// The stale-victim cache with a tenant r that reserves 12 blocks.
struct reserved_victim_fixture : stale_victim_fixture {
  static cache_config with_reservation() {
    auto c = stale_victim_fixture::config();
    tenant_config r;
    r.name = "r";
    r.reserved_blocks = 12;
    c.tenants = {tenant_config{}, r};
    return c;
  }
  reserved_victim_fixture() : stale_victim_fixture(with_reservation()) {
  }
};

} // namespace

BOOST_FIXTURE_TEST_CASE(a_victim_whose_tenant_fell_to_its_reservation_is_spared,
                        reserved_victim_fixture) {
  // As choose_victims: never a tenant at or below its reservation - which
  // the victim's tenant may have reached since its choice.
  BOOST_REQUIRE(allocate(1, 4 * 30));
  auto low = make_request(cfg, 2, 4 * 10);
  low.priority = priority::low;
  low.tenant = "r";
  BOOST_REQUIRE(allocate(low));
  auto other = make_request(cfg, 3, 4 * 10);
  other.tenant = "r";
  BOOST_REQUIRE(allocate(other));
  auto held = sup.address();
  self->send(mgr, allocate_atom::value, make_request(cfg, 4, 4 * 11));
  run_except(held);
  BOOST_REQUIRE(sched.prioritize(sup));
  sched.run_once(); // critical (61 of 64): victims asked for, 2 named
  run_except(held);
  BOOST_REQUIRE((reply_to<request_handle_actor, block_table>(self)));
  // 3 ends: r holds 10 blocks, within its 12. 5 takes 10: critical again.
  self->send(mgr, free_atom::value, request_id{3});
  run_except(held);
  BOOST_REQUIRE(reply_to<std::uint32_t>(self));
  self->send(mgr, allocate_atom::value, make_request(cfg, 5, 4 * 10));
  run_except(held);
  BOOST_REQUIRE((reply_to<request_handle_actor, block_table>(self)));
  run(); // the supervisor preempts 2: refused; it looks again
  BOOST_TEST(outcome(lookup(2)) == "ok");
  auto notices = preempt_notices(self);
  BOOST_REQUIRE(notices.size() == 1u);
  BOOST_TEST(notices[0].id == 5u);
  BOOST_TEST(used_blocks() == 51u);
}

BOOST_AUTO_TEST_CASE(a_victim_still_needed_is_preempted) {
  // The control: nothing changed meanwhile, and the victim goes.
  reach_critical_with_the_victims_held();
  run();
  BOOST_TEST(outcome(lookup(2)) == "unknown_request");
  auto notices = preempt_notices(self);
  BOOST_REQUIRE(notices.size() == 1u);
  BOOST_TEST(notices[0].id == 2u);
  BOOST_TEST(used_blocks() == 51u);
}

BOOST_AUTO_TEST_SUITE_END()

namespace {

/// The stale-victim cache on a slow storage: a swap's copy stays in flight
/// until the test completes (or fails) it.
struct swap_relief_fixture : cache_fixture {
  std::shared_ptr<slow_storage> store;

  explicit swap_relief_fixture(
    std::shared_ptr<slow_storage> s = make_slow(stale_victim_fixture::config()))
    : cache_fixture(stale_victim_fixture::config(), s), store(std::move(s)) {
  }

  /// 1: 30 blocks, 2 (low priority): 10, 3: 10, whose swap-out is in
  /// flight; then 4: 11 - 61 of 64, critical, with 3's 10 blocks leaving.
  /// The supervisor's round has run.
  void reach_critical_while_3_swaps_out() {
    BOOST_REQUIRE(allocate(1, 4 * 30));
    auto low = make_request(cfg, 2, 4 * 10);
    low.priority = priority::low;
    BOOST_REQUIRE(allocate(low));
    BOOST_REQUIRE(allocate(3, 4 * 10));
    self->send(mgr, swap_out_atom::value, request_id{3});
    run();
    BOOST_REQUIRE(store->pending() == 1u);
    BOOST_REQUIRE(allocate(4, 4 * 11));
  }
};

} // namespace

BOOST_FIXTURE_TEST_SUITE(swaps_in_flight, swap_relief_fixture)

BOOST_AUTO_TEST_CASE(a_swap_out_in_flight_counts_as_relief) {
  // The relief needs 10 blocks (61 down to 51, under 52); 3's swap-out
  // takes 10 away once the copy is done: no victim (before, 2 was
  // preempted too, for nothing).
  reach_critical_while_3_swaps_out();
  BOOST_TEST(preempt_notices(self).empty());
  store->complete();
  run();
  BOOST_TEST(outcome(reply_to<std::uint32_t>(self)) == "ok");
  BOOST_TEST(outcome(lookup(2)) == "ok");
  BOOST_TEST(used_blocks() == 51u);
  BOOST_TEST(must(stats()).preemption_count == 0u);
}

BOOST_AUTO_TEST_CASE(a_failed_swap_out_still_gets_its_relief) {
  // The copy fails: 3 stays resident, its blocks with it, and usage is
  // still critical in the same band - the pool reports it anyway, and the
  // supervisor's next round preempts 2.
  reach_critical_while_3_swaps_out();
  store->fail();
  sched.trigger_timeouts(); // the device watchdog's poll
  run();
  BOOST_TEST(outcome(reply_to<std::uint32_t>(self)) == "device_failure");
  BOOST_TEST(outcome(lookup(3)) == "ok");
  BOOST_TEST(outcome(lookup(2)) == "unknown_request");
  auto notices = preempt_notices(self);
  BOOST_REQUIRE(notices.size() == 1u);
  BOOST_TEST(notices[0].id == 2u);
  BOOST_TEST(used_blocks() == 51u);
}

BOOST_AUTO_TEST_SUITE_END()

namespace {

/// Critical is left only below 0.77 (49 of 64 blocks), under the high
/// mark (52): validate() accepts such marks.
cache_config wide_hysteresis_config() {
  auto c = stale_victim_fixture::config();
  c.pressure.high = 0.8;
  c.pressure.critical = 0.82;
  c.pressure.hysteresis = 0.05;
  return c;
}

struct wide_hysteresis_fixture : stale_victim_fixture {
  wide_hysteresis_fixture() : stale_victim_fixture(wide_hysteresis_config()) {
  }
};

} // namespace

BOOST_FIXTURE_TEST_SUITE(relief_target, wide_hysteresis_fixture)

BOOST_AUTO_TEST_CASE(a_relief_leaves_critical_even_below_the_high_mark) {
  BOOST_REQUIRE(!validate(cfg));
  BOOST_REQUIRE(allocate(1, 4 * 30));
  auto low = make_request(cfg, 2, 4 * 10);
  low.priority = priority::low;
  BOOST_REQUIRE(allocate(low));
  BOOST_REQUIRE(allocate(3, 4 * 10));
  // 61 blocks: critical (53). Under the high mark alone (51: 2 preempted)
  // would still read critical; out of it takes under 50: 4 goes too.
  BOOST_REQUIRE(allocate(4, 4 * 11));
  run();
  BOOST_TEST(used_blocks() < 50u);
  BOOST_TEST(outcome(lookup(2)) == "unknown_request");
  BOOST_TEST((must(stats()).pressure < memory_pressure::critical));
}

BOOST_AUTO_TEST_SUITE_END()
