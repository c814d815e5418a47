// free_stack and lru_lists: order of hand-out and eviction, removal anywhere,
// and a seeded random run against std::vector / std::list models.
#include <array>
#include <cstdint>
#include <list>
#include <random>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/actors/block_lists.hpp"

using kvactor::block_id;
using kvactor::no_block;
using kvactor::detail::free_stack;
using kvactor::detail::lru_lists;

namespace {

constexpr auto levels = lru_lists::num_levels;

/// The blocks of `lru` in eviction order, as "block@level" words.
std::string order(const lru_lists& lru) {
  std::string out;
  lru.for_each([&](block_id b, std::size_t level) {
    out += std::to_string(b) + "@" + std::to_string(level) + " ";
  });
  return out;
}

/// The same for a model: one std::list per level, front evicted first.
std::string order(const std::array<std::list<block_id>, levels>& model) {
  std::string out;
  for (std::size_t l = 0; l < levels; ++l)
    for (auto b : model[l])
      out += std::to_string(b) + "@" + std::to_string(l) + " ";
  return out;
}

} // namespace

BOOST_AUTO_TEST_SUITE(block_lists_suite)

BOOST_AUTO_TEST_CASE(free_stack_hands_out_the_most_recently_pushed_block) {
  free_stack s;
  s.reserve(8);
  BOOST_TEST(s.empty());
  for (block_id b : {3u, 1u, 4u})
    s.push(b);
  BOOST_TEST(s.size() == 3u);
  BOOST_TEST((s.ids() == std::vector<block_id>{3, 1, 4}));
  BOOST_TEST(s.pop() == 4u);
  s.push(9);
  BOOST_TEST(s.pop() == 9u);
  BOOST_TEST(s.pop() == 1u);
  BOOST_TEST(s.pop() == 3u);
  BOOST_TEST(s.empty());
}

BOOST_AUTO_TEST_CASE(lru_front_is_the_oldest_block_of_the_lowest_level) {
  lru_lists lru(16);
  std::size_t level = 99;
  BOOST_TEST(lru.front(level) == no_block);
  lru.push_back(5, 2);
  lru.push_back(6, 1);
  lru.push_back(7, 3);
  lru.push_back(8, 1);
  BOOST_TEST(lru.size() == 4u);
  BOOST_TEST(lru.size(1) == 2u);
  BOOST_TEST(lru.size(0) == 0u);
  BOOST_TEST(order(lru) == "6@1 8@1 5@2 7@3 ");
  BOOST_TEST(lru.front(level) == 6u);
  BOOST_TEST(level == 1u);
  lru.push_back(0, 0); // a lower level goes first even if released later
  BOOST_TEST(lru.front(level) == 0u);
  BOOST_TEST(level == 0u);
}

BOOST_AUTO_TEST_CASE(lru_remove_from_head_middle_and_tail_keeps_the_order) {
  lru_lists lru(16);
  for (block_id b = 0; b < 5; ++b)
    lru.push_back(b, 1);
  lru.remove(2, 1); // middle
  BOOST_TEST(order(lru) == "0@1 1@1 3@1 4@1 ");
  lru.remove(0, 1); // head
  BOOST_TEST(order(lru) == "1@1 3@1 4@1 ");
  lru.remove(4, 1); // tail
  BOOST_TEST(order(lru) == "1@1 3@1 ");
  lru.push_back(4, 1); // back in as the newest
  lru.push_back(0, 1);
  BOOST_TEST(order(lru) == "1@1 3@1 4@1 0@1 ");
  lru.remove(1, 1);
  lru.remove(3, 1);
  lru.remove(4, 1);
  lru.remove(0, 1); // the only one: head and tail at once
  BOOST_TEST(lru.size() == 0u);
  BOOST_TEST(lru.size(1) == 0u);
  std::size_t level = 0;
  BOOST_TEST(lru.front(level) == no_block);
  lru.push_back(3, 1); // an emptied level works again
  BOOST_TEST(order(lru) == "3@1 ");
}

BOOST_AUTO_TEST_CASE(lru_moves_a_block_between_levels) {
  lru_lists lru(4);
  lru.push_back(1, 0);
  lru.push_back(2, 0);
  lru.remove(1, 0);
  lru.push_back(1, 3);
  BOOST_TEST(order(lru) == "2@0 1@3 ");
  BOOST_TEST(lru.size(0) == 1u);
  BOOST_TEST(lru.size(3) == 1u);
}

BOOST_AUTO_TEST_CASE(random_lru_and_free_stack_ops_match_std_models) {
  constexpr block_id n = 64;
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    std::mt19937_64 rng(seed);
    lru_lists lru(n);
    free_stack stack;
    std::array<std::list<block_id>, levels> model;
    std::vector<block_id> stack_model;
    // Every block is in exactly one place: the stack or one LRU level.
    for (block_id b = 0; b < n; ++b) {
      stack.push(b);
      stack_model.push_back(b);
    }
    auto find = [&](block_id b, std::size_t& level) {
      for (level = 0; level < levels; ++level)
        for (auto x : model[level])
          if (x == b)
            return true;
      return false;
    };
    for (int op = 0; op < 100000; ++op) {
      switch (rng() % 3) {
        case 0: // free -> LRU
          if (!stack.empty()) {
            auto b = stack.pop();
            BOOST_REQUIRE_EQUAL(b, stack_model.back());
            stack_model.pop_back();
            auto level = rng() % levels;
            lru.push_back(b, level);
            model[level].push_back(b);
          }
          break;
        case 1: { // remove a random block from the LRU (anywhere) -> free
          auto b = static_cast<block_id>(rng() % n);
          std::size_t level;
          if (find(b, level)) {
            lru.remove(b, level);
            model[level].remove(b);
            stack.push(b);
            stack_model.push_back(b);
          }
          break;
        }
        default: { // evict the front -> free
          std::size_t level = 99;
          auto b = lru.front(level);
          std::size_t want_level = 0;
          while (want_level < levels && model[want_level].empty())
            ++want_level;
          if (want_level == levels) {
            BOOST_REQUIRE_EQUAL(b, no_block);
            break;
          }
          BOOST_REQUIRE_EQUAL(b, model[want_level].front());
          BOOST_REQUIRE_EQUAL(level, want_level);
          lru.remove(b, level);
          model[level].pop_front();
          stack.push(b);
          stack_model.push_back(b);
        }
      }
      BOOST_REQUIRE_EQUAL(stack.size(), stack_model.size());
      BOOST_REQUIRE_EQUAL(lru.size() + stack.size(), std::size_t{n});
      for (std::size_t l = 0; l < levels; ++l)
        BOOST_REQUIRE_EQUAL(lru.size(l), model[l].size());
      if (op % 101 == 0) {
        BOOST_REQUIRE_EQUAL(order(lru), order(model));
        BOOST_REQUIRE(stack.ids() == stack_model);
      }
    }
    BOOST_REQUIRE_EQUAL(order(lru), order(model));
  }
}

BOOST_AUTO_TEST_SUITE_END()
