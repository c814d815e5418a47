// The scenarios that escaped the prefix index's lineage before, each
// checked against the brute-force lineage oracle (lineage_oracle.hpp) after
// every operation, and by what the index holds and a later prompt hits:
// orphan chains, forks that ended or copied their parent's unwritten tail,
// chains of requests that ended, drafts that came back from a swap, a
// swap-in's shared block. The oracle's random runs are in
// lineage_oracle_test.cpp.
#include <cstdint>
#include <set>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/actors/block_pool_core.hpp"
#include "lineage_oracle.hpp"
#include "pool_fixture.hpp"

using namespace kvactor;
using namespace kvactor::test;

BOOST_AUTO_TEST_SUITE(lineage_oracle_suite)

namespace {

/// An oracle over a pool of 64 blocks of 4 (small_config()'s; 16 host
/// blocks for the swap_oracle_fixture).
struct oracle_fixture {
  lineage_oracle o;

  oracle_fixture() : oracle_fixture(small_config()) {
  }

  explicit oracle_fixture(const cache_config& cfg) : o(cfg, 64) {
  }

  ~oracle_fixture() {
    BOOST_TEST(o.failure() == "", o.failure() << "\noperations:\n" << o.log());
  }

  bool indexed(block_id b) const {
    return in_index(o.pool(), b);
  }

  bool hashable(request_id id) const {
    return o.pool().find(id)->hashable;
  }

  /// Allocates and requires success; returns the hit tokens.
  std::uint64_t alloc(request_id id, const std::vector<token_id>& prompt) {
    auto r = o.allocate(id, prompt);
    BOOST_REQUIRE_MESSAGE(r, "allocate " << id << ": " << code(r));
    return r->hit_tokens;
  }

  /// Extends and requires success; returns the number of copies.
  std::size_t grow(request_id id, const std::vector<token_id>& tokens,
                   std::uint64_t drafts = 0) {
    auto r = o.extend(id, tokens, drafts);
    BOOST_REQUIRE_MESSAGE(r, "extend " << id << ": " << code(r));
    return r->copies.size();
  }

  /// Swaps `id` out and back in, both moves made.
  void swap_out_and_in(request_id id) {
    BOOST_REQUIRE(o.swap_out_begin(id));
    BOOST_REQUIRE(o.swap_out_done(id, true));
    BOOST_REQUIRE(o.swap_in_begin(id));
    BOOST_REQUIRE(o.swap_in_done(id, true));
  }

  /// Runs a step and requires that no part of it failed.
  step_result step(const lineage_oracle::step_ops& s) {
    auto r = o.step(s);
    BOOST_REQUIRE_MESSAGE(r.failed.empty(), "step: " << o.log());
    return r;
  }
};

struct swap_oracle_fixture : oracle_fixture {
  swap_oracle_fixture() : oracle_fixture(with_host_blocks()) {
  }

  static cache_config with_host_blocks() {
    auto cfg = small_config();
    cfg.num_host_blocks = 16;
    return cfg;
  }
};

} // namespace

BOOST_FIXTURE_TEST_CASE(a_discard_takes_an_orphan_chain_through_a_victims_unindexed_block,
                        oracle_fixture) {
  // A (1) brings X, unwritten. V (2) hits X and brings Y; W (3) hits X, Y
  // and brings Z, then ends: Z is cached. V is a victim, preempted
  // unindexing: Y (its own) leaves the index, so no indexed chain leads
  // from X to Z, and nobody holds Z. A is discarded: Z was computed over
  // X, never written - it must go. Else, once X and Y are recomputed, a
  // prompt X Y Z hits Z.
  auto X = run(100, 4), Y = run(200, 4), Z = run(300, 4);
  alloc(1, cat(X, {1}));
  alloc(2, cat(cat(X, Y), {2}));
  alloc(3, cat(cat(cat(X, Y), Z), {3}));
  auto z = o.blocks(3)[2];
  BOOST_REQUIRE(o.release(3));
  BOOST_REQUIRE(o.preempt(2, true));
  BOOST_REQUIRE(indexed(z));
  BOOST_REQUIRE(o.discard(1));
  BOOST_TEST(!indexed(z));
  alloc(4, cat(cat(X, Y), {4}));
  BOOST_TEST(alloc(5, cat(cat(cat(X, Y), Z), {5})) == 8u); // X, Y: not Z
}

