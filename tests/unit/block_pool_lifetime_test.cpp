// block_pool_core: what happens to blocks after admission - extend and
// copy-on-write, fork, release into the cache, LRU eviction, reclaim and
// preemption, decode tokens filling blocks that become findable.
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

BOOST_AUTO_TEST_SUITE(block_pool_lifetime_suite)

// -- extend, fork, release ------------------------------------------------------

BOOST_FIXTURE_TEST_CASE(extend_past_max_sequence_length_fails_and_changes_nothing,
                        pool_fixture) {
  alloc(tokens_req(1, 6, "", 10));
  auto before = describe(pool(), true);
  BOOST_TEST(code(pool().extend(1, 5, nullptr)) == "exceeds_max_sequence_length");
  BOOST_TEST(describe(pool(), true) == before);
  auto ok = pool().extend(1, 4, nullptr);
  BOOST_REQUIRE(ok);
  BOOST_TEST(ok->changed);
  BOOST_TEST(ok->first_changed == 2u);
  BOOST_TEST((blocks(1) == ids{0, 1, 2}));
  BOOST_TEST(tokens(1) == 10u);
  before = describe(pool(), true);
  BOOST_TEST(code(pool().extend(1, 1, nullptr)) == "exceeds_max_sequence_length");
  BOOST_TEST(describe(pool(), true) == before);
  // Growing by nothing is allowed, even at the limit.
  auto none = pool().extend(1, 0, nullptr);
  BOOST_REQUIRE(none);
  BOOST_TEST(!none->changed);
  BOOST_TEST(describe(pool(), true) == before);
}

BOOST_FIXTURE_TEST_CASE(token_counts_near_the_integer_limit_fail_cleanly,
                        pool_fixture) {
  alloc(tokens_req(1, 5, "", 100));
  auto before = describe(pool(), true);
  // 5 + n wraps around to a small number: still past max_sequence_length.
  for (auto n : {u64_max, u64_max - 2, u64_max - 4})
    BOOST_TEST(code(pool().extend(1, n, nullptr)) == "exceeds_max_sequence_length");
  BOOST_TEST(describe(pool(), true) == before);
  // The same through a copy-on-write, where a wrapped block count once
  // cancelled out the copy and the loop took blocks forever.
  alloc(tokens_req(4, 6, "", 100));
  BOOST_REQUIRE(pool().fork(4, 5));
  before = describe(pool(), true);
  BOOST_TEST(code(pool().extend(5, u64_max - 3, nullptr)) == "exceeds_max_sequence_length");
  BOOST_TEST(describe(pool(), true) == before);
  // A limit near 2^64 and a count whose block count overflows a naive
  // ceil(n / block_size): too many blocks - more than the pool has -
  // not zero blocks.
  for (auto n : {u64_max, u64_max - 1, u64_max - 2})
    BOOST_TEST(code(pool().allocate(tokens_req(2, n, "", u64_max))) == "exceeds_capacity");
  alloc(tokens_req(3, 0, "", u64_max));
  for (auto n : {u64_max, u64_max - 1, u64_max - 2})
    BOOST_TEST(code(pool().extend(3, n, nullptr)) == "exceeds_capacity");
  BOOST_TEST(blocks(3).empty());
  BOOST_TEST(tokens(3) == 0u);
}

BOOST_FIXTURE_TEST_CASE(huge_counts_pass_neither_the_quota_nor_the_pool, pool_fixture) {
  cfg.block_size = 1;
  cfg.tenants = {tenant_config{}, tenant("q", 5)};
  make(16);
  alloc(tokens_req(1, 2, "q"));
  // 2 used + (2^64 - 1) needed wraps to 1, which must not pass: more than
  // the pool, it never fits.
  BOOST_TEST(code(pool().allocate(tokens_req(2, u64_max, "q", u64_max))) == "exceeds_capacity");
  BOOST_TEST(code(pool().allocate(tokens_req(2, 4, "q"))) == "quota_exceeded");
  alloc(tokens_req(2, 3, "q"));
}

