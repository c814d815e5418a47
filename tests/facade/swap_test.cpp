// The facade's swapping on the threaded scheduler with host storage: a
// request swapped out and back in keeps its bytes, and a swap-in shares back
// a prefix another request holds instead of copying it.
#include <vector>

#include "block_bytes.hpp"
#include "fixture.hpp"

using namespace kvtest;

BOOST_FIXTURE_TEST_SUITE(facade_swap, watchdog)

BOOST_AUTO_TEST_CASE(swap_out_and_in_round_trips_the_bytes) {
  auto cfg = small_config();
  cfg.num_host_blocks = 8;
  cache_fixture f{cfg};
  auto h = f.alloc(f.req(1, 6));
  auto t0 = h->table();
  fill_block(*h, t0.blocks[0], 11.0f);
  fill_block(*h, t0.blocks[1], 22.0f);
  // A copy of the request's bytes, to compare after the round trip.
  std::vector<float> before;
  for (std::uint32_t l = 0; l < 2; ++l)
    for (auto view : {h->key_cache(l), h->value_cache(l)})
      for (auto b : t0.blocks)
        before.insert(before.end(), block_of(**view, b),
                      block_of(**view, b) + (*view)->strides[0]);
  BOOST_REQUIRE_MESSAGE(!f.m().swap_out(1), "swap_out");
  BOOST_TEST(h->is_swapped());
  BOOST_TEST(h->is_valid());
  BOOST_TEST(f.used_blocks() == 0u);
  KV_CHECK_ERROR(f.m().swap_out(1), errc::invalid_request);
  KV_CHECK_ERROR(f.m().extend(*h, 1), errc::invalid_request);
  // Other requests take the freed device blocks meanwhile.
  auto other = f.alloc(f.req(2, 8));
  fill_block(*other, other->table().blocks[0], 99.0f);
  BOOST_REQUIRE_MESSAGE(!f.m().swap_in(1), "swap_in");
  BOOST_TEST(!h->is_swapped());
  auto t1 = h->table();
  BOOST_TEST(t1.num_tokens == 6u);
  BOOST_REQUIRE_EQUAL(t1.blocks.size(), 2u);
  std::vector<float> after;
  for (std::uint32_t l = 0; l < 2; ++l)
    for (auto view : {h->key_cache(l), h->value_cache(l)})
      for (auto b : t1.blocks)
        after.insert(after.end(), block_of(**view, b),
                     block_of(**view, b) + (*view)->strides[0]);
  BOOST_TEST((after == before), "the bytes came back changed");
  BOOST_TEST(!f.m().extend(*h, 3));
  BOOST_TEST(h->num_tokens() == 9u);
  KV_CHECK_ERROR(f.m().swap_in(1), errc::invalid_request);
  KV_CHECK_ERROR(f.m().swap_out(77), errc::unknown_request, "request 77");
  auto s = f.checked_stats();
  BOOST_TEST(s.swap_out_count == 1u);
  BOOST_TEST(s.swap_in_count == 1u);
  BOOST_TEST(s.host_total_blocks == 8u);
  BOOST_TEST(s.host_free_blocks == 8u);
}

BOOST_AUTO_TEST_CASE(swap_in_shares_back_a_prefix_another_request_holds) {
  auto cfg = small_config();
  cfg.num_host_blocks = 8;
  cache_fixture f{cfg};
  std::vector<token_id> prompt{1, 2, 3, 4, 5, 6}; // one full block + 2
  auto h = f.alloc(f.req(1, 0, 256, prompt));
  auto other = f.alloc(f.req(2, 0, 256, prompt));
  auto shared = h->table().blocks[0];
  BOOST_REQUIRE_EQUAL(other->table().blocks[0], shared);
  fill_block(*h, shared, 5.0f);
  fill_block(*h, h->table().blocks[1], 6.0f);
  std::vector<float> before;
  for (auto b : h->table().blocks)
    before.insert(before.end(), block_of(**h->key_cache(0), b),
                  block_of(**h->key_cache(0), b) + (*h->key_cache(0))->strides[0]);
  BOOST_REQUIRE_MESSAGE(!f.m().swap_out(1), "swap_out");
  BOOST_REQUIRE_MESSAGE(!f.m().swap_in(1), "swap_in");
  // The prefix block is request 2's again, not a copy; the tail came back.
  auto t = h->table();
  BOOST_REQUIRE_EQUAL(t.blocks.size(), 2u);
  BOOST_TEST(t.blocks[0] == shared);
  std::vector<float> after;
  for (auto b : t.blocks)
    after.insert(after.end(), block_of(**h->key_cache(0), b),
                 block_of(**h->key_cache(0), b) + (*h->key_cache(0))->strides[0]);
  BOOST_TEST((after == before), "the bytes came back changed");
  auto s = f.checked_stats();
  BOOST_TEST(s.swap_in_count == 1u);
  BOOST_TEST(s.swap_in_shared_blocks == 1u);
  BOOST_TEST(f.used_blocks() == 3u); // the shared block counts once
  // A request of two full blocks, the first a hit and the second cached
  // once it left, has nothing to copy back.
  auto whole = f.alloc(f.req(3, 0, 256, {1, 2, 3, 4, 7, 7, 7, 7}));
  auto t3 = whole->table().blocks;
  BOOST_REQUIRE_EQUAL(t3.size(), 2u);
  BOOST_TEST(t3[0] == shared);
  BOOST_REQUIRE_MESSAGE(!f.m().swap_out(3), "swap_out");
  BOOST_REQUIRE_MESSAGE(!f.m().swap_in(3), "swap_in");
  BOOST_TEST((whole->table().blocks == t3));
  BOOST_TEST(whole->num_tokens() == 8u);
  BOOST_TEST(f.checked_stats().swap_in_shared_blocks == 3u);
}

BOOST_AUTO_TEST_SUITE_END()
