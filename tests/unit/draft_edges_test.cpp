// Edge cases of the draft paths (settle_drafts, extend's drafts,
// undo_cow's draft handling, run_step's verdicts): copies in flight,
// preemption in the same step, block sizes 1 and 64, swaps, prefix
// caching off, KV events, and error paths that must change nothing. See
// discard_edges_test.cpp for discard.
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

BOOST_AUTO_TEST_SUITE(draft_edges_suite)

BOOST_FIXTURE_TEST_CASE(block_size_one_drafts_take_a_block_each_and_go_free,
                        pool_fixture) {
  cfg.block_size = 1;
  make(16);
  alloc(prompt_req(1, run(100, 3)));
  BOOST_TEST(indexed_blocks(pool()).size() == 3u);
  auto toks = run(103, 5);
  BOOST_REQUIRE(pool().extend(1, 5, toks.data(), false, 4));
  BOOST_TEST(blocks(1).size() == 8u);
  BOOST_TEST(drafts(1) == 4u);
  // The settled token 103 is indexed, none of the drafts.
  auto b = blocks(1);
  BOOST_TEST((indexed_blocks(pool()) == std::set<block_id>(b.begin(), b.begin() + 4)));
  BOOST_TEST(invariant(pool()) == "ok");
  auto cached = pool().cached_blocks();
  auto res = pool().settle_drafts(1, 1);
  BOOST_REQUIRE(res);
  BOOST_TEST(res->changed);
  BOOST_TEST(res->first_changed == 5u);
  BOOST_TEST((blocks(1) == ids(b.begin(), b.begin() + 5)));
  BOOST_TEST(indexed_blocks(pool()).size() == 5u);
  BOOST_TEST(pool().cached_blocks() == cached);
  BOOST_TEST(pool().free_blocks() == 11u);
  BOOST_TEST(pool().counters().drafts_rejected == 3u);
  // The prompt with the accepted token hits all five.
  BOOST_TEST(alloc(prompt_req(2, run(100, 6))) == 5u);
}

BOOST_FIXTURE_TEST_CASE(large_blocks_drafts_across_one_boundary,
                        pool_fixture) {
  cfg.block_size = 64;
  make(8);
  alloc(prompt_req(1, run(0, 60)));
  BOOST_TEST(indexed_blocks(pool()).empty());
  auto toks = run(60, 10); // 60..61 settled, 62..69 drafts: two blocks
  BOOST_REQUIRE(pool().extend(1, 10, toks.data(), false, 8));
  BOOST_TEST(blocks(1).size() == 2u);
  BOOST_TEST(indexed_blocks(pool()).empty()); // block 0 holds drafts 62, 63
  auto first = blocks(1)[0];
  auto res = pool().settle_drafts(1, 2); // keeps 62, 63: block 0 is full
  BOOST_REQUIRE(res);
  BOOST_TEST(res->changed);
  BOOST_TEST(res->first_changed == 1u);
  BOOST_TEST(tokens(1) == 64u);
  BOOST_TEST((indexed_blocks(pool()) == std::set<block_id>{first}));
  BOOST_TEST(pool().free_blocks() == 7u);
  BOOST_TEST(alloc(prompt_req(2, run(0, 65))) == 64u);
}

BOOST_FIXTURE_TEST_CASE(a_failed_copy_undoes_an_extend_with_drafts_exactly,
                        pool_fixture) {
  alloc(prompt_req(1, run(100, 6)));
  BOOST_REQUIRE(pool().fork(1, 2));
  auto before = describe(pool(), true);
  auto toks = run(106, 3);
  auto res = pool().extend(2, 3, toks.data(), true, 2);
  BOOST_REQUIRE(res);
  BOOST_REQUIRE(res->copies.size() == 1u);
  BOOST_TEST(drafts(2) == 2u);
  BOOST_TEST(pool().copies_in_flight() == 1u);
  BOOST_TEST(invariant(pool()) == "ok");
  // A verdict while the copy is in flight is refused and changes nothing.
  auto mid = describe(pool(), true);
  BOOST_TEST(code(pool().settle_drafts(2, 0)) == "invalid_request");
  BOOST_TEST(code(pool().settle_drafts(2, 2)) == "invalid_request");
  BOOST_TEST(describe(pool(), true) == mid);
  // The copy fails: the extend, drafts included, never happened.
  auto undone = pool().settle_copies(res->copies, false);
  BOOST_TEST((undone == std::vector<request_id>{2}));
  BOOST_TEST(drafts(2) == 0u);
  BOOST_TEST(describe(pool(), true) == before);
  BOOST_TEST(invariant(pool()) == "ok");
  // Again, and this time the copy is made: the drafts settle normally.
  res = pool().extend(2, 3, toks.data(), true, 2);
  BOOST_REQUIRE(res);
  BOOST_TEST(pool().settle_copies(res->copies, true).empty());
  auto s = pool().settle_drafts(2, 1);
  BOOST_REQUIRE(s);
  BOOST_TEST(tokens(2) == 8u);
  BOOST_TEST(indexed_blocks(pool()).size() == 2u); // 2's block 1 is full
  BOOST_TEST(pool().counters().draft_tokens == 2u);
  BOOST_TEST(pool().counters().drafts_rejected == 1u);
}

