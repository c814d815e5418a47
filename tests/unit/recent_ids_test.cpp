// recent_ids (the facade's ended handle actors): remembers the last
// `capacity` distinct ids, forgets the oldest first, ignores repeats -
// checked against a deque and a set in a seeded random model test.
#include <cstdint>
#include <deque>
#include <random>
#include <unordered_set>

#include <boost/test/unit_test.hpp>

#include "kvactor/actors/recent_ids.hpp"

using kvactor::detail::recent_ids;

BOOST_AUTO_TEST_SUITE(recent_ids_suite)

BOOST_AUTO_TEST_CASE(the_oldest_goes_first_and_repeats_change_nothing) {
  recent_ids r{3};
  BOOST_TEST(r.insert(10));
  BOOST_TEST(r.insert(11));
  BOOST_TEST(!r.insert(10)); // still remembered: not moved to the back
  BOOST_TEST(r.insert(12));
  BOOST_TEST(r.size() == 3u);
  BOOST_TEST(r.insert(13)); // forgets 10
  BOOST_TEST(!r.contains(10));
  for (std::uint64_t id : {11, 12, 13})
    BOOST_TEST(r.contains(id));
  BOOST_TEST(r.insert(10)); // forgets 11, remembers 10 again
  BOOST_TEST(!r.contains(11));
  BOOST_TEST(r.contains(10));
  BOOST_TEST(r.size() == 3u);
}

BOOST_AUTO_TEST_CASE(matches_a_deque_and_a_set_over_random_inserts) {
  for (std::uint32_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 rng{seed};
    std::size_t cap = 1 + rng() % 64;
    recent_ids r{cap};
    std::deque<std::uint64_t> order;
    std::unordered_set<std::uint64_t> set;
    // Ids from a range a few times the capacity: repeats of remembered
    // and of forgotten ids both happen.
    auto range = 1 + cap * (1 + rng() % 4);
    for (int step = 0; step < 5000; ++step) {
      auto id = rng() % range;
      bool fresh = set.insert(id).second;
      if (fresh) {
        order.push_back(id);
        if (order.size() > cap) {
          set.erase(order.front());
          order.pop_front();
        }
      }
      BOOST_REQUIRE_EQUAL(r.insert(id), fresh);
      BOOST_REQUIRE_EQUAL(r.size(), order.size());
      auto probe = rng() % range;
      BOOST_REQUIRE_EQUAL(r.contains(probe), set.count(probe) == 1);
    }
    for (std::uint64_t id = 0; id < range; ++id)
      BOOST_REQUIRE_EQUAL(r.contains(id), set.count(id) == 1);
  }
}

BOOST_AUTO_TEST_SUITE_END()
