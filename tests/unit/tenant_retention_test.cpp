// block_pool_core's tenant policy, driven directly, one promise per case:
// retention levels, pins, the choice of preemption victims and admission
// headroom (quotas, reservations, isolation: tenant_policy_test.cpp).
// Every case ends with check_invariant() passing (the fixture checks it).

#include <boost/test/unit_test.hpp>

#include "tenant_policy_fixture.hpp"

using namespace kvactor;
using namespace kvactor::test;
using namespace kvactor::test::tenant_policy;

namespace {

/// Request `id` of tenant `who`: `tokens` now, `out` more expected, and no
/// room past them.
allocation_request expecting(request_id id, std::uint64_t tokens,
                             std::uint64_t out, std::string who = "") {
  auto r = tokens_req(id, tokens, std::move(who));
  r.expected_output_tokens = out;
  r.max_sequence_length = tokens + out;
  return r;
}

} // namespace

BOOST_FIXTURE_TEST_SUITE(tenant_retention_suite, policy_fixture)

// -- retention ----------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(a_low_priority_tenants_cache_goes_before_a_high_ones) {
  cfg.tenants = {tenant_config{}, tenant("lo", 0, 0, priority::low),
                 tenant("hi", 0, 0, priority::high)};
  make(16);
  alloc(prompt_req(1, run(10, 5), "hi"));  // 0 1
  alloc(prompt_req(2, run(20, 5), "lo"));  // 2 3
  alloc(prompt_req(3, run(30, 5), "lo", priority::critical)); // 4 5
  alloc(prompt_req(4, run(40, 5), "", priority::low));        // 6 7
  release(2);
  release(1); // the high tenant's, released after a low one's
  release(3);
  release(4);
  // Levels: lo/normal 1, lo/critical 3, default/low 4, hi/normal 9.
  BOOST_TEST(detail::retention_of(priority::low, priority::critical)
             < detail::retention_of(priority::normal, priority::low));
  BOOST_TEST((evicted(4) == ids{2, 4, 6, 0}));
}

BOOST_AUTO_TEST_CASE(request_priority_orders_retention_within_a_tenant) {
  alloc(prompt_req(1, run(10, 5), "", priority::high));   // 0 1
  alloc(prompt_req(2, run(20, 5), "", priority::normal)); // 2 3
  alloc(prompt_req(3, run(30, 5), "", priority::low));    // 4 5
  release(3);
  release(1);
  release(2);
  BOOST_TEST((evicted(3) == ids{4, 2, 0}));
}

BOOST_AUTO_TEST_CASE(a_block_held_by_a_high_and_a_low_request_keeps_the_higher_level) {
  auto p = run(10, 9); // blocks 0 and 1 shared
  for (bool high_first : {true, false}) {
    make(16);
    alloc(prompt_req(1, p, "", priority::high)); // 0 1 2
    alloc(prompt_req(2, p, "", priority::low));  // 0 1 3
    alloc(prompt_req(3, run(50, 5), "", priority::normal)); // 4 5
    release(high_first ? 1 : 2);
    release(high_first ? 2 : 1);
    release(3); // released last, but normal < high
    BOOST_TEST((evicted(2) == ids{4, 1}), "high first " << high_first);
  }
  // Over time too: a low request reviving a high one's cached prefix does
  // not lower it (it used to take the low level and go first).
  make(16);
  alloc(prompt_req(1, p, "", priority::high));
  release(1);
  alloc(prompt_req(2, p, "", priority::low));
  alloc(prompt_req(3, run(50, 5), "", priority::normal));
  release(2);
  release(3);
  BOOST_TEST((evicted(3) == ids{3, 1, 0}));
}

