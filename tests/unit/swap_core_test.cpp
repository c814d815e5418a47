// block_pool_core's two-phase swap to the host tier and back, driven directly:
// what swapping out holds and frees, what a failed device copy undoes,
// releases deferred while the device moves bytes, a full host tier. Swapping
// back in: swap_in_test.cpp; the bytes themselves: swap_bytes_test.cpp.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/device/storage.hpp"
#include "swap_fixture.hpp"

using namespace kvactor;
using namespace kvactor::test;
using namespace kvactor::test::swap_core;
using kvactor::detail::residency;

BOOST_AUTO_TEST_SUITE(swap_core_suite)

BOOST_FIXTURE_TEST_CASE(swap_out_frees_device_blocks_and_holds_host_blocks,
                        swap_fixture) {
  auto p = run(100, 13);                              // 3 full blocks + 1
  alloc(prompt_req(1, p));                            // 0 1 2 3
  alloc(prompt_req(2, std::vector<token_id>(p.begin(), p.begin() + 9))); // 0 1 4
  BOOST_TEST((table_of(seq(2)) == ids{0, 1, 4}));
  auto moves = out_begin(1);
  BOOST_TEST((devices(moves) == ids{0, 1, 2, 3}));
  // While the device reads them, the blocks stay held.
  BOOST_TEST(pool().used_blocks() == 5u);
  BOOST_TEST(pool().free_host_blocks() == 4u);
  BOOST_TEST((seq(1).where == residency::swapping_out));
  BOOST_TEST(seq(1).host_blocks.size() == 4u);
  // Block 3 was private and unindexed: freed; block 2 private and indexed:
  // cached; 0 and 1 stay with request 2.
  BOOST_TEST(out_done(1, true) == 2u);
  BOOST_TEST((seq(1).where == residency::swapped));
  BOOST_TEST(seq(1).blocks.empty());
  BOOST_TEST(seq(1).num_tokens == 13u);
  BOOST_TEST(seq(1).host_blocks.size() == 4u);
  BOOST_TEST(pool().used_blocks() == 3u);
  BOOST_TEST(pool().cached_blocks() == 1u);
  BOOST_TEST(pool().free_host_blocks() == 4u);
  BOOST_TEST(pool().counters().swap_outs == 1u);
  BOOST_TEST(pool().tenants()[0].used == 3u);
  BOOST_TEST(pool().tenants()[0].active == 2u);
  // The cached prefix is still findable by others.
  alloc(prompt_req(3, p));
  BOOST_TEST((seq(3).blocks[2] == 2u));
}

BOOST_FIXTURE_TEST_CASE(swapped_request_cannot_grow_or_fork_but_can_be_released,
                        swap_fixture) {
  alloc(tokens_req(1, 10));
  alloc(tokens_req(9, 2));
  out_begin(1);
  // Mid-copy: nothing may touch it but the copy's end (or a release).
  BOOST_TEST(code(pool().extend(1, 1, nullptr)) == "invalid_request");
  BOOST_TEST(code(pool().fork(1, 2)) == "invalid_request");
  BOOST_TEST(code(pool().swap_out_begin(1)) == "invalid_request");
  BOOST_TEST(code(pool().swap_in_begin(1)) == "invalid_request");
  auto cid = seq(1).cache_id;
  BOOST_TEST(code(pool().swap_in_done(1, cid, true)) == "invalid_request");
  BOOST_TEST(code(pool().swap_out_done(1, cid + 100, true)) == "invalid_request");
  out_done(1, true);
  auto before = describe(pool());
  BOOST_TEST(code(pool().extend(1, 1, nullptr)) == "invalid_request");
  BOOST_TEST(code(pool().fork(1, 2)) == "invalid_request");
  BOOST_TEST(code(pool().fork(9, 1)) == "duplicate_request");
  BOOST_TEST(code(pool().swap_out_begin(1)) == "invalid_request");
  BOOST_TEST(code(pool().swap_out_done(1, cid, true)) == "invalid_request");
  BOOST_TEST(code(pool().swap_in_done(1, cid, false)) == "invalid_request");
  BOOST_TEST(code(pool().swap_out_begin(7)) == "unknown_request");
  BOOST_TEST(code(pool().swap_in_begin(7)) == "unknown_request");
  BOOST_TEST(code(pool().swap_in_begin(9)) == "invalid_request"); // resident
  BOOST_TEST(pool().choose_victims(100).size() == 1u); // only request 9
  BOOST_TEST(describe(pool()) == before);
  ok();
  BOOST_TEST(*pool().release(1) == 0u); // no device block to free
  BOOST_TEST(pool().find(1) == nullptr);
  BOOST_TEST(pool().free_host_blocks() == 8u);
  BOOST_TEST(pool().tenants()[0].active == 1u);
}