BOOST_FIXTURE_TEST_CASE(a_step_verdict_then_extend_of_the_same_request,
                        pool_fixture) {
  alloc(prompt_req(1, run(100, 6)));
  auto toks = run(106, 6);
  BOOST_REQUIRE(pool().extend(1, 6, toks.data(), false, 5)); // 12, 3 blocks
  auto b = blocks(1);
  step_request step;
  step.verdicts = {draft_verdict{1, 0}}; // back to 7 tokens, 2 blocks
  step.extends = {extend_op{1, 6, 2}};   // 13 tokens, 4 blocks
  step.tokens = run(300, 6);
  auto r = pool().run_step(step);
  BOOST_TEST(r.failed.empty());
  BOOST_REQUIRE(r.changed.size() == 2u);
  BOOST_TEST(r.changed[0].id == 1u);
  BOOST_TEST(r.changed[0].first == 2u);
  BOOST_TEST(r.changed[0].blocks.empty());
  BOOST_TEST(r.changed[0].num_tokens == 7u);
  BOOST_TEST(r.changed[1].first == 2u);
  BOOST_TEST(r.changed[1].num_tokens == 13u);
  auto now = blocks(1);
  BOOST_REQUIRE(now.size() == 4u);
  BOOST_TEST((ids(now.begin(), now.begin() + 2) == ids(b.begin(), b.begin() + 2)));
  BOOST_TEST((r.changed[1].blocks == ids(now.begin() + 2, now.end())));
  BOOST_TEST(drafts(1) == 2u);
  // 100..106 + 300..303 settled: blocks 0-1 full of settled tokens, block 2
  // (301..303, then draft 304) and 3 (draft 305) hold drafts.
  BOOST_TEST((indexed_blocks(pool()) == std::set<block_id>{now[0], now[1]}));
  BOOST_TEST(pool().counters().drafts_rejected == 5u);
}

BOOST_FIXTURE_TEST_CASE(a_request_cut_by_its_verdict_can_be_the_steps_victim,
                        pool_fixture) {
  make(4);
  alloc(prompt_req(1, run(100, 8))); // 2 blocks, full
  alloc(prompt_req(2, run(200, 4))); // 1 block, full
  auto t2 = run(204, 4);
  BOOST_REQUIRE(pool().extend(2, 4, t2.data(), false, 4)); // +1 block
  BOOST_TEST(pool().free_blocks() == 0u);
  auto b2 = blocks(2);
  step_request step;
  step.verdicts = {draft_verdict{2, 3}}; // 7 tokens, still 2 blocks
  step.extends = {extend_op{1, 4, 0}, extend_op{2, 1, 1}}; // 1 wants 1
  step.tokens = run(108, 4) + run(900, 1);
  auto r = pool().run_step(step);
  BOOST_TEST(r.failed.empty());
  BOOST_TEST((r.preempted == std::vector<request_id>{2}));
  BOOST_TEST(r.changed.size() == 1u); // 1's new block; 2's verdict cut none
  BOOST_TEST(pool().find(2) == nullptr);
  BOOST_TEST(tokens(1) == 12u);
  // 2's partial block (204..206 settled, 207 rejected) was never indexed:
  // it went free (not cached) and 1 took it; 2's full block stays cached.
  BOOST_TEST(blocks(1)[2] == b2[1]);
  BOOST_TEST(pool().cached_blocks() == 1u);
  BOOST_TEST(invariant(pool()) == "ok");
  release(1);
  BOOST_TEST(alloc(prompt_req(3, run(200, 9))) == 4u);
}

