// Edge cases of discard (and a step's discards): forks and pins sharing a
// discarded request's blocks, drafts at the discard, a prompt re-admitted
// in the same step, a swapped request. See draft_edges_test.cpp for
// the draft paths.
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/actors/block_pool_core.hpp"
#include "kvactor/messages/error.hpp"
#include "kvactor/messages/step.hpp"
#include "pool_fixture.hpp"

using namespace kvactor;
using namespace kvactor::test;

BOOST_AUTO_TEST_SUITE(discard_edges_suite)

namespace {

/// A prefix P (4 full blocks of 4), Q, R and T, U to build on it.
struct built_on_fixture : pool_fixture {
  std::vector<token_id> P = run(100, 16);
  std::vector<token_id> Q = run(500, 4);
  std::vector<token_id> R = run(600, 4);
  std::vector<token_id> T = run(700, 2);
  std::vector<token_id> U = run(800, 2);

  /// A (1) brings P, unwritten. E (5) hits it and completes a block Q' equal
  /// to B's (2) indexed Q - so Q' stays unindexed - then indexes R over it:
  /// R's parent hash is Q's. B's Q is evicted. Returns E's R.
  block_id duplicate_chain() {
    make(64);
    alloc(prompt_req(1, cat(P, run(900, 1))));
    alloc(prompt_req(5, cat(P, {Q[0]})));
    alloc(prompt_req(2, cat(cat(P, Q), run(901, 1))));
    std::vector<token_id> rest(Q.begin() + 1, Q.end());
    BOOST_REQUIRE(pool().extend(5, 3, rest.data()));
    auto grown = cat(R, run(950, 1));
    BOOST_REQUIRE(pool().extend(5, 5, grown.data()));
    BOOST_REQUIRE(!in_index(pool(), blocks(5)[4])); // Q' lost to B's Q
    auto e_r = blocks(5)[5];
    BOOST_REQUIRE(in_index(pool(), e_r));
    release(2);
    BOOST_REQUIRE(pool().evict(1) == 1u); // B's Q
    return e_r;
  }

  /// P written and cached; A (1) hits it, its own block its partly filled
  /// last one (T, unwritten); C (2) forks A. Returns A's incarnation.
  std::uint64_t fork_over_unwritten_tail() {
    make(64);
    alloc(prompt_req(9, cat(P, run(900, 1))));
    release(9);
    alloc(prompt_req(1, cat(P, T)));
    BOOST_REQUIRE(pool().fork(1, 2));
    return cache_id(1);
  }
};

} // namespace

BOOST_FIXTURE_TEST_CASE(a_reclaim_takes_what_others_computed_over_its_blocks_out_of_the_index,
                        pool_fixture) {
  // A's prompt P (4 full blocks) is indexed at its admission, unwritten.
  // B hits them and computes its block 4 (Q) over them. A is reclaimed
  // before its pass: its blocks leave the index though B holds them - and
  // so must B's block 4. Before, it stayed: C recomputed P under the same
  // hashes, and D's prompt P+Q hit 20 tokens, block 4 included.
  make(32);
  auto P = run(100, 16);
  auto Q = run(500, 4);
  auto a = pool().allocate(prompt_req(1, cat(P, run(900, 1))));
  BOOST_REQUIRE(a);
  alloc(prompt_req(2, cat(cat(P, Q), run(901, 1))));
  auto b4 = blocks(2)[4];
  BOOST_REQUIRE(in_index(pool(), b4));
  BOOST_REQUIRE(pool().reclaim(1, a->cache_id));
  BOOST_TEST(!in_index(pool(), b4));
  BOOST_TEST(pool().index_size() == 0u);
  BOOST_TEST(blocks(2).size() == 6u); // B holds them still
  // B computes over what nobody wrote: what it fills is indexed no more.
  auto more = run(600, 3);
  BOOST_REQUIRE(pool().extend(2, 3, more.data()));
  BOOST_TEST(!in_index(pool(), blocks(2)[5]));
  alloc(prompt_req(3, cat(cat(P, run(700, 4)), run(902, 1))));
  auto d = pool().allocate(prompt_req(4, cat(cat(P, Q), run(903, 1))));
  BOOST_REQUIRE(d);
  BOOST_TEST(d->hit_tokens == 16u); // C's P, not B's block 4
  BOOST_TEST(blocks(4)[4] != b4);
  BOOST_TEST(invariant(pool()) == "ok");
}

