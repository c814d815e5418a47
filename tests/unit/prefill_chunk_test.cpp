// Chunked prefill (allocation_request::prefill_chunk): the whole prompt is
// looked up, only its cached prefix and one chunk are admitted, and the rest
// of the prompt enters the table - and its full blocks the prefix index -
// chunk by chunk as later extends bring its token ids. So a long prompt
// finds every cached block of its prefix however small the chunk, and no
// block of a chunk not yet scheduled can be hit by another prompt.
#include <cstdint>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/actors/block_pool_core.hpp"
#include "kvactor/messages/error.hpp"
#include "pool_fixture.hpp"

using namespace kvactor;
using namespace kvactor::test;

namespace {

/// The first n of `xs`.
ids first(ids xs, std::size_t n) {
  xs.resize(n);
  return xs;
}

} // namespace

BOOST_AUTO_TEST_SUITE(prefill_chunk_suite)

BOOST_FIXTURE_TEST_CASE(a_chunk_admits_its_tokens_and_indexes_only_their_full_blocks,
                        pool_fixture) {
  auto prompt = run(100, 22); // 5 full blocks of 4 and 2 tokens
  BOOST_TEST(alloc(chunked(1, prompt, 6)) == 0u);
  BOOST_TEST(tokens(1) == 6u);
  BOOST_TEST(blocks(1).size() == 2u);
  BOOST_TEST(pool().used_blocks() == 2u);
  // Only the first block is full: a second prompt finds it and no more.
  BOOST_TEST(alloc(prompt_req(2, prompt)) == 4u);
  // The lookup counted the whole prompt, chunked or not.
  BOOST_TEST(pool().counters().query_tokens == 44u);
  BOOST_TEST(pool().counters().hit_tokens == 4u);
}

BOOST_FIXTURE_TEST_CASE(the_whole_prompt_is_looked_up_however_small_the_chunk,
                        pool_fixture) {
  auto prompt = run(100, 22);
  alloc(prompt_req(1, prompt)); // indexes 5 full blocks
  // Chunk 3 past 5 hit blocks (20 tokens): 22 tokens, the prompt's all.
  BOOST_TEST(alloc(chunked(2, prompt, 3)) == 20u);
  BOOST_TEST(tokens(2) == 22u);
  BOOST_TEST(blocks(2).size() == 6u);
  BOOST_TEST(first(blocks(2), 5) == first(blocks(1), 5));
  // Chunk 1: the hits and one token, never less than one computed token.
  BOOST_TEST(alloc(chunked(3, prompt, 1)) == 20u);
  BOOST_TEST(tokens(3) == 21u);
}

BOOST_FIXTURE_TEST_CASE(later_chunks_enter_the_index_as_their_extends_bring_them,
                        pool_fixture) {
  auto prompt = run(100, 22);
  alloc(chunked(1, prompt, 8)); // blocks 0-1 indexed
  auto ext = pool().extend(1, 8, part(prompt, 8, 16).data());
  BOOST_REQUIRE(ext);
  BOOST_TEST(tokens(1) == 16u);
  // A prompt sharing the first 16 tokens finds all four blocks now.
  BOOST_TEST(alloc(prompt_req(2, part(prompt, 0, 16) + run(900, 5))) == 16u);
  BOOST_REQUIRE(pool().extend(1, 6, part(prompt, 16, 22).data()));
  BOOST_TEST(tokens(1) == 22u);
  BOOST_TEST(alloc(prompt_req(3, prompt)) == 20u);
  BOOST_TEST(blocks(3).size() == 6u);
  BOOST_TEST(first(blocks(3), 5) == first(blocks(1), 5));
}

BOOST_FIXTURE_TEST_CASE(a_chunk_as_long_as_the_prompt_admits_it_all, pool_fixture) {
  auto prompt = run(100, 10);
  alloc(chunked(1, prompt, 10));
  alloc(chunked(2, run(200, 10), 1000));
  BOOST_TEST(tokens(1) == 10u);
  BOOST_TEST(tokens(2) == 10u);
  BOOST_TEST(describe(pool(), true).find("hashed 1/2") != std::string::npos);
}