BOOST_FIXTURE_TEST_CASE(a_second_verdict_for_a_request_in_one_step_fails_alone,
                        pool_fixture) {
  // Keep all three drafts, then drop them: the second verdict would find
  // no drafts and pass as a no-op, the scheduler believing them dropped.
  // It fails instead, naming the repeat; the first stands.
  alloc(prompt_req(1, run(100, 6)));
  auto t1 = run(106, 3);
  BOOST_REQUIRE(pool().extend(1, 3, t1.data(), false, 3));
  step_request step;
  step.verdicts = {draft_verdict{1, 3}, draft_verdict{1, 0},
                   draft_verdict{77, 0}, draft_verdict{77, 0}};
  auto r = pool().run_step(step);
  BOOST_REQUIRE(r.failed.size() == 3u);
  BOOST_TEST(r.failed[0].id == 1u);
  BOOST_TEST(has_code(r.failed[0].error, errc::invalid_request));
  BOOST_TEST(render(r.failed[0].error).find("appears twice in the step's verdicts")
             != std::string::npos);
  // An unknown id is unknown each time, not a repeat.
  BOOST_TEST(has_code(r.failed[1].error, errc::unknown_request));
  BOOST_TEST(has_code(r.failed[2].error, errc::unknown_request));
  BOOST_TEST(tokens(1) == 9u);
  BOOST_TEST(drafts(1) == 0u);
  BOOST_TEST(invariant(pool()) == "ok");
  // The next step settles again.
  auto t2 = run(109, 2);
  BOOST_REQUIRE(pool().extend(1, 2, t2.data(), false, 2));
  step.verdicts = {draft_verdict{1, 0}};
  r = pool().run_step(step);
  BOOST_TEST(r.failed.empty());
  BOOST_TEST(tokens(1) == 9u);
}

BOOST_FIXTURE_TEST_CASE(a_failed_verdict_fails_the_extend_and_spares_the_others,
                        pool_fixture) {
  alloc(prompt_req(1, run(100, 6)));
  alloc(prompt_req(2, run(200, 6)));
  auto t1 = run(106, 3);
  BOOST_REQUIRE(pool().extend(1, 3, t1.data(), false, 2));
  step_request step;
  step.verdicts = {draft_verdict{1, 3}, draft_verdict{77, 0}};
  step.extends = {extend_op{1, 1, 0}, extend_op{2, 4, 1}};
  step.tokens = run(500, 5);
  auto r = pool().run_step(step);
  BOOST_REQUIRE(r.failed.size() == 3u);
  BOOST_TEST(r.failed[0].id == 1u);
  BOOST_TEST(code(r.failed[0].error) == "invalid_request");
  BOOST_TEST(r.failed[1].id == 77u);
  BOOST_TEST(code(r.failed[1].error) == "unknown_request");
  BOOST_TEST(r.failed[2].id == 1u);
  BOOST_TEST(code(r.failed[2].error) == "invalid_request");
  BOOST_TEST(drafts(1) == 2u);
  BOOST_TEST(tokens(1) == 9u);
  BOOST_TEST(tokens(2) == 10u);
  BOOST_TEST(drafts(2) == 1u);
  // A later step's good verdict settles 1, and its extend then succeeds.
  step_request next;
  next.verdicts = {draft_verdict{1, 2}, draft_verdict{2, 1}};
  next.extends = {extend_op{1, 1, 0}};
  next.tokens = {42};
  r = pool().run_step(next);
  BOOST_TEST(r.failed.empty());
  BOOST_TEST(tokens(1) == 10u);
  BOOST_TEST(drafts(1) == 0u);
  BOOST_TEST(drafts(2) == 0u);
}

BOOST_FIXTURE_TEST_CASE(settling_emits_stored_events_for_accepted_blocks_only,
                        pool_fixture) {
  pool().record_events(true);
  prompt_then_drafts();
  pool().take_events();
  auto b = blocks(1);
  BOOST_REQUIRE(pool().settle_drafts(1, 1)); // 107 completes block 1
  auto events = pool().take_events();
  BOOST_REQUIRE(events.size() == 1u);
  BOOST_TEST(events[0].stored);
  BOOST_TEST(events[0].block == b[1]);
  BOOST_TEST((events[0].tokens == run(104, 4)));
  // A second settle (nothing left) emits nothing and changes nothing.
  auto before = describe(pool(), true);
  auto res = pool().settle_drafts(1, 0);
  BOOST_REQUIRE(res);
  BOOST_TEST(!res->changed);
  BOOST_TEST(pool().take_events().empty());
  BOOST_TEST(describe(pool(), true) == before);
}