BOOST_FIXTURE_TEST_CASE(a_discard_takes_the_block_an_ended_fork_filled_over_a_copy_of_its_unwritten_tail,
                        oracle_fixture) {
  // P is written and cached. A (1) hits it; its own region is its partly
  // filled block 4 (T), unwritten. C (2) forks A and completes block 4
  // through a copy-on-write copy - T's K/V copied from what A never wrote
  // - indexed; C ends, the block cached. A is discarded: C's block must
  // leave the index though nobody holds it and it is not A's. Else, once P
  // is recomputed (A was its last holder: it went too), P T U hits it.
  auto P = run(100, 16), T = run(500, 2), U = run(600, 2);
  alloc(9, cat(P, {900}));
  BOOST_REQUIRE(o.release(9));
  BOOST_REQUIRE(alloc(1, cat(P, T)) == 16u);
  BOOST_REQUIRE(o.fork(1, 2));
  BOOST_REQUIRE(grow(2, U) == 1u);
  auto c4 = o.blocks(2)[4];
  BOOST_REQUIRE(indexed(c4));
  BOOST_REQUIRE(o.release(2));
  BOOST_REQUIRE(indexed(c4));
  BOOST_REQUIRE(o.discard(1));
  BOOST_TEST(!indexed(c4));
  alloc(3, cat(P, {901}));
  BOOST_TEST(alloc(4, cat(cat(cat(P, T), U), {950})) == 16u); // P only
}

BOOST_FIXTURE_TEST_CASE(a_discard_stops_a_fork_left_on_the_unwritten_tail_its_parent_copied_away,
                        oracle_fixture) {
  // A (1) hits the written P; its own region is only its partly filled
  // block 4 (T). C (2) forks it. A grows first and copies its tail away:
  // C alone holds the original block 4, no longer in A's table. C fills it
  // and block 5, both indexed. A is discarded: both were computed over T,
  // which A never wrote - they leave the index, and C indexes nothing more.
  auto P = run(100, 16), T = run(500, 2), U = run(600, 2), R = run(700, 4);
  alloc(9, cat(P, {900}));
  BOOST_REQUIRE(o.release(9));
  BOOST_REQUIRE(alloc(1, cat(P, T)) == 16u);
  BOOST_REQUIRE(o.fork(1, 2));
  auto tail = o.blocks(1)[4];
  BOOST_REQUIRE(grow(1, {800}) == 1u);
  BOOST_REQUIRE(o.blocks(1)[4] != tail);
  BOOST_REQUIRE(o.blocks(2)[4] == tail);
  grow(2, cat(U, R));
  auto c5 = o.blocks(2)[5];
  BOOST_REQUIRE(indexed(tail));
  BOOST_REQUIRE(indexed(c5));
  BOOST_REQUIRE(o.discard(1));
  BOOST_TEST(!indexed(tail));
  BOOST_TEST(!indexed(c5));
  BOOST_TEST(!hashable(2));
  grow(2, run(1000, 4));
  BOOST_TEST(!indexed(o.blocks(2)[6]));
  BOOST_TEST(o.pool().index_size() == 4u); // P
}