BOOST_FIXTURE_TEST_CASE(failed_swap_out_restores_everything, swap_fixture) {
  alloc(prompt_req(1, run(0, 10)));
  alloc(prompt_req(2, run(0, 9)));
  alloc(tokens_req(3, 5));
  auto before = describe(pool());
  auto moves = out_begin(1);
  BOOST_TEST(out_done(1, false) == 0u);
  BOOST_TEST(describe(pool()) == before);
  // Even the host blocks it would be handed next are the same.
  auto again = out_begin(1);
  BOOST_TEST((again == moves));
  out_done(1, false);
  BOOST_TEST(describe(pool()) == before);
  // It is resident again: it grows and forks.
  BOOST_TEST(static_cast<bool>(pool().extend(1, 3, nullptr)));
  BOOST_TEST(static_cast<bool>(pool().fork(1, 4)));
  ok();
}

BOOST_FIXTURE_TEST_CASE(release_during_a_swap_ends_it_and_frees_its_id_at_once,
                        swap_fixture) {
  // Out, ok / out, failed / in, ok / in, failed.
  for (int c = 0; c < 4; ++c) {
    make(16);
    alloc(prompt_req(1, run(0, 9)));  // 0 1 2, two indexed
    alloc(prompt_req(2, run(0, 9)));  // shares 0 1
    bool in = c >= 2;
    bool success = c % 2 == 0;
    if (in) {
      out_begin(1);
      out_done(1, true);
      in_begin(1);
    } else {
      out_begin(1);
    }
    auto used = pool().used_blocks();
    auto cache_id = seq(1).cache_id;
    BOOST_TEST(*pool().release(1) == 0u);
    ok();
    // It has ended: a ghost holding its blocks until the device's move
    // ends (nothing handed out mid-copy), out of the id index and no
    // longer active; a second end fails and counts nothing, GC finds
    // nothing to reclaim.
    BOOST_TEST(pool().find(1) == nullptr);
    BOOST_TEST(pool().num_ghosts() == 1u);
    BOOST_TEST(pool().used_blocks() == used);
    BOOST_TEST(pool().tenants()[0].active == 1u);
    auto preemptions = pool().counters().preemptions;
    BOOST_TEST(code(pool().preempt(1)) == "unknown_request");
    BOOST_TEST(code(pool().release(1)) == "unknown_request");
    BOOST_TEST(pool().counters().preemptions == preemptions);
    BOOST_TEST(pool().find(1, cache_id) == nullptr);
    BOOST_TEST(pool().reclaim(1, cache_id).value() == 0u);
    // The id is free at once: a new incarnation, with fresh blocks.
    alloc(tokens_req(1, 4));
    auto again = seq(1).cache_id;
    BOOST_TEST(again != cache_id);
    auto again_blocks = seq(1).blocks;
    BOOST_TEST(pool().used_blocks() == used + 1);
    // Fresh allocations cannot take the ghost's blocks meanwhile.
    alloc(tokens_req(3, 4 * (16 - used - 1)));
    BOOST_TEST(code(pool().allocate(tokens_req(4, 1))) == "out_of_blocks");
    BOOST_TEST(pool().release(3).value() == 16 - used - 1);
    // A swap end naming the new incarnation is refused (it is resident).
    BOOST_TEST(code(in ? pool().swap_in_done(1, again, success)
                       : pool().swap_out_done(1, again, success))
               == "invalid_request");
    ok();
    // The ghost's end finishes its release: device and host blocks all
    // return, and the new incarnation is untouched.
    auto swaps = pool().counters();
    auto freed = in ? in_done(1, success, cache_id) : out_done(1, success, cache_id);
    BOOST_TEST(pool().num_ghosts() == 0u);
    // A swap of an ended request took no effect: not counted as one.
    BOOST_TEST(pool().counters().swap_outs == swaps.swap_outs);
    BOOST_TEST(pool().counters().swap_ins == swaps.swap_ins);
    BOOST_TEST(pool().counters().swap_in_shared == swaps.swap_in_shared);
    // Only its private block: the prefix it shares stays with request 2
    // (a swap-in shares it again rather than copying it).
    BOOST_TEST(freed == 1u, "case " << c);
    BOOST_TEST(pool().free_host_blocks() == 8u);
    BOOST_TEST(pool().used_blocks() == 4u); // request 2's, the new 1's
    BOOST_TEST(pool().tenants()[0].active == 2u);
    BOOST_TEST(seq(1).cache_id == again);
    BOOST_TEST((seq(1).where == residency::resident));
    BOOST_TEST(seq(1).blocks == again_blocks);
    BOOST_TEST(code(pool().swap_out_done(1, cache_id, true)) == "invalid_request");
    BOOST_TEST(code(pool().swap_in_done(1, cache_id, true)) == "invalid_request");
    BOOST_TEST(pool().release(1).value() == 1u);
    ok();
  }
}

