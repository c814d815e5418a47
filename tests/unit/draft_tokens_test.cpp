// Draft tokens (speculative decoding): an extend's last `drafts` tokens get
// slots but enter the prefix index only once settle_drafts keeps them; the
// rejected ones are dropped - the request shrinks, blocks left empty go back
// free (never cached: their K/V belong to tokens that are not there). Also
// how a scheduler whose forward pass failed takes a step's tokens back.
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

namespace {

/// The cases' pool (pool_fixture::prompt_then_drafts sets up request 1).
using draft_fixture = pool_fixture;

} // namespace

BOOST_AUTO_TEST_SUITE(draft_tokens_suite)

BOOST_FIXTURE_TEST_CASE(drafts_enter_the_index_only_once_accepted,
                        draft_fixture) {
  prompt_then_drafts();
  auto b = blocks(1);
  // Block 1 (100..107 less the prompt's block) ends in a draft, block 2
  // holds drafts only: neither may be found.
  BOOST_TEST((indexed_blocks(pool()) == std::set<block_id>{b[0]}));
  BOOST_TEST(drafts(1) == 5u);
  auto res = pool().settle_drafts(1, 5);
  BOOST_REQUIRE(res);
  BOOST_TEST(!res->changed);
  BOOST_TEST(drafts(1) == 0u);
  BOOST_TEST((indexed_blocks(pool()) == std::set<block_id>{b[0], b[1], b[2]}));
  // A prompt of the same tokens now shares all three blocks.
  BOOST_TEST(alloc(prompt_req(2, run(100, 13))) == 12u);
  auto b2 = blocks(2);
  BOOST_TEST((ids(b2.begin(), b2.begin() + 3) == b));
  BOOST_TEST(pool().counters().draft_tokens == 5u);
  BOOST_TEST(pool().counters().drafts_rejected == 0u);
}

BOOST_FIXTURE_TEST_CASE(rejected_drafts_go_and_their_empty_blocks_come_free,
                        draft_fixture) {
  prompt_then_drafts();
  auto b = blocks(1);
  auto used = pool().used_blocks();
  auto cached = pool().cached_blocks();
  auto res = pool().settle_drafts(1, 1); // keeps 107, drops 108..111
  BOOST_REQUIRE(res);
  BOOST_TEST(res->changed);
  BOOST_TEST(res->first_changed == 2u);
  BOOST_TEST(tokens(1) == 8u);
  BOOST_TEST((blocks(1) == ids{b[0], b[1]}));
  BOOST_TEST(pool().used_blocks() == used - 1);
  BOOST_TEST(pool().cached_blocks() == cached); // freed, not cached
  // 104..107 are settled now: block 1 is full and indexed.
  BOOST_TEST((indexed_blocks(pool()) == std::set<block_id>{b[0], b[1]}));
  BOOST_TEST(pool().counters().drafts_rejected == 4u);
  // The request goes on with the token the verifier chose; the chain is
  // the one a request that never drafted would have.
  std::vector<token_id> next{500, 501, 502, 503};
  BOOST_REQUIRE(pool().extend(1, 4, next.data()));
  BOOST_TEST(alloc(prompt_req(2, run(100, 8) + next + run(7, 1))) == 12u);
  auto b2 = blocks(2);
  BOOST_TEST((ids(b2.begin(), b2.begin() + 3) == blocks(1)));
}

BOOST_FIXTURE_TEST_CASE(rejecting_every_draft_restores_the_table, draft_fixture) {
  alloc(prompt_req(1, run(100, 8))); // two full blocks
  auto before = blocks(1);
  auto toks = run(108, 3);
  BOOST_REQUIRE(pool().extend(1, 3, toks.data(), false, 3));
  BOOST_TEST(blocks(1).size() == 3u);
  auto res = pool().settle_drafts(1, 0);
  BOOST_REQUIRE(res);
  BOOST_TEST(res->changed);
  BOOST_TEST(blocks(1) == before);
  BOOST_TEST(tokens(1) == 8u);
  BOOST_TEST(indexed_blocks(pool()).size() == 2u);
}