// -- pins ---------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(a_pinned_prefix_is_kept_until_its_time_runs_out) {
  cfg.max_pinned_blocks = 4;
  make(8);
  auto p = run(10, 9);
  alloc(prompt_req(1, p)); // 0 1 2
  release(1);
  BOOST_TEST(pool().pin(0, p, 100, 1000).value() == 2u);
  BOOST_TEST(pool().pinned_blocks() == 2u);
  BOOST_TEST(pool().cached_blocks() == 0u);
  BOOST_TEST(pool().evict(8) == 0u);
  BOOST_TEST(try_alloc(tokens_req(2, 4 * 7)) == "out_of_blocks");
  alloc(tokens_req(2, 4 * 6));
  release(2);
  // Still findable while pinned, and pinned again once released.
  BOOST_TEST(alloc(prompt_req(3, p)) == 8u);
  release(3);
  BOOST_TEST(pool().cached_blocks() == 0u);
  BOOST_TEST(pool().pin(0, p, 200, 1000).value() == 2u); // until 1200 now
  BOOST_TEST(pool().expire_pins(1100) == 0u);
  BOOST_TEST(pool().expire_pins(1199) == 0u);
  BOOST_TEST(pool().pinned_blocks() == 2u);
  BOOST_TEST(pool().expire_pins(1200) == 2u);
  BOOST_TEST(pool().pinned_blocks() == 0u);
  BOOST_TEST(pool().cached_blocks() == 2u);
  alloc(tokens_req(4, 32)); // 6 free, and evicts both
  BOOST_TEST(pool().counters().evictions == 2u);
  release(4);
  // A time to live past the end of the clock pins for good (it used to
  // wrap around and expire at the next tick).
  alloc(prompt_req(5, p));
  release(5);
  BOOST_TEST(pool().pin(0, p, UINT64_MAX, 5000).value() == 2u);
  BOOST_TEST(pool().expire_pins(UINT64_MAX - 1) == 0u);
  BOOST_TEST(pool().pinned_blocks() == 2u);
}

BOOST_AUTO_TEST_CASE(pinning_past_the_cap_pins_nothing_and_zero_disables_it) {
  cfg.max_pinned_blocks = 3;
  make(16);
  auto p = run(10, 9);
  auto q = run(50, 9);
  alloc(prompt_req(1, p));
  alloc(prompt_req(2, q)); // in use: pinning needs no cached state
  BOOST_TEST(pool().pin(0, p, 10, 0).value() == 2u);
  auto before = describe(pool());
  BOOST_TEST(code(pool().pin(0, q, 10, 0)) == "quota_exceeded");
  BOOST_TEST(describe(pool()) == before);
  BOOST_TEST(pool().pin(0, p, 10, 0).value() == 2u); // already pinned: free
  BOOST_TEST(pool().pin(0, std::vector<token_id>(q.begin(), q.begin() + 4), 10, 0)
               .value() == 1u);
  BOOST_TEST(pool().pinned_blocks() == 3u);
  release(1);
  release(2);
  BOOST_TEST(pool().cached_blocks() == 1u); // q's second block
  BOOST_TEST(code(pool().pin(7, p, 10, 0)) == "unknown_tenant");
  cfg.max_pinned_blocks = 0;
  make(16);
  alloc(prompt_req(1, p));
  BOOST_TEST(code(pool().pin(0, p, 10, 0)) == "quota_exceeded");
  BOOST_TEST(pool().pinned_blocks() == 0u);
  // Bad input is named as such even with pinning off: the caller's error
  // comes before the config's.
  BOOST_TEST(code(pool().pin(7, p, 10, 0)) == "unknown_tenant");
  BOOST_TEST(code(pool().pin(0, {1, -2}, 10, 0)) == "invalid_request");
}

BOOST_AUTO_TEST_CASE(a_pinned_prefix_is_usable_when_the_pool_is_full) {
  cfg.max_pinned_blocks = 4;
  make(6);
  auto p = run(10, 9);
  alloc(prompt_req(1, p)); // 0 1 2
  BOOST_TEST(pool().pin(0, p, 100, 0).value() == 2u);
  release(1);               // 0 1 pinned, 2 free
  alloc(tokens_req(2, 12)); // 2 3 4: one block free
  // Two pinned hits and one fresh block: only the fresh one is taken.
  BOOST_TEST(try_alloc(prompt_req(3, p)) == "ok");
  BOOST_TEST((blocks(3) == ids{0, 1, 5}));
}

// -- victims ------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(victims_go_by_request_priority_then_tenant_priority) {
  cfg.tenants = {tenant_config{}, tenant("lo", 0, 0, priority::low),
                 tenant("hi", 0, 0, priority::high)};
  make(64);
  alloc(tokens_req(1, 8, "hi", priority::low));
  alloc(tokens_req(2, 8, "lo", priority::normal));
  alloc(tokens_req(3, 8, "", priority::low));
  alloc(tokens_req(4, 8, "lo", priority::low));
  alloc(tokens_req(5, 8, "hi", priority::normal));
  BOOST_TEST((pool().choose_victims(100) == reqs{4, 3, 1, 2, 5}));
  // It stops once the victims free enough: 2 + 2 + 2 >= 5.
  BOOST_TEST((pool().choose_victims(5) == reqs{4, 3, 1}));
  BOOST_TEST((pool().choose_victims(1) == reqs{4}));
  BOOST_TEST(pool().choose_victims(0).empty());
}

