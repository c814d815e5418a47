// exceeds_capacity: a request that could never stay live - more blocks than
// the pool, than its tenant's quota or what other tenants' reservations
// leave it (its prefix namespace its own), or (the supervisor preempting at
// critical pressure) enough to reach the critical mark on its own, beyond
// its tenant's reservation - is
// refused up front, by allocate, extend, can_allocate and steps alike,
// instead of waiting for ever or being preempted the moment it is admitted.
// Refusals change nothing (the fixture checks the invariant).
#include <cstdint>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/actors/block_pool_core.hpp"
#include "kvactor/messages/error.hpp"
#include "pool_fixture.hpp"

using namespace kvactor;
using namespace kvactor::test;

namespace {

/// A pool of 20 blocks of 4 tokens where the supervisor preempts at
/// critical pressure (0.95: 19 blocks in use): one request may hold 18,
/// one of tenant "reserved" (as make(reserved) says) that many.
struct capacity_fixture : pool_fixture {
  capacity_fixture() {
    cfg.pressure.preempt_at_critical = true;
    make(0);
  }
  void make(std::uint64_t reserved) {
    cfg.tenants = {tenant_config{}, tenant("quota", 6),
                   tenant("reserved", 0, reserved)};
    pool_fixture::make(20);
  }
};

bool says(const caf::error& err, const std::string& what) {
  return render(err).find(what) != std::string::npos;
}

} // namespace

BOOST_AUTO_TEST_SUITE(capacity_suite)

BOOST_AUTO_TEST_CASE(the_cap_is_the_pool_or_below_the_critical_mark) {
  cache_config cfg;
  tenant_config plain;
  auto quota = tenant("q", 6);
  auto reserved = tenant("r", 0, 19);
  cfg.tenants = {plain, quota};
  BOOST_TEST(pressure_mark(0.95, 20) == 19u);
  BOOST_TEST(pressure_mark(0.95, 100) == 95u); // not 96 for 0.95 * 100 rounding up
  BOOST_TEST(lone_request_cap(cfg, plain, 20) == 18u);
  // Its namespace its own, every block of its tables is charged to it.
  BOOST_TEST(lone_request_cap(cfg, quota, 20) == 6u);
  // Nor can one take what another tenant's reservation keeps.
  cfg.tenants = {plain, quota, reserved};
  BOOST_TEST(lone_request_cap(cfg, plain, 20) == 1u);
  BOOST_TEST(lone_request_cap(cfg, quota, 20) == 1u);
  BOOST_TEST(lone_request_cap(cfg, reserved, 20) == 19u);
  BOOST_TEST(lone_request_cap(cfg, reserved, 10) == 10u);
  BOOST_TEST(lone_request_cap(cfg, plain, 1) == 0u); // critical at 1 block
  // Sharing a namespace, a tenant with a reservation may hold blocks
  // charged to another, its own charge within the reservation: only the
  // pool bounds it. Without a reservation the mark still does; neither
  // its quota nor others' reservations bound a table whose blocks may be
  // charged to others.
  auto shared_r = tenant("sr", 0, 4, "ns");
  auto shared_plain = tenant("sp", 0, 0, "ns");
  auto shared_quota = tenant("sq", 6, 0, "ns");
  cfg.tenants = {plain, shared_r, shared_plain, shared_quota};
  BOOST_TEST(lone_request_cap(cfg, shared_r, 20) == 20u);
  BOOST_TEST(lone_request_cap(cfg, shared_plain, 20) == 18u);
  BOOST_TEST(lone_request_cap(cfg, shared_quota, 20) == 18u);
  BOOST_TEST(lone_request_cap(cfg, plain, 20) == 16u); // sr keeps 4
  cfg.tenants = {plain, shared_r}; // the namespace alone: not shared
  BOOST_TEST(lone_request_cap(cfg, shared_r, 20) == 18u);
  auto bounds = tenant_bounds_of(cfg, 20);
  BOOST_REQUIRE(bounds.size() == 2u);
  BOOST_TEST(bounds[0].lone_cap == 16u);
  BOOST_TEST(bounds[0].others_reserved == 4u);
  BOOST_TEST(!bounds[0].shares_namespace);
  BOOST_TEST(bounds[1].lone_cap == 18u);
  BOOST_TEST(bounds[1].others_reserved == 0u);
  BOOST_TEST(!bounds[1].shares_namespace);
  cfg.tenants = {plain, shared_r, shared_plain};
  bounds = tenant_bounds_of(cfg, 20);
  BOOST_TEST(bounds[1].shares_namespace);
  BOOST_TEST(bounds[2].shares_namespace);
  BOOST_TEST(bounds[2].lone_cap == lone_request_cap(cfg, shared_plain, 20));
  cfg.tenants = {plain};
  cfg.pressure.critical = 1.0;
  BOOST_TEST(lone_request_cap(cfg, plain, 20) == 19u);
  cfg.pressure.preempt_at_critical = false;
  BOOST_TEST(lone_request_cap(cfg, plain, 20) == 20u);
  BOOST_TEST(lone_request_cap(cfg, reserved, 20) == 20u);
}

