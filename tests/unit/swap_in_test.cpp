// block_pool_core's swap back in from the host tier: what it shares back
// from the prefix cache and what it copies, the admission watermark, quotas
// and reservations, a failed device copy (swapping out: swap_core_test.cpp).
#include <boost/test/unit_test.hpp>

#include "pool_test_access.hpp"
#include "swap_fixture.hpp"

using namespace kvactor;
using namespace kvactor::test;
using namespace kvactor::test::swap_core;
using kvactor::detail::residency;

BOOST_AUTO_TEST_SUITE(swap_core_suite)

BOOST_FIXTURE_TEST_CASE(swap_in_shares_the_prefix_still_cached_and_copies_the_rest,
                        swap_fixture) {
  auto p = run(50, 10);
  alloc(prompt_req(1, p)); // 0 1 2; 0 and 1 indexed
  auto out = out_begin(1);
  out_done(1, true); // 0 and 1 cached, 2 free
  BOOST_TEST(pool().cached_blocks() == 2u);
  alloc(tokens_req(2, 8)); // takes free blocks, not the cached 0 and 1
  auto in = in_begin(1);
  // Only the unindexed tail block is copied back, into a fresh block.
  BOOST_REQUIRE(in.size() == 1u);
  BOOST_TEST(in[0].host_block == out[2].host_block);
  BOOST_TEST((seq(1).incoming == ids{0, 1, in[0].device_block}));
  BOOST_TEST(pool().cached_blocks() == 0u); // revived and held meanwhile
  BOOST_TEST(in_done(1, true) == 0u);
  BOOST_TEST((table_of(seq(1)) == ids{0, 1, in[0].device_block}));
  BOOST_TEST(pool().counters().swap_in_shared == 2u);
  BOOST_TEST(pool().counters().swap_ins == 1u);
  BOOST_TEST(pool().free_host_blocks() == 8u);
  // Its prefix is shared again: a new request with the same prompt hits it.
  alloc(prompt_req(3, p));
  BOOST_TEST(seq(3).blocks[0] == 0u);
  BOOST_TEST(seq(3).blocks[1] == 1u);
}

BOOST_FIXTURE_TEST_CASE(swap_in_copies_a_block_whose_index_key_collides,
                        swap_fixture) {
  // The index's key is half of a block's hash; a swap-in compares the other
  // half too: a cached block whose key matches but whose hash differs (a
  // collision, made by changing the other half) is copied back, not shared.
  auto p = run(50, 10);
  alloc(prompt_req(1, p)); // 0 1 2; 0 and 1 indexed
  out_begin(1);
  out_done(1, true); // 0 and 1 cached, 2 free
  detail::block_pool_test_access::meta(pool(), 0).hash.hi ^= 1;
  auto in = in_begin(1);
  // Block 0's copy and the tail come back by copy; block 1 (its own hash
  // intact) is shared.
  BOOST_REQUIRE(in.size() == 2u);
  BOOST_TEST(seq(1).incoming[0] != 0u);
  BOOST_TEST(seq(1).incoming[1] == 1u);
  in_done(1, true);
  BOOST_TEST(pool().counters().swap_in_shared == 1u);
}

BOOST_FIXTURE_TEST_CASE(swap_in_shares_a_prefix_another_request_still_uses,
                        swap_fixture) {
  auto p = run(0, 9);
  alloc(prompt_req(1, p)); // 0 1 2, two indexed
  alloc(prompt_req(2, p)); // shares 0 1, own 3
  out_begin(1);
  BOOST_TEST(out_done(1, true) == 1u); // only its private block 2
  auto used = pool().used_blocks();
  auto in = in_begin(1);
  BOOST_REQUIRE(in.size() == 1u);
  BOOST_TEST(pool().used_blocks() == used + 1); // the shared ones were in use
  in_done(1, true);
  BOOST_TEST(seq(1).blocks[0] == seq(2).blocks[0]);
  BOOST_TEST(seq(1).blocks[1] == seq(2).blocks[1]);
  BOOST_TEST(pool().counters().swap_in_shared == 2u);
  // Both release: the shared blocks are freed once, by the last holder.
  BOOST_TEST(pool().release(1).value() == 1u);
  BOOST_TEST(pool().release(2).value() == 3u);
}

