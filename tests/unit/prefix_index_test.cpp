// prefix_index: the pool's compact hash -> block map. Keys that share their
// top 32 bits (the stored tag), runs that wrap around the table, a table
// filled to its capacity, and random operations checked against
// std::unordered_map, with the full keys kept outside the index as the pool
// keeps them in its block metadata.
#include <cstdint>
#include <limits>
#include <random>
#include <unordered_map>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/actors/prefix_index.hpp"

using kvactor::detail::prefix_index;

namespace {

constexpr auto npos = prefix_index::npos;
constexpr auto max_key = std::numeric_limits<std::uint64_t>::max();

/// The full keys of the stored values, as blocks_[b].hash.lo in the pool.
struct key_table {
  std::vector<std::uint64_t> keys;
  std::uint64_t operator()(std::uint32_t v) const {
    return keys.at(v);
  }
};

/// Random inserts, erases and finds over values 0..n-1 whose keys come from
/// `pool`; each value holds at most one key at a time, as each block does.
void random_ops(std::size_t n, const std::vector<std::uint64_t>& pool,
                std::size_t ops, std::uint64_t seed) {
  prefix_index idx(n);
  key_table kt{std::vector<std::uint64_t>(n, 0)};
  std::vector<bool> stored(n, false);
  std::unordered_map<std::uint64_t, std::uint32_t> ref;
  std::mt19937_64 rng(seed);
  for (std::size_t op = 0; op < ops; ++op) {
    auto v = static_cast<std::uint32_t>(rng() % n);
    auto k = pool[rng() % pool.size()];
    switch (rng() % 3) {
      case 0: {
        if (stored[v])
          break; // the pool indexes a block once
        kt.keys[v] = k; // index_block writes the hash first
        bool fresh = ref.count(k) == 0;
        BOOST_REQUIRE_EQUAL(idx.insert(k, v, kt), fresh);
        if (fresh) {
          ref[k] = v;
          stored[v] = true;
        }
        break;
      }
      case 1: {
        BOOST_REQUIRE_EQUAL(idx.erase(kt.keys[v], v), bool{stored[v]});
        if (stored[v]) {
          ref.erase(kt.keys[v]);
          stored[v] = false;
        }
        break;
      }
      default: {
        auto i = ref.find(k);
        BOOST_REQUIRE_EQUAL(idx.find(k, kt), i == ref.end() ? npos : i->second);
      }
    }
    BOOST_REQUIRE_EQUAL(idx.size(), ref.size());
  }
  std::size_t seen = 0;
  idx.for_each([&](std::uint32_t v) {
    ++seen;
    BOOST_REQUIRE(stored[v]);
    BOOST_REQUIRE_EQUAL(ref.at(kt.keys[v]), v);
  });
  BOOST_TEST(seen == ref.size());
}

} // namespace

BOOST_AUTO_TEST_SUITE(prefix_index_suite)

BOOST_AUTO_TEST_CASE(an_empty_index_finds_nothing_and_erases_nothing) {
  prefix_index idx(100);
  key_table kt{{}};
  BOOST_TEST(idx.size() == 0u);
  BOOST_TEST(idx.capacity() == 100u);
  BOOST_TEST(idx.find(0, kt) == npos);
  BOOST_TEST(idx.find(max_key, kt) == npos);
  BOOST_TEST(!idx.erase(7, 0));
}

BOOST_AUTO_TEST_CASE(a_slot_is_eight_bytes_and_load_stays_under_two_thirds) {
  prefix_index idx(20000);
  // 20,000 * 1.5 -> 32,768 slots of 8 bytes.
  BOOST_TEST(idx.memory_bytes() == 32768u * 8u);
  prefix_index small(10);
  BOOST_TEST(small.memory_bytes() == 16u * 8u);
}

BOOST_AUTO_TEST_CASE(keys_zero_and_max_and_value_zero_work) {
  prefix_index idx(8);
  key_table kt{{0, max_key, 1}};
  BOOST_TEST(idx.insert(0, 0, kt));
  BOOST_TEST(idx.insert(max_key, 1, kt));
  BOOST_TEST(idx.insert(1, 2, kt));
  BOOST_TEST(idx.find(0, kt) == 0u);
  BOOST_TEST(idx.find(max_key, kt) == 1u);
  BOOST_TEST(idx.find(1, kt) == 2u);
  BOOST_TEST(idx.erase(max_key, 1));
  BOOST_TEST(idx.find(max_key, kt) == npos);
  BOOST_TEST(idx.find(0, kt) == 0u);
  BOOST_TEST(idx.size() == 2u);
}