BOOST_FIXTURE_TEST_CASE(allocate_refuses_a_request_the_supervisor_would_preempt_at_once,
                        capacity_fixture) {
  auto res = pool().allocate(tokens_req(1, 73)); // 19 blocks
  BOOST_REQUIRE(!res);
  BOOST_TEST(code(res.error()) == "exceeds_capacity");
  BOOST_TEST(says(res.error(), "needs 19 blocks, more than the 18 blocks one request"));
  BOOST_TEST(says(res.error(), "critical pressure"));
  BOOST_TEST(!pool().can_allocate(tokens_req(1, 73)));
  BOOST_TEST(pool().counters().allocation_failures == 1u);
  // Nothing else was changed (the failure counters aside).
  BOOST_TEST(pool().find(1) == nullptr);
  BOOST_TEST(pool().used_blocks() == 0u);
  alloc(tokens_req(1, 72)); // 18 blocks: stays below the mark
  release(1);
  // A reservation the request stays within protects it from the supervisor.
  make(19);
  alloc(tokens_req(2, 76, "reserved")); // 19 blocks
  BOOST_TEST(pool().used_blocks() == 19u);
}

BOOST_FIXTURE_TEST_CASE(past_the_pool_its_quota_or_what_reservations_leave_never_fits, capacity_fixture) {
  make(20);
  auto res = pool().allocate(tokens_req(1, 81, "reserved")); // 21 blocks
  BOOST_REQUIRE(!res);
  BOOST_TEST(code(res.error()) == "exceeds_capacity");
  BOOST_TEST(says(res.error(), "more than the pool's 20"));
  // Past its quota, a tenant whose namespace is its own never fits.
  make(0);
  res = pool().allocate(tokens_req(2, 28, "quota")); // 7 blocks
  BOOST_REQUIRE(!res);
  BOOST_TEST(code(res.error()) == "exceeds_capacity");
  BOOST_TEST(says(res.error(), "needs 7 blocks, more than the max_blocks 6 of tenant 'quota'"));
  // Nor past what other tenants' reservations leave it.
  make(15);
  res = pool().allocate(tokens_req(3, 24)); // 6 blocks, 5 left
  BOOST_REQUIRE(!res);
  BOOST_TEST(code(res.error()) == "exceeds_capacity");
  BOOST_TEST(says(res.error(), "more than the 5 blocks the pool of 20 leaves "
                               "tenant 'default' past the other tenants' "
                               "reserved_blocks (15)"));
  BOOST_TEST(pool().used_blocks() == 0u);
  alloc(tokens_req(3, 20)); // 5 blocks: fits
  // Sharing its namespace, a tenant's blocks may be charged to another:
  // past its quota it waits (quota_exceeded), as a step then would.
  cfg.tenants = {tenant_config{}, tenant("quota", 6, 0, "ns"),
                 tenant("other", 0, 0, "ns")};
  pool_fixture::make(20);
  BOOST_TEST(code(pool().allocate(tokens_req(2, 28, "quota"))) == "quota_exceeded");
}