BOOST_AUTO_TEST_CASE(among_equals_the_tenant_furthest_over_its_fair_share_goes_first) {
  // Fair shares: 40 / 4 tenants = 10, but c's is its reservation, 12.
  cfg.tenants = {tenant_config{}, tenant("a"), tenant("b"), tenant("c", 0, 12)};
  make(40);
  alloc(tokens_req(6, 48, "c")); // 12
  alloc(tokens_req(1, 8, "a"));  // 2
  alloc(tokens_req(2, 8, "a"));  // 2
  alloc(tokens_req(3, 40, "a")); // 10: a holds 14, 4 over
  alloc(tokens_req(4, 8, "b"));  // 2
  alloc(tokens_req(5, 40, "b")); // 10: b holds 12, 2 over
  alloc(tokens_req(7, 4, "c"));  // 1: c holds 13, 1 over
  // a's newest, then b's (2 over beats c's 1), then c's until it is back at
  // its reservation (never below), then a and b alike: the newest.
  BOOST_TEST((pool().choose_victims(100) == reqs{3, 5, 7, 2, 4, 1}));
  BOOST_TEST((pool().choose_victims(20) == reqs{3, 5}));
}

BOOST_AUTO_TEST_CASE(a_tenant_at_or_below_its_reservation_is_never_a_victim) {
  cfg.tenants = {tenant_config{}, tenant("r", 0, 4, priority::low)};
  make(16);
  alloc(tokens_req(1, 16, "r", priority::low)); // exactly its 4
  alloc(tokens_req(2, 8, "", priority::high));
  BOOST_TEST((pool().choose_victims(100) == reqs{2}));
  alloc(tokens_req(3, 4, "r", priority::low)); // 5: one over
  BOOST_TEST((pool().choose_victims(100) == reqs{3, 2}));
  release(1); // 1: below
  BOOST_TEST((pool().choose_victims(100) == reqs{2}));
}

BOOST_AUTO_TEST_CASE(a_tenant_without_a_reservation_still_offers_victims_at_zero_estimated_use) {
  // x and y share a namespace: y's prompt blocks end up held by x's request
  // 3 alone, still charged to y (the first toucher). Choosing 3 takes its 4
  // blocks off x's estimated usage of 2, down to 0; x has no reservation,
  // so its request 2 must still be offered. (It used to be passed over as
  // "at its reservation" of 0.)
  cfg.tenants = {tenant_config{}, tenant("x", 0, 0, priority::normal, "ns"),
                 tenant("y", 0, 0, priority::normal, "ns")};
  make(16);
  auto p = run(0, 13);         // 3 full blocks and one token
  alloc(prompt_req(1, p, "y")); // 0 1 2 3
  alloc(tokens_req(2, 4, "x")); // 4
  alloc(prompt_req(3, p, "x")); // hits 0 1 2, takes 5
  release(1);                   // 0 1 2: 3's alone, charged to y
  BOOST_TEST(pool().tenants()[1].used == 2u);
  BOOST_TEST(pool().tenants()[2].used == 3u);
  BOOST_TEST((pool().choose_victims(10) == reqs{3, 2}));
}

BOOST_AUTO_TEST_CASE(only_requests_holding_blocks_of_their_own_are_victims) {
  auto p = run(10, 8);
  alloc(prompt_req(1, p));  // 2 full blocks
  BOOST_REQUIRE(pool().fork(1, 2));
  alloc(tokens_req(3, 0));
  alloc(prompt_req(4, p)); // shares block 0; computes its last token anew
  BOOST_TEST(blocks(4)[0] == blocks(1)[0]);
  BOOST_TEST(blocks(4)[1] != blocks(1)[1]);
  BOOST_TEST((pool().choose_victims(100) == reqs{4}));
}

// -- admission headroom -------------------------------------------------------------

