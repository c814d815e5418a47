// block_pool_core driven directly, one documented promise per case: how
// many blocks an allocation takes, prefix sharing and the pin of its hits,
// rejected input, tenants' quotas, reservations and prefix namespaces.
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

BOOST_AUTO_TEST_SUITE(block_pool_core_suite)

// -- allocation ---------------------------------------------------------------

BOOST_FIXTURE_TEST_CASE(allocate_gives_ceil_n_over_block_size_blocks, pool_fixture) {
  make(64);
  std::uint64_t used = 0;
  block_id next = 0;
  for (std::uint64_t n = 0; n <= 13; ++n) {
    alloc(tokens_req(100 + n, n));
    auto want = (n + 3) / 4;
    BOOST_TEST(blocks(100 + n).size() == want);
    BOOST_TEST(tokens(100 + n) == n);
    auto table = pool().table(*pool().find(100 + n));
    BOOST_TEST(table.num_tokens == n);
    BOOST_TEST(table.block_size == 4u);
    // Fresh blocks come off the free list in order: 0, 1, 2, ...
    for (auto b : blocks(100 + n))
      BOOST_TEST(b == next++);
    used += want;
    BOOST_TEST(pool().used_blocks() == used);
  }
  // A prompt's length is the token count, with initial_tokens 0 or equal.
  alloc(prompt_req(1, run(1, 5)));
  BOOST_TEST(blocks(1).size() == 2u);
  BOOST_TEST(tokens(1) == 5u);
  auto req = prompt_req(2, run(50, 9));
  req.initial_tokens = 9;
  alloc(req);
  BOOST_TEST(blocks(2).size() == 3u);
  BOOST_TEST(pool().counters().allocations == 16u);
  BOOST_TEST(pool().num_sequences() == 16u);
  BOOST_TEST(pool().free_blocks() == 64 - pool().used_blocks());
}

BOOST_FIXTURE_TEST_CASE(prompt_prefix_is_shared_and_last_token_always_computed,
                        pool_fixture) {
  auto p = run(100, 12); // exactly 3 blocks
  BOOST_TEST(alloc(prompt_req(1, p)) == 0u);
  BOOST_TEST((blocks(1) == ids{0, 1, 2}));
  // The same 3-block prompt shares only 2: its last token must be computed.
  BOOST_TEST(alloc(prompt_req(2, p)) == 8u);
  BOOST_TEST((blocks(2) == ids{0, 1, 3}));
  // One token more and all 3 full blocks are shared.
  BOOST_TEST(alloc(prompt_req(3, p + std::vector<token_id>{7})) == 12u);
  BOOST_TEST((blocks(3) == ids{0, 1, 2, 4}));
  // A one-block prompt shares nothing.
  BOOST_TEST(alloc(prompt_req(4, run(100, 4))) == 0u);
  BOOST_TEST((blocks(4) == ids{5}));
  // A prompt that differs in its first block shares nothing after it either.
  auto q = p;
  q[0] = 999;
  BOOST_TEST(alloc(prompt_req(5, q + std::vector<token_id>{7})) == 0u);
  BOOST_TEST(pool().used_blocks() == 10u);
  auto& c = pool().counters();
  BOOST_TEST(c.query_tokens == 12u + 12 + 13 + 4 + 13);
  BOOST_TEST(c.hit_tokens == 20u);
  BOOST_TEST(c.prefix_hit_blocks == 5u);
  BOOST_TEST(pool().tenants()[0].hit_tokens == 20u);
}

BOOST_FIXTURE_TEST_CASE(hit_pins_cached_block_so_fresh_allocation_cannot_evict_it,
                        pool_fixture) {
  make(8);
  auto a = run(10, 9);
  alloc(prompt_req(1, a)); // 0 1 2
  release(1);              // 2 free; LRU 1, 0
  alloc(prompt_req(2, run(60, 5))); // 2 3
  release(2);                       // 3 free; LRU 1, 0, 2
  alloc(tokens_req(3, 20));         // 3 4 5 6 7: nothing free, 3 cached
  BOOST_TEST((blocks(3) == ids{3, 4, 5, 6, 7}));
  BOOST_TEST(pool().cached_blocks() == 3u);
  // Hits 0 and 1 sit at the front of the LRU; they are pinned before the
  // fresh block is taken, so the eviction takes block 2 instead.
  auto b = std::vector<token_id>(a.begin(), a.begin() + 8) + std::vector<token_id>{5};
  BOOST_TEST(alloc(prompt_req(4, b)) == 8u);
  BOOST_TEST((blocks(4) == ids{0, 1, 2}));
  BOOST_TEST(pool().counters().evictions == 1u);
  BOOST_TEST(pool().cached_blocks() == 0u);
  BOOST_TEST(pool().used_blocks() == 8u);
}