BOOST_FIXTURE_TEST_CASE(swap_in_copies_all_when_the_prefix_was_evicted,
                        swap_fixture) {
  auto p = run(50, 10);
  alloc(prompt_req(1, p)); // 0 1 2; 0 and 1 indexed
  auto out = out_begin(1);
  out_done(1, true);
  // Request 2 takes every block, the two cached ones last (evicted).
  alloc(tokens_req(2, 4 * 16));
  BOOST_TEST(pool().cached_blocks() == 0u);
  BOOST_TEST(code(pool().swap_in_begin(1)) == "out_of_blocks");
  pool().release(2);
  auto in = in_begin(1);
  BOOST_REQUIRE(in.size() == 3u);
  for (std::size_t i = 0; i < in.size(); ++i)
    BOOST_TEST(in[i].host_block == out[i].host_block); // table order kept
  BOOST_TEST((seq(1).incoming == devices(in)));
  BOOST_TEST(in_done(1, true) == 0u);
  BOOST_TEST((seq(1).where == residency::resident));
  BOOST_TEST((table_of(seq(1)) == devices(in)));
  BOOST_TEST(seq(1).num_tokens == 10u);
  BOOST_TEST(seq(1).host_blocks.empty());
  BOOST_TEST(pool().free_host_blocks() == 8u);
  BOOST_TEST(pool().counters().swap_in_shared == 0u);
  // The copies are private and unindexed: the prompt no longer hits...
  alloc(prompt_req(5, p));
  BOOST_TEST(seq(5).blocks[0] != seq(1).blocks[0]);
  // ...but the request's hash chain goes on from where it was.
  auto more = run(60, 2);
  BOOST_REQUIRE(pool().extend(1, 2, more.data()));
  ok();
  auto q = p;
  q.insert(q.end(), more.begin(), more.end());
  q.push_back(7);
  alloc(prompt_req(6, q));
  BOOST_TEST(seq(6).blocks[2] == seq(1).blocks[2]);
}

BOOST_FIXTURE_TEST_CASE(swap_in_leaves_the_admission_watermark_free,
                        swap_fixture) {
  cfg.admission.watermark = 0.25; // 4 of 16 blocks
  make(16);
  alloc(tokens_req(1, 12)); // 3 blocks
  out_begin(1);
  out_done(1, true);
  alloc(tokens_req(2, 40)); // 10 blocks: 6 left, above the watermark
  auto before = describe(pool());
  auto res = pool().swap_in_begin(1);
  BOOST_TEST(code(res) == "out_of_blocks"); // 3 would leave 3 < 4
  BOOST_TEST(render(res.error()).find("headroom") != std::string::npos);
  BOOST_TEST(describe(pool()) == before);
  pool().release(2);
  BOOST_TEST(in_begin(1).size() == 3u);
  in_done(1, true);
}

