// block_pool_core::run_step: one scheduler step in one call - frees first,
// extends oldest first with vLLM's preempt-the-newest policy, then
// first-come-first-served admissions, none after a preemption.
// Every case ends with check_invariant() passing (the fixture checks it).
#include <cstdint>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/actors/block_pool_core.hpp"
#include "kvactor/messages/error.hpp"
#include "pool_fixture.hpp"

using namespace kvactor;
using namespace kvactor::test;

BOOST_AUTO_TEST_SUITE(block_pool_step_suite)

// -- the step -------------------------------------------------------------------------

namespace {

extend_op grow(request_id id, std::uint32_t n) {
  return extend_op{id, n};
}

} // namespace

BOOST_FIXTURE_TEST_CASE(run_step_preempts_newest_first_like_vllm, pool_fixture) {
  make(7);
  alloc(tokens_req(1, 8)); // 0 1
  alloc(tokens_req(2, 8)); // 2 3
  alloc(tokens_req(3, 8)); // 4 5; 6 free
  step_request step;
  step.extends = {grow(1, 4), grow(2, 8), grow(3, 4)};
  auto r = pool().run_step(step);
  // 1 takes block 6; 2 needs two, so 3 (the newest) is preempted for it.
  BOOST_TEST(r.preempted == std::vector<request_id>{3});
  BOOST_TEST(r.failed.empty());
  BOOST_REQUIRE(r.changed.size() == 2u);
  BOOST_TEST(r.changed[0].id == 1u);
  BOOST_TEST(r.changed[0].first == 2u);
  BOOST_TEST((r.changed[0].blocks == ids{6}));
  BOOST_TEST(r.changed[0].num_tokens == 12u);
  BOOST_TEST(r.changed[1].id == 2u);
  BOOST_TEST((r.changed[1].blocks == ids{4, 5}));
  BOOST_TEST((blocks(2) == ids{2, 3, 4, 5}));
  BOOST_TEST(!pool().find(3));
  BOOST_TEST(pool().counters().preemptions == 1u);
  BOOST_TEST(r.used_blocks == 7u);
  BOOST_TEST(r.free_blocks == 0u);
  BOOST_TEST(invariant(pool()) == "ok");
  // Several victims, newest first, until the oldest fits.
  make(8);
  for (request_id id = 1; id <= 4; ++id)
    alloc(tokens_req(id, 8)); // 2 blocks each, pool full
  step.extends = {grow(1, 24), grow(2, 1), grow(3, 1), grow(4, 1)};
  r = pool().run_step(step);
  BOOST_TEST((r.preempted == std::vector<request_id>{4, 3, 2}));
  BOOST_REQUIRE(r.changed.size() == 1u);
  BOOST_TEST(r.changed[0].id == 1u);
  BOOST_TEST(tokens(1) == 32u);
  BOOST_TEST(pool().num_sequences() == 1u);
  // Growth past the whole pool could never fit: it fails alone, and
  // preempts nobody (not even itself).
  alloc(tokens_req(2, 0));
  step.extends = {grow(1, 1), grow(2, 0)};
  r = pool().run_step(step);
  BOOST_TEST(r.preempted.empty());
  BOOST_REQUIRE(r.failed.size() == 1u);
  BOOST_TEST(code(r.failed[0].error) == "exceeds_capacity");
  BOOST_TEST(tokens(1) == 32u);
  release(1);
  release(2);
  // Last in line and nothing to take from the step: a request preempts
  // itself (the blocks are held by one the step does not extend).
  alloc(tokens_req(1, 8));
  alloc(tokens_req(2, 24));
  step.extends = {grow(1, 1)};
  r = pool().run_step(step);
  BOOST_TEST(r.preempted == std::vector<request_id>{1});
  BOOST_TEST(r.failed.empty());
  BOOST_TEST(pool().num_sequences() == 1u);
  // Without preempt_on_shortage the extend fails alone.
  alloc(tokens_req(1, 8));
  step.preempt_on_shortage = false;
  step.extends = {grow(1, 1)};
  r = pool().run_step(step);
  BOOST_TEST(r.preempted.empty());
  BOOST_REQUIRE(r.failed.size() == 1u);
  BOOST_TEST(code(r.failed[0].error) == "out_of_blocks");
  BOOST_TEST(tokens(1) == 8u);
  // Other failures never preempt.
  step.preempt_on_shortage = true;
  step.extends = {grow(1, 2000), grow(7, 1)};
  r = pool().run_step(step);
  BOOST_TEST(r.preempted.empty());
  BOOST_REQUIRE(r.failed.size() == 2u);
  BOOST_TEST(code(r.failed[0].error) == "exceeds_max_sequence_length");
  BOOST_TEST(code(r.failed[1].error) == "unknown_request");
}