BOOST_FIXTURE_TEST_CASE(failed_allocation_changes_nothing, pool_fixture) {
  cfg.tenants = {tenant_config{}, tenant("q", 6)};
  // Two pools in the same state; only the first sees the failing requests.
  auto setup = [&](block_pool_core& p) {
    BOOST_REQUIRE(p.allocate(prompt_req(1, run(10, 9))));
    BOOST_REQUIRE(p.allocate(tokens_req(2, 14)));
    BOOST_REQUIRE(p.allocate(prompt_req(3, run(40, 13), "q")));
    BOOST_REQUIRE(p.release(1)); // two cached blocks
  };
  auto follow_up = [&](block_pool_core& p) {
    BOOST_REQUIRE(p.allocate(prompt_req(10, run(10, 9))));
    BOOST_REQUIRE(p.release(3));
    BOOST_REQUIRE(p.allocate(tokens_req(11, 20)));
    BOOST_REQUIRE(p.extend(2, 10, nullptr));
    BOOST_TEST(p.evict(2) == 2u);
    BOOST_REQUIRE(p.allocate(tokens_req(12, 8)));
  };
  block_pool_core twin(cfg, 16);
  setup(twin);
  setup(make(16));
  BOOST_TEST(pool().cached_blocks() == 2u);
  auto before = describe(pool(), false);
  auto failures = pool().counters().allocation_failures;
  // Out of blocks, with a cached prefix that would have been revived.
  BOOST_TEST(code(pool().allocate(prompt_req(20, run(10, 8) + run(0, 30)))) == "out_of_blocks");
  BOOST_TEST(describe(pool(), false) == before);
  // Out of blocks by one, where taking blocks would have meant evicting.
  BOOST_TEST(code(pool().allocate(tokens_req(21, 4 * 8 + 1))) == "out_of_blocks");
  BOOST_TEST(describe(pool(), false) == before);
  // Over the quota.
  BOOST_TEST(code(pool().allocate(tokens_req(22, 9, "q"))) == "quota_exceeded");
  BOOST_TEST(describe(pool(), false) == before);
  BOOST_TEST(invariant(pool()) == "ok");
  BOOST_TEST(pool().counters().allocation_failures == failures + 3);
  BOOST_TEST(pool().tenants()[0].failures == 2u);
  BOOST_TEST(pool().tenants()[1].failures == 1u);
  BOOST_TEST(!pool().find(20));
  // Free and LRU order too: the same operations give the same blocks.
  follow_up(pool());
  follow_up(twin);
  BOOST_TEST(describe(pool(), false) == describe(twin, false));
}

BOOST_FIXTURE_TEST_CASE(can_allocate_answers_what_allocate_would_do, pool_fixture) {
  make(4);
  alloc(prompt_req(1, run(10, 9))); // 3 blocks
  release(1);                       // 2 cached, 2 free
  BOOST_TEST(pool().can_allocate(tokens_req(2, 16)));
  BOOST_TEST(!pool().can_allocate(tokens_req(2, 17)));
  // Reviving a cached hit takes it from the pool as much as a fresh block.
  BOOST_TEST(pool().can_allocate(prompt_req(2, run(10, 8) + run(0, 8))));
  BOOST_TEST(!pool().can_allocate(prompt_req(2, run(10, 8) + run(0, 9))));
  auto before = describe(pool(), true);
  BOOST_TEST(!pool().can_allocate(tokens_req(2, 1, "nobody")));
  BOOST_TEST(describe(pool(), true) == before);
  alloc(tokens_req(2, 1));
  BOOST_TEST(!pool().can_allocate(tokens_req(2, 1))); // duplicate
}

// -- rejected requests ------------------------------------------------------------