BOOST_FIXTURE_TEST_CASE(extend_into_shared_block_copies_on_write, pool_fixture) {
  alloc(tokens_req(1, 6)); // 0 1, block 1 half full
  auto forked = pool().fork(1, 2);
  BOOST_REQUIRE(forked);
  BOOST_TEST((blocks(2) == ids{0, 1}));
  auto res = pool().extend(2, 1, nullptr);
  BOOST_REQUIRE(res);
  BOOST_TEST(str(res->copies) == "(1->2)");
  BOOST_TEST(res->changed);
  BOOST_TEST(res->first_changed == 1u);
  BOOST_TEST((blocks(2) == ids{0, 2}));
  BOOST_TEST((blocks(1) == ids{0, 1})); // the parent keeps the original
  BOOST_TEST(pool().counters().cow_copies == 1u);
  BOOST_TEST(pool().used_blocks() == 3u);
  // Block 1 is the parent's alone now: it appends in place.
  res = pool().extend(1, 2, nullptr);
  BOOST_REQUIRE(res);
  BOOST_TEST(res->copies.empty());
  BOOST_TEST(!res->changed);
  BOOST_TEST((blocks(1) == ids{0, 1}));
  // A full shared last block is never written: appending takes a new block.
  alloc(tokens_req(3, 8)); // 3 4
  BOOST_REQUIRE(pool().fork(3, 4));
  res = pool().extend(4, 1, nullptr);
  BOOST_REQUIRE(res);
  BOOST_TEST(res->copies.empty());
  BOOST_TEST(res->first_changed == 2u);
  BOOST_TEST((blocks(4) == ids{3, 4, 5}));
  // A copy that does not fit fails and changes nothing.
  make(3);
  alloc(tokens_req(1, 6));
  BOOST_REQUIRE(pool().fork(1, 2));
  alloc(tokens_req(3, 1));
  auto before = describe(pool(), true);
  BOOST_TEST(code(pool().extend(2, 1, nullptr)) == "out_of_blocks");
  BOOST_TEST(describe(pool(), true) == before);
}

BOOST_FIXTURE_TEST_CASE(fork_shares_every_block, pool_fixture) {
  alloc(prompt_req(1, run(10, 10))); // 0 1 2
  auto res = pool().fork(1, 2);
  BOOST_REQUIRE(res);
  BOOST_TEST(res->hit_tokens == 0u);
  BOOST_TEST(res->cache_id != pool().find(1)->cache_id);
  BOOST_TEST((blocks(2) == ids{0, 1, 2}));
  BOOST_TEST(tokens(2) == 10u);
  BOOST_TEST(pool().used_blocks() == 3u);
  BOOST_TEST(pool().counters().allocations == 2u);
  BOOST_TEST(pool().counters().blocks_allocated == 3u);
  BOOST_TEST(pool().tenants()[0].active == 2u);
  // The parent can end first; the child keeps every block.
  BOOST_TEST(*pool().release(1) == 0u);
  BOOST_TEST((blocks(2) == ids{0, 1, 2}));
  BOOST_TEST(pool().used_blocks() == 3u);
  BOOST_TEST(*pool().release(2) == 3u);
  BOOST_TEST(pool().used_blocks() == 0u);
  // The fork inherited the hashing state: its own decode blocks get indexed.
  alloc(prompt_req(3, run(500, 6)));
  BOOST_REQUIRE(pool().fork(3, 4));
  auto more = run(506, 2);
  BOOST_REQUIRE(pool().extend(4, 2, more.data()));
  BOOST_TEST(alloc(prompt_req(5, run(500, 9))) == 8u);
}

BOOST_FIXTURE_TEST_CASE(release_returns_blocks_and_keeps_hashed_ones_cached,
                        pool_fixture) {
  alloc(prompt_req(1, run(10, 10))); // 0 1 2; 0 and 1 full and hashed
  auto freed = pool().release(1);
  BOOST_REQUIRE(freed);
  BOOST_TEST(*freed == 3u);
  BOOST_TEST(pool().used_blocks() == 0u);
  BOOST_TEST(pool().cached_blocks() == 2u);
  BOOST_TEST(pool().free_blocks() == 16u); // cached blocks count as free
  BOOST_TEST(pool().tenants()[0].active == 0u);
  BOOST_TEST(!pool().find(1));
  // The same prompt finds both cached blocks again; block 2, released first
  // and not indexed, is on top of the free stack.
  BOOST_TEST(alloc(prompt_req(2, run(10, 10))) == 8u);
  BOOST_TEST((blocks(2) == ids{0, 1, 2}));
  BOOST_TEST(pool().cached_blocks() == 0u);
  BOOST_TEST(pool().used_blocks() == 3u);
  BOOST_TEST(pool().counters().blocks_freed == 3u);
}

