// id_map (the manager's registry, and others): lookups, insert through
// operator[] and try_emplace, erase that moves the last entry into the gap,
// iteration and erasing while iterating - checked against
// std::unordered_map in seeded random model tests, also with chunks of four
// entries so that entries move across chunk boundaries.
#include <cstdint>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>

#include <boost/test/unit_test.hpp>

#include "kvactor/actors/id_map.hpp"

using kvactor::detail::id_map;

namespace {

using ref_map = std::unordered_map<std::uint64_t, std::string>;

/// True if `m` holds exactly the entries of `ref`, each found by its key
/// and each visited once by iteration.
template <unsigned Bits>
bool same_contents(const id_map<std::string, Bits>& m, const ref_map& ref) {
  if (m.size() != ref.size() || m.empty() != ref.empty())
    return false;
  std::size_t seen = 0;
  for (auto& [k, v] : m) {
    ++seen;
    auto i = ref.find(k);
    if (i == ref.end() || i->second != v)
      return false;
  }
  for (auto& [k, v] : ref) {
    auto i = m.find(k);
    if (i == m.end() || i->first != k || i->second != v || m.count(k) != 1)
      return false;
  }
  return seen == ref.size();
}

} // namespace

BOOST_AUTO_TEST_SUITE(id_map_suite)

BOOST_AUTO_TEST_CASE(insert_find_and_erase_keep_the_other_entries) {
  id_map<std::string> m;
  BOOST_TEST(m.empty());
  BOOST_TEST((m.find(7) == m.end()));
  m[7] = "seven";
  m[9] = "nine";
  m[11] = "eleven";
  BOOST_TEST(m.size() == 3u);
  BOOST_TEST(m.find(9)->second == "nine");
  BOOST_TEST(m.count(10) == 0u);
  // operator[] on a present key changes nothing else.
  m[9] += "!";
  BOOST_TEST(m.size() == 3u);
  BOOST_TEST(m.find(9)->second == "nine!");
  // Erasing the first entry moves the last one into its place.
  m.erase(m.find(7));
  BOOST_TEST(m.size() == 2u);
  BOOST_TEST(m.count(7) == 0u);
  BOOST_TEST(m.find(11)->second == "eleven");
  BOOST_TEST(m.find(9)->second == "nine!");
  // Erasing the last entry moves nothing.
  m.erase(m.find(9));
  m.erase(m.find(11));
  BOOST_TEST(m.empty());
  BOOST_TEST((m.begin() == m.end()));
  m[7] = "again";
  BOOST_TEST(m.find(7)->second == "again");
  m.clear();
  BOOST_TEST(m.empty());
  BOOST_TEST(m.count(7) == 0u);
}

BOOST_AUTO_TEST_CASE(move_only_values_survive_erase) {
  id_map<std::unique_ptr<int>> m;
  for (int i = 0; i < 100; ++i)
    m[static_cast<std::uint64_t>(i) * 1000].reset(new int{i});
  for (int i = 0; i < 100; i += 3)
    m.erase(m.find(static_cast<std::uint64_t>(i) * 1000));
  for (int i = 0; i < 100; ++i) {
    auto it = m.find(static_cast<std::uint64_t>(i) * 1000);
    if (i % 3 == 0) {
      BOOST_TEST((it == m.end()));
    } else {
      BOOST_REQUIRE((it != m.end()));
      BOOST_TEST(*it->second == i);
    }
  }
}

BOOST_AUTO_TEST_CASE(an_entry_stays_put_while_others_are_added) {
  // Inserts move no entry: a reference taken before stays valid.
  id_map<std::string> m;
  auto& first = m[1];
  first = "one";
  for (std::uint64_t k = 2; k < 5000; ++k)
    m[k] = "x";
  BOOST_TEST(&m.find(1)->second == &first);
  BOOST_TEST(first == "one");
}

BOOST_AUTO_TEST_CASE(random_operations_match_unordered_map) {
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 rng{seed};
    id_map<std::string, 2> m; // chunks of 4: erase moves entries across them
    ref_map ref;
    // Keys from a small range collide and recur; some far apart.
    auto key = [&] {
      return rng() % 4 == 0 ? rng() : rng() % 300;
    };
    for (int step = 0; step < 3000; ++step) {
      auto k = key();
      switch (rng() % 4) {
        case 0:
        case 1: {
          auto v = std::to_string(rng() % 1000);
          m[k] = v;
          ref[k] = v;
          break;
        }
        case 2: {
          auto i = m.find(k);
          BOOST_REQUIRE((i == m.end()) == (ref.count(k) == 0));
          if (i != m.end()) {
            m.erase(i);
            ref.erase(k);
          }
          break;
        }
        default: {
          // Erase whatever iteration reaches first (any position).
          if (!m.empty()) {
            auto victim = std::next(m.begin(), static_cast<std::ptrdiff_t>(rng() % m.size()));
            ref.erase(victim->first);
            m.erase(victim);
          }
        }
      }
      if (step % 97 == 0)
        BOOST_REQUIRE_MESSAGE(same_contents(m, ref),
                              "seed " << seed << " step " << step);
    }
    BOOST_REQUIRE_MESSAGE(same_contents(m, ref), "seed " << seed);
  }
}

BOOST_AUTO_TEST_CASE(try_emplace_adds_only_what_is_absent) {
  id_map<std::string, 1> m;
  auto [i, added] = m.try_emplace(5, 3, 'x');
  BOOST_TEST(added);
  BOOST_TEST(i->second == "xxx");
  auto [j, again] = m.try_emplace(5, "other");
  BOOST_TEST(!again);
  BOOST_TEST((j == i));
  BOOST_TEST(j->second == "xxx");
  BOOST_TEST(m.size() == 1u);
}

BOOST_AUTO_TEST_CASE(erasing_while_iterating_visits_every_entry_once) {
  // The users' pattern (the step ledger forgetting a stepper, the bridge
  // failing the calls to an actor): erase a matching entry and look at the
  // same position again, where the last entry now is.
  for (std::uint64_t seed = 1; seed <= 10; ++seed) {
    std::mt19937_64 rng{seed};
    id_map<std::string, 2> m;
    ref_map ref;
    for (std::uint64_t k = 0; k < 200; ++k) {
      auto v = std::to_string(rng() % 3);
      m[k * 977] = v;
      ref[k * 977] = v;
    }
    std::size_t visited = 0;
    for (auto i = m.begin(); i != m.end();) {
      ++visited;
      if (i->second == "1")
        m.erase(i); // the last entry moves here
      else
        ++i;
    }
    for (auto it = ref.begin(); it != ref.end();)
      it = it->second == "1" ? ref.erase(it) : std::next(it);
    BOOST_TEST(visited == 200u);
    BOOST_TEST(same_contents(m, ref));
  }
}

BOOST_AUTO_TEST_SUITE_END()