BOOST_FIXTURE_TEST_CASE(unsettled_drafts_stop_growth_and_forks_and_bad_verdicts_change_nothing,
                        draft_fixture) {
  alloc(prompt_req(1, run(100, 6)));
  auto toks = run(106, 3);
  BOOST_REQUIRE(pool().extend(1, 3, toks.data(), false, 2));
  auto before = describe(pool(), true);
  std::vector<token_id> one{7};
  auto grow = pool().extend(1, 1, one.data());
  BOOST_TEST(code(grow) == "invalid_request");
  BOOST_TEST(context_of(grow.error()).find("draft tokens unsettled")
             != std::string::npos);
  BOOST_TEST(code(pool().fork(1, 2)) == "invalid_request");
  BOOST_TEST(code(pool().settle_drafts(1, 3)) == "invalid_request");
  BOOST_TEST(code(pool().settle_drafts(9, 0)) == "unknown_request");
  BOOST_TEST(describe(pool(), true) == before);
  // A touch (no tokens) is no growth.
  BOOST_TEST(code(pool().extend(1, 0, nullptr)) == "ok");
  BOOST_REQUIRE(pool().settle_drafts(1, 2));
  BOOST_TEST(code(pool().extend(1, 1, one.data())) == "ok");
  BOOST_TEST(code(pool().fork(1, 2)) == "ok");
}

BOOST_FIXTURE_TEST_CASE(draft_counts_past_the_extend_or_the_cap_are_refused,
                        draft_fixture) {
  alloc(prompt_req(1, run(100, 6)));
  auto before = describe(pool(), true);
  auto toks = run(106, 2);
  auto res = pool().extend(1, 2, toks.data(), false, 3);
  BOOST_TEST(code(res) == "invalid_request");
  BOOST_TEST(context_of(res.error()).find("3 draft tokens in an extend of 2")
             != std::string::npos);
  BOOST_TEST(code(pool().extend(1, 70000, nullptr, false,
                                max_draft_tokens + 1))
             == "invalid_request");
  // Nothing to settle: a verdict keeping none is a no-op, one keeping
  // more is an error.
  auto none = pool().settle_drafts(1, 0);
  BOOST_REQUIRE(none);
  BOOST_TEST(!none->changed);
  BOOST_TEST(code(pool().settle_drafts(1, 1)) == "invalid_request");
  BOOST_TEST(describe(pool(), true) == before);
}

BOOST_FIXTURE_TEST_CASE(unnamed_drafts_shrink_the_same_way, draft_fixture) {
  alloc(tokens_req(1, 6));
  BOOST_REQUIRE(pool().extend(1, 5, nullptr, false, 4)); // 11 tokens
  BOOST_TEST(blocks(1).size() == 3u);
  auto res = pool().settle_drafts(1, 2); // 9 tokens
  BOOST_REQUIRE(res);
  BOOST_TEST(!res->changed);
  BOOST_TEST(tokens(1) == 9u);
  BOOST_REQUIRE(pool().extend(1, 4, nullptr, false, 4)); // 13: 4 blocks
  res = pool().settle_drafts(1, 0);
  BOOST_REQUIRE(res);
  BOOST_TEST(res->changed);
  BOOST_TEST(blocks(1).size() == 3u);
  BOOST_TEST(indexed_blocks(pool()).empty());
}

BOOST_FIXTURE_TEST_CASE(a_failed_forward_pass_takes_its_chunk_back,
                        draft_fixture) {
  // A scheduler that sends a prefill chunk as drafts and settles it once
  // the forward pass finished can take it all back when the pass fails:
  // no block of garbage K/V is ever indexed.
  auto prompt = run(100, 20);
  alloc(chunked(1, prompt, 8)); // blocks 0-1, indexed
  auto index_before = indexed_blocks(pool());
  BOOST_REQUIRE(pool().extend(1, 8, part(prompt, 8, 16).data(), false, 8));
  BOOST_TEST(indexed_blocks(pool()) == index_before);
  BOOST_REQUIRE(pool().settle_drafts(1, 0)); // the pass failed
  BOOST_TEST(tokens(1) == 8u);
  BOOST_TEST(indexed_blocks(pool()) == index_before);
  BOOST_REQUIRE(pool().extend(1, 8, part(prompt, 8, 16).data(), false, 8));
  BOOST_REQUIRE(pool().settle_drafts(1, 8)); // the retry went through
  BOOST_TEST(indexed_blocks(pool()).size() == 4u);
  BOOST_TEST(alloc(prompt_req(2, prompt)) == 16u);
}