BOOST_FIXTURE_TEST_CASE(accepted_drafts_completing_a_block_already_indexed,
                        pool_fixture) {
  // Two requests compute the same block; the second one's copy is a draft
  // when the first's enters the index.
  alloc(prompt_req(1, run(100, 6)));
  alloc(prompt_req(2, run(100, 6)));
  auto toks = run(106, 2);
  BOOST_REQUIRE(pool().extend(1, 2, toks.data()));
  auto b1 = blocks(1);
  BOOST_TEST(indexed_blocks(pool()).count(b1[1]) == 1u);
  BOOST_REQUIRE(pool().extend(2, 2, toks.data(), false, 2));
  BOOST_REQUIRE(pool().settle_drafts(2, 2));
  BOOST_TEST(invariant(pool()) == "ok");
  BOOST_TEST(tokens(2) == 8u);
  release(1);
  release(2);
  BOOST_TEST(alloc(prompt_req(3, run(100, 9))) == 8u);
}

BOOST_FIXTURE_TEST_CASE(drafts_with_prefix_caching_off, pool_fixture) {
  cfg.prefix_caching = false;
  make(16);
  prompt_then_drafts();
  BOOST_TEST(pool().index_size() == 0u);
  auto res = pool().settle_drafts(1, 2);
  BOOST_REQUIRE(res);
  BOOST_TEST(!res->changed); // 9 tokens still need 3 blocks
  BOOST_TEST(tokens(1) == 9u);
  BOOST_TEST(blocks(1).size() == 3u);
  BOOST_TEST(pool().index_size() == 0u);
  BOOST_TEST(pool().free_blocks() == 13u);
  BOOST_REQUIRE(pool().discard(1));
  BOOST_TEST(pool().free_blocks() == 16u);
}

BOOST_FIXTURE_TEST_CASE(unnamed_tokens_with_drafts, pool_fixture) {
  alloc(tokens_req(1, 6));
  BOOST_REQUIRE(pool().extend(1, 6, nullptr, false, 5));
  BOOST_TEST(drafts(1) == 5u);
  auto res = pool().settle_drafts(1, 0);
  BOOST_REQUIRE(res);
  BOOST_TEST(tokens(1) == 7u);
  BOOST_TEST(blocks(1).size() == 2u);
  BOOST_TEST(pool().index_size() == 0u);
}

BOOST_FIXTURE_TEST_CASE(a_request_holding_drafts_swaps_out_and_back,
                        pool_fixture) {
  cfg.num_host_blocks = 8;
  make(16);
  prompt_then_drafts();
  auto out = pool().swap_out_begin(1);
  BOOST_REQUIRE(out);
  auto mid = describe(pool(), true);
  BOOST_TEST(code(pool().settle_drafts(1, 1)) == "invalid_request");
  BOOST_TEST(describe(pool(), true) == mid);
  BOOST_REQUIRE(pool().swap_out_done(1, cache_id(1), true));
  BOOST_TEST(code(pool().settle_drafts(1, 1)) == "invalid_request");
  BOOST_TEST(drafts(1) == 5u);
  auto in = pool().swap_in_begin(1);
  BOOST_REQUIRE(in);
  BOOST_REQUIRE(pool().swap_in_done(1, cache_id(1), true));
  BOOST_TEST(drafts(1) == 5u);
  BOOST_TEST(invariant(pool()) == "ok");
  auto b = blocks(1);
  BOOST_REQUIRE(b.size() == 3u);
  // Only the prompt's block was indexed before: the others came back fresh.
  auto res = pool().settle_drafts(1, 1);
  BOOST_REQUIRE(res);
  BOOST_TEST(tokens(1) == 8u);
  BOOST_TEST((indexed_blocks(pool()) == std::set<block_id>{b[0], b[1]}));
  BOOST_TEST(alloc(prompt_req(2, run(100, 9))) == 8u);
}

BOOST_FIXTURE_TEST_CASE(chunked_prefill_then_drafts, pool_fixture) {
  auto prompt = run(100, 12);
  alloc(chunked(1, prompt, 5));
  BOOST_TEST(tokens(1) == 5u);
  auto rest = part(prompt, 5, 12);
  BOOST_REQUIRE(pool().extend(1, 7, rest.data()));
  auto d = run(400, 3);
  BOOST_REQUIRE(pool().extend(1, 3, d.data(), false, 3));
  BOOST_TEST(indexed_blocks(pool()).size() == 3u);
  BOOST_REQUIRE(pool().settle_drafts(1, 0));
  BOOST_TEST(tokens(1) == 12u);
  BOOST_TEST(blocks(1).size() == 3u);
  BOOST_REQUIRE(pool().discard(1));
  BOOST_TEST(pool().index_size() == 0u);
  BOOST_TEST(pool().free_blocks() == 16u);
}

