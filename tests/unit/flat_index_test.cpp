// flat_index: the basic operations, growth (spread over later operations
// while the old table retires), and backward-shift deletion under heavy
// collisions and wrap-around, checked against std::unordered_map.
#include <cstdint>
#include <limits>
#include <random>
#include <unordered_map>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/actors/flat_index.hpp"

using kvactor::detail::flat_index;

namespace {

constexpr auto npos = flat_index::npos;
constexpr auto max_key = std::numeric_limits<std::uint64_t>::max();

/// The home slot flat_index gives `key` in a table of 2^log2_cap slots
/// (Fibonacci hashing, as in flat_index.hpp). Used only to pick keys that
/// collide; if the hash changes the tests still hold, with fewer collisions.
std::size_t home_of(std::uint64_t key, unsigned log2_cap) {
  return static_cast<std::size_t>((key * 0x9e3779b97f4a7c15ull) >> (64 - log2_cap));
}

/// True if `idx` holds exactly the entries of `ref`, checked both ways.
bool same_contents(const flat_index& idx,
                   const std::unordered_map<std::uint64_t, std::uint32_t>& ref) {
  if (idx.size() != ref.size())
    return false;
  std::size_t seen = 0;
  bool ok = true;
  idx.for_each([&](std::uint64_t k, std::uint32_t v) {
    ++seen;
    auto i = ref.find(k);
    if (i == ref.end() || i->second != v)
      ok = false;
  });
  for (auto& [k, v] : ref)
    if (idx.find(k) != v)
      ok = false;
  return ok && seen == ref.size();
}

/// Random insert / assign / erase / find over `keys`, checked op by op
/// against std::unordered_map; the size never exceeds `max_size`.
void random_ops(flat_index& idx, const std::vector<std::uint64_t>& keys,
                std::size_t ops, std::size_t max_size, std::uint64_t seed) {
  std::unordered_map<std::uint64_t, std::uint32_t> ref;
  std::mt19937_64 rng(seed);
  auto pick = [&] { return keys[rng() % keys.size()]; };
  for (std::size_t op = 0; op < ops; ++op) {
    auto k = pick();
    auto v = static_cast<std::uint32_t>(rng() % 1000000);
    switch (rng() % 4) {
      case 0: {
        if (ref.size() >= max_size)
          break;
        bool fresh = ref.count(k) == 0;
        BOOST_REQUIRE_EQUAL(idx.insert(k, v), fresh);
        if (fresh)
          ref[k] = v;
        break;
      }
      case 1: {
        bool present = ref.count(k) != 0;
        BOOST_REQUIRE_EQUAL(idx.assign(k, v), present);
        if (present)
          ref[k] = v;
        break;
      }
      case 2: {
        bool present = ref.count(k) != 0;
        BOOST_REQUIRE_EQUAL(idx.erase(k), present);
        ref.erase(k);
        break;
      }
      default: {
        auto i = ref.find(k);
        BOOST_REQUIRE_EQUAL(idx.find(k), i == ref.end() ? npos : i->second);
      }
    }
    BOOST_REQUIRE_EQUAL(idx.size(), ref.size());
    if (op % 997 == 0)
      BOOST_REQUIRE(same_contents(idx, ref));
  }
  BOOST_REQUIRE(same_contents(idx, ref));
}

} // namespace

BOOST_AUTO_TEST_SUITE(flat_index_suite)

BOOST_AUTO_TEST_CASE(an_empty_index_finds_nothing) {
  flat_index idx;
  BOOST_TEST(idx.size() == 0u);
  BOOST_TEST(idx.find(0) == npos);
  BOOST_TEST(idx.find(max_key) == npos);
  BOOST_TEST(!idx.erase(7));
  BOOST_TEST(!idx.assign(7, 1));
  std::size_t n = 0;
  idx.for_each([&](std::uint64_t, std::uint32_t) { ++n; });
  BOOST_TEST(n == 0u);
}

BOOST_AUTO_TEST_CASE(insert_find_assign_erase_work_for_keys_zero_and_max) {
  flat_index idx;
  BOOST_TEST(idx.insert(0, 10));
  BOOST_TEST(idx.insert(max_key, 20));
  BOOST_TEST(idx.insert(1, 0)); // value 0 is a value like any other
  BOOST_TEST(idx.size() == 3u);
  BOOST_TEST(idx.find(0) == 10u);
  BOOST_TEST(idx.find(max_key) == 20u);
  BOOST_TEST(idx.find(1) == 0u);
  BOOST_TEST(!idx.insert(0, 11)); // present: no change
  BOOST_TEST(idx.find(0) == 10u);
  BOOST_TEST(idx.assign(0, 12));
  BOOST_TEST(idx.find(0) == 12u);
  BOOST_TEST(idx.size() == 3u);
  BOOST_TEST(idx.erase(max_key));
  BOOST_TEST(!idx.erase(max_key));
  BOOST_TEST(idx.find(max_key) == npos);
  BOOST_TEST(idx.erase(0));
  BOOST_TEST(idx.find(0) == npos);
  BOOST_TEST(idx.find(1) == 0u);
  BOOST_TEST(idx.size() == 1u);
}