BOOST_AUTO_TEST_CASE(keys_sharing_the_stored_tag_are_told_apart_by_key_of) {
  // Same top 32 bits: same tag and same home slot, different keys.
  std::uint64_t hi = 0xDEADBEEF00000000ull;
  key_table kt{{hi | 1, hi | 2, hi | 3}};
  prefix_index idx(3);
  BOOST_TEST(idx.insert(hi | 1, 0, kt));
  BOOST_TEST(idx.insert(hi | 2, 1, kt));
  BOOST_TEST(!idx.insert(hi | 2, 2, kt)); // present under value 1
  BOOST_TEST(idx.find(hi | 1, kt) == 0u);
  BOOST_TEST(idx.find(hi | 2, kt) == 1u);
  BOOST_TEST(idx.find(hi | 3, kt) == npos);
  // Erase names the value: removing key 2's entry leaves key 1's.
  BOOST_TEST(!idx.erase(hi | 2, 2));
  BOOST_TEST(idx.erase(hi | 2, 1));
  BOOST_TEST(idx.find(hi | 1, kt) == 0u);
  BOOST_TEST(idx.find(hi | 2, kt) == npos);
}

BOOST_AUTO_TEST_CASE(a_key_homes_at_its_top_bits_and_erase_shifts_its_run_back) {
  // 10 entries -> 16 slots: a key's home slot is its top 4 bits.
  key_table kt{{0xF000000000000001ull, 0xF000000000000002ull,
                0x0000000000000003ull, 0x7000000000000004ull}};
  prefix_index idx(10);
  for (std::uint32_t v = 0; v < 4; ++v)
    BOOST_REQUIRE(idx.insert(kt.keys[v], v, kt));
  BOOST_TEST(idx.slot_of(kt.keys[0], kt) == 15u); // home 15
  BOOST_TEST(idx.slot_of(kt.keys[1], kt) == 0u);  // home 15, wrapped
  BOOST_TEST(idx.slot_of(kt.keys[2], kt) == 1u);  // home 0, pushed on
  BOOST_TEST(idx.slot_of(kt.keys[3], kt) == 7u);
  // Removing the head of the wrapped run pulls both followers back.
  BOOST_TEST(idx.erase(kt.keys[0], 0));
  BOOST_TEST(idx.slot_of(kt.keys[1], kt) == 15u);
  BOOST_TEST(idx.slot_of(kt.keys[2], kt) == 0u);
  BOOST_TEST(idx.slot_of(kt.keys[3], kt) == 7u);
  BOOST_TEST(idx.slot_of(kt.keys[0], kt) == npos);
  // A 20,000-entry index has 32,768 slots: home = top 15 bits.
  prefix_index big(20000);
  key_table bt{{0x1234567800000000ull}};
  BOOST_REQUIRE(big.insert(bt.keys[0], 0, bt));
  BOOST_TEST(big.slot_of(bt.keys[0], bt) == (0x1234567800000000ull >> 49));
}

BOOST_AUTO_TEST_CASE(an_index_filled_to_capacity_finds_every_key) {
  constexpr std::size_t n = 1000;
  prefix_index idx(n);
  key_table kt{{}};
  std::mt19937_64 rng(5);
  for (std::uint32_t v = 0; v < n; ++v) {
    kt.keys.push_back(rng());
    BOOST_REQUIRE(idx.insert(kt.keys.back(), v, kt));
  }
  BOOST_TEST(idx.size() == n);
  for (std::uint32_t v = 0; v < n; ++v)
    BOOST_REQUIRE_EQUAL(idx.find(kt.keys[v], kt), v);
  for (std::uint32_t v = 0; v < n; v += 2)
    BOOST_REQUIRE(idx.erase(kt.keys[v], v));
  for (std::uint32_t v = 0; v < n; ++v)
    BOOST_REQUIRE_EQUAL(idx.find(kt.keys[v], kt), v % 2 == 0 ? npos : v);
}

BOOST_AUTO_TEST_CASE(runs_that_wrap_around_the_table_survive_erases) {
  // 10 entries -> 16 slots, home = top 4 bits. Keys homing at slots 14, 15
  // and 0 make runs that wrap past the end; low bits keep them distinct,
  // some share a tag.
  std::vector<std::uint64_t> pool;
  std::mt19937_64 rng(9);
  for (std::uint64_t top : {0xEull, 0xFull, 0x0ull})
    for (int i = 0; i < 6; ++i) {
      auto low = i < 2 ? static_cast<std::uint64_t>(i) : rng() >> 4;
      pool.push_back(top << 60 | (low & ((1ull << 60) - 1)));
    }
  random_ops(10, pool, 100000, 1);
}

BOOST_AUTO_TEST_CASE(random_ops_match_unordered_map) {
  std::vector<std::uint64_t> pool{0, max_key, max_key - 1, 1};
  std::mt19937_64 rng(3);
  for (int i = 0; i < 3000; ++i)
    pool.push_back(rng());
  for (std::uint64_t seed : {11u, 12u, 13u})
    random_ops(1500, pool, 100000, seed);
  random_ops(20000, pool, 100000, 14); // the default pool's table size
}

BOOST_AUTO_TEST_SUITE_END()