BOOST_FIXTURE_TEST_CASE(eviction_is_lru_and_tail_blocks_of_a_sequence_go_first,
                        pool_fixture) {
  alloc(prompt_req(1, run(10, 9))); // 0 1 2
  alloc(prompt_req(2, run(50, 9))); // 3 4 5
  release(1); // LRU: 1 0
  release(2); // LRU: 1 0 4 3
  pool().record_events(true);
  BOOST_TEST(pool().evict(3) == 3u);
  auto events = pool().take_events();
  BOOST_REQUIRE(events.size() == 3u);
  BOOST_TEST(!events[0].stored);
  BOOST_TEST(events[0].block == 1u);
  BOOST_TEST(events[1].block == 0u);
  BOOST_TEST(events[2].block == 4u);
  BOOST_TEST(pool().counters().evictions == 3u);
  BOOST_TEST(pool().evict(5) == 1u); // only block 3 was left
  BOOST_TEST(pool().evict(5) == 0u);
  // Lower retention levels go first, whenever released: a low-priority
  // request's blocks before a normal one's released earlier.
  auto normal = prompt_req(3, run(70, 5));
  auto low = prompt_req(4, run(90, 5));
  low.priority = priority::low;
  auto high = prompt_req(5, run(110, 5));
  high.priority = priority::high;
  alloc(high);
  alloc(normal);
  alloc(low);
  auto hb = blocks(5)[0];
  auto nb = blocks(3)[0];
  auto lb = blocks(4)[0];
  release(5);
  release(3);
  release(4);
  pool().take_events();
  BOOST_TEST(pool().evict(1) == 1u);
  BOOST_TEST(pool().take_events()[0].block == lb);
  BOOST_TEST(pool().evict(1) == 1u);
  BOOST_TEST(pool().take_events()[0].block == nb);
  BOOST_TEST(pool().evict(1) == 1u);
  BOOST_TEST(pool().take_events()[0].block == hb);
}

BOOST_FIXTURE_TEST_CASE(a_full_pool_evicts_the_least_recently_released_block,
                        pool_fixture) {
  make(4);
  alloc(prompt_req(1, run(10, 5))); // 0 1
  alloc(prompt_req(2, run(50, 5))); // 2 3
  release(2); // 3 free, LRU: 2
  release(1); // 1 free, LRU: 2 0
  alloc(tokens_req(3, 12)); // 1 3, then evicts 2
  BOOST_TEST((blocks(3) == ids{1, 3, 2}));
  BOOST_TEST(pool().counters().evictions == 1u);
  release(3);
  BOOST_TEST(alloc(prompt_req(4, run(10, 5))) == 4u); // 0 survived
  BOOST_TEST(alloc(prompt_req(5, run(50, 5))) == 0u); // 2 did not
}

// -- reclaim, preempt ------------------------------------------------------------------

BOOST_FIXTURE_TEST_CASE(reclaim_ignores_a_newer_request_with_the_same_id,
                        pool_fixture) {
  auto first = pool().allocate(tokens_req(5, 8));
  BOOST_REQUIRE(first);
  release(5);
  auto second = pool().allocate(tokens_req(5, 4));
  BOOST_REQUIRE(second);
  BOOST_TEST(first->cache_id != second->cache_id);
  auto before = describe(pool(), true);
  auto stale = pool().reclaim(5, first->cache_id);
  BOOST_REQUIRE(stale);
  BOOST_TEST(*stale == 0u);
  BOOST_TEST(describe(pool(), true) == before);
  auto gone = pool().reclaim(6, first->cache_id); // no such request: nothing
  BOOST_REQUIRE(gone);
  BOOST_TEST(*gone == 0u);
  auto live = pool().reclaim(5, second->cache_id);
  BOOST_REQUIRE(live);
  BOOST_TEST(*live == 1u);
  BOOST_TEST(!pool().find(5));
  BOOST_TEST(pool().counters().preemptions == 0u);
}

