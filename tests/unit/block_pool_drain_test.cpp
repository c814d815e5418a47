// block_pool_core's drains (pressure.preempt_grace_ms): the blocks a
// supervisor's victim lets go are no one's until the drain ends - by its
// serial (the grace ran out) or its tag (its stepper's next step) - and
// nothing else about the preemption changes. The fixture checks the
// invariant when each case ends; the reference models check drains on
// random operations (block_pool_model_test, policy_model_test).
#include <cstdint>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/actors/block_pool_core.hpp"
#include "kvactor/messages/error.hpp"
#include "pool_fixture.hpp"

using namespace kvactor;
using namespace kvactor::test;

BOOST_AUTO_TEST_SUITE(block_pool_drain_suite)

BOOST_FIXTURE_TEST_CASE(a_victims_blocks_are_no_ones_until_its_drain_ends,
                        pool_fixture) {
  make(8);
  alloc(tokens_req(1, 24)); // 6 blocks
  alloc(tokens_req(2, 4));  // 1 block
  auto res = pool().preempt_draining(1, 7);
  BOOST_REQUIRE(res);
  BOOST_TEST(*res == 6u); // their last reference went, as a preemption's
  BOOST_TEST(!pool().find(1));
  BOOST_TEST(pool().counters().preemptions == 1u);
  auto serial = pool().last_drain();
  BOOST_TEST(serial != 0u);
  BOOST_TEST(pool().draining_blocks() == 6u);
  BOOST_TEST(pool().num_drains() == 1u);
  BOOST_TEST(pool().used_blocks() == 1u); // pressure drops at once
  BOOST_TEST(pool().free_blocks() == 1u); // but only one block is takeable
  BOOST_TEST(invariant(pool()) == "ok");
  // Nothing takes them meanwhile; the refusal says why.
  auto before = describe(pool(), false);
  auto big = pool().allocate(tokens_req(3, 8));
  BOOST_REQUIRE(!big);
  BOOST_TEST(code(big) == "out_of_blocks");
  BOOST_TEST(context_of(big.error()).find("6 more drain after a preemption")
             != std::string::npos, context_of(big.error()));
  BOOST_TEST(!pool().can_allocate(tokens_req(3, 8)));
  BOOST_TEST(describe(pool(), false) == before);
  // Another tag's step, or a drain already ended, frees nothing.
  BOOST_TEST(pool().end_drains(8) == 0u);
  BOOST_TEST(pool().end_drains(0) == 0u);
  BOOST_TEST(pool().end_drain(serial + 1) == 0u);
  BOOST_TEST(pool().draining_blocks() == 6u);
  // The grace ran out: all six come free, once.
  BOOST_TEST(pool().end_drain(serial) == 6u);
  BOOST_TEST(pool().end_drain(serial) == 0u);
  BOOST_TEST(pool().draining_blocks() == 0u);
  BOOST_TEST(pool().free_blocks() == 7u);
  BOOST_TEST(pool().counters().blocks_freed == 6u); // counted when let go
  alloc(tokens_req(3, 24));
}

BOOST_FIXTURE_TEST_CASE(a_stepper_ends_its_own_drains_only, pool_fixture) {
  make(16);
  alloc(tokens_req(1, 8));
  alloc(tokens_req(2, 8));
  alloc(tokens_req(3, 8));
  BOOST_REQUIRE(pool().preempt_draining(1, 5));
  auto first = pool().last_drain();
  BOOST_REQUIRE(pool().preempt_draining(2, 6));
  BOOST_REQUIRE(pool().preempt_draining(3, 5));
  BOOST_TEST(pool().num_drains() == 3u);
  BOOST_TEST(pool().draining_blocks() == 6u);
  BOOST_TEST(pool().end_drains(5) == 4u); // requests 1 and 3
  BOOST_TEST(pool().num_drains() == 1u);
  BOOST_TEST(pool().end_drain(first) == 0u); // ended with its stepper's
  BOOST_TEST(pool().draining_blocks() == 2u);
  BOOST_TEST(invariant(pool()) == "ok");
}

BOOST_FIXTURE_TEST_CASE(a_drained_victim_leaves_no_prefix_but_keeps_its_hits,
                        pool_fixture) {
  make(16);
  // Request 1's prompt is written (released: cached); request 2 hits its
  // first block and brings two of its own.
  alloc(prompt_req(1, run(0, 5)));
  release(1);
  BOOST_TEST(alloc(prompt_req(2, run(0, 12))) == 4u);
  auto table = blocks(2);
  BOOST_REQUIRE(table.size() == 3u);
  BOOST_REQUIRE(pool().preempt_draining(2, 0));
  // The hit stays cached (an earlier pass wrote it); the two blocks it
  // brought, indexed at its admission, drain - out of the index.
  BOOST_TEST(pool().draining_blocks() == 2u);
  BOOST_TEST(pool().cached_blocks() == 1u);
  auto again = pool().cached_prefix(prompt_req(4, run(0, 12)));
  BOOST_REQUIRE(again);
  BOOST_TEST(*again == 4u);
  // Tag 0: no stepper ends it, only its serial.
  BOOST_TEST(pool().end_drains(0) == 0u);
  BOOST_TEST(pool().end_drain(pool().last_drain()) == 2u);
}