// Under reserve_expected a swap-in is admitted with room for its expected
// growth, so that room must stay promised while the device copies: an
// admission in between used to see it free (the promise counted only once
// the copy ended) and take it, as it could not with the request resident.
BOOST_FIXTURE_TEST_CASE(a_swap_in_keeps_its_growth_promised_while_its_copy_runs,
                        swap_fixture) {
  cfg.admission.policy = "reserve_expected";
  cfg.admission.default_expected_output = 40;
  make(16);
  auto promised = [&] { return pool().tenants()[0].promised; };
  alloc(tokens_req(1, 8)); // 2 blocks, expected to grow to 12
  BOOST_REQUIRE(promised() == 10u);
  // Resident, it leaves no room for another such request: 12 free after
  // its 2 blocks < 10 promised + 10 more.
  BOOST_TEST(code(pool().allocate(tokens_req(2, 8))) == "out_of_blocks");
  out_begin(1);
  out_done(1, true);
  BOOST_TEST(promised() == 0u); // swapped out: it will not grow
  in_begin(1);
  BOOST_TEST(promised() == 10u);
  BOOST_TEST(code(pool().allocate(tokens_req(2, 8))) == "out_of_blocks");
  in_done(1, true);
  BOOST_TEST(promised() == 10u);
  BOOST_TEST(code(pool().allocate(tokens_req(2, 8))) == "out_of_blocks");
  // A failed copy takes the promise back; so does a release mid-copy,
  // which ends the request at once (its ghost will not grow).
  out_begin(1);
  out_done(1, true);
  in_begin(1);
  in_done(1, false);
  BOOST_TEST(promised() == 0u);
  for (bool success : {true, false}) {
    in_begin(1);
    auto cache_id = seq(1).cache_id;
    BOOST_REQUIRE(pool().release(1));
    ok();
    BOOST_TEST(promised() == 0u);
    in_done(1, success, cache_id);
    BOOST_TEST(promised() == 0u);
    alloc(tokens_req(1, 8));
    out_begin(1);
    out_done(1, true);
  }
}

// The swap-out counterpart: the promise stays while the copy runs, so an
// admission meanwhile cannot take the room a failed copy gives back to a
// request that grows again (it gave up its promise at begin, and a failed
// swap-out left the pool promising 20 blocks over 12 free).
BOOST_FIXTURE_TEST_CASE(a_swap_out_keeps_its_growth_promised_until_its_copy_succeeded,
                        swap_fixture) {
  cfg.admission.policy = "reserve_expected";
  cfg.admission.default_expected_output = 40;
  make(16);
  auto promised = [&] { return pool().tenants()[0].promised; };
  alloc(tokens_req(1, 8)); // 2 blocks, expected to grow to 12
  out_begin(1);
  BOOST_TEST(promised() == 10u);
  BOOST_TEST(code(pool().allocate(tokens_req(2, 8))) == "out_of_blocks");
  out_done(1, false); // back, as it was
  BOOST_TEST(promised() == 10u);
  out_begin(1);
  out_done(1, true);
  BOOST_TEST(promised() == 0u); // away: it will not grow
  // Released mid-copy: ended at once, nothing promised from then on.
  in_begin(1);
  in_done(1, true);
  out_begin(1);
  auto cache_id = seq(1).cache_id;
  BOOST_REQUIRE(pool().release(1));
  ok();
  BOOST_TEST(promised() == 0u);
  out_done(1, false, cache_id);
  BOOST_TEST(promised() == 0u);
}

BOOST_FIXTURE_TEST_CASE(failed_swap_in_puts_revived_blocks_back_in_the_cache,
                        swap_fixture) {
  auto p = run(50, 10);
  alloc(prompt_req(1, p));
  out_begin(1);
  out_done(1, true);
  auto before = describe(pool(), false);
  auto flow = pool().counters();
  in_begin(1);
  BOOST_TEST(pool().cached_blocks() == 0u);
  BOOST_TEST(in_done(1, false) == 3u);
  BOOST_TEST(describe(pool(), false) == before);
  // The fresh block was handed out and came back (flow counters never go
  // down: stats were answered during the copy); the two revived ones were
  // let go again, as any last reference.
  BOOST_TEST(pool().counters().blocks_allocated == flow.blocks_allocated + 1);
  BOOST_TEST(pool().counters().blocks_freed == flow.blocks_freed + 3);
  BOOST_TEST(pool().cached_blocks() == 2u);
  BOOST_TEST(pool().counters().swap_in_shared == 0u);
  in_begin(1);
  in_done(1, true);
  BOOST_TEST(pool().counters().swap_in_shared == 2u);
}

