// Test helpers of gpu_tests: random batches for the storage's operations
// (block copies, swaps, slot mappings) on a layout, from a seeded generator.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/device/storage.hpp"
#include "twin.hpp"

namespace kvactor::test {

using bytes = std::vector<std::uint8_t>;

/// 0 .. n-1 in random order.
inline std::vector<block_id> shuffled(std::uint32_t n, std::mt19937_64& rng) {
  std::vector<block_id> ids(n);
  std::iota(ids.begin(), ids.end(), 0u);
  std::shuffle(ids.begin(), ids.end(), rng);
  return ids;
}

/// About a third of the blocks copied onto others: destinations distinct
/// and never sources.
inline std::vector<block_copy> random_pairs(std::uint32_t num_blocks,
                                            std::mt19937_64& rng) {
  auto ids = shuffled(num_blocks, rng);
  std::vector<block_copy> pairs;
  const auto half = num_blocks / 2;
  for (std::uint32_t i = 0; i < half; ++i)
    if (rng() % 3 != 0)
      pairs.push_back({ids[i], ids[half + i]});
  return pairs;
}

/// Random device blocks paired with random host blocks, each at most once.
inline std::vector<block_move> random_moves(const storage_layout& l,
                                            std::mt19937_64& rng) {
  auto dev = shuffled(l.num_blocks, rng);
  auto host = shuffled(l.num_host_blocks, rng);
  std::vector<block_move> moves;
  const auto n = std::min(l.num_blocks, l.num_host_blocks);
  for (std::uint32_t i = 0; i < n; ++i)
    if (rng() % 4 != 0)
      moves.push_back({dev[i], host[i]});
  return moves;
}

/// `n` distinct random slots, about one in ten -1 (skipped).
inline std::vector<std::int64_t>
random_slots(const storage_layout& l, std::size_t n, std::mt19937_64& rng) {
  auto order = shuffled(l.num_blocks * l.block_size, rng);
  std::vector<std::int64_t> slots(n);
  for (std::size_t i = 0; i < n; ++i)
    slots[i] = rng() % 10 == 0 ? -1 : std::int64_t{order[i]};
  return slots;
}

/// About one token in `one_in` (from the second on) names an earlier
/// token's slot again: the last writer must win.
inline void name_again(std::vector<std::int64_t>& slots, std::uint64_t one_in,
                       std::mt19937_64& rng) {
  for (std::size_t i = 1; i < slots.size(); ++i)
    if (rng() % one_in == 0)
      slots[i] = slots[rng() % i];
}

inline void expect_ok(const caf::expected<ticket>& t, const char* what) {
  BOOST_REQUIRE_MESSAGE(t, what << ": " << why(t));
}

} // namespace kvactor::test