BOOST_FIXTURE_TEST_CASE(run_step_extends_a_request_at_most_once_per_step,
                        pool_fixture) {
  // The review's first sequence: nothing free, and 1 named twice. Its
  // second entry used to be its own victim - 1 preempted, then its retried
  // extend failing as unknown. Now the second entry fails as a repeat and
  // is never a victim: with no one else after it, 1 preempts itself.
  make(4);
  alloc(tokens_req(1, 8)); // 0 1
  alloc(tokens_req(2, 8)); // 2 3: the pool is full
  step_request step;
  step.extends = {grow(1, 1), grow(1, 1)};
  auto r = pool().run_step(step);
  BOOST_TEST(r.preempted == std::vector<request_id>{1});
  BOOST_REQUIRE(r.failed.size() == 1u);
  BOOST_TEST(r.failed[0].id == 1u);
  BOOST_TEST(code(r.failed[0].error) == "invalid_request");
  auto msg = render(r.failed[0].error);
  BOOST_TEST(msg.find("(extend of request 1: request 1 appears twice in the "
                      "step's extends")
               != std::string::npos, msg);
  BOOST_TEST(r.changed.empty());
  BOOST_TEST((blocks(2) == ids{2, 3}));
  // The review's second sequence: one free block, 1 named first and last.
  // 1 takes it; 2 runs short and used to preempt 1 (the last entry) and
  // take 1's blocks, while `changed` still named one of them as 1's. Now
  // the entry of a request the step already extended is no victim: 2
  // preempts itself, and 1's block stays 1's.
  make(5);
  alloc(tokens_req(1, 8)); // 0 1
  alloc(tokens_req(2, 8)); // 2 3; 4 free
  step.extends = {grow(1, 1), grow(2, 1), grow(1, 1)};
  r = pool().run_step(step);
  BOOST_REQUIRE(r.changed.size() == 1u);
  BOOST_TEST(r.changed[0].id == 1u);
  BOOST_TEST((r.changed[0].blocks == ids{4}));
  BOOST_TEST(r.preempted == std::vector<request_id>{2});
  BOOST_REQUIRE(r.failed.size() == 1u);
  BOOST_TEST(r.failed[0].id == 1u);
  BOOST_TEST(code(r.failed[0].error) == "invalid_request");
  BOOST_TEST((blocks(1) == ids{0, 1, 4}));
  BOOST_TEST(tokens(1) == 9u);
  BOOST_TEST(!pool().find(2));
  // A repeat is passed over, not the distinct request behind it: 1 runs
  // short, 3 (after 1's repeat) goes, and 1 is extended once.
  make(6);
  alloc(tokens_req(1, 8)); // 0 1
  alloc(tokens_req(2, 8)); // 2 3
  alloc(tokens_req(3, 8)); // 4 5: the pool is full
  step.extends = {grow(1, 1), grow(1, 1), grow(3, 1)};
  r = pool().run_step(step);
  BOOST_TEST(r.preempted == std::vector<request_id>{3});
  BOOST_REQUIRE(r.failed.size() == 1u);
  BOOST_TEST(r.failed[0].id == 1u);
  BOOST_TEST(tokens(1) == 9u);
  BOOST_TEST(pool().counters().preemptions == 1u);
}

BOOST_FIXTURE_TEST_CASE(run_step_passes_over_victims_that_hold_no_device_blocks,
                        pool_fixture) {
  // A request being swapped out, or an unknown one, would free nothing if
  // preempted: the newest resident request goes instead, and they fail on
  // their own extends. The swap goes on undisturbed.
  cfg.num_host_blocks = 8;
  make(6);
  alloc(tokens_req(1, 8)); // 0 1
  alloc(tokens_req(2, 8)); // 2 3
  alloc(tokens_req(3, 8)); // 4 5; the pool is full
  BOOST_REQUIRE(pool().swap_out_begin(3));
  step_request step;
  step.extends = {grow(1, 4), grow(2, 1), grow(3, 1), grow(99, 1)};
  auto r = pool().run_step(step);
  BOOST_TEST(r.preempted == std::vector<request_id>{2});
  BOOST_REQUIRE(r.failed.size() == 2u);
  BOOST_TEST(r.failed[0].id == 3u);
  BOOST_TEST(code(r.failed[0].error) == "invalid_request");
  BOOST_TEST(r.failed[1].id == 99u);
  BOOST_TEST(code(r.failed[1].error) == "unknown_request");
  BOOST_TEST(blocks(1).size() == 3u);
  BOOST_TEST(pool().counters().preemptions == 1u);
  BOOST_REQUIRE(pool().find(3) != nullptr);
  BOOST_TEST(!pool().find(3)->release_pending);
  BOOST_TEST(code(pool().swap_out_done(3, pool().find(3)->cache_id, true)) == "ok");
  BOOST_TEST((pool().find(3)->where == detail::residency::swapped));
}