BOOST_FIXTURE_TEST_CASE(a_discard_takes_what_a_request_away_on_the_host_computed_over_its_blocks,
                        pool_fixture) {
  // As above, but B is swapped out when A goes: its block 4 is cached,
  // indexed, and leaves the index with A's; B, back in, indexes nothing
  // it fills.
  cfg.num_host_blocks = 8;
  make(32);
  auto P = run(100, 16);
  auto Q = run(500, 4);
  alloc(prompt_req(1, cat(P, run(900, 1))));
  alloc(prompt_req(2, cat(cat(P, Q), run(901, 1))));
  auto b4 = blocks(2)[4];
  auto cid = pool().find(2)->cache_id;
  BOOST_REQUIRE(pool().swap_out_begin(2));
  BOOST_REQUIRE(pool().swap_out_done(2, cid, true));
  BOOST_REQUIRE(in_index(pool(), b4)); // cached
  BOOST_REQUIRE(pool().discard(1));
  BOOST_TEST(!in_index(pool(), b4));
  BOOST_TEST(pool().index_size() == 0u);
  BOOST_REQUIRE(pool().swap_in_begin(2));
  BOOST_REQUIRE(pool().swap_in_done(2, cid, true));
  auto more = run(600, 3);
  BOOST_REQUIRE(pool().extend(2, 3, more.data()));
  BOOST_TEST(pool().index_size() == 0u);
  alloc(prompt_req(3, cat(P, run(902, 1))));
  auto d = pool().allocate(prompt_req(4, cat(cat(P, Q), run(903, 1))));
  BOOST_REQUIRE(d);
  BOOST_TEST(d->hit_tokens == 16u);
  BOOST_TEST(invariant(pool()) == "ok");
}

BOOST_FIXTURE_TEST_CASE(a_discard_takes_what_a_holder_computed_over_a_duplicate_block,
                        built_on_fixture) {
  // No chain of indexed blocks leads from P to E's R once B's Q is gone,
  // but E holds P: what it indexed after P goes with A's discard. Before,
  // R stayed, and once C recomputed P and Q, D hit R.
  auto e_r = duplicate_chain();
  BOOST_REQUIRE(pool().discard(1));
  BOOST_TEST(!in_index(pool(), e_r));
  BOOST_TEST(pool().index_size() == 0u);
  release(5);
  alloc(prompt_req(3, cat(cat(P, Q), run(902, 1))));
  BOOST_TEST(alloc(prompt_req(4, cat(cat(cat(P, Q), R), run(903, 1)))) == 20u);
}

BOOST_FIXTURE_TEST_CASE(a_discard_stops_a_fork_that_copied_its_unwritten_tail,
                        built_on_fixture) {
  // C completes A's partial block through a copy (indexed): its first
  // tokens' K/V are what A never wrote. A is reclaimed: C holds none of
  // A's blocks any more, but as A's fork what it built from there on goes.
  // Before, D hit C's block.
  auto a = fork_over_unwritten_tail();
  auto res = pool().extend(2, 2, U.data());
  BOOST_REQUIRE(res);
  BOOST_REQUIRE(res->copies.size() == 1u);
  auto c4 = blocks(2)[4];
  BOOST_REQUIRE(in_index(pool(), c4));
  BOOST_REQUIRE(pool().reclaim(1, a));
  BOOST_TEST(!in_index(pool(), c4));
  BOOST_TEST(!pool().find(2)->hashable);
  release(2);
  BOOST_TEST(alloc(prompt_req(3, cat(cat(cat(P, T), U), run(950, 1)))) == 16u);
}