BOOST_FIXTURE_TEST_CASE(a_reclaim_caches_only_what_its_admission_found_cached,
                        pool_fixture) {
  // Its owner went, or nobody got it: its K/V may never have been written.
  // The prompt's blocks it brought leave the index (free, not cached);
  // the prefix it found cached, an earlier pass's, stays.
  auto p = run(10, 8);      // 2 full blocks of 4 tokens
  auto q = p + run(500, 9); // p's 2 blocks hit, 2 full ones more, 1 token
  alloc(prompt_req(1, p));
  release(1);
  BOOST_TEST(pool().cached_blocks() == 2u);
  auto second = pool().allocate(prompt_req(2, q));
  BOOST_REQUIRE(second);
  auto freed = pool().reclaim(2, second->cache_id);
  BOOST_REQUIRE(freed);
  BOOST_TEST(*freed == 5u);
  BOOST_TEST(!pool().find(2));
  BOOST_TEST(pool().cached_blocks() == 2u); // p's, not q's own
  BOOST_TEST(invariant(pool()) == "ok");
  BOOST_TEST(alloc(prompt_req(3, q)) == 8u); // p's 2 blocks
  BOOST_TEST(pool().find(3)->hit_blocks == 2u);
  // Unclaimed with nothing found cached: nothing of it stays.
  release(3);
  auto fresh = pool().allocate(prompt_req(4, run(900, 8)));
  BOOST_REQUIRE(fresh);
  BOOST_REQUIRE(pool().reclaim(4, fresh->cache_id));
  BOOST_TEST(pool().cached_prefix(prompt_req(5, run(900, 8))).value() == 0u);
  BOOST_TEST(invariant(pool()) == "ok");
}

BOOST_FIXTURE_TEST_CASE(a_hit_on_blocks_another_request_just_brought_is_not_kept_by_a_reclaim,
                        pool_fixture) {
  // 2 hits 1's blocks while 1 holds them: indexed at 1's admission, maybe
  // unwritten yet. Both reclaimed (their owner went before any pass) -
  // in either order - nothing of them stays findable. (Counted as
  // written, 2's hits stayed cached when 1 went first.)
  for (int order = 0; order < 2; ++order) {
    make(16);
    auto p = run(10, 9); // 2 full blocks of 4 tokens, 1 token
    auto a = pool().allocate(prompt_req(1, p));
    BOOST_REQUIRE(a);
    auto b = pool().allocate(prompt_req(2, p));
    BOOST_REQUIRE(b);
    BOOST_TEST(b->hit_tokens == 8u); // a hit all the same
    BOOST_TEST(pool().find(2)->hit_blocks == 0u);
    if (order == 0) {
      BOOST_REQUIRE(pool().reclaim(1, a->cache_id));
      BOOST_REQUIRE(pool().reclaim(2, b->cache_id));
    } else {
      BOOST_REQUIRE(pool().reclaim(2, b->cache_id));
      BOOST_REQUIRE(pool().reclaim(1, a->cache_id));
    }
    BOOST_TEST(pool().cached_prefix(prompt_req(3, p)).value() == 0u);
    BOOST_TEST(pool().cached_blocks() == 0u);
    BOOST_TEST(invariant(pool()) == "ok");
  }
}

BOOST_FIXTURE_TEST_CASE(hits_count_as_written_only_before_the_first_on_a_held_block,
                        pool_fixture) {
  // 1's prompt: 2 blocks, released (cached, written). 2 takes the first
  // again (held now, which a hit cannot tell from a block just indexed);
  // 3 hits both, and counts neither as written - a table is a prefix, so
  // what follows a held block is as unknown.
  auto p = run(10, 8);
  alloc(prompt_req(1, p));
  release(1);
  alloc(prompt_req(2, std::vector<token_id>(p.begin(), p.begin() + 5)));
  BOOST_TEST(pool().find(2)->hit_blocks == 1u);
  BOOST_TEST(alloc(prompt_req(3, p + run(500, 1))) == 8u);
  BOOST_TEST(pool().find(3)->hit_blocks == 0u);
  BOOST_TEST(invariant(pool()) == "ok");
}

BOOST_FIXTURE_TEST_CASE(a_fork_keeps_only_what_its_parents_admission_found_cached,
                        pool_fixture) {
  // A fork may come before its parent's pass: the blocks the parent's
  // prompt brought may be unwritten, and leave the index when the fork,
  // their last holder, ends by a reclaim or the supervisor's preemption.
  // The prefix the parent's admission found cached stays.
  auto p = run(10, 8);      // 2 full blocks
  auto q = p + run(60, 9);  // p's 2 blocks, 2 full ones more, 1 token
  alloc(prompt_req(1, p));
  release(1); // written by its pass, and cached
  alloc(prompt_req(2, q));
  auto child = pool().fork(2, 3);
  BOOST_REQUIRE(child);
  BOOST_TEST(pool().find(3)->hit_blocks == 2u);
  BOOST_REQUIRE(pool().discard(2)); // its pass failed: the fork holds on
  BOOST_TEST(pool().cached_blocks() == 0u);
  BOOST_REQUIRE(pool().reclaim(3, child->cache_id));
  BOOST_TEST(pool().cached_blocks() == 2u); // p's, not q's own
  BOOST_TEST(invariant(pool()) == "ok");
  BOOST_TEST(alloc(prompt_req(4, q)) == 8u);
}