BOOST_FIXTURE_TEST_CASE(error_paths_change_nothing, pool_fixture) {
  alloc(prompt_req(1, run(100, 6)));
  auto toks = run(106, 3);
  BOOST_REQUIRE(pool().extend(1, 3, toks.data(), false, 2));
  auto before = describe(pool(), true);
  BOOST_TEST(code(pool().settle_drafts(9, 0)) == "unknown_request");
  BOOST_TEST(code(pool().settle_drafts(1, 3)) == "invalid_request");
  std::vector<token_id> one{5};
  BOOST_TEST(code(pool().extend(1, 1, one.data())) == "invalid_request");
  BOOST_TEST(code(pool().extend(1, 1, one.data(), false, 1))
             == "invalid_request");
  BOOST_TEST(code(pool().fork(1, 2)) == "invalid_request");
  BOOST_TEST(code(pool().discard(9)) == "unknown_request");
  BOOST_TEST(describe(pool(), true) == before);
  // A fresh request: drafts past n, past max_draft_tokens, negative ids.
  alloc(prompt_req(3, run(300, 6)));
  auto before3 = describe(pool(), true);
  BOOST_TEST(code(pool().extend(3, 1, one.data(), false, 2))
             == "invalid_request");
  std::vector<token_id> big(70000, 1);
  BOOST_TEST(code(pool().extend(3, 70000, big.data(), false, 70000))
             == "invalid_request");
  std::vector<token_id> neg{7, -1};
  BOOST_TEST(code(pool().extend(3, 2, neg.data(), false, 1))
             == "invalid_request");
  step_request step;
  step.extends = {extend_op{3, 2, 1}};
  step.tokens = neg;
  auto r = pool().run_step(step);
  BOOST_REQUIRE(r.failed.size() == 1u);
  BOOST_TEST(code(r.failed[0].error) == "invalid_request");
  BOOST_TEST(describe(pool(), true) == before3);
}

BOOST_FIXTURE_TEST_CASE(a_verdict_under_reserve_expected_keeps_the_promises,
                        pool_fixture) {
  cfg.admission.policy = "reserve_expected";
  make(16);
  auto req = prompt_req(1, run(100, 6));
  req.expected_output_tokens = 10; // 16 tokens: 4 blocks, 2 to grow
  alloc(req);
  auto toks = run(106, 6);
  BOOST_REQUIRE(pool().extend(1, 6, toks.data(), false, 5)); // 3 blocks
  BOOST_TEST(invariant(pool()) == "ok");
  auto res = pool().settle_drafts(1, 0); // back to 2 blocks: 2 to grow
  BOOST_REQUIRE(res);
  BOOST_TEST(res->changed);
  BOOST_TEST(invariant(pool()) == "ok");
  BOOST_REQUIRE(pool().discard(1));
  BOOST_TEST(pool().free_blocks() == 16u);
}

BOOST_FIXTURE_TEST_CASE(a_step_with_held_copies_undoes_only_the_extend,
                        pool_fixture) {
  alloc(prompt_req(1, run(100, 6)));
  BOOST_REQUIRE(pool().fork(1, 2));
  BOOST_REQUIRE(pool().fork(1, 3)); // 2 and 3 keep sharing 1's tail
  // 1 drafts past its shared tail (copy made at once), then settles in a
  // step that also extends 2 with drafts through a held copy that fails.
  auto t1 = run(106, 3);
  auto e1 = pool().extend(1, 3, t1.data(), false, 2);
  BOOST_REQUIRE(e1);
  BOOST_TEST(e1->copies.size() == 1u);
  step_request step;
  step.verdicts = {draft_verdict{1, 0}};
  step.extends = {extend_op{2, 3, 3}};
  step.tokens = run(700, 3);
  auto r = pool().run_step(step, true);
  BOOST_TEST(r.failed.empty());
  BOOST_REQUIRE(r.copies.size() == 1u);
  BOOST_TEST(drafts(2) == 3u);
  auto after_verdict = [&] {
    // What the step's verdict alone leaves: 1 at 7 tokens, 2 untouched.
    BOOST_TEST(tokens(1) == 7u);
    BOOST_TEST(drafts(1) == 0u);
  };
  after_verdict();
  auto undone = pool().settle_copies(r.copies, false);
  BOOST_TEST((undone == std::vector<request_id>{2}));
  after_verdict();
  BOOST_TEST(tokens(2) == 6u);
  BOOST_TEST(drafts(2) == 0u);
  BOOST_TEST(pool().copies_in_flight() == 0u);
  BOOST_TEST(pool().counters().draft_tokens == 2u);
  BOOST_TEST(invariant(pool()) == "ok");
  // 2 may grow again (its drafts went with the undone extend).
  auto again = run(800, 2);
  auto e2 = pool().extend(2, 2, again.data());
  BOOST_REQUIRE(e2);
  BOOST_TEST(invariant(pool()) == "ok");
}