BOOST_AUTO_TEST_CASE(the_largest_value_is_stored) {
  flat_index idx;
  BOOST_TEST(idx.insert(5, flat_index::max_value));
  BOOST_TEST(idx.find(5) == flat_index::max_value);
  BOOST_TEST(idx.take(5) == flat_index::max_value);
}

BOOST_AUTO_TEST_CASE(growth_keeps_every_entry) {
  flat_index idx; // room for 16
  auto before = idx.memory_bytes();
  std::unordered_map<std::uint64_t, std::uint32_t> ref;
  for (std::uint64_t k = 0; k < 20000; ++k) {
    // Sequential ids, as request ids are, and their spread images.
    auto key = k % 2 == 0 ? k : k * 0x100000001b3ull;
    BOOST_REQUIRE(idx.insert(key, static_cast<std::uint32_t>(k)));
    ref[key] = static_cast<std::uint32_t>(k);
  }
  BOOST_TEST(idx.memory_bytes() > before);
  BOOST_TEST(same_contents(idx, ref));
  for (std::uint64_t k = 0; k < 20000; k += 3) {
    auto key = k % 2 == 0 ? k : k * 0x100000001b3ull;
    BOOST_REQUIRE(idx.erase(key));
    ref.erase(key);
  }
  BOOST_TEST(same_contents(idx, ref));
}

BOOST_AUTO_TEST_CASE(a_presized_index_does_not_grow_below_half_load) {
  flat_index idx(100); // 256 slots
  auto bytes = idx.memory_bytes();
  for (std::uint32_t k = 0; k < 100; ++k)
    idx.insert(k * 7919, k);
  BOOST_TEST(idx.memory_bytes() == bytes);
}

BOOST_AUTO_TEST_CASE(erase_shifts_back_a_colliding_run_that_wraps_around) {
  // 64 slots (no growth below 32 entries); every key homes in the last three
  // slots or the first two, so runs are long and wrap past the end.
  flat_index idx(32);
  auto bytes = idx.memory_bytes();
  std::vector<std::uint64_t> keys{0}; // home 0
  std::mt19937_64 rng(42);
  while (keys.size() < 200) {
    auto k = rng();
    auto h = home_of(k, 6);
    if (h >= 61 || h <= 1)
      keys.push_back(k);
  }
  keys.push_back(max_key); // elsewhere, sometimes inside the run
  random_ops(idx, keys, 100000, 30, 1);
  BOOST_TEST(idx.memory_bytes() == bytes); // the collisions were real
}

BOOST_AUTO_TEST_CASE(erase_from_the_middle_of_a_run_keeps_the_rest_findable) {
  flat_index idx(32);
  // Five keys with the same home slot 63, then two homing at 0 and 1 that
  // the run pushes further along.
  std::vector<std::uint64_t> same, next;
  std::mt19937_64 rng(7);
  while (same.size() < 5 || next.size() < 2) {
    auto k = rng();
    auto h = home_of(k, 6);
    if (h == 63 && same.size() < 5)
      same.push_back(k);
    else if (h == static_cast<std::size_t>(next.size()) && next.size() < 2)
      next.push_back(k);
  }
  std::uint32_t v = 0;
  for (auto k : same)
    idx.insert(k, v++);
  for (auto k : next)
    idx.insert(k, v++);
  for (std::size_t drop = 0; drop < same.size(); ++drop) {
    flat_index copy = idx;
    BOOST_TEST(copy.erase(same[drop]));
    for (std::size_t i = 0; i < same.size(); ++i)
      BOOST_TEST(copy.find(same[i]) == (i == drop ? npos : i));
    BOOST_TEST(copy.find(next[0]) == 5u);
    BOOST_TEST(copy.find(next[1]) == 6u);
  }
}

