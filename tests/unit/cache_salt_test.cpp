// allocation_request::cache_salt: the same tokens under different salts (a
// LoRA adapter's id, a multimodal input's hash) produce different K/V, so
// their prefix blocks are never shared; under the same salt they are, as
// without one. Pins and the retry memo go by the salt too.
#include <cstdint>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/actors/block_pool_core.hpp"
#include "pool_fixture.hpp"

using namespace kvactor;
using namespace kvactor::test;

namespace {

allocation_request salted(request_id id, std::vector<token_id> prompt,
                          std::uint64_t salt) {
  auto req = prompt_req(id, std::move(prompt));
  req.cache_salt = salt;
  return req;
}

} // namespace

BOOST_AUTO_TEST_SUITE(cache_salt_suite)

BOOST_FIXTURE_TEST_CASE(only_the_same_salt_shares_prefix_blocks, pool_fixture) {
  auto prompt = run(100, 10); // 2 full blocks of 4
  BOOST_TEST(alloc(salted(1, prompt, 0)) == 0u);
  BOOST_TEST(alloc(salted(2, prompt, 5)) == 0u); // not the unsalted chain
  BOOST_TEST(alloc(salted(3, prompt, 6)) == 0u); // nor salt 5's
  BOOST_TEST(alloc(salted(4, prompt, 5)) == 8u);
  BOOST_TEST(alloc(salted(5, prompt, 0)) == 8u);
  BOOST_TEST(blocks(4)[0] == blocks(2)[0]);
  BOOST_TEST(blocks(5)[0] == blocks(1)[0]);
  BOOST_TEST(blocks(2)[0] != blocks(1)[0]);
  BOOST_TEST(blocks(3)[0] != blocks(2)[0]);
}

BOOST_FIXTURE_TEST_CASE(a_salted_chain_goes_on_through_extends_and_chunks,
                        pool_fixture) {
  auto prompt = run(100, 14);
  auto first = salted(1, prompt, 9);
  first.prefill_chunk = 5; // 5 tokens now, the rest by extends
  alloc(first);
  BOOST_REQUIRE(pool().extend(1, 9, prompt.data() + 5));
  BOOST_TEST(alloc(salted(2, prompt, 9)) == 12u);
  BOOST_TEST(alloc(salted(3, prompt, 8)) == 0u);
}

BOOST_FIXTURE_TEST_CASE(a_retry_under_another_salt_does_not_use_the_memo,
                        pool_fixture) {
  make(4);
  auto prompt = run(100, 8);
  alloc(salted(1, prompt, 1)); // 2 blocks, indexed under salt 1
  alloc(tokens_req(2, 8));     // the other 2: the pool is full
  // Refused under salt 2 (its prompt hashed and kept for the retry)...
  BOOST_TEST(code(pool().allocate(salted(3, prompt, 2))) == "out_of_blocks");
  release(2);
  // ...its retry under salt 1 finds salt 1's block, not salt 2's memo.
  BOOST_TEST(alloc(salted(3, prompt, 1)) == 4u);
}

BOOST_FIXTURE_TEST_CASE(a_pin_names_the_salt_its_prefix_was_allocated_under,
                        pool_fixture) {
  cfg.max_pinned_blocks = 8;
  make(16);
  auto prompt = run(100, 8);
  alloc(salted(1, prompt, 3));
  release(1);
  BOOST_TEST(pool().pin(0, prompt, 1000, 0).value() == 0u);
  BOOST_TEST(pool().pin(0, prompt, 1000, 0, 4).value() == 0u);
  BOOST_TEST(pool().pin(0, prompt, 1000, 0, 3).value() == 2u);
}

BOOST_AUTO_TEST_SUITE_END()