BOOST_FIXTURE_TEST_CASE(a_step_settles_verdicts_first_and_reports_the_cut,
                        draft_fixture) {
  alloc(prompt_req(1, run(100, 6)));
  step_request grow;
  grow.extends = {extend_op{1, 6, 5}};
  grow.tokens = run(106, 6);
  auto r1 = pool().run_step(grow);
  BOOST_TEST(r1.failed.empty());
  BOOST_REQUIRE(r1.changed.size() == 1u);
  BOOST_TEST(r1.changed[0].num_tokens == 12u);
  auto b = blocks(1);
  // Keep one draft, grow by the verifier's token in the same step: a cut
  // to two blocks, then a fresh third one.
  step_request next;
  next.verdicts = {draft_verdict{1, 1}};
  next.extends = {extend_op{1, 1, 0}};
  next.tokens = {500};
  auto r2 = pool().run_step(next);
  BOOST_TEST(r2.failed.empty());
  BOOST_REQUIRE(r2.changed.size() == 2u);
  BOOST_TEST(r2.changed[0].first == 2u);
  BOOST_TEST(r2.changed[0].blocks.empty());
  BOOST_TEST(r2.changed[0].num_tokens == 8u);
  BOOST_TEST(r2.changed[1].first == 2u);
  BOOST_TEST(r2.changed[1].blocks.size() == 1u);
  BOOST_TEST(r2.changed[1].num_tokens == 9u);
  BOOST_TEST(tokens(1) == 9u);
  BOOST_TEST(blocks(1)[1] == b[1]);
  // A verdict for a request without drafts fails alone.
  step_request bad;
  bad.verdicts = {draft_verdict{1, 2}};
  bad.extends = {extend_op{1, 1, 0}};
  auto r3 = pool().run_step(bad);
  BOOST_REQUIRE(r3.failed.size() == 1u);
  BOOST_TEST(r3.failed[0].id == 1u);
  BOOST_TEST(code(r3.failed[0].error) == "invalid_request");
  BOOST_TEST(tokens(1) == 10u);
}

BOOST_FIXTURE_TEST_CASE(an_undone_copy_takes_its_drafts_back, draft_fixture) {
  alloc(prompt_req(1, run(10, 6)));
  BOOST_REQUIRE(pool().fork(1, 2));
  auto before = describe(pool(), true);
  auto toks = run(20, 3);
  auto res = pool().extend(2, 3, toks.data(), true, 2);
  BOOST_REQUIRE(res);
  BOOST_REQUIRE(res->copies.size() == 1u);
  BOOST_TEST(drafts(2) == 2u);
  BOOST_TEST(code(pool().settle_drafts(2, 2)) == "invalid_request"); // copy
  BOOST_TEST(pool().settle_copies(res->copies, false)
             == std::vector<request_id>{2});
  BOOST_TEST(drafts(2) == 0u);
  BOOST_TEST(describe(pool(), true) == before);
}

BOOST_FIXTURE_TEST_CASE(drafts_survive_a_swap_and_a_release_caches_none,
                        draft_fixture) {
  cfg.num_host_blocks = 8;
  make(16);
  prompt_then_drafts();
  auto cache_id = pool().find(1)->cache_id;
  BOOST_REQUIRE(pool().swap_out_begin(1));
  BOOST_REQUIRE(pool().swap_out_done(1, cache_id, true));
  BOOST_TEST(code(pool().settle_drafts(1, 0)) == "invalid_request");
  BOOST_REQUIRE(pool().swap_in_begin(1));
  BOOST_REQUIRE(pool().swap_in_done(1, cache_id, true));
  BOOST_TEST(drafts(1) == 5u);
  BOOST_TEST(invariant(pool()) == "ok");
  auto res = pool().settle_drafts(1, 2); // 9 tokens
  BOOST_REQUIRE(res);
  BOOST_TEST(blocks(1).size() == 3u);
  BOOST_TEST(tokens(1) == 9u);
  // Release: the two full settled blocks stay cached, the third goes free.
  auto cached = pool().cached_blocks();
  release(1);
  BOOST_TEST(pool().cached_blocks() == cached + 2);
}

BOOST_AUTO_TEST_SUITE_END()