BOOST_FIXTURE_TEST_CASE(failed_swap_in_keeps_it_swapped_and_returns_the_blocks,
                        swap_fixture) {
  alloc(tokens_req(1, 12));
  alloc(tokens_req(2, 4));
  out_begin(1);
  out_done(1, true);
  // The blocks it took come back in the order they were handed out, so the
  // pool is as it was - but for the flow counters, which count the three
  // blocks out and back (they never go down).
  auto before = describe(pool(), false);
  auto flow = pool().counters();
  auto in = in_begin(1);
  BOOST_TEST(pool().used_blocks() == 4u);
  BOOST_TEST(in_done(1, false) == 3u);
  BOOST_TEST(describe(pool(), false) == before);
  BOOST_TEST(pool().counters().blocks_allocated == flow.blocks_allocated + 3);
  BOOST_TEST(pool().counters().blocks_freed == flow.blocks_freed + 3);
  BOOST_TEST((seq(1).where == residency::swapped));
  // And a second try gets the same blocks.
  BOOST_TEST((in_begin(1) == in));
  in_done(1, true);
  BOOST_TEST(pool().counters().swap_ins == 1u);
}

BOOST_FIXTURE_TEST_CASE(a_failed_swap_in_counts_a_free_made_during_its_copy,
                        swap_fixture) {
  // Request 2 shares 1's prefix; 1 swaps out and back in, and 2 ends during
  // the copy: the shared blocks' last reference is then the swap-in's, and
  // its failure lets them go - a real free, as 2's end would have been.
  auto p = run(50, 10);
  alloc(prompt_req(2, p));
  alloc(prompt_req(1, p));
  out_begin(1);
  out_done(1, true);
  auto flow = pool().counters();
  in_begin(1);
  BOOST_TEST(pool().release(2).value() == 1u); // its own tail block
  in_done(1, false);
  // 1's fresh tail block out and back; 2's three blocks, its prefix's last
  // reference the swap-in's.
  BOOST_TEST(pool().counters().blocks_allocated == flow.blocks_allocated + 1);
  BOOST_TEST(pool().counters().blocks_freed == flow.blocks_freed + 4);
  BOOST_TEST(pool().used_blocks() == 0u);
}

BOOST_FIXTURE_TEST_CASE(a_swap_ins_end_counts_what_it_shared_though_a_discard_unindexed_it,
                        swap_fixture) {
  // 1's prefix was evicted while it was away; 2 brought it back, and 1's
  // swap-in shares 2's blocks. 2 is discarded during the copy: the blocks
  // it brought leave the index while 1 holds them. The swap-in's end still
  // knows them as shared, not as taken fresh (it told them by the index).
  for (bool copied : {false, true}) {
    make(16);
    auto p = run(50, 10); // 2 full blocks of 4, 2 tokens
    alloc(prompt_req(1, p));
    out_begin(1);
    out_done(1, true);
    BOOST_REQUIRE(pool().evict(16) == 2u);
    alloc(prompt_req(2, p));
    auto flow = pool().counters();
    BOOST_TEST(in_begin(1).size() == 1u); // shares 2's two full blocks
    BOOST_REQUIRE(pool().discard(2));     // its own tail block goes
    BOOST_TEST(pool().index_size() == 0u);
    in_done(1, copied);
    auto now = pool().counters();
    if (copied) {
      BOOST_TEST(now.swap_in_shared == flow.swap_in_shared + 2);
      BOOST_TEST(now.blocks_allocated == flow.blocks_allocated + 1);
      BOOST_TEST(now.blocks_freed == flow.blocks_freed + 1);
      BOOST_TEST(pool().used_blocks() == 3u);
    } else {
      // The fresh block out and back; the shared ones' last reference
      // went, with 2's tail: four frees.
      BOOST_TEST(now.blocks_allocated == flow.blocks_allocated + 1);
      BOOST_TEST(now.blocks_freed == flow.blocks_freed + 4);
      BOOST_TEST(pool().used_blocks() == 0u);
    }
    ok();
  }
}