BOOST_FIXTURE_TEST_CASE(a_discarded_fork_leaves_its_parent_indexing_the_tail_it_wrote,
                        oracle_fixture) {
  // A (1) writes its prompt (block 0, and 2 tokens of block 1). C (2)
  // forks it and grows through a copy of the tail; D (3) forks it and
  // writes nothing, sharing A's tail. Both are discarded: what they never
  // wrote is theirs, not A's - A still indexes the blocks it fills. (The
  // oracle cannot see this: it only finds what is indexed wrongly.)
  auto prompt = run(100, 6);
  alloc(1, prompt);
  auto a1 = o.blocks(1)[1];
  BOOST_REQUIRE(o.fork(1, 2));
  BOOST_REQUIRE(grow(2, {600}) == 1u);
  BOOST_REQUIRE(o.fork(1, 3));
  BOOST_REQUIRE(o.discard(2));
  BOOST_TEST(hashable(1));
  BOOST_REQUIRE(o.discard(3));
  BOOST_TEST(hashable(1));
  BOOST_TEST(indexed(o.blocks(1)[0]));
  grow(1, run(106, 6));
  BOOST_REQUIRE(o.blocks(1)[1] == a1);
  BOOST_TEST(indexed(a1));
  BOOST_TEST(indexed(o.blocks(1)[2]));
  BOOST_TEST(o.pool().index_size() == 3u);
}

BOOST_FIXTURE_TEST_CASE(a_discard_takes_a_chain_of_ended_hitters_and_keeps_what_was_built_on_written_kv,
                        oracle_fixture) {
  // P is written and cached. A (1) hits it and brings Q, unwritten. B (2)
  // hits P, Q and brings R; C (3) hits P, Q, R and brings S. D (4) hits P
  // and brings V - computed over written K/V only. B and C end: R and S
  // are cached, nobody holds them. A is discarded: Q, R, S leave the index
  // (R over Q, S over R over Q); P (D holds it) and V stay, also once D
  // ends.
  auto P = run(100, 4), Q = run(200, 4), R = run(300, 4), S = run(400, 4),
       V = run(500, 4);
  alloc(9, cat(P, {900}));
  auto p = o.blocks(9)[0];
  BOOST_REQUIRE(o.release(9));
  BOOST_REQUIRE(alloc(1, cat(cat(P, Q), {1})) == 4u);
  BOOST_REQUIRE(alloc(2, cat(cat(cat(P, Q), R), {2})) == 8u);
  BOOST_REQUIRE(alloc(3, cat(cat(cat(cat(P, Q), R), S), {3})) == 12u);
  BOOST_REQUIRE(alloc(4, cat(cat(P, V), {4})) == 4u);
  auto q = o.blocks(1)[1], r = o.blocks(2)[2], s = o.blocks(3)[3],
       v = o.blocks(4)[1];
  BOOST_REQUIRE(o.release(2));
  BOOST_REQUIRE(o.release(3));
  BOOST_REQUIRE((indexed_blocks(o.pool()) == std::set<block_id>{p, q, r, s, v}));
  BOOST_REQUIRE(o.discard(1));
  BOOST_TEST(!indexed(q));
  BOOST_TEST(!indexed(r));
  BOOST_TEST(!indexed(s));
  BOOST_TEST((indexed_blocks(o.pool()) == std::set<block_id>{p, v}));
  BOOST_REQUIRE(o.release(4));
  BOOST_TEST((indexed_blocks(o.pool()) == std::set<block_id>{p, v}));
  // Recomputed, P Q is found again - but not R or S over it.
  alloc(5, cat(cat(P, Q), {5}));
  BOOST_TEST(alloc(6, cat(cat(cat(cat(P, Q), R), S), {6})) == 8u);
  BOOST_TEST(alloc(7, cat(cat(P, V), {7})) == 8u);
}

