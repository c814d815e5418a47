// discard: a request ends as with release, but nothing it wrote stays in
// the prefix index - for a request whose forward pass failed, so its K/V
// were never written. What its admission found cached (written by earlier
// passes) stays, pins and all; what it brought leaves the index even while
// others hold it.
#include <cstdint>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/actors/block_pool_core.hpp"
#include "kvactor/messages/step.hpp"
#include "pool_fixture.hpp"

using namespace kvactor;
using namespace kvactor::test;

BOOST_AUTO_TEST_SUITE(discard_suite)

BOOST_FIXTURE_TEST_CASE(a_discarded_prompt_leaves_nothing_cached, pool_fixture) {
  pool().record_events(true);
  auto prompt = run(100, 13); // 3 full blocks and one token
  alloc(prompt_req(1, prompt));
  BOOST_TEST(pool().index_size() == 3u);
  pool().take_events();
  auto freed = pool().discard(1);
  BOOST_REQUIRE(freed);
  BOOST_TEST(*freed == 4u);
  BOOST_TEST(pool().index_size() == 0u);
  BOOST_TEST(pool().cached_blocks() == 0u);
  BOOST_TEST(pool().free_blocks() == 16u);
  // Subscribers hear the three blocks go.
  auto events = pool().take_events();
  BOOST_TEST(events.size() == 3u);
  for (auto& e : events)
    BOOST_TEST(!e.stored);
  // The same prompt again finds nothing: it computes its blocks anew.
  BOOST_TEST(alloc(prompt_req(2, prompt)) == 0u);
  // A release, by contrast, keeps them.
  release(2);
  BOOST_TEST(pool().cached_blocks() == 3u);
  BOOST_TEST(alloc(prompt_req(3, prompt)) == 12u);
}

BOOST_FIXTURE_TEST_CASE(blocks_it_brought_leave_the_index_while_another_holds_them,
                        pool_fixture) {
  // 2 hit 1's blocks in the same pass, before 1's K/V were written. 1's
  // pass failed: what it brought is findable no more, though 2 holds it
  // (and reads what 1 never wrote - discard the pass's other requests
  // too). A discard of the one that only found them leaves them be.
  auto prompt = run(100, 13);
  alloc(prompt_req(1, prompt));
  BOOST_TEST(alloc(prompt_req(2, prompt)) == 12u); // same pass: it hit them
  BOOST_TEST(alloc(prompt_req(3, prompt)) == 12u);
  BOOST_REQUIRE(pool().discard(3));
  BOOST_TEST(pool().index_size() == 3u);
  auto shared = blocks(2);
  BOOST_REQUIRE(pool().discard(1));
  BOOST_TEST(blocks(2) == shared);
  BOOST_TEST(pool().index_size() == 0u);
  BOOST_TEST(pool().cached_prefix(prompt_req(4, prompt)).value() == 0u);
  BOOST_REQUIRE(pool().discard(2));      // the pass failed for both
  BOOST_TEST(pool().index_size() == 0u);
  BOOST_TEST(pool().cached_blocks() == 0u);
  BOOST_TEST(pool().used_blocks() == 0u);
}

BOOST_FIXTURE_TEST_CASE(a_supervisors_victim_leaves_what_others_hold_indexed,
                        pool_fixture) {
  // Its step's pass still writes its K/V (a reclaimed request's nobody
  // writes): the blocks it brought that 2 hit stay findable.
  auto prompt = run(100, 13);
  alloc(prompt_req(1, prompt));
  BOOST_TEST(alloc(prompt_req(2, prompt)) == 12u);
  BOOST_REQUIRE(pool().preempt(1, true));
  BOOST_TEST(pool().index_size() == 3u);
  BOOST_TEST(pool().cached_prefix(prompt_req(3, prompt)).value() == 12u);
  auto second = pool().find(2)->cache_id;
  alloc(prompt_req(4, prompt));
  BOOST_REQUIRE(pool().reclaim(4, pool().find(4)->cache_id));
  BOOST_TEST(pool().index_size() == 3u); // 4 only found them
  BOOST_REQUIRE(pool().reclaim(2, second));
  BOOST_TEST(pool().index_size() == 0u);
  BOOST_TEST(invariant(pool()) == "ok");
}