BOOST_AUTO_TEST_CASE(reserve_expected_keeps_room_for_the_promised_growth) {
  cfg.admission.policy = "reserve_expected";
  cfg.admission.default_expected_output = 12;
  make(16);
  auto req = [](request_id id, std::uint64_t out, std::uint64_t max_len = 1000) {
    auto r = tokens_req(id, 4);
    r.expected_output_tokens = out;
    r.max_sequence_length = max_len;
    return r;
  };
  alloc(req(1, 100, 48)); // 1 block now, 12 expected: 11 promised
  // Each of these takes 1 block, leaving 14 free for 11 + its own growth.
  BOOST_TEST(pool().can_allocate(req(2, 12)));       // 4 blocks: grows 3
  BOOST_TEST(!pool().can_allocate(req(2, 13)));      // 5 blocks: grows 4
  BOOST_TEST(pool().can_allocate(req(2, 0)));        // the default, 12
  BOOST_TEST(pool().can_allocate(req(2, 1000, 16))); // capped at 16 tokens
  BOOST_TEST(!pool().can_allocate(req(2, 1000, 17)));
  auto refused = pool().allocate(req(2, 13));
  BOOST_REQUIRE(!refused);
  BOOST_TEST(code(refused.error()) == "out_of_blocks");
  BOOST_TEST(render(refused.error()).find("headroom") != std::string::npos);
  BOOST_TEST(try_alloc(req(2, 13)) == "out_of_blocks");
  BOOST_TEST(try_alloc(req(2, 12)) == "ok");
  // 14 free, 14 promised: nothing more is admitted...
  BOOST_TEST(try_alloc(req(3, 0, 4)) == "out_of_blocks");
  // ...but extends are never refused for headroom, past promises included.
  BOOST_TEST(code(pool().extend(2, 40, nullptr)) == "ok"); // 10 blocks
  BOOST_TEST(code(pool().extend(1, 16, nullptr)) == "ok"); // the last 4
  BOOST_TEST(pool().free_blocks() == 0u);
  BOOST_TEST(code(pool().extend(1, 1, nullptr)) == "out_of_blocks");
  // Ending a request returns its blocks and its promise.
  release(1);
  BOOST_TEST(try_alloc(req(3, 4)) == "ok"); // 5 free: 1 + 1 growth
  // The same requests under "immediate" are all admitted.
  cfg.admission.policy = "immediate";
  make(16);
  alloc(req(1, 100, 48));
  alloc(req(2, 13));
  alloc(req(3, 1000));
}

BOOST_AUTO_TEST_CASE(growth_within_the_promise_leaves_admissions_unchanged) {
  cfg.admission.policy = "reserve_expected";
  cfg.admission.default_expected_output = 20;
  make(16);
  auto req = [](request_id id, std::uint64_t out) {
    auto r = tokens_req(id, 4);
    r.expected_output_tokens = out;
    return r;
  };
  alloc(tokens_req(1, 4)); // 1 block, 24 tokens expected: 5 promised
  alloc(tokens_req(2, 4)); // 14 free, 10 promised
  // A third takes 1 and leaves 13: room for 10 and its own 3, not 4.
  BOOST_TEST(pool().can_allocate(req(3, 12)));
  BOOST_TEST(!pool().can_allocate(req(3, 16)));
  // Growing within the promise takes promised blocks: nothing changes.
  BOOST_REQUIRE(pool().extend(1, 16, nullptr)); // 5 blocks of its 6
  BOOST_TEST(pool().can_allocate(req(3, 12)));
  BOOST_TEST(!pool().can_allocate(req(3, 16)));
  // Growing past it eats the headroom.
  BOOST_REQUIRE(pool().extend(1, 8, nullptr)); // 7 blocks
  BOOST_TEST(!pool().can_allocate(req(3, 12)));
  BOOST_TEST(try_alloc(req(3, 8)) == "ok");
}

// A reservation's free blocks are its tenant's alone: other tenants'
// promised growth cannot land there, so it is not charged against them -
// an admission the tenant makes from its own reservation passed the check
// only if the shared blocks covered every other tenant's promises too.
BOOST_AUTO_TEST_CASE(headroom_charges_a_reservation_only_its_own_tenants_growth) {
  cfg.admission.policy = "reserve_expected";
  cfg.tenants = {tenant_config{}, tenant("r", 0, 8)};
  make(20);
  alloc(expecting(1, 4, 28));  // 1 block, 7 promised
  auto second = expecting(2, 4, 4); // 1 block, 1 promised: 10 free for the others
  second.max_sequence_length = 100;
  alloc(second);
  BOOST_REQUIRE(pool().extend(2, 40, nullptr)); // 11 blocks, past its promise
  // 12 used, 8 free - all of them r's; the default tenant's 7 promised
  // cannot be covered, and r's admissions change nothing about that.
  BOOST_TEST(try_alloc(expecting(3, 32, 0, "r")) == "ok");
  BOOST_TEST(pool().free_blocks() == 0u);
  release(3);
  // With growth r's reservation holds, and past it (from no shared block).
  BOOST_TEST(pool().can_allocate(expecting(3, 16, 16, "r")));
  BOOST_TEST(!pool().can_allocate(expecting(3, 16, 20, "r")));
  // The default tenant may take none of them, admitted or grown.
  BOOST_TEST(try_alloc(expecting(4, 4, 0)) == "out_of_blocks");
  BOOST_TEST(code(pool().extend(1, 4, nullptr)) == "out_of_blocks");
}