BOOST_FIXTURE_TEST_CASE(run_step_passes_over_victims_whose_blocks_go_to_their_reservation,
                        pool_fixture) {
  // 3's tenant holds just its reservation: preempting 3 would hand its
  // blocks back to that reservation, nothing to 1. It used to be preempted
  // first, for nothing, and 2 after it.
  cfg.tenants = {tenant_config{}, tenant("r", 0, 4)};
  make(8);
  alloc(tokens_req(1, 8));       // 0 1
  alloc(tokens_req(2, 8));       // 2 3
  alloc(tokens_req(3, 16, "r")); // 4-7: the pool is full
  step_request step;
  step.extends = {grow(1, 4), grow(2, 1), grow(3, 1)};
  auto r = pool().run_step(step);
  BOOST_TEST(r.preempted == std::vector<request_id>{2});
  BOOST_TEST(r.failed.empty());
  BOOST_TEST(blocks(1).size() == 3u);
  BOOST_TEST(blocks(3).size() == 5u); // r past its reservation now
  // Past it, r's request is a victim like any other.
  release(1);
  alloc(tokens_req(4, 8)); // 2 of the 3 free
  step.extends = {grow(4, 8), grow(3, 1)};
  r = pool().run_step(step);
  BOOST_TEST(r.preempted == std::vector<request_id>{3});
}

BOOST_FIXTURE_TEST_CASE(run_step_frees_first_and_reports_copies_and_bad_ops,
                        pool_fixture) {
  make(4);
  alloc(tokens_req(1, 6)); // 0 1
  BOOST_REQUIRE(pool().fork(1, 2));
  alloc(tokens_req(3, 8)); // 2 3: the pool is full
  // Token ids that do not add up to the extends fail every extend.
  step_request step;
  step.frees = {3, 99};
  step.extends = {grow(2, 2), grow(1, 1)};
  step.tokens = run(0, 4);
  auto r = pool().run_step(step);
  BOOST_TEST(r.freed == std::vector<request_id>{3});
  BOOST_REQUIRE(r.failed.size() == 3u);
  BOOST_TEST(r.failed[0].id == 99u);
  BOOST_TEST(code(r.failed[0].error) == "unknown_request");
  BOOST_TEST(r.failed[1].id == 2u);
  BOOST_TEST(code(r.failed[1].error) == "invalid_request");
  BOOST_TEST(r.failed[2].id == 1u);
  BOOST_TEST(code(r.failed[2].error) == "invalid_request");
  BOOST_TEST(r.changed.empty());
  BOOST_TEST(tokens(1) == 6u);
  BOOST_TEST(tokens(2) == 6u);
  // 1 appends into the block it shares with 2: a copy, into a freed block.
  step = step_request{};
  step.extends = {grow(1, 1)};
  r = pool().run_step(step);
  BOOST_TEST(r.failed.empty());
  BOOST_REQUIRE(r.changed.size() == 1u);
  BOOST_TEST(r.changed[0].id == 1u);
  BOOST_TEST(r.changed[0].first == 1u);
  BOOST_TEST((r.changed[0].blocks == ids{2}));
  BOOST_TEST(r.changed[0].num_tokens == 7u);
  BOOST_TEST(str(r.copies) == "(1->2)");
  BOOST_TEST((blocks(2) == ids{0, 1}));
  BOOST_TEST(r.preempted.empty());
}