BOOST_FIXTURE_TEST_CASE(preempt_releases_and_counts, pool_fixture) {
  cfg.tenants = {tenant_config{}, tenant("t")};
  make(16);
  alloc(prompt_req(1, run(0, 9), "t"));
  auto res = pool().preempt(1);
  BOOST_REQUIRE(res);
  BOOST_TEST(*res == 3u);
  BOOST_TEST(!pool().find(1));
  BOOST_TEST(pool().counters().preemptions == 1u);
  BOOST_TEST(pool().tenants()[1].preemptions == 1u);
  BOOST_TEST(pool().cached_blocks() == 2u); // recompute finds its prefix
  BOOST_TEST(alloc(prompt_req(1, run(0, 9), "t")) == 8u);
}

BOOST_FIXTURE_TEST_CASE(preempting_a_request_off_the_device_ends_it_uncounted,
                        pool_fixture) {
  // A preemption counts the device blocks it frees now. A swapped request
  // holds none and one mid-swap keeps its blocks until the move ends: both
  // end (as preempted, for their owners), neither counts.
  cfg.num_host_blocks = 8;
  cfg.tenants = {tenant_config{}, tenant("t")};
  make(16);
  alloc(tokens_req(1, 8, "t"));
  alloc(tokens_req(2, 8, "t"));
  alloc(tokens_req(3, 8, "t"));
  BOOST_REQUIRE(pool().swap_out_begin(1));
  BOOST_REQUIRE(pool().swap_out_done(1, pool().find(1)->cache_id, true));
  BOOST_REQUIRE(pool().swap_out_begin(2)); // still moving
  auto free_host = pool().free_host_blocks();
  BOOST_TEST(pool().preempt(1).value() == 0u);
  BOOST_TEST(pool().free_host_blocks() == free_host + 2); // its host copy
  BOOST_TEST(pool().preempt(2).value() == 0u);
  BOOST_TEST(pool().num_ghosts() == 1u); // blocks back when the move ends
  BOOST_TEST(!pool().find(1));
  BOOST_TEST(!pool().find(2));
  BOOST_TEST(pool().counters().preemptions == 0u);
  BOOST_TEST(pool().tenants()[1].preemptions == 0u);
  // A resident one counts.
  BOOST_TEST(pool().preempt(3).value() == 2u);
  BOOST_TEST(pool().counters().preemptions == 1u);
  BOOST_TEST(pool().tenants()[1].preemptions == 1u);
}

// -- hashing -----------------------------------------------------------------------------

BOOST_FIXTURE_TEST_CASE(decode_tokens_fill_blocks_that_become_findable,
                        pool_fixture) {
  make(32);
  // No prompt and no tokens yet: everything it decodes is hashed.
  alloc(tokens_req(1, 0));
  auto t = run(200, 10);
  BOOST_REQUIRE(pool().extend(1, 3, t.data()));
  BOOST_REQUIRE(pool().extend(1, 7, t.data() + 3));
  BOOST_TEST(pool().counters().blocks_cached == 2u);
  BOOST_TEST(alloc(prompt_req(2, run(200, 8) + std::vector<token_id>{1})) == 8u);
  // A prompt's partial block is indexed once decoding fills it.
  alloc(prompt_req(3, run(300, 6)));
  auto more = run(306, 2);
  BOOST_REQUIRE(pool().extend(3, 2, more.data()));
  BOOST_TEST(alloc(prompt_req(4, run(300, 9))) == 8u);
  // A step's flat token ids are cut in list order, one run per extend.
  alloc(tokens_req(7, 0));
  alloc(tokens_req(8, 0));
  step_request step;
  step.extends = {extend_op{7, 5}, extend_op{8, 4}};
  step.tokens = run(600, 5) + run(700, 4);
  auto r = pool().run_step(step);
  BOOST_TEST(r.failed.empty());
  BOOST_TEST(r.changed.size() == 2u);
  BOOST_TEST(alloc(prompt_req(9, run(600, 5))) == 4u);
  BOOST_TEST(alloc(prompt_req(10, run(700, 5))) == 4u);
  // A request allocated by count has unknown tokens: it is never hashed.
  alloc(tokens_req(5, 4));
  auto named = run(400, 8);
  BOOST_REQUIRE(pool().extend(5, 8, named.data()));
  BOOST_TEST(alloc(prompt_req(6, run(400, 9))) == 0u);
}