BOOST_FIXTURE_TEST_CASE(rejected_drafts_after_a_failed_copy_leave_one_writer,
                        pool_fixture) {
  alloc(prompt_req(1, run(100, 6))); // block 1 holds 2 tokens
  BOOST_REQUIRE(pool().fork(1, 2));
  auto shared = blocks(1).back();
  // One step: 1 appends through a held copy; 2, seeing only the copy's
  // hold on the block, drafts into it in place.
  step_request step;
  step.extends = {extend_op{1, 1, 0}, extend_op{2, 1, 1}};
  step.tokens = run(700, 2);
  auto r = pool().run_step(step, true);
  BOOST_TEST(r.failed.empty());
  BOOST_REQUIRE(r.copies.size() == 1u);
  BOOST_TEST(blocks(2).back() == shared);
  // The copy fails: 1 is back on the block, 2 still ahead of it.
  BOOST_TEST((pool().settle_copies(r.copies, false) == std::vector<request_id>{1}));
  BOOST_TEST(invariant(pool()) == "ok");
  // 2's draft is rejected: both now hold 2 tokens of the block. 2 still
  // writes in place (its third slot is no one else's), 1 copies first.
  step_request verdict;
  verdict.verdicts = {draft_verdict{2, 0}};
  auto v = pool().run_step(verdict, true);
  BOOST_TEST(v.failed.empty());
  BOOST_TEST(tokens(1) == 6u);
  BOOST_TEST(tokens(2) == 6u);
  BOOST_TEST(invariant(pool()) == "ok");
  // The first to append copies the block; the other, its only holder
  // then, writes into it in place.
  auto e1 = pool().extend(1, 1, run(800, 1).data());
  BOOST_REQUIRE(e1);
  BOOST_TEST(e1->copies.size() == 1u);
  auto e2 = pool().extend(2, 1, run(900, 1).data());
  BOOST_REQUIRE(e2);
  BOOST_TEST(e2->copies.empty());
  BOOST_TEST(blocks(2).back() == shared);
  BOOST_TEST(blocks(1).back() != shared);
  BOOST_TEST(invariant(pool()) == "ok");
}

BOOST_FIXTURE_TEST_CASE(a_draft_extend_short_of_its_copy_fails_then_preempts,
                        pool_fixture) {
  make(3);
  alloc(prompt_req(1, run(100, 6))); // 2 blocks, the second half full
  BOOST_REQUIRE(pool().fork(1, 2));
  alloc(prompt_req(3, run(300, 4))); // the last block
  auto before = describe(pool(), false);
  std::vector<token_id> one{9};
  BOOST_TEST(code(pool().extend(2, 1, one.data(), false, 1)) == "out_of_blocks");
  BOOST_TEST(describe(pool(), false) == before);
  step_request step;
  step.extends = {extend_op{2, 1, 1}, extend_op{3, 0, 0}};
  step.tokens = one;
  auto r = pool().run_step(step);
  BOOST_TEST(r.failed.empty());
  BOOST_TEST((r.preempted == std::vector<request_id>{3}));
  BOOST_TEST(r.copies.size() == 1u);
  BOOST_TEST(drafts(2) == 1u);
  BOOST_TEST(tokens(2) == 7u);
  BOOST_TEST(invariant(pool()) == "ok");
  // Its draft rejected, 2 keeps its private copy of the shared tail.
  auto copy = blocks(2)[1];
  step_request next;
  next.verdicts = {draft_verdict{2, 0}};
  r = pool().run_step(next);
  BOOST_TEST(r.failed.empty());
  BOOST_TEST(r.changed.empty());
  BOOST_TEST(tokens(2) == 6u);
  BOOST_TEST(blocks(2)[1] == copy);
  BOOST_TEST(blocks(1)[1] != copy);
}

BOOST_AUTO_TEST_SUITE_END()