// A tenant's promises past its quota can never be kept: it may not take
// the blocks. Counted, a tenant stuck at its quota kept every other tenant
// out while most of the pool was free - for good, for a scheduler that
// waits on the quota_exceeded of its extends.
BOOST_AUTO_TEST_CASE(promises_past_a_tenants_quota_hold_nothing_back) {
  cfg.admission.policy = "reserve_expected";
  cfg.tenants = {tenant_config{}, tenant("b", 4)};
  make(16);
  // b: four 1-block requests, each promising 3 blocks more (12 in all) -
  // and at its quota of 4 it can grow by none of them.
  for (request_id id = 1; id <= 4; ++id)
    BOOST_REQUIRE(try_alloc(expecting(id, 4, 12, "b")) == "ok");
  BOOST_TEST(pool().free_blocks() == 12u);
  BOOST_TEST(code(pool().extend(1, 4, nullptr)) == "quota_exceeded");
  // So the default tenant is admitted, for all of the 11 blocks' growth
  // that stay beside its 1 - its own promise still counts.
  BOOST_TEST(pool().can_allocate(expecting(5, 4, 44)));
  BOOST_TEST(!pool().can_allocate(expecting(5, 4, 48)));
  BOOST_TEST(try_alloc(expecting(5, 4, 4)) == "ok");
  // Once b has room again, its promises count again, as far as the room:
  // with request 4 gone b may grow by 1 block. 12 free, 11 after the next
  // admission's own block, less b's 1 and request 5's 1: growth of 9.
  release(4);
  BOOST_TEST(pool().can_allocate(expecting(6, 4, 36)));
  BOOST_TEST(!pool().can_allocate(expecting(6, 4, 40)));
}

BOOST_AUTO_TEST_CASE(the_watermark_gives_way_to_a_reservation) {
  cfg.admission.watermark = 0.1; // 2 of 20
  cfg.tenants = {tenant_config{}, tenant("r", 0, 8)};
  make(20);
  alloc(tokens_req(1, 4));
  BOOST_REQUIRE(pool().extend(1, 44, nullptr)); // 12 blocks: no shared left
  // r's reservation is r's, watermark or not.
  BOOST_TEST(try_alloc(tokens_req(2, 32, "r")) == "ok");
  BOOST_TEST(pool().free_blocks() == 0u);
  release(2);
  release(1);
  // The watermark still binds the blocks no reservation holds: r's
  // admission past its reservation would leave 1 of them.
  alloc(tokens_req(3, 40)); // 10 blocks: 2 shared left
  BOOST_TEST(try_alloc(tokens_req(4, 36, "r")) == "out_of_blocks");
  BOOST_TEST(try_alloc(tokens_req(4, 32, "r")) == "ok");
}

BOOST_AUTO_TEST_CASE(the_watermark_holds_blocks_back_from_admissions_only) {
  cfg.admission.watermark = 0.25; // 4 of 16
  make(16);
  alloc(tokens_req(1, 44)); // 11
  alloc(tokens_req(2, 4));  // 12: exactly 4 left
  BOOST_TEST(try_alloc(tokens_req(3, 1)) == "out_of_blocks");
  alloc(tokens_req(3, 0)); // takes nothing
  BOOST_TEST(code(pool().extend(2, 16, nullptr)) == "ok");
  BOOST_TEST(pool().free_blocks() == 0u);
  step_request step;
  step.admits.push_back(tokens_req(4, 1));
  release(1);
  auto r = pool().run_step(step);
  BOOST_TEST(r.admitted.size() == 1u); // 11 free, 10 left
  step.admits = {tokens_req(5, 28), tokens_req(6, 1)};
  r = pool().run_step(step);
  BOOST_TEST(r.admitted.size() == 0u);
  BOOST_TEST(r.admission_blocked);
  BOOST_TEST(r.blocked == 5u);
}

BOOST_AUTO_TEST_SUITE_END()