BOOST_FIXTURE_TEST_CASE(unnamed_tokens_end_hashing, pool_fixture) {
  auto u = run(10, 12);
  alloc(prompt_req(1, std::vector<token_id>(u.begin(), u.begin() + 6))); // 0 1
  BOOST_REQUIRE(pool().extend(1, 2, nullptr)); // fills block 1, unnamed
  BOOST_REQUIRE(pool().extend(1, 4, u.data() + 8)); // named, but too late
  BOOST_TEST(!pool().find(1)->hashable);
  BOOST_TEST(pool().counters().blocks_cached == 1u);
  BOOST_TEST(alloc(prompt_req(2, u + std::vector<token_id>{1})) == 4u);
}

BOOST_FIXTURE_TEST_CASE(events_record_store_and_evict_in_order, pool_fixture) {
  alloc(prompt_req(1, run(0, 4))); // before recording: no event
  BOOST_TEST(pool().take_events().empty());
  pool().record_events(true);
  auto p = run(10, 9);
  alloc(prompt_req(2, p)); // 1 2 3
  auto ev = pool().take_events();
  BOOST_REQUIRE(ev.size() == 2u);
  // Hashes are the documented chain from the tenant's namespace seed.
  auto seed = detail::namespace_seed("tenant:default");
  auto h0 = detail::hash_block(seed, p.data(), 4);
  auto h1 = detail::hash_block(h0, p.data() + 4, 4);
  BOOST_TEST(ev[0].stored);
  BOOST_TEST(ev[0].block == 1u);
  BOOST_TEST(ev[0].hash == h0.lo);
  BOOST_TEST(ev[0].parent_hash == 0u);
  BOOST_TEST(ev[1].stored);
  BOOST_TEST(ev[1].block == 2u);
  BOOST_TEST(ev[1].hash == h1.lo);
  BOOST_TEST(ev[1].parent_hash == h0.lo);
  BOOST_TEST(ev[1].tenant == 0u);
  // A hit stores nothing; decoding a block full does.
  alloc(prompt_req(3, p));
  BOOST_TEST(pool().take_events().empty());
  auto more = run(19, 3);
  BOOST_REQUIRE(pool().extend(2, 3, more.data()));
  ev = pool().take_events();
  BOOST_REQUIRE(ev.size() == 1u);
  BOOST_TEST(ev[0].block == 3u);
  BOOST_TEST(ev[0].parent_hash == h1.lo);
  BOOST_TEST(ev[0].hash == detail::hash_block(h1, run(18, 4).data(), 4).lo);
  // Evictions, in LRU order, name the blocks and hashes they removed.
  release(2);
  release(3);
  release(1);
  BOOST_TEST(pool().evict(16) == 4u);
  ev = pool().take_events();
  BOOST_REQUIRE(ev.size() == 4u);
  BOOST_TEST(!ev[0].stored);
  BOOST_TEST(ev[0].block == 3u);
  BOOST_TEST(ev[1].block == 2u);
  BOOST_TEST(ev[1].hash == h1.lo);
  BOOST_TEST(ev[1].parent_hash == h0.lo);
  BOOST_TEST(ev[2].block == 1u);
  BOOST_TEST(ev[3].block == 0u);
  BOOST_TEST(pool().take_events().empty());
  pool().record_events(false);
  alloc(prompt_req(4, p));
  BOOST_TEST(pool().take_events().empty());
}

BOOST_FIXTURE_TEST_CASE(prefix_caching_off_shares_nothing, pool_fixture) {
  cfg.prefix_caching = false;
  make(16);
  auto p = run(10, 9);
  alloc(prompt_req(1, p));
  release(1);
  BOOST_TEST(pool().cached_blocks() == 0u);
  BOOST_TEST(alloc(prompt_req(2, p)) == 0u);
  BOOST_TEST(pool().counters().query_tokens == 0u);
  BOOST_TEST(pool().counters().blocks_cached == 0u);
}

BOOST_AUTO_TEST_SUITE_END()