BOOST_FIXTURE_TEST_CASE(extend_stops_at_the_cap_and_changes_nothing, capacity_fixture) {
  alloc(tokens_req(1, 70)); // 18 blocks, 2 tokens of room in the last
  BOOST_TEST(static_cast<bool>(pool().extend(1, 2, nullptr)));
  auto before = describe(pool(), true);
  auto res = pool().extend(1, 1, nullptr);
  BOOST_REQUIRE(!res);
  BOOST_TEST(code(res.error()) == "exceeds_capacity");
  BOOST_TEST(describe(pool(), true) == before);
  BOOST_TEST(tokens(1) == 72u);
}

BOOST_FIXTURE_TEST_CASE(a_step_fails_such_requests_without_blocking_or_preempting,
                        capacity_fixture) {
  alloc(tokens_req(1, 72)); // 18 blocks, full
  alloc(tokens_req(4, 8));  // the other 2: the pool is full
  step_request step;
  // 1's growth could only come from 4, which the step would preempt for
  // it (out_of_blocks); past the cap it fails instead and 4 stays.
  step.extends = {extend_op{1, 1}, extend_op{4, 0}};
  step.admits = {tokens_req(2, 73), tokens_req(3, 0)};
  auto r = pool().run_step(step);
  BOOST_TEST(r.preempted.empty());
  BOOST_REQUIRE(r.failed.size() == 2u);
  BOOST_TEST(r.failed[0].id == 1u);
  BOOST_TEST(code(r.failed[0].error) == "exceeds_capacity");
  BOOST_TEST(r.failed[1].id == 2u);
  BOOST_TEST(code(r.failed[1].error) == "exceeds_capacity");
  // 3 was not held up behind 2.
  BOOST_REQUIRE(r.admitted.size() == 1u);
  BOOST_TEST(r.admitted[0].id == 3u);
  BOOST_TEST(!r.admission_blocked);
  BOOST_TEST(tokens(1) == 72u);
  BOOST_TEST(pool().find(4) != nullptr);
}

BOOST_FIXTURE_TEST_CASE(a_step_passes_over_an_admit_past_its_quota, capacity_fixture) {
  // A prompt past its tenant's quota used to wait (quota_exceeded) and hold
  // up every admission behind it, for ever: its tenant's namespace is its
  // own, so no prefix hit could ever make it fit.
  step_request step;
  step.admits = {tokens_req(1, 28, "quota"), tokens_req(2, 8, "quota"),
                 tokens_req(3, 8)};
  auto r = pool().run_step(step);
  BOOST_REQUIRE(r.failed.size() == 1u);
  BOOST_TEST(r.failed[0].id == 1u);
  BOOST_TEST(code(r.failed[0].error) == "exceeds_capacity");
  BOOST_REQUIRE(r.admitted.size() == 2u);
  BOOST_TEST(r.admitted[0].id == 2u);
  BOOST_TEST(r.admitted[1].id == 3u);
  BOOST_TEST(!r.admission_blocked);
  // Its extends stop at the quota the same way, preempting no one for it.
  step = step_request{};
  step.extends = {extend_op{2, 17}, extend_op{3, 1}}; // 2: 7 blocks
  r = pool().run_step(step);
  BOOST_TEST(r.preempted.empty());
  BOOST_REQUIRE(r.failed.size() == 1u);
  BOOST_TEST(code(r.failed[0].error) == "exceeds_capacity");
  BOOST_TEST(tokens(2) == 8u);
  BOOST_TEST(tokens(3) == 9u);
}

BOOST_FIXTURE_TEST_CASE(reserve_expected_promises_no_more_than_the_cap,
                        capacity_fixture) {
  cfg.admission.policy = "reserve_expected";
  make(0);
  // 8 tokens now, 400 expected (100 blocks): no empty pool could keep that
  // promise. It is cut to the cap (18 blocks), so the request is admitted
  // on the empty pool instead of waiting as out_of_blocks for ever.
  auto big = tokens_req(1, 8);
  big.expected_output_tokens = 400;
  BOOST_TEST(pool().can_allocate(big));
  alloc(big);
  // Its promise holds 16 more blocks back from admissions: 3 blocks and 1
  // of growth do not fit beside it, and do once it is gone.
  auto small = tokens_req(2, 12);
  small.expected_output_tokens = 1;
  BOOST_TEST(code(pool().allocate(small)) == "out_of_blocks");
  release(1);
  alloc(small);
}

BOOST_AUTO_TEST_SUITE_END()