BOOST_FIXTURE_TEST_CASE(a_pinned_prefix_it_revived_keeps_its_pins, pool_fixture) {
  cfg.max_pinned_blocks = 8;
  make(16);
  auto prompt = run(100, 13);
  alloc(prompt_req(1, prompt));
  release(1);
  auto pinned = pool().pin(0, prompt, 1000, 0);
  BOOST_REQUIRE(pinned);
  BOOST_TEST(*pinned == 3u);
  // A request revives the pinned blocks and adds two of its own; its pass
  // fails. An earlier pass wrote what it found cached, and the failed one
  // wrote nothing there (its slots are past its hits): the pinned prefix
  // stays findable and pinned. Its own blocks go.
  auto longer = prompt;
  auto more = run(500, 8);
  longer.insert(longer.end() - 1, more.begin(), more.end()); // 5 full blocks
  BOOST_TEST(alloc(prompt_req(2, longer)) == 12u);
  BOOST_TEST(pool().index_size() == 5u);
  BOOST_REQUIRE(pool().discard(2));
  BOOST_TEST(pool().pinned_blocks() == 3u);
  BOOST_TEST(pool().index_size() == 3u);
  BOOST_TEST(pool().pinned_cached_blocks() == 3u);
  BOOST_TEST(pool().cached_blocks() == 0u); // its own went free
  BOOST_TEST(pool().used_blocks() == 0u);
  BOOST_TEST(pool().cached_prefix(prompt_req(3, longer)).value() == 12u);
  BOOST_TEST(invariant(pool()) == "ok");
}

BOOST_FIXTURE_TEST_CASE(a_victims_blocks_leave_with_the_discard_of_their_last_holder,
                        pool_fixture) {
  // 2 hits 1's blocks in the same step, before its pass. The supervisor
  // preempts 1 (its epoch ends as written: its step's pass writes its
  // K/V). Then that pass fails: the scheduler's discard of 1 finds it
  // gone, its discard of 2 must take 1's blocks out - 2 held them last,
  // and nobody may have written them.
  auto prompt = run(100, 13);
  alloc(prompt_req(1, prompt));
  BOOST_TEST(alloc(prompt_req(2, prompt)) == 12u);
  BOOST_REQUIRE(pool().preempt(1, true));
  BOOST_TEST(pool().index_size() == 3u); // 2 holds them, its pass writes
  BOOST_TEST(code(pool().discard(1)) == "unknown_request");
  BOOST_REQUIRE(pool().discard(2));
  BOOST_TEST(pool().index_size() == 0u);
  BOOST_TEST(pool().cached_prefix(prompt_req(3, prompt)).value() == 0u);
  BOOST_TEST(invariant(pool()) == "ok");
}

BOOST_FIXTURE_TEST_CASE(a_step_discards_after_its_frees, pool_fixture) {
  alloc(prompt_req(1, run(100, 9)));
  alloc(prompt_req(2, run(200, 9)));
  step_request step;
  step.frees = {1};
  step.discards = {2, 7};
  block_pool_core::step_trace trace;
  auto r = pool().run_step(step, false, &trace);
  BOOST_TEST((r.freed == std::vector<request_id>{1, 2}));
  BOOST_TEST((trace.freed_blocks == std::vector<std::uint32_t>{3, 3}));
  BOOST_REQUIRE(r.failed.size() == 1u);
  BOOST_TEST(r.failed[0].id == 7u);
  BOOST_TEST(code(r.failed[0].error) == "unknown_request");
  BOOST_TEST(pool().cached_blocks() == 2u); // 1's two full blocks only
}

BOOST_FIXTURE_TEST_CASE(a_swapped_request_is_discarded_as_never_written,
                        pool_fixture) {
  // A swap-out does not say its pass succeeded: the blocks it wrote and
  // left cached leave the index when it is discarded away on the host
  // (before, that was a release, and they stayed).
  cfg.num_host_blocks = 8;
  make(16);
  alloc(prompt_req(1, run(100, 9)));
  auto cache_id = pool().find(1)->cache_id;
  BOOST_REQUIRE(pool().swap_out_begin(1));
  BOOST_REQUIRE(pool().swap_out_done(1, cache_id, true));
  BOOST_TEST(pool().cached_blocks() == 2u); // its full blocks, left behind
  BOOST_REQUIRE(pool().discard(1));
  BOOST_TEST(pool().free_host_blocks() == 8u);
  BOOST_TEST(pool().cached_blocks() == 0u);
  BOOST_TEST(pool().free_blocks() == 16u);
}

