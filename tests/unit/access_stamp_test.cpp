// A request's last_access (the pool's clock at its latest change): stamped
// by an extend that takes blocks or copies as by one in place, by a step,
// and by settling drafts.
#include <cstdint>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/actors/block_pool_core.hpp"
#include "kvactor/messages/error.hpp"
#include "pool_fixture.hpp"

using namespace kvactor;
using namespace kvactor::test;

namespace {

using reqs = std::vector<request_id>;

} // namespace

BOOST_AUTO_TEST_SUITE(access_stamp_suite)

// block_pool_extend.cpp: the full path (a block taken, a copy made) stamps
// the request as the in-place path does.
BOOST_FIXTURE_TEST_CASE(an_extend_that_takes_blocks_stamps_last_access, pool_fixture) {
  pool().set_clock(100);
  alloc(prompt_req(1, run(10, 6))); // 0 full, 1 half
  BOOST_TEST(pool().find(1)->last_access == 100u);
  pool().set_clock(200);
  BOOST_REQUIRE(pool().extend(1, 3, nullptr)); // 9 tokens: a new block
  BOOST_TEST(blocks(1).size() == 3u);
  BOOST_TEST(pool().find(1)->last_access == 200u);
  pool().set_clock(300);
  BOOST_REQUIRE(pool().extend(1, 1, nullptr)); // in place
  BOOST_TEST(pool().find(1)->last_access == 300u);
  BOOST_REQUIRE(pool().fork(1, 2));
  pool().set_clock(400);
  auto res = pool().extend(2, 1, nullptr); // copy-on-write of block 2
  BOOST_REQUIRE(res);
  BOOST_TEST(res->copies.size() == 1u);
  BOOST_TEST(pool().find(2)->last_access == 400u);
  // And through a step.
  pool().set_clock(500);
  step_request step;
  step.extends.push_back(extend_op{1, 3});
  auto r = pool().run_step(step);
  BOOST_TEST(r.failed.empty());
  BOOST_TEST(r.changed.size() == 1u);
  BOOST_TEST(pool().find(1)->last_access == 500u);
}

// block_pool_rollback.cpp: settling drafts stamps the request too - kept
// or dropped, and through a step's verdicts.
BOOST_FIXTURE_TEST_CASE(settling_drafts_stamps_last_access, pool_fixture) {
  pool().set_clock(100);
  prompt_then_drafts(); // request 1: 12 tokens, the last 5 drafts
  BOOST_TEST(pool().find(1)->last_access == 100u);
  pool().set_clock(200);
  auto res = pool().settle_drafts(1, 0); // all 5 dropped: block 2 goes
  BOOST_REQUIRE(res);
  BOOST_TEST(res->changed);
  BOOST_TEST(pool().find(1)->last_access == 200u);
  std::vector<token_id> toks{7, 8};
  BOOST_REQUIRE(pool().extend(1, 2, toks.data(), false, 2));
  pool().set_clock(300);
  step_request step;
  step.verdicts.push_back(draft_verdict{1, 2});
  auto r = pool().run_step(step);
  BOOST_TEST(r.failed.empty());
  BOOST_TEST(pool().find(1)->last_access == 300u);
}

BOOST_AUTO_TEST_SUITE_END()
