// The supervisor's preemption at critical pressure: which victims it
// chooses (lowest priority, then newest; never one whose blocks are all
// shared), who hears of it, and what of a victim's blocks stays findable
// (the prefix its admission hit; not the blocks it brought, which nobody
// may have written), and that a round which found no victim is not the
// last while usage stays critical.
#include "fixture.hpp"

#include <caf/all.hpp>

using namespace kvactor;
using namespace kvactor::test;

namespace {

cache_config critical_config() {
  auto c = small_config();
  c.pressure.preempt_at_critical = true;
  return c;
}

struct critical_fixture : cache_fixture {
  explicit critical_fixture(cache_config c = critical_config())
    : cache_fixture(std::move(c)) {
  }
};

/// Critical pressure preempts; high pressure evicts no cached block.
cache_config lazy_critical_config() {
  auto c = critical_config();
  c.pressure.evict_cached_at_high = false;
  return c;
}

struct lazy_critical_fixture : critical_fixture {
  lazy_critical_fixture() : critical_fixture(lazy_critical_config()) {
  }
};

} // namespace

// -- preemption at critical pressure -----------------------------------------------

BOOST_FIXTURE_TEST_SUITE(critical, critical_fixture)

BOOST_AUTO_TEST_CASE(critical_pressure_preempts_the_lowest_priority_first_and_tells_the_owner) {
  caf::scoped_actor sub{sys};
  subscribe(topic::lifecycle, sub);
  BOOST_REQUIRE(allocate(1, 4 * 30));
  auto low = make_request(cfg, 2, 4 * 10);
  low.priority = priority::low;
  BOOST_REQUIRE(allocate(low));
  BOOST_REQUIRE(allocate(3, 4 * 10));
  BOOST_TEST(preempt_notices(self).empty());
  // 61 blocks: critical. Back under the high mark (52) takes 10 blocks:
  // the low-priority request goes, although it is not the newest.
  BOOST_REQUIRE(allocate(4, 4 * 11));
  auto notices = preempt_notices(self);
  BOOST_REQUIRE(notices.size() == 1u);
  BOOST_TEST(notices[0].id == 2u);
  BOOST_TEST(notices[0].reason == end_reason::preempted);
  BOOST_TEST(notices[0].blocks_released == 10u);
  auto ended = ended_events(sub);
  BOOST_REQUIRE(ended.size() == 1u);
  BOOST_TEST(ended[0].id == 2u);
  BOOST_TEST(outcome(lookup(2)) == "unknown_request");
  auto s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->free_blocks == 13u);
  BOOST_TEST(s->preemption_count == 1u);
  BOOST_TEST(s->pressure == memory_pressure::high);
  // Among equals the newest goes: here the one just admitted.
  BOOST_REQUIRE(allocate(5, 4 * 10));
  notices = preempt_notices(self);
  BOOST_REQUIRE(notices.size() == 1u);
  BOOST_TEST(notices[0].id == 5u);
  for (request_id id : {1, 3, 4})
    BOOST_TEST(outcome(lookup(id)) == "ok");
}

// The supervisor chooses its victims at any moment - one admitted a moment
// ago, its prompt's K/V not yet written, among them - so their blocks
// leave the prefix index: a later prompt must not hit blocks nobody wrote.
// A preemption its owner asks for, at its own step boundary, keeps them.
BOOST_FIXTURE_TEST_CASE(the_supervisors_victims_leave_no_prefix_to_hit,
                        lazy_critical_fixture) {
  BOOST_REQUIRE(allocate(1, 4 * 30));
  auto prompt = make_tokens(4 * 10 + 1, 11); // 10 full blocks and 1 token
  auto victim = make_prompt_request(cfg, 2, prompt);
  victim.priority = priority::low;
  BOOST_REQUIRE(allocate(victim));
  BOOST_REQUIRE(allocate(3, 4 * 10));
  auto before = stats();
  BOOST_REQUIRE(before);
  BOOST_REQUIRE(allocate(4, 4 * 10)); // 61 blocks: critical
  auto notices = preempt_notices(self);
  BOOST_REQUIRE(notices.size() == 1u);
  BOOST_TEST(notices[0].id == 2u);
  auto after = stats();
  BOOST_REQUIRE(after);
  BOOST_TEST(after->cached_blocks == before->cached_blocks);
  BOOST_TEST(after->eviction_count - before->eviction_count == 10u);
  BOOST_TEST(after->preemption_count == 1u);
  BOOST_REQUIRE(free(4)); // room below the critical mark
  auto again = allocate(make_prompt_request(cfg, 5, prompt));
  BOOST_REQUIRE(again);
  auto hit = handle_stats(again->handle);
  BOOST_REQUIRE(hit);
  BOOST_TEST(hit->prefix_hit_tokens == 0u);
  // Preempted by its owner, at its boundary: the prefix stays cached.
  BOOST_REQUIRE(free(5));
  auto other = make_tokens(4 * 10 + 1, 12);
  BOOST_REQUIRE(allocate(make_prompt_request(cfg, 6, other)));
  BOOST_REQUIRE(preempt(6));
  auto later = allocate(make_prompt_request(cfg, 7, other));
  BOOST_REQUIRE(later);
  hit = handle_stats(later->handle);
  BOOST_REQUIRE_MESSAGE(hit, outcome(hit));
  BOOST_TEST(hit->prefix_hit_tokens == 40u);
}

