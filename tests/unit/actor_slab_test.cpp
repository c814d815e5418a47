// actor_slab (where handle actors live): blocks come back last-freed-first,
// at most max_cached wait for reuse, the counts say what happened, and
// threads taking and giving at once neither lose nor share a block.
#include <cstdint>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/actors/actor_slab.hpp"

using kvactor::detail::actor_slab;

BOOST_AUTO_TEST_SUITE(actor_slab_suite)

BOOST_AUTO_TEST_CASE(reuses_the_last_block_given_back_first) {
  actor_slab slab{1224};
  BOOST_TEST(slab.block_bytes() == 1224u);
  auto* a = slab.take();
  auto* b = slab.take();
  std::memset(a, 0xAB, 1224); // usable in full
  std::memset(b, 0xCD, 1224);
  slab.give(a);
  slab.give(b);
  BOOST_TEST(slab.take() == b);
  BOOST_TEST(slab.take() == a);
  auto c = slab.snapshot();
  BOOST_TEST(c.fresh == 2u);
  BOOST_TEST(c.reused == 2u);
  BOOST_TEST(c.cached == 0u);
  slab.give(a);
  slab.give(b);
}

BOOST_AUTO_TEST_CASE(caches_at_most_max_cached_blocks) {
  actor_slab slab{64, 2};
  std::vector<void*> blocks;
  for (int i = 0; i < 5; ++i)
    blocks.push_back(slab.take());
  for (auto* p : blocks)
    slab.give(p); // the last three go back to the heap
  BOOST_TEST(slab.snapshot().cached == 2u);
  BOOST_TEST(slab.take() == blocks[1]);
  BOOST_TEST(slab.take() == blocks[0]);
  BOOST_TEST(slab.snapshot().cached == 0u);
  slab.give(blocks[0]);
  slab.give(blocks[1]);
}

BOOST_AUTO_TEST_CASE(threads_never_share_or_lose_a_block) {
  actor_slab slab{128, 64};
  constexpr int threads = 4;
  constexpr int rounds = 5000;
  std::vector<std::thread> ts;
  std::vector<int> clashes(threads, 0);
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      std::vector<unsigned char*> mine;
      for (int r = 0; r < rounds; ++r) {
        // Hold up to 8 blocks, each stamped with this thread's id: a block
        // handed to two threads at once would show the other's stamp.
        auto* p = static_cast<unsigned char*>(slab.take());
        std::memset(p, t + 1, 128);
        mine.push_back(p);
        if (mine.size() == 8 || r + 1 == rounds) {
          for (auto* q : mine) {
            for (int i = 0; i < 128; ++i)
              clashes[t] += q[i] != t + 1;
            slab.give(q);
          }
          mine.clear();
        }
      }
    });
  for (auto& th : ts)
    th.join();
  for (int t = 0; t < threads; ++t)
    BOOST_TEST(clashes[t] == 0, "thread " << t);
  auto c = slab.snapshot();
  BOOST_TEST(c.reused + c.fresh == std::size_t{threads} * rounds);
  BOOST_TEST(c.cached <= 64u);
  BOOST_TEST(c.fresh <= std::size_t{threads} * 8 + 64); // held at once
}

BOOST_AUTO_TEST_SUITE_END()