BOOST_FIXTURE_TEST_CASE(a_request_discarded_while_swapping_out_leaves_nothing_cached,
                        pool_fixture) {
  // Its failed pass may not have written what the move copies: a
  // swap-out confirms nothing. Before, such a discard was a release, and
  // its two full blocks stayed findable.
  cfg.num_host_blocks = 8;
  for (bool copied : {true, false}) {
    make(16);
    auto prompt = run(100, 9); // two full blocks and one token
    alloc(prompt_req(1, prompt));
    auto cache_id = pool().find(1)->cache_id;
    BOOST_REQUIRE(pool().swap_out_begin(1));
    BOOST_REQUIRE(pool().discard(1));
    BOOST_TEST(pool().index_size() == 0u); // out now, though still held
    BOOST_TEST(pool().find(1) == nullptr);
    BOOST_TEST(invariant(pool()) == "ok");
    // The ghost lets its blocks go when the move ends, made or failed.
    BOOST_REQUIRE(pool().swap_out_done(1, cache_id, copied));
    BOOST_TEST(pool().free_blocks() == 16u);
    BOOST_TEST(pool().cached_blocks() == 0u);
    BOOST_TEST(pool().free_host_blocks() == 8u);
    BOOST_TEST(alloc(prompt_req(2, prompt)) == 0u);
  }
}

BOOST_FIXTURE_TEST_CASE(a_second_copy_discarded_while_swapping_out_never_takes_the_first_ones_place,
                        pool_fixture) {
  cfg.num_host_blocks = 8;
  make(16);
  auto prompt = run(100, 5);
  alloc(prompt_req(1, prompt)); // indexes block 0 of the prompt
  // 2 computes the same first block again: a prompt too short to hit it,
  // grown by the rest. 1 holds the first copy, so 2's is a second copy.
  alloc(prompt_req(2, run(100, 2)));
  auto rest = run(102, 3);
  BOOST_REQUIRE(pool().extend(2, 3, rest.data()));
  BOOST_REQUIRE(pool().index_size() == 1u);
  auto cache_id = pool().find(2)->cache_id;
  BOOST_REQUIRE(pool().swap_out_begin(2));
  BOOST_REQUIRE(pool().discard(2));
  // The first copy goes: cached, then evicted while 2's ghost still holds
  // its copy. Before, that copy was indexed in its place.
  release(1);
  BOOST_TEST(pool().evict(16) == 1u);
  BOOST_TEST(pool().index_size() == 0u);
  BOOST_REQUIRE(pool().swap_out_done(2, cache_id, true));
  BOOST_TEST(pool().index_size() == 0u);
  BOOST_TEST(pool().free_blocks() == 16u);
}

BOOST_FIXTURE_TEST_CASE(a_victim_preempted_while_swapping_out_leaves_no_prefix_behind,
                        pool_fixture) {
  // As a resident victim: the supervisor's preemption (unindexing) takes
  // the blocks it lets go last out of the index. Mid-swap, its ghost holds
  // them until the copy ends; before, they stayed indexed and were cached
  // then.
  cfg.num_host_blocks = 8;
  auto prompt = run(100, 13); // three full blocks
  alloc(prompt_req(1, prompt));
  BOOST_REQUIRE(pool().preempt(1, true));
  BOOST_TEST(*pool().cached_prefix(prompt_req(9, prompt)) == 0u);
  make(16);
  alloc(prompt_req(1, prompt));
  auto cid = cache_id(1);
  BOOST_REQUIRE(pool().swap_out_begin(1));
  BOOST_REQUIRE(pool().preempt(1, true));
  BOOST_TEST(*pool().cached_prefix(prompt_req(9, prompt)) == 0u);
  BOOST_TEST(invariant(pool()) == "ok");
  BOOST_REQUIRE(pool().swap_out_done(1, cid, true));
  BOOST_TEST(*pool().cached_prefix(prompt_req(9, prompt)) == 0u);
  BOOST_TEST(pool().free_blocks() == 16u);
}

