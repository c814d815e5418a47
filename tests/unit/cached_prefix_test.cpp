// block_pool_core::cached_prefix: how many prompt tokens an admission would
// find cached now - the same lookup allocate makes (whole blocks, under the
// tenant's namespace and salt, never the last token), changing nothing.
#include <cstdint>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "pool_fixture.hpp"
#include "pool_test_access.hpp"

using namespace kvactor;
using namespace kvactor::test;

namespace {

/// Everything observable, to show a probe changed nothing.
std::string state(block_pool_core& pool) {
  return describe(pool, true) + "cached " + std::to_string(pool.cached_blocks());
}

} // namespace

BOOST_FIXTURE_TEST_SUITE(cached_prefix_suite, pool_fixture)

BOOST_AUTO_TEST_CASE(a_probe_answers_what_the_allocate_then_hits) {
  auto p = run(10, 13); // 3 full blocks of 4 and a partial one
  alloc(prompt_req(1, p));
  release(1); // its 3 full blocks stay cached
  auto longer = p + run(500, 7);
  auto before = state(pool());
  BOOST_TEST(pool().cached_prefix(prompt_req(2, longer)).value() == 12u);
  BOOST_TEST(pool().cached_prefix(prompt_req(3, run(900, 13))).value() == 0u);
  BOOST_TEST(state(pool()) == before); // no block taken, touched or moved
  BOOST_TEST(alloc(prompt_req(2, longer)) == 12u);
  // In use by request 2 now, still hits for the next prompt - and so is the
  // full block request 2 computed past them, indexed when it was admitted.
  BOOST_TEST(pool().cached_prefix(prompt_req(3, longer)).value() == 16u);
}

BOOST_AUTO_TEST_CASE(the_last_prompt_token_is_never_counted) {
  auto p = run(10, 12); // exactly 3 full blocks
  alloc(prompt_req(1, p));
  release(1);
  // allocate computes the last token anew: 2 blocks hit, not 3.
  BOOST_TEST(pool().cached_prefix(prompt_req(2, p)).value() == 8u);
  BOOST_TEST(pool().cached_prefix(prompt_req(2, p + run(99, 1))).value() == 12u);
  BOOST_TEST(pool().cached_prefix(prompt_req(2, run(10, 1))).value() == 0u);
  BOOST_TEST(alloc(prompt_req(2, p)) == 8u);
}

BOOST_AUTO_TEST_CASE(salts_and_namespaces_keep_their_prefixes_apart) {
  cfg.tenants = {tenant_config{}, tenant("own"), tenant("a", 0, 0, "team"),
                 tenant("b", 0, 0, "team")};
  make(16);
  auto p = run(10, 13);
  auto salted = prompt_req(1, p);
  salted.cache_salt = 7;
  alloc(salted);
  alloc(prompt_req(2, p, "a"));
  BOOST_TEST(pool().cached_prefix(prompt_req(3, p)).value() == 0u); // unsalted
  BOOST_TEST(pool().cached_prefix(salted).value() == 12u);
  BOOST_TEST(pool().cached_prefix(prompt_req(3, p, "own")).value() == 0u);
  BOOST_TEST(pool().cached_prefix(prompt_req(3, p, "b")).value() == 12u);
}

BOOST_AUTO_TEST_CASE(without_prefix_caching_or_a_prompt_nothing_is_cached) {
  auto p = run(10, 13);
  alloc(prompt_req(1, p));
  BOOST_TEST(pool().cached_prefix(tokens_req(2, 13)).value() == 0u);
  cfg.prefix_caching = false;
  make(16);
  alloc(prompt_req(1, p));
  release(1);
  BOOST_TEST(pool().cached_prefix(prompt_req(2, p)).value() == 0u);
}

BOOST_AUTO_TEST_CASE(bad_requests_fail_as_allocate_would_and_change_nothing) {
  auto p = run(10, 13);
  alloc(prompt_req(1, p));
  auto before = state(pool());
  auto bad = prompt_req(2, p);
  bad.prompt[5] = -4;
  auto neg = pool().cached_prefix(bad);
  BOOST_TEST(code(neg) == "invalid_request");
  BOOST_TEST(render(neg.error()).find("prompt[5] = -4") != std::string::npos);
  auto who = pool().cached_prefix(prompt_req(2, p, "nobody"));
  BOOST_TEST(code(who) == "unknown_tenant");
  auto shape = prompt_req(2, p);
  shape.head_dim = 7;
  BOOST_TEST(code(pool().cached_prefix(shape)) == "invalid_request");
  // A live id is no error: the probe allocates nothing.
  BOOST_TEST(pool().cached_prefix(prompt_req(1, p)).value() == 12u);
  BOOST_TEST(state(pool()) == before);
}

BOOST_AUTO_TEST_CASE(a_block_whose_index_key_collides_is_never_shared) {
  // The index is keyed by 64 bits of a block's 128-bit hash; every lookup
  // compares the other 64 too. A cached block whose key matches but whose
  // full hash differs - a collision, made here by changing the other half -
  // serves no hit: not to allocate, a probe, a pin or a swap-in.
  cfg.max_pinned_blocks = 8;
  make(16);
  auto p = run(10, 13); // 3 full blocks of 4 and a partial one
  alloc(prompt_req(1, p));
  // (Not blocks(1).at(0): GCC 12 warns, falsely, -Wfree-nonheap-object.)
  auto first = pool().find(1)->blocks[0];
  release(1);
  BOOST_REQUIRE(pool().cached_prefix(prompt_req(2, p)).value() == 12u);
  using access = detail::block_pool_test_access;
  access::meta(pool(), first).hash.hi ^= 1;
  BOOST_TEST(pool().cached_prefix(prompt_req(2, p)).value() == 0u);
  BOOST_TEST(pool().pin(0, p, 1000, 0).value() == 0u);
  auto hits = pool().counters().prefix_hit_blocks;
  BOOST_TEST(alloc(prompt_req(2, p)) == 0u);
  BOOST_TEST(pool().counters().prefix_hit_blocks == hits);
  for (auto b : blocks(2))
    BOOST_TEST(b != first);
  // Its own first block cannot be indexed under the taken key: the next
  // prompt still hits nothing.
  BOOST_TEST(pool().cached_prefix(prompt_req(3, p)).value() == 0u);
  release(2);
}

BOOST_AUTO_TEST_SUITE_END()