BOOST_FIXTURE_TEST_CASE(a_chunk_near_two_to_the_64_admits_the_whole_prompt,
                        pool_fixture) {
  auto prompt = run(100, 10);
  alloc(prompt_req(1, prompt));
  // One hit block: 4 + (2^64 - 1) must not wrap around to 3 tokens.
  BOOST_TEST(alloc(chunked(2, prompt, u64_max)) == 8u);
  BOOST_TEST(tokens(2) == 10u);
  alloc(chunked(3, run(300, 5), u64_max - 2));
  BOOST_TEST(tokens(3) == 5u);
}

BOOST_FIXTURE_TEST_CASE(a_chunk_without_a_prompt_is_refused_and_changes_nothing,
                        pool_fixture) {
  auto before = describe(pool(), true);
  auto req = tokens_req(1, 8);
  req.prefill_chunk = 4;
  auto res = pool().allocate(req);
  BOOST_REQUIRE(!res);
  BOOST_TEST(code(res.error()) == "invalid_request");
  BOOST_TEST(render(res.error()).find("prefill_chunk 4 needs a prompt")
             != std::string::npos);
  BOOST_TEST(!pool().can_allocate(req));
  BOOST_TEST(describe(pool(), true) == before);
}

BOOST_FIXTURE_TEST_CASE(the_capacity_check_counts_the_whole_prompt, pool_fixture) {
  // 16 blocks of 4: a 68-token prompt (17 blocks) can never be held whole,
  // even if its first chunk fits.
  auto res = pool().allocate(chunked(1, run(0, 68), 4));
  BOOST_REQUIRE(!res);
  BOOST_TEST(code(res.error()) == "exceeds_capacity");
  BOOST_TEST(pool().used_blocks() == 0u);
  alloc(chunked(2, run(0, 64), 4)); // 16 blocks: fits the pool
  BOOST_TEST(tokens(2) == 4u);
}

BOOST_FIXTURE_TEST_CASE(reserve_expected_keeps_headroom_for_the_rest_of_the_prompt,
                        pool_fixture) {
  cfg.admission.policy = "reserve_expected";
  cfg.admission.default_expected_output = 1;
  make(8);
  // A 24-token prompt (6 blocks), one chunk of 4 now: its promise counts
  // 25 tokens (7 blocks), so a second such request does not fit in 8.
  alloc(chunked(1, run(0, 24), 4));
  BOOST_TEST(pool().used_blocks() == 1u);
  auto res = pool().allocate(chunked(2, run(500, 24), 4));
  BOOST_REQUIRE(!res);
  BOOST_TEST(code(res.error()) == "out_of_blocks");
  // The chunks come in within the promise.
  BOOST_REQUIRE(pool().extend(1, 20, run(4, 20).data()));
  BOOST_TEST(pool().used_blocks() == 6u);
}

BOOST_FIXTURE_TEST_CASE(a_step_admits_a_chunk_and_its_extends_bring_the_rest,
                        pool_fixture) {
  auto prompt = run(100, 14);
  step_request step;
  step.admits.push_back(chunked(1, prompt, 5));
  auto res = pool().run_step(step);
  BOOST_REQUIRE(res.admitted.size() == 1u);
  BOOST_TEST(res.admitted[0].table.num_tokens == 5u);
  BOOST_TEST(res.admitted[0].table.blocks.size() == 2u);
  step_request next;
  next.extends.push_back(extend_op{1, 9});
  next.tokens = part(prompt, 5, 14);
  res = pool().run_step(next);
  BOOST_TEST(res.failed.empty());
  BOOST_TEST(tokens(1) == 14u);
  BOOST_TEST(alloc(prompt_req(2, prompt)) == 12u);
}

BOOST_AUTO_TEST_SUITE_END()