BOOST_FIXTURE_TEST_CASE(a_full_host_tier_is_out_of_blocks_and_changes_nothing,
                        swap_fixture) {
  cfg.num_host_blocks = 5;
  make(16);
  alloc(tokens_req(1, 12)); // 3
  alloc(tokens_req(2, 12)); // 3
  out_begin(1);
  auto before = describe(pool());
  BOOST_TEST(code(pool().swap_out_begin(2)) == "out_of_blocks");
  BOOST_TEST(describe(pool()) == before);
  out_done(1, true);
  BOOST_TEST(code(pool().swap_out_begin(2)) == "out_of_blocks");
  // No host tier at all.
  cfg.num_host_blocks = 0;
  make(16);
  alloc(tokens_req(1, 4));
  before = describe(pool());
  BOOST_TEST(code(pool().swap_out_begin(1)) == "out_of_blocks");
  BOOST_TEST(describe(pool()) == before);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(blocks_leaving_suite)

// What a relief counts as going already (the supervisor's victims):
// the blocks that swaps in flight take away, and only those.
BOOST_FIXTURE_TEST_CASE(swaps_in_flight_count_their_private_blocks_as_leaving,
                        swap_fixture) {
  alloc(prompt_req(1, run(0, 13)));                   // 0 1 2 3
  alloc(prompt_req(2, run(0, 9)));                    // shares 0 1, then 4
  alloc(tokens_req(3, 8));                            // 5 6
  BOOST_TEST(pool().blocks_leaving() == 0u);
  // Swapping out: its blocks shared with 2 stay in use after the copy.
  out_begin(1);
  BOOST_TEST(pool().blocks_leaving() == 2u);
  // Ended mid-copy, a ghost: its blocks go at the copy's end all the same.
  auto first = seq(1).cache_id;
  BOOST_TEST(*pool().release(1) == 0u);
  BOOST_TEST(pool().blocks_leaving() == 2u);
  out_done(1, false, first);
  BOOST_TEST(pool().blocks_leaving() == 0u);
  // Swapping in, live: its fresh blocks stay. Ended mid-copy: they go.
  out_begin(3);
  out_done(3, true);
  BOOST_TEST(in_begin(3).size() == 2u);
  BOOST_TEST(pool().blocks_leaving() == 0u);
  auto third = seq(3).cache_id;
  BOOST_TEST(*pool().release(3) == 0u);
  BOOST_TEST(pool().blocks_leaving() == 2u);
  in_done(3, true, third);
  BOOST_TEST(pool().blocks_leaving() == 0u);
  ok();
}

BOOST_AUTO_TEST_SUITE_END()