BOOST_AUTO_TEST_CASE(random_ops_with_growth_match_unordered_map) {
  std::vector<std::uint64_t> keys{0, max_key, max_key - 1, 1};
  std::mt19937_64 rng(3);
  for (int i = 0; i < 2000; ++i)
    keys.push_back(i % 2 == 0 ? rng() : static_cast<std::uint64_t>(i));
  for (std::uint64_t seed : {11u, 12u, 13u}) {
    flat_index idx(4);
    random_ops(idx, keys, 100000, keys.size(), seed);
  }
}

BOOST_AUTO_TEST_CASE(a_growth_retires_the_old_table_over_later_operations) {
  // 32 slots: the 17th insert starts a 64-slot table; the old one's 32
  // slots move across move_per_op at a time with each later insert or erase.
  flat_index idx(16);
  std::unordered_map<std::uint64_t, std::uint32_t> ref;
  for (std::uint32_t k = 0; k < 16; ++k) {
    BOOST_REQUIRE(idx.insert(k * 7919, k));
    ref[k * 7919] = k;
  }
  BOOST_TEST(!idx.growing());
  auto bytes = idx.memory_bytes();
  BOOST_REQUIRE(idx.insert(1, 100));
  ref[1] = 100;
  BOOST_TEST(idx.growing());
  BOOST_TEST(idx.memory_bytes() == 3 * bytes); // both tables, for now
  BOOST_TEST(same_contents(idx, ref));
  // Keys not moved yet (at the old table's end) and moved ones (its start)
  // can be assigned, erased and inserted again meanwhile. Each insert or
  // erase that changed something moved slots across.
  std::size_t changes = 0;
  for (std::uint32_t k = 0; idx.growing(); ++k) {
    auto before = idx.size();
    auto key = static_cast<std::uint64_t>(k % 16) * 7919;
    switch (k % 3) {
      case 0:
        BOOST_TEST(idx.assign(key, k + 1000) == (ref.count(key) != 0));
        if (ref.count(key))
          ref[key] = k + 1000;
        break;
      case 1:
        BOOST_TEST(idx.take(key) == (ref.count(key) ? ref[key] : npos));
        ref.erase(key);
        break;
      default:
        BOOST_TEST(idx.insert(key, k) == (ref.count(key) == 0));
        ref.emplace(key, k);
    }
    changes += idx.size() != before;
    BOOST_REQUIRE(same_contents(idx, ref));
  }
  BOOST_TEST(changes > 0u);
  BOOST_TEST(changes <= 32 / flat_index::move_per_op);
  BOOST_TEST(idx.memory_bytes() == 2 * bytes); // the old table is gone
  BOOST_TEST(same_contents(idx, ref));
}

BOOST_AUTO_TEST_CASE(random_ops_while_tables_retire_match_unordered_map) {
  // Inserts outnumber erases 2:1 over 3,000 keys, so the size climbs to
  // ~2,000 through eight growths with erases among the inserts that retire
  // each old table; a copy taken mid-growth is an index of its own.
  std::vector<std::uint64_t> keys;
  std::mt19937_64 rng(5);
  for (int i = 0; i < 3000; ++i)
    keys.push_back(i % 3 == 0 ? rng() : static_cast<std::uint64_t>(i));
  for (std::uint64_t seed : {21u, 22u, 23u}) {
    rng.seed(seed);
    flat_index idx(4);
    std::unordered_map<std::uint64_t, std::uint32_t> ref;
    std::size_t growths = 0;
    std::size_t while_growing = 0;
    for (std::size_t op = 0; op < 30000; ++op) {
      auto k = keys[rng() % keys.size()];
      auto v = static_cast<std::uint32_t>(rng() % 1000);
      bool was_growing = idx.growing();
      while_growing += was_growing;
      if (rng() % 3 != 0) {
        bool fresh = ref.count(k) == 0;
        BOOST_REQUIRE_EQUAL(idx.insert(k, v), fresh);
        if (fresh)
          ref[k] = v;
      } else {
        auto i = ref.find(k);
        BOOST_REQUIRE_EQUAL(idx.take(k), i == ref.end() ? npos : i->second);
        ref.erase(k);
      }
      growths += !was_growing && idx.growing();
      BOOST_REQUIRE_EQUAL(idx.size(), ref.size());
      if (idx.growing() && op % 7 == 0) {
        flat_index copy = idx;
        BOOST_REQUIRE(same_contents(copy, ref));
        BOOST_REQUIRE_EQUAL(copy.find(k), idx.find(k));
      }
    }
    BOOST_REQUIRE(same_contents(idx, ref));
    BOOST_TEST(growths >= 8u);
    BOOST_TEST(while_growing > 500u);
  }
}

BOOST_AUTO_TEST_SUITE_END()