BOOST_FIXTURE_TEST_CASE(a_discard_stops_a_fork_sharing_its_unwritten_tail,
                        built_on_fixture) {
  // A is reclaimed before C writes: C shares A's unindexed partial block,
  // completes it in place - and indexes nothing from there.
  auto a = fork_over_unwritten_tail();
  BOOST_REQUIRE(pool().reclaim(1, a));
  BOOST_TEST(!pool().find(2)->hashable);
  BOOST_REQUIRE(pool().extend(2, 2, U.data()));
  BOOST_TEST(!in_index(pool(), blocks(2)[4]));
  release(2);
  BOOST_TEST(alloc(prompt_req(3, cat(cat(cat(P, T), U), run(950, 1)))) == 16u);
}

BOOST_FIXTURE_TEST_CASE(a_discard_takes_what_a_ghost_indexed_over_its_blocks,
                        built_on_fixture) {
  // The duplicate chain with E ended during its swap-out (a ghost): what
  // it indexed over A's blocks goes all the same.
  cfg.num_host_blocks = 32;
  auto e_r = duplicate_chain();
  auto e = cache_id(5);
  BOOST_REQUIRE(pool().swap_out_begin(5));
  release(5); // a ghost until its copy ends
  BOOST_REQUIRE(pool().discard(1));
  BOOST_TEST(!in_index(pool(), e_r));
  BOOST_REQUIRE(pool().swap_out_done(5, e, true));
  BOOST_TEST(pool().index_size() == 0u);
  alloc(prompt_req(3, cat(cat(P, Q), run(902, 1))));
  BOOST_TEST(alloc(prompt_req(4, cat(cat(cat(P, Q), R), run(903, 1)))) == 20u);
}

BOOST_FIXTURE_TEST_CASE(a_victims_preemption_leaves_what_others_computed_over_its_blocks,
                        pool_fixture) {
  // A supervisor's victim: the pass of the step that admitted it still
  // writes its K/V, so what B computed over them stands.
  make(32);
  auto P = run(100, 16);
  auto Q = run(500, 4);
  alloc(prompt_req(1, cat(P, run(900, 1))));
  alloc(prompt_req(2, cat(cat(P, Q), run(901, 1))));
  auto b4 = blocks(2)[4];
  BOOST_REQUIRE(pool().preempt(1, true));
  BOOST_TEST(in_index(pool(), b4));
  auto more = run(600, 3);
  BOOST_REQUIRE(pool().extend(2, 3, more.data()));
  BOOST_TEST(in_index(pool(), blocks(2)[5]));
  BOOST_TEST(invariant(pool()) == "ok");
}

BOOST_FIXTURE_TEST_CASE(discarding_a_fork_parent_unindexes_what_the_child_holds,
                        pool_fixture) {
  // The parent brought the blocks: they leave the index with it (their
  // K/V may never have been written), the child keeps holding them.
  pool().record_events(true);
  alloc(prompt_req(1, run(100, 13)));
  BOOST_REQUIRE(pool().fork(1, 2));
  pool().take_events();
  auto child = blocks(2);
  BOOST_REQUIRE(pool().discard(1));
  BOOST_TEST(blocks(2) == child);
  BOOST_TEST(pool().index_size() == 0u);
  auto events = pool().take_events();
  BOOST_TEST(events.size() == 3u);
  for (auto& e : events)
    BOOST_TEST(!e.stored);
  BOOST_TEST(pool().cached_prefix(prompt_req(3, run(100, 13))).value() == 0u);
  // The child's private copy of the shared tail on its next extend.
  std::vector<token_id> one{113};
  auto res = pool().extend(2, 1, one.data());
  BOOST_REQUIRE(res);
  BOOST_TEST(res->copies.empty()); // the parent is gone: sole holder
  BOOST_REQUIRE(pool().discard(2));
  BOOST_TEST(pool().take_events().empty());
  BOOST_TEST(pool().index_size() == 0u);
  BOOST_TEST(pool().free_blocks() == 16u);
  BOOST_TEST(pool().cached_blocks() == 0u);
}