BOOST_FIXTURE_TEST_CASE(run_step_failures_name_the_op_and_the_request,
                        pool_fixture) {
  // One id fails as a verdict, a free, a discard and an extend in one step;
  // from below each error reads "request 7 is not allocated". A quota's
  // error names no request at all.
  cfg.tenants = {tenant("a", 3)};
  make(8);
  alloc(tokens_req(1, 8)); // 2 blocks
  alloc(tokens_req(3, 4)); // and the tenant's last one
  step_request step;
  step.verdicts = {draft_verdict{7, 0}};
  step.frees = {7};
  step.discards = {7};
  step.extends = {grow(7, 1), grow(1, 1)};
  step.admits = {tokens_req(2, 4)};
  auto r = pool().run_step(step);
  std::vector<std::string> want = {
    "kvactor: unknown_request (verdict of request 7: ",
    "kvactor: unknown_request (free of request 7: ",
    "kvactor: unknown_request (discard of request 7: ",
    "kvactor: unknown_request (extend of request 7: ",
    "kvactor: quota_exceeded (extend of request 1: ",
    "kvactor: quota_exceeded (admission of request 2: "};
  BOOST_REQUIRE(r.failed.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    auto got = render(r.failed[i].error);
    BOOST_TEST(got.rfind(want[i], 0) == 0u, got);
  }
  BOOST_TEST(tokens(1) == 8u);
}

BOOST_FIXTURE_TEST_CASE(run_step_admits_fcfs_and_stops_at_first_that_does_not_fit,
                        pool_fixture) {
  make(8);
  step_request step;
  // 3 needs 7 blocks of the 6 left; 4 more than the pool: it never fits.
  step.admits = {tokens_req(1, 8), tokens_req(2, 4, "nobody"),
                 tokens_req(4, 40), tokens_req(3, 28), tokens_req(5, 4)};
  auto r = pool().run_step(step);
  BOOST_REQUIRE(r.admitted.size() == 1u);
  BOOST_TEST(r.admitted[0].id == 1u);
  BOOST_TEST((r.admitted[0].table.blocks == ids{0, 1}));
  BOOST_TEST(r.admitted[0].table.num_tokens == 8u);
  BOOST_TEST(r.admitted[0].cache_id == pool().find(1)->cache_id);
  // A bad request, or one that can never fit, does not stop the line.
  BOOST_REQUIRE(r.failed.size() == 2u);
  BOOST_TEST(r.failed[0].id == 2u);
  BOOST_TEST(code(r.failed[0].error) == "unknown_tenant");
  BOOST_TEST(r.failed[1].id == 4u);
  BOOST_TEST(code(r.failed[1].error) == "exceeds_capacity");
  BOOST_TEST(r.admission_blocked);
  BOOST_TEST(r.blocked == 3u);
  BOOST_TEST(!pool().find(5)); // would fit, but waits behind 3
  BOOST_TEST(r.used_blocks == 2u);
  BOOST_TEST(r.free_blocks == 6u);
  BOOST_TEST(pool().counters().allocation_failures == 2u);
  // Hits are reported per admission.
  step.admits = {prompt_req(5, run(0, 9)), prompt_req(6, run(0, 9))};
  r = pool().run_step(step);
  BOOST_REQUIRE(r.admitted.size() == 2u);
  BOOST_TEST(r.admitted[0].hit_tokens == 0u);
  BOOST_TEST(r.admitted[1].hit_tokens == 8u);
  BOOST_TEST(!r.admission_blocked);
  BOOST_TEST(r.blocked == 0u);
}

BOOST_FIXTURE_TEST_CASE(run_step_skips_admission_after_preemption, pool_fixture) {
  make(4);
  alloc(tokens_req(1, 12));
  alloc(tokens_req(9, 4)); // the rest of the pool, not in the step
  step_request step;
  step.extends = {grow(1, 1)};
  step.admits = {tokens_req(2, 4), tokens_req(3, 4)};
  auto r = pool().run_step(step);
  BOOST_TEST(r.preempted == std::vector<request_id>{1});
  BOOST_TEST(r.admitted.empty());
  BOOST_TEST(r.admission_blocked);
  BOOST_TEST(r.blocked == 2u);
  BOOST_TEST(!pool().find(2));
  BOOST_TEST(pool().used_blocks() == 1u);
  // Unless asked to admit anyway.
  alloc(tokens_req(1, 12));
  step.admit_after_preemption = true;
  r = pool().run_step(step);
  BOOST_TEST(r.preempted == std::vector<request_id>{1});
  BOOST_TEST(r.admitted.size() == 2u);
  BOOST_TEST(!r.admission_blocked);
  // Frees are not preemptions: admission goes ahead after them.
  step = step_request{};
  step.frees = {2, 3};
  step.admits = {tokens_req(4, 12)};
  r = pool().run_step(step);
  BOOST_TEST(r.admitted.size() == 1u);
}

BOOST_AUTO_TEST_SUITE_END()