BOOST_FIXTURE_TEST_CASE(a_discard_takes_a_draft_block_that_came_back_from_a_swap_and_settled,
                        swap_oracle_fixture) {
  // B (1) brings X Y, unwritten. A (2) hits them and grows by 3 drafts,
  // which fill its block 2 (never indexed: drafts). A is swapped out and
  // back in: block 2 comes back as a fresh copy, which must keep what it
  // was computed over. The drafts settle, all kept: block 2 enters the
  // index. B is discarded: A's block 2 was computed over X Y, never
  // written - it must go. Else, once X Y are recomputed, a prompt X Y 2 3
  // 4 5 hits it.
  auto X = run(100, 4), Y = run(200, 4);
  alloc(1, cat(cat(X, Y), {1}));
  BOOST_REQUIRE(alloc(2, cat(cat(X, Y), {2})) == 8u);
  grow(2, {3, 4, 5}, 3);
  swap_out_and_in(2);
  BOOST_REQUIRE(o.settle_drafts(2, 3));
  auto a2 = o.blocks(2)[2];
  BOOST_REQUIRE(indexed(a2));
  BOOST_REQUIRE(o.discard(1));
  BOOST_TEST(!indexed(a2));
  BOOST_REQUIRE(o.release(2));
  alloc(3, cat(cat(X, Y), {9}));
  BOOST_TEST(alloc(4, cat(cat(cat(X, Y), {2, 3, 4, 5}), {7})) == 8u); // X, Y
}

BOOST_FIXTURE_TEST_CASE(a_reclaim_takes_a_draft_block_that_came_back_from_a_swap_and_a_step_kept,
                        swap_oracle_fixture) {
  // The same through run_step, as a scheduler runs it: A (2) is admitted
  // in a step, hitting the X Y that B (1) brought; its drafts come in the
  // next step's extend, a swap out and in between steps, the verdict (all
  // kept) in the step after. B's owner dies: the reclaim must take A's
  // block 2 out of the index.
  auto X = run(100, 4), Y = run(200, 4);
  alloc(1, cat(cat(X, Y), {1}));
  lineage_oracle::step_ops admit;
  admit.extends = {{1, {11}}};
  admit.admits = {{2, cat(cat(X, Y), {2})}};
  auto r = step(admit);
  BOOST_REQUIRE(r.admitted.size() == 1u);
  BOOST_REQUIRE(r.admitted[0].hit_tokens == 8u);
  lineage_oracle::step_ops drafts;
  drafts.extends = {{1, {12}}, {2, {3, 4, 5}, 3}};
  step(drafts);
  swap_out_and_in(2);
  lineage_oracle::step_ops verdict;
  verdict.verdicts = {{2, 3}};
  verdict.extends = {{1, {13}}, {2, {6}}};
  step(verdict);
  auto a2 = o.blocks(2)[2];
  BOOST_REQUIRE(indexed(a2));
  BOOST_REQUIRE(o.reclaim(1));
  BOOST_TEST(!indexed(a2));
  BOOST_REQUIRE(o.release(2));
  alloc(3, cat(cat(X, Y), {9}));
  BOOST_TEST(alloc(4, cat(cat(cat(X, Y), {2, 3, 4, 5}), {7})) == 8u); // X, Y
}

BOOST_FIXTURE_TEST_CASE(a_swap_in_records_only_the_blocks_it_copied_back,
                        swap_oracle_fixture) {
  // A fork's held copy fails: it is back on its parent's last block S,
  // which the parent filled meanwhile (indexed). The parent ends; the fork
  // swaps out and in, sharing S again from the index (revived, held by it
  // alone) - a block it never wrote. It copies away from S at its next
  // extend, and S is cached: the swap-in must not have recorded S as its
  // new epoch's (the invariant: no cached block's writer is live; a
  // discard of the fork would take S out for nothing).
  alloc(1, {1, 2, 3, 4, 5, 6});
  BOOST_REQUIRE(o.fork(1, 2));
  BOOST_REQUIRE(o.extend(2, {9}, 0, true));
  BOOST_REQUIRE(o.extend(1, {7, 8}, 0, true));
  auto s = o.blocks(1)[1];
  o.settle(false);
  BOOST_REQUIRE(indexed(s));
  BOOST_REQUIRE(o.release(1));
  swap_out_and_in(2);
  BOOST_REQUIRE(o.blocks(2)[1] == s);
  BOOST_REQUIRE(grow(2, {9}) == 1u); // S is indexed: copied first
  BOOST_TEST(indexed(s));
  BOOST_TEST(invariant(o.pool()) == "ok");
  BOOST_REQUIRE(o.discard(2));
  BOOST_TEST(indexed(s));
}

BOOST_AUTO_TEST_SUITE_END()