BOOST_FIXTURE_TEST_CASE(discarding_a_fork_child_unindexes_a_tail_it_completed_in_place,
                        pool_fixture) {
  // Block size 4: the parent's second block holds 2 tokens, shared with
  // its fork. One step: the parent appends 1 through a held copy; the
  // child, seeing only the copy's hold on the block, writes 2 into it in
  // place and completes it, indexed. The copy fails: the parent is back
  // on the block, which holds the child's 2 tokens. The child's pass
  // failed too: its discard must take the block out of the index though
  // the parent holds it - nobody wrote those tokens' K/V.
  auto prompt = run(100, 6);
  alloc(prompt_req(1, prompt));
  BOOST_REQUIRE(pool().fork(1, 2));
  auto shared = blocks(1).back();
  step_request step;
  step.extends = {extend_op{1, 1, 0}, extend_op{2, 2, 0}};
  step.tokens = {700, 701, 702};
  auto r = pool().run_step(step, true);
  BOOST_TEST(r.failed.empty());
  BOOST_REQUIRE(r.copies.size() == 1u);
  BOOST_REQUIRE(blocks(2).back() == shared);
  BOOST_TEST((pool().settle_copies(r.copies, false) == std::vector<request_id>{1}));
  BOOST_REQUIRE(blocks(1).back() == shared);
  auto childs = prompt;
  childs.insert(childs.end(), {701, 702, 9});
  BOOST_REQUIRE(pool().cached_prefix(prompt_req(3, childs)).value() == 8u);
  BOOST_REQUIRE(pool().discard(2));
  BOOST_TEST(blocks(1).back() == shared);
  // The parent's first block, which its admission indexed, stays.
  BOOST_TEST(pool().cached_prefix(prompt_req(3, childs)).value() == 4u);
  BOOST_TEST(invariant(pool()) == "ok");
}

BOOST_FIXTURE_TEST_CASE(discarding_one_of_two_holders_of_a_pinned_prefix,
                        pool_fixture) {
  cfg.max_pinned_blocks = 8;
  make(16);
  auto prompt = run(100, 13);
  alloc(prompt_req(1, prompt));
  auto pinned = pool().pin(0, prompt, 1000, 0);
  BOOST_REQUIRE(pinned);
  BOOST_TEST(*pinned == 3u);
  BOOST_TEST(alloc(prompt_req(2, prompt)) == 12u);
  // 2 only found them: its discard leaves them pinned, with 1.
  BOOST_REQUIRE(pool().discard(2));
  BOOST_TEST(pool().pinned_blocks() == 3u);
  BOOST_TEST(pool().index_size() == 3u);
  // 1 brought them: they lose their pins, and leave the index, while 3
  // still holds them.
  BOOST_TEST(alloc(prompt_req(3, prompt)) == 12u);
  BOOST_REQUIRE(pool().discard(1));
  BOOST_TEST(pool().pinned_blocks() == 0u);
  BOOST_TEST(pool().index_size() == 0u);
  BOOST_REQUIRE(pool().discard(3));
  BOOST_TEST(pool().pinned_blocks() == 0u);
  BOOST_TEST(pool().index_size() == 0u);
  BOOST_TEST(pool().free_blocks() == 16u);
}

BOOST_FIXTURE_TEST_CASE(a_discarded_request_with_drafts_caches_nothing,
                        pool_fixture) {
  pool().record_events(true);
  prompt_then_drafts();
  auto events = pool().take_events();
  BOOST_TEST(events.size() == 1u); // the prompt's full block only
  step_request step;
  step.discards = {1};
  auto r = pool().run_step(step);
  BOOST_TEST((r.freed == std::vector<request_id>{1}));
  events = pool().take_events();
  BOOST_REQUIRE(events.size() == 1u);
  BOOST_TEST(!events[0].stored);
  BOOST_TEST(pool().index_size() == 0u);
  BOOST_TEST(pool().free_blocks() == 16u);
  BOOST_TEST(pool().cached_blocks() == 0u);
}