// What the victim's admission found cached was written by an earlier
// pass: that prefix stays; only the blocks the victim brought leave.
BOOST_FIXTURE_TEST_CASE(a_supervisors_victim_keeps_the_prefix_it_hit,
                        lazy_critical_fixture) {
  BOOST_REQUIRE(allocate(1, 4 * 30));
  auto system = make_tokens(4 * 8, 21); // 8 full blocks
  auto first = system;
  first.push_back(7);
  BOOST_REQUIRE(allocate(make_prompt_request(cfg, 2, first)));
  BOOST_REQUIRE(free(2)); // its 8 full blocks cached
  auto prompt = system;
  auto own = make_tokens(4 * 2 + 1, 22); // 2 full blocks and a token more
  prompt.insert(prompt.end(), own.begin(), own.end());
  auto victim = make_prompt_request(cfg, 3, prompt);
  victim.priority = priority::low;
  auto v = allocate(victim);
  BOOST_REQUIRE(v);
  auto hit = handle_stats(v->handle);
  BOOST_REQUIRE(hit);
  BOOST_TEST(hit->prefix_hit_tokens == 32u);
  BOOST_REQUIRE(allocate(4, 4 * 10));
  auto before = stats();
  BOOST_REQUIRE(before);
  BOOST_REQUIRE(allocate(5, 4 * 10)); // 61 blocks: critical
  auto notices = preempt_notices(self);
  BOOST_REQUIRE(notices.size() == 1u);
  BOOST_TEST(notices[0].id == 3u);
  auto after = stats();
  BOOST_REQUIRE(after);
  BOOST_TEST(after->cached_blocks - before->cached_blocks == 8u);
  BOOST_TEST(after->eviction_count - before->eviction_count == 2u);
  BOOST_REQUIRE(free(5)); // room below the critical mark
  auto again = allocate(make_prompt_request(cfg, 6, prompt));
  BOOST_REQUIRE(again);
  hit = handle_stats(again->handle);
  BOOST_REQUIRE(hit);
  BOOST_TEST(hit->prefix_hit_tokens == 32u);
}

BOOST_AUTO_TEST_CASE(critical_pressure_never_preempts_requests_whose_blocks_are_all_shared) {
  // Request 1 and its fork share 40 blocks: preempting either frees none.
  BOOST_REQUIRE(allocate(1, 4 * 40));
  BOOST_REQUIRE(fork(1, 2));
  BOOST_REQUIRE(allocate(3, 4 * 11));
  BOOST_REQUIRE(allocate(4, 4 * 10)); // 61: 10 blocks to free
  auto notices = preempt_notices(self);
  BOOST_REQUIRE(notices.size() == 1u);
  BOOST_TEST(notices[0].id == 4u);
  BOOST_TEST(outcome(lookup(1)) == "ok");
  BOOST_TEST(outcome(lookup(2)) == "ok");
}

BOOST_AUTO_TEST_CASE(a_victim_that_appears_within_the_critical_band_is_preempted) {
  // 1 and its fork share 60 blocks: neither is a victim. 3 takes usage to
  // 61 (critical) and goes; 60 is still critical, and the round ends with
  // no victim. Then the fork ends: 1 holds the 60 alone. No mark is
  // crossed (usage stays 60), yet the supervisor must look again - with
  // GC off (this fixture), nothing else would make it.
  BOOST_REQUIRE(allocate(1, 4 * 60));
  BOOST_REQUIRE(fork(1, 2));
  BOOST_REQUIRE(allocate(3, 4));
  auto notices = preempt_notices(self);
  BOOST_REQUIRE(notices.size() == 1u);
  BOOST_TEST(notices[0].id == 3u);
  auto s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->pressure == memory_pressure::critical);
  BOOST_REQUIRE(free(2));
  notices = preempt_notices(self);
  BOOST_REQUIRE(notices.size() == 1u);
  BOOST_TEST(notices[0].id == 1u);
  s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->pressure == memory_pressure::low);
  BOOST_TEST(outcome(lookup(1)) == "unknown_request");
}

BOOST_AUTO_TEST_SUITE_END()

namespace {

/// Tenants that reserve 61 of the 64 blocks (the critical mark): "default"
/// 32, "b" 29; "c" none.
cache_config reserved_critical_config() {
  auto c = critical_config();
  tenant_config a, b, t;
  a.reserved_blocks = 32;
  b.name = "b";
  b.reserved_blocks = 29;
  t.name = "c";
  c.tenants = {a, b, t};
  return c;
}

} // namespace

BOOST_AUTO_TEST_CASE(within_the_reservations_changes_do_not_wake_the_supervisor) {
  // Each tenant at its reservation, usage critical: no victim can exist,
  // and a change in the band (an extend) brings the supervisor nothing -
  // it would ask for victims each time, to hear of none. A request of the
  // tenant without a reservation can be one: that change wakes it.
  critical_fixture f{reserved_critical_config()};
  BOOST_REQUIRE(f.allocate(1, 4 * 32 - 1)); // "default": 32 blocks
  auto b = make_request(f.cfg, 2, 4 * 29);
  b.tenant = "b";
  BOOST_REQUIRE(f.allocate(b)); // 61 blocks: critical, nobody to preempt
  BOOST_TEST(f.preempt_notices(f.self).empty());
  f.self->send(f.mgr, extend_atom::value, request_id{1}, std::uint64_t{1});
  f.run_except(f.sup.address());
  BOOST_REQUIRE(f.reply_to<block_table>(f.self));
  BOOST_TEST(!f.sched.prioritize(f.sup), "the supervisor was woken");
  f.run();
  auto c = make_request(f.cfg, 3, 4);
  c.tenant = "c";
  BOOST_REQUIRE(f.allocate(c));
  auto notices = f.preempt_notices(f.self);
  BOOST_REQUIRE(notices.size() == 1u);
  BOOST_TEST(notices[0].id == 3u);
  BOOST_TEST(outcome(f.lookup(1)) == "ok");
  BOOST_TEST(outcome(f.lookup(2)) == "ok");
}