BOOST_FIXTURE_TEST_CASE(blocks_a_discard_brought_and_held_last_leave_as_when_resident,
                        pool_fixture) {
  // 2 hit 1's blocks while 1 held them (hits a discard does not keep),
  // then held them alone. Its discard takes them out of the index whether
  // it is resident or being swapped out; before, mid-swap, they were
  // cached when the copy ended.
  cfg.num_host_blocks = 8;
  auto prompt = run(100, 13);
  for (bool swapping : {false, true}) {
    make(16);
    alloc(prompt_req(1, prompt));
    BOOST_REQUIRE(alloc(prompt_req(2, prompt + run(700, 3))) == 12u);
    release(1);
    auto cid = cache_id(2);
    if (swapping)
      BOOST_REQUIRE(pool().swap_out_begin(2));
    BOOST_REQUIRE(pool().discard(2));
    if (swapping)
      BOOST_REQUIRE(pool().swap_out_done(2, cid, true));
    BOOST_TEST(invariant(pool()) == "ok");
    BOOST_TEST(*pool().cached_prefix(prompt_req(9, prompt)) == 0u,
               (swapping ? "swapping out" : "resident"));
    BOOST_TEST(pool().free_blocks() == 16u);
  }
}

BOOST_FIXTURE_TEST_CASE(a_second_copy_indexed_during_its_swap_out_leaves_with_a_discard_away,
                        pool_fixture) {
  // 2 computes the prompt's first block again (1 holds the first copy):
  // its copy is a second copy, unindexed when the swap-out begins. The
  // first copy is evicted during the copy, so 2's takes its place; the
  // swap-out must take its hash along, or a discard while 2 is away cannot
  // find it, and later prompts hit K/V 2 never wrote.
  cfg.num_host_blocks = 8;
  make(16);
  auto prompt = run(100, 5);
  alloc(prompt_req(1, prompt));
  alloc(prompt_req(2, run(100, 2)));
  auto rest = run(102, 3);
  BOOST_REQUIRE(pool().extend(2, 3, rest.data()));
  auto cid = cache_id(2);
  BOOST_REQUIRE(pool().swap_out_begin(2));
  release(1);
  BOOST_REQUIRE(pool().evict(16) == 1u);
  BOOST_REQUIRE(pool().index_size() == 1u); // 2's copy, promoted
  BOOST_REQUIRE(pool().swap_out_done(2, cid, true));
  BOOST_REQUIRE(pool().discard(2));
  BOOST_TEST(pool().index_size() == 0u);
  BOOST_TEST(*pool().cached_prefix(prompt_req(9, prompt)) == 0u);
  BOOST_TEST(pool().free_blocks() == 16u);
}

BOOST_FIXTURE_TEST_CASE(a_discard_while_coming_back_takes_back_what_it_shares_again,
                        pool_fixture) {
  // Away, 2's full blocks stayed cached; its swap-in shares them back. A
  // discard before the copy ends finds them through its own hashes (a
  // swap-in takes its own epoch on from no block, so nothing spread): out
  // of the index at once, freed when the copy ends.
  cfg.num_host_blocks = 8;
  make(16);
  auto prompt = run(100, 13); // three full blocks and one token
  alloc(prompt_req(2, prompt));
  auto cid = cache_id(2);
  BOOST_REQUIRE(pool().swap_out_begin(2));
  BOOST_REQUIRE(pool().swap_out_done(2, cid, true));
  BOOST_REQUIRE(pool().swap_in_begin(2));
  BOOST_REQUIRE(pool().discard(2));
  BOOST_TEST(pool().index_size() == 0u);
  BOOST_TEST(invariant(pool()) == "ok");
  BOOST_REQUIRE(pool().swap_in_done(2, cid, true));
  BOOST_TEST(*pool().cached_prefix(prompt_req(9, prompt)) == 0u);
  BOOST_TEST(pool().free_blocks() == 16u);
  BOOST_TEST(pool().free_host_blocks() == 8u);
}

BOOST_AUTO_TEST_SUITE_END()