BOOST_FIXTURE_TEST_CASE(a_step_readmitting_a_discarded_prompt_finds_nothing,
                        pool_fixture) {
  auto prompt = run(100, 13);
  alloc(prompt_req(1, prompt));
  step_request step;
  step.discards = {1};
  step.admits = {prompt_req(2, prompt)};
  auto r = pool().run_step(step);
  BOOST_TEST((r.freed == std::vector<request_id>{1}));
  BOOST_REQUIRE(r.admitted.size() == 1u);
  BOOST_TEST(r.admitted[0].hit_tokens == 0u); // discards run before admits
  BOOST_TEST(pool().index_size() == 3u);      // 2's own blocks
}

BOOST_FIXTURE_TEST_CASE(a_swapped_request_with_drafts_takes_back_what_it_wrote,
                        pool_fixture) {
  // Away on the host its epoch goes on: the prompt's full block it wrote
  // and let go at the swap-out leaves the index (before, a discard of a
  // swapped request was a release, and the block stayed findable).
  cfg.num_host_blocks = 8;
  make(16);
  prompt_then_drafts();
  BOOST_REQUIRE(pool().swap_out_begin(1));
  BOOST_REQUIRE(pool().swap_out_done(1, cache_id(1), true));
  auto host = pool().free_host_blocks();
  step_request step;
  step.verdicts = {draft_verdict{1, 5}};
  step.discards = {1};
  auto r = pool().run_step(step);
  BOOST_REQUIRE(r.failed.size() == 1u); // the verdict: not resident
  BOOST_TEST(code(r.failed[0].error) == "invalid_request");
  BOOST_TEST((r.freed == std::vector<request_id>{1}));
  BOOST_TEST(pool().find(1) == nullptr);
  BOOST_TEST(pool().free_host_blocks() == host + 3);
  BOOST_TEST(pool().index_size() == 0u);
  BOOST_TEST(pool().cached_blocks() == 0u);
  BOOST_TEST(alloc(prompt_req(1, run(100, 12))) == 0u);
}

BOOST_FIXTURE_TEST_CASE(a_steps_discards_take_what_each_discard_would_in_one_scan,
                        built_on_fixture) {
  // A (1) and B (2) bring P and Q, unwritten; C (3) and D (4) build on
  // them and end; E (5) builds on A's and runs on; F (6) builds on
  // nothing of theirs. A failed pass discards A and B in one step: the
  // pool scans once for both, and takes what a discard of each would
  // (the same blocks; its eviction count and free order may differ).
  auto scenario = [&] {
    make(64);
    alloc(prompt_req(1, cat(P, run(900, 1))));
    alloc(prompt_req(2, cat(Q, run(901, 1))));
    alloc(prompt_req(3, cat(cat(P, R), run(902, 1))));
    alloc(prompt_req(4, cat(cat(Q, T), run(903, 3))));
    alloc(prompt_req(5, cat(cat(P, U), run(904, 3))));
    alloc(prompt_req(6, cat(run(700, 8), run(905, 1))));
    release(3);
    release(4);
  };
  scenario();
  for (request_id id : {1, 2})
    BOOST_REQUIRE(pool().discard(id));
  auto one_by_one = indexed_blocks(pool());
  auto free_after = pool().free_blocks();
  scenario();
  step_request step;
  step.discards = {1, 2};
  auto r = pool().run_step(step);
  BOOST_TEST((r.freed == std::vector<request_id>{1, 2}));
  BOOST_TEST((indexed_blocks(pool()) == one_by_one));
  BOOST_TEST(pool().free_blocks() == free_after);
  BOOST_TEST(!pool().find(5)->hashable); // computed over A's P
  BOOST_TEST(pool().find(6)->hashable);
  BOOST_TEST(pool().index_size() == 2u); // F's own two
  BOOST_TEST(invariant(pool()) == "ok");
}

BOOST_AUTO_TEST_SUITE_END()