BOOST_FIXTURE_TEST_CASE(blocks_someone_else_holds_do_not_drain, pool_fixture) {
  cfg.num_host_blocks = 8;
  make(16);
  alloc(tokens_req(1, 8));
  BOOST_REQUIRE(pool().fork(1, 2));
  BOOST_REQUIRE(pool().preempt_draining(1, 3));
  BOOST_TEST(pool().last_drain() == 0u); // request 2 holds them all
  BOOST_TEST(pool().num_drains() == 0u);
  BOOST_TEST(blocks(2).size() == 2u);
  // A swapped victim frees no device blocks now: nothing drains either.
  alloc(tokens_req(3, 8));
  BOOST_REQUIRE(pool().swap_out_begin(3));
  BOOST_REQUIRE(pool().swap_out_done(3, cache_id(3), true));
  BOOST_REQUIRE(pool().preempt_draining(3, 3));
  BOOST_TEST(pool().last_drain() == 0u);
  BOOST_TEST(pool().draining_blocks() == 0u);
}

BOOST_FIXTURE_TEST_CASE(draining_blocks_cover_reservations_first,
                        pool_fixture) {
  // Tenant a reserves 8 blocks and holds 12; its request goes, leaving a
  // 8 short. Its 12 blocks drain: they cover that shortfall, so the other
  // tenant keeps the 2 free blocks - a waits for the drain's end instead.
  cfg.tenants = {tenant_config{}, tenant("a", 0, 8)};
  make(16);
  alloc(tokens_req(1, 48, "a"));
  alloc(tokens_req(2, 8));
  BOOST_REQUIRE(pool().preempt_draining(1, 0));
  BOOST_TEST(pool().draining_blocks() == 12u);
  BOOST_TEST(pool().can_allocate(tokens_req(3, 8)));
  alloc(tokens_req(3, 8));
  auto owed = pool().allocate(tokens_req(4, 4, "a"));
  BOOST_TEST(code(owed) == "out_of_blocks");
  BOOST_TEST(invariant(pool()) == "ok");
  BOOST_TEST(pool().end_drain(pool().last_drain()) == 12u);
  alloc(tokens_req(4, 32, "a"));
}

BOOST_FIXTURE_TEST_CASE(a_drain_covers_its_own_tenants_reservation_only,
                        pool_fixture) {
  // b reserves 4 blocks and holds none: the 4 free blocks are b's. a's
  // victim drains 6 blocks: they cover no reservation of b's, so the
  // default tenant still may not take b's 4 (which would make b wait for
  // another tenant's drain), and b may.
  cfg.tenants = {tenant_config{}, tenant("a"), tenant("b", 0, 4)};
  make(16);
  alloc(tokens_req(1, 24, "a"));
  alloc(tokens_req(2, 24));
  BOOST_REQUIRE(pool().preempt_draining(1, 0));
  BOOST_TEST(pool().draining_blocks() == 6u);
  BOOST_TEST(code(pool().allocate(tokens_req(3, 4))) == "out_of_blocks");
  BOOST_TEST(invariant(pool()) == "ok");
  alloc(tokens_req(4, 16, "b"));
}

BOOST_FIXTURE_TEST_CASE(a_drain_that_covers_a_reservation_leaves_the_headroom_too,
                        pool_fixture) {
  // As draining_blocks_cover_reservations_first, with a watermark of one
  // block: the admission headroom counts the drain's cover as takeable()
  // does - the other tenant's admission leaving the watermark free passes.
  cfg.tenants = {tenant_config{}, tenant("a", 0, 8)};
  cfg.admission.watermark = 1.0 / 16;
  make(16);
  alloc(tokens_req(1, 48, "a"));
  alloc(tokens_req(2, 8));
  BOOST_REQUIRE(pool().preempt_draining(1, 0));
  BOOST_TEST(pool().can_allocate(tokens_req(3, 4)));
  alloc(tokens_req(3, 4));
  // The last free block is the watermark's.
  BOOST_TEST(code(pool().allocate(tokens_req(4, 4, "a"))) == "out_of_blocks");
  BOOST_TEST(invariant(pool()) == "ok");
}

BOOST_FIXTURE_TEST_CASE(an_unknown_victim_fails_and_changes_nothing,
                        pool_fixture) {
  alloc(tokens_req(1, 8));
  BOOST_REQUIRE(pool().preempt_draining(1, 3));
  auto serial = pool().last_drain();
  auto before = describe(pool(), true);
  auto res = pool().preempt_draining(9, 3);
  BOOST_REQUIRE(!res);
  BOOST_TEST(code(res) == "unknown_request");
  BOOST_TEST(pool().last_drain() == 0u);
  BOOST_TEST(pool().draining_blocks() == 2u);
  BOOST_TEST(describe(pool(), true) == before);
  BOOST_TEST(pool().end_drain(serial) == 2u);
}

BOOST_FIXTURE_TEST_CASE(a_draining_preemption_waits_for_copies_in_flight,
                        pool_fixture) {
  // 2's extend copies 1's half-full last block and holds the copy: its
  // destination would come free at the settle, into no drain, and a new
  // request could take it while a pass still writes 2's K/V. Refused,
  // nothing changed; settled first, it drains.
  alloc(prompt_req(1, run(10, 6))); // blocks 0, 1 (half full)
  BOOST_REQUIRE(pool().fork(1, 2));
  std::vector<token_id> t{20, 21, 22, 23, 24};
  auto ext = pool().extend(2, 5, t.data(), true);
  BOOST_REQUIRE(ext);
  BOOST_REQUIRE(ext->copies.size() == 1u);
  auto before = describe(pool(), true);
  auto res = pool().preempt_draining(2, 7);
  BOOST_TEST(code(res) == "invalid_request");
  BOOST_TEST(pool().last_drain() == 0u);
  BOOST_TEST(describe(pool(), true) == before);
  pool().settle_copies(ext->copies, true);
  BOOST_REQUIRE(pool().preempt_draining(2, 7));
  BOOST_TEST(pool().draining_blocks() == 2u); // the copy and the new block
  BOOST_TEST(invariant(pool()) == "ok");
}

BOOST_AUTO_TEST_SUITE_END()