BOOST_FIXTURE_TEST_CASE(duplicate_and_unknown_ids_are_rejected, pool_fixture) {
  alloc(tokens_req(1, 5));
  auto before = describe(pool(), true);
  BOOST_TEST(code(pool().allocate(tokens_req(1, 1))) == "duplicate_request");
  BOOST_TEST(code(pool().allocate(prompt_req(1, run(0, 3)))) == "duplicate_request");
  BOOST_TEST(code(pool().extend(9, 1, nullptr)) == "unknown_request");
  BOOST_TEST(code(pool().extend(9, 0, nullptr)) == "unknown_request");
  BOOST_TEST(code(pool().release(9)) == "unknown_request");
  BOOST_TEST(code(pool().preempt(9)) == "unknown_request");
  BOOST_TEST(code(pool().fork(9, 2)) == "unknown_request");
  BOOST_TEST(code(pool().fork(1, 1)) == "duplicate_request");
  alloc(tokens_req(2, 1));
  before = describe(pool(), true);
  BOOST_TEST(code(pool().fork(1, 2)) == "duplicate_request");
  BOOST_TEST(describe(pool(), true) == before);
  // Rejected requests are not allocation failures (no lack of blocks).
  BOOST_TEST(pool().counters().allocation_failures == 0u);
  // An id is free again once its request ended.
  release(1);
  BOOST_TEST(code(pool().release(1)) == "unknown_request");
  alloc(tokens_req(1, 1));
}

BOOST_FIXTURE_TEST_CASE(shape_mismatch_and_unknown_tenant_are_rejected,
                        pool_fixture) {
  auto before = describe(pool(), true);
  auto expect = [&](allocation_request req, const std::string& want) {
    BOOST_TEST(code(pool().allocate(req)) == want);
    BOOST_TEST(!pool().can_allocate(req));
    BOOST_TEST(describe(pool(), true) == before);
  };
  auto req = tokens_req(1, 4);
  req.num_layers = 3;
  expect(req, "invalid_request");
  req = tokens_req(1, 4);
  req.num_heads = 4;
  expect(req, "invalid_request");
  req = tokens_req(1, 4);
  req.head_dim = 64;
  expect(req, "invalid_request");
  req = tokens_req(1, 4);
  req.dtype = dtype::bf16;
  expect(req, "invalid_request");
  expect(tokens_req(1, 0, "", 0), "invalid_request"); // max_sequence_length 0
  req = prompt_req(1, run(0, 5));
  req.initial_tokens = 4;
  expect(req, "invalid_request");
  expect(prompt_req(1, {1, 2, -3}), "invalid_request");
  expect(tokens_req(1, 11, "", 10), "exceeds_max_sequence_length");
  expect(prompt_req(1, run(0, 11), "", 10), "exceeds_max_sequence_length");
  expect(tokens_req(1, 4, "nobody"), "unknown_tenant");
  // A priority off the wire is any integer: it once picked an LRU level
  // past the pool's lists (written out of bounds at the request's end).
  req = prompt_req(1, run(0, 9));
  req.priority = static_cast<priority>(4);
  expect(req, "invalid_request");
  BOOST_TEST(render(pool().allocate(req).error()).find("priority 4")
             != std::string::npos);
  req.priority = static_cast<priority>(200);
  expect(req, "invalid_request");
  // The tenant is checked first: "nobody" wins over a bad shape.
  req = tokens_req(1, 4, "nobody");
  req.num_layers = 1;
  expect(req, "unknown_tenant");
  // The default tenant answers to "" and to its name.
  alloc(tokens_req(1, 4, "default"));
  alloc(tokens_req(2, 4, ""));
  BOOST_TEST(pool().tenants()[0].active == 2u);
}

BOOST_FIXTURE_TEST_CASE(extend_rejects_negative_token_ids, pool_fixture) {
  alloc(prompt_req(1, run(0, 3)));
  auto before = describe(pool(), true);
  std::vector<token_id> bad{4, -1};
  BOOST_TEST(code(pool().extend(1, 2, bad.data())) == "invalid_request");
  BOOST_TEST(describe(pool(), true) == before);
}

// -- tenants ------------------------------------------------------------------------