BOOST_FIXTURE_TEST_CASE(a_discard_after_a_swap_in_unindexes_the_partial_block_it_completed,
                        swap_fixture) {
  // 1 comes back with a partly filled last block and completes it in place
  // (indexed). 2's prompt hits it before 1's pass wrote those tokens; 1's
  // pass fails and it is discarded: the block leaves the index though 2
  // holds it, as without the swap. Before, a swap-in counted every block
  // as written before it moved, and 3 hit 2 tokens nobody wrote.
  alloc(prompt_req(1, run(100, 6))); // a full block and 2 tokens
  out_begin(1);
  out_done(1, true);
  in_begin(1);
  in_done(1, true);
  auto grown = run(106, 2);
  BOOST_REQUIRE(pool().extend(1, 2, grown.data()));
  auto b = seq(1).blocks[1];
  BOOST_REQUIRE(in_index(pool(), b));
  alloc(prompt_req(2, run(100, 9))); // hits both of 1's blocks
  BOOST_REQUIRE(seq(2).blocks[1] == b);
  BOOST_REQUIRE(pool().discard(1));
  BOOST_TEST(!in_index(pool(), b));
  auto third = pool().allocate(prompt_req(3, run(100, 9)));
  BOOST_REQUIRE(third);
  BOOST_TEST(third->hit_tokens == 4u); // the block written before the swap
  ok();
}

BOOST_FIXTURE_TEST_CASE(a_discard_after_a_swap_in_unindexes_a_block_regrown_past_dropped_drafts,
                        swap_fixture) {
  // 1 moves with 4 drafts filling its third block; they are dropped after
  // the swap-in and 4 other tokens grow that place anew (indexed). 2 hits
  // it, 1 is discarded: the block leaves the index.
  alloc(prompt_req(1, run(100, 8))); // 2 full blocks
  auto drafts = run(108, 4);
  BOOST_REQUIRE(pool().extend(1, 4, drafts.data(), false, 4));
  out_begin(1);
  out_done(1, true);
  in_begin(1);
  in_done(1, true);
  BOOST_REQUIRE(pool().settle_drafts(1, 0));
  BOOST_REQUIRE(seq(1).blocks.size() == 2u);
  auto grown = run(200, 4);
  BOOST_REQUIRE(pool().extend(1, 4, grown.data()));
  auto b = seq(1).blocks[2];
  BOOST_REQUIRE(in_index(pool(), b));
  auto prompt = run(100, 8);
  prompt.insert(prompt.end(), grown.begin(), grown.end());
  prompt.push_back(1);
  alloc(prompt_req(2, prompt));
  BOOST_REQUIRE(seq(2).blocks[2] == b);
  BOOST_REQUIRE(pool().discard(1));
  BOOST_TEST(!in_index(pool(), b));
  auto third = pool().allocate(prompt_req(3, prompt));
  BOOST_REQUIRE(third);
  BOOST_TEST(third->hit_tokens == 8u);
  ok();
}

BOOST_FIXTURE_TEST_CASE(swap_in_obeys_free_blocks_quota_and_reservations,
                        swap_fixture) {
  cfg.tenants = {tenant_config{}, tenant_config{}, tenant_config{}};
  cfg.tenants[1].name = "q";
  cfg.tenants[1].max_blocks = 4;
  cfg.tenants[2].name = "r";
  cfg.tenants[2].reserved_blocks = 4;
  make(16);
  alloc(tokens_req(1, 16, "q")); // 4: q's quota
  out_begin(1);
  out_done(1, true);
  alloc(tokens_req(2, 4, "q"));
  auto before = describe(pool());
  BOOST_TEST(code(pool().swap_in_begin(1)) == "quota_exceeded");
  BOOST_TEST(describe(pool()) == before);
  BOOST_TEST(pool().release(2).value() == 1u);
  // The default tenant fills what r's reservation leaves.
  alloc(tokens_req(3, 4 * 9));
  before = describe(pool());
  BOOST_TEST(code(pool().swap_in_begin(1)) == "out_of_blocks");
  BOOST_TEST(describe(pool()) == before);
  BOOST_TEST(pool().release(3).value() == 9u);
  in_begin(1);
  in_done(1, true);
}

BOOST_AUTO_TEST_SUITE_END()