BOOST_FIXTURE_TEST_CASE(quota_exceeded_at_exactly_quota_plus_one, pool_fixture) {
  cfg.tenants = {tenant_config{}, tenant("q", 5)};
  make(16);
  alloc(tokens_req(1, 20, "q")); // 5 blocks: exactly the quota
  BOOST_TEST(code(pool().allocate(tokens_req(2, 1, "q"))) == "quota_exceeded");
  // A sixth block in one table never fits: the quota is q's own bound.
  BOOST_TEST(code(pool().extend(1, 1, nullptr)) == "exceeds_capacity");
  BOOST_TEST(pool().can_allocate(tokens_req(2, 0, "q"))); // no blocks needed
  alloc(tokens_req(3, 20)); // other tenants are not affected
  release(1);
  BOOST_TEST(code(pool().allocate(tokens_req(2, 21, "q"))) == "exceeds_capacity");
  alloc(tokens_req(2, 20, "q"));
  BOOST_TEST(pool().tenants()[1].used == 5u);
  BOOST_TEST(pool().tenants()[1].failures == 2u); // extend failures don't count
  release(2);
  // Reviving a cached block charges the tenant like a fresh one.
  alloc(prompt_req(4, run(10, 9), "q")); // 3 blocks
  release(4);                            // 2 cached
  alloc(tokens_req(5, 12, "q"));         // 3 blocks
  BOOST_TEST(code(pool().allocate(prompt_req(6, run(10, 9), "q"))) == "quota_exceeded");
  // A hit on a block the tenant already uses is free of charge.
  release(5);
  alloc(prompt_req(6, run(10, 9), "q")); // revives 2, takes 1
  BOOST_TEST(alloc(prompt_req(7, run(10, 9), "q")) == 8u);
  BOOST_TEST(pool().tenants()[1].used == 4u);
}

BOOST_FIXTURE_TEST_CASE(reservations_hold_blocks_for_their_tenant, pool_fixture) {
  cfg.tenants = {tenant_config{}, tenant("r", 0, 6)};
  make(16);
  // 11 blocks never fit beside r's 6: refused for good.
  BOOST_TEST(code(pool().allocate(tokens_req(1, 44))) == "exceeds_capacity");
  alloc(tokens_req(1, 40)); // 10
  BOOST_TEST(code(pool().allocate(tokens_req(2, 1))) == "out_of_blocks");
  BOOST_TEST(pool().free_blocks() == 6u);
  alloc(tokens_req(3, 12, "r")); // 3 of its 6
  BOOST_TEST(code(pool().allocate(tokens_req(2, 1))) == "out_of_blocks");
  alloc(tokens_req(4, 12, "r")); // the other 3
  BOOST_TEST(pool().free_blocks() == 0u);
  // Past its reservation, r competes like anyone.
  release(1);
  alloc(tokens_req(5, 40, "r"));
  BOOST_TEST(pool().tenants()[1].used == 16u);
  BOOST_TEST(code(pool().allocate(tokens_req(2, 1))) == "out_of_blocks");
  // Once r falls below its reservation again, the shortfall is held anew.
  release(5);
  release(4);
  release(3);
  BOOST_TEST(code(pool().allocate(tokens_req(2, 44))) == "exceeds_capacity");
  alloc(tokens_req(2, 40));
  // Cached blocks are free blocks for the reservation too.
  alloc(prompt_req(6, run(0, 24), "r")); // 6 full blocks, all indexed
  release(6);                            // 6 cached, none free
  BOOST_TEST(pool().cached_blocks() == 6u);
  BOOST_TEST(code(pool().allocate(tokens_req(8, 1))) == "out_of_blocks");
  alloc(tokens_req(7, 24, "r")); // evicts to serve r
  BOOST_TEST(pool().counters().evictions == 6u);
}

BOOST_FIXTURE_TEST_CASE(tenants_do_not_share_prefixes_unless_same_namespace,
                        pool_fixture) {
  cfg.tenants = {tenant_config{}, tenant("a"), tenant("b"), tenant("c", 0, 0, "team"),
                 tenant("d", 0, 0, "team")};
  make(32);
  auto p = run(10, 9);
  alloc(prompt_req(1, p, "a"));
  BOOST_TEST(alloc(prompt_req(2, p, "b")) == 0u);
  BOOST_TEST(alloc(prompt_req(3, p, "")) == 0u);
  BOOST_TEST(alloc(prompt_req(4, p, "c")) == 0u);
  BOOST_TEST(alloc(prompt_req(5, p, "d")) == 8u); // c's blocks
  BOOST_TEST(alloc(prompt_req(6, p, "a")) == 8u);
  // Sharing across tenants charges the block to whoever took it first.
  BOOST_TEST((blocks(5)[0] == blocks(4)[0]));
  BOOST_TEST(pool().tenants()[3].used == 3u);
  BOOST_TEST(pool().tenants()[4].used == 1u);
  release(4);
  BOOST_TEST(pool().tenants()[3].used == 2u); // still charged for d's hits
  BOOST_TEST(pool().tenants()[4].hit_tokens == 8u);
  BOOST_TEST(pool().tenants()[3].hit_tokens == 0u);
}

BOOST_AUTO_TEST_SUITE_END()
