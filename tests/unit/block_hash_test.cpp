// block_hash: the chained block hash reacts to every token bit, to token
// order, to the parent and to the length, spreads its bits evenly, and
// stays the same function (routers outside the process recompute it).
#include <algorithm>
#include <bitset>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/actors/block_hash.hpp"

using kvactor::token_id;
using kvactor::detail::block_hash;
using kvactor::detail::hash_block;

namespace {

std::vector<token_id> random_tokens(std::mt19937_64& rng, std::size_t n) {
  std::vector<token_id> out(n);
  for (auto& t : out)
    t = static_cast<token_id>(rng() % 152064);
  return out;
}

int bits_differing(std::uint64_t x, std::uint64_t y) {
  return static_cast<int>(std::bitset<64>(x ^ y).count());
}

} // namespace

BOOST_AUTO_TEST_SUITE(block_hash_suite)

BOOST_AUTO_TEST_CASE(every_token_bit_flips_about_half_of_each_lane) {
  std::mt19937_64 rng{7};
  const block_hash parent{0x1234, 0x5678};
  double lo_sum = 0;
  double hi_sum = 0;
  int flips = 0;
  for (int trial = 0; trial < 8; ++trial) {
    auto tokens = random_tokens(rng, 16);
    auto base = hash_block(parent, tokens.data(), tokens.size());
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      for (int bit = 0; bit < 32; ++bit) {
        auto t = tokens;
        t[i] = static_cast<token_id>(static_cast<std::uint32_t>(t[i]) ^ (1u << bit));
        auto h = hash_block(parent, t.data(), t.size());
        auto dlo = bits_differing(base.lo, h.lo);
        auto dhi = bits_differing(base.hi, h.hi);
        BOOST_TEST_REQUIRE(dlo > 0, "token " << i << " bit " << bit << " leaves lo");
        BOOST_TEST_REQUIRE(dhi > 0, "token " << i << " bit " << bit << " leaves hi");
        lo_sum += dlo;
        hi_sum += dhi;
        ++flips;
      }
    }
  }
  // A good mix changes 32 bits on average; 4096 flips pin the mean closely.
  BOOST_TEST(lo_sum / flips > 31.0);
  BOOST_TEST(lo_sum / flips < 33.0);
  BOOST_TEST(hi_sum / flips > 31.0);
  BOOST_TEST(hi_sum / flips < 33.0);
}

BOOST_AUTO_TEST_CASE(order_parent_and_length_all_count) {
  std::mt19937_64 rng{11};
  auto tokens = random_tokens(rng, 16);
  const block_hash parent{1, 2};
  auto base = hash_block(parent, tokens.data(), 16);
  // Swapping two 4-token chunks, or two tokens inside one.
  auto swapped = tokens;
  std::swap_ranges(swapped.begin(), swapped.begin() + 4, swapped.begin() + 4);
  BOOST_TEST(hash_block(parent, swapped.data(), 16).lo != base.lo);
  swapped = tokens;
  std::swap(swapped[0], swapped[1]);
  BOOST_TEST(hash_block(parent, swapped.data(), 16).lo != base.lo);
  // Either half of the parent moves its own lane (each lane follows its
  // own half: see hash_block for why).
  auto h = hash_block(block_hash{1, 3}, tokens.data(), 16);
  BOOST_TEST(h.lo == base.lo);
  BOOST_TEST(h.hi != base.hi);
  h = hash_block(block_hash{0, 2}, tokens.data(), 16);
  BOOST_TEST(h.lo != base.lo);
  BOOST_TEST(h.hi == base.hi);
  // Zero tokens at the end are not the same as no tokens; every length
  // from 1 to 40 (block sizes other than 16) gives its own hash.
  std::vector<token_id> zeros(40, 0);
  std::set<std::uint64_t> seen;
  for (std::size_t n = 1; n <= zeros.size(); ++n)
    seen.insert(hash_block(parent, zeros.data(), n).lo);
  BOOST_TEST(seen.size() == zeros.size());
  // Chunks past the fourth (blocks over 16 tokens) have keys of their own:
  // swapping a 32-token block's halves changes its hash.
  auto long_block = random_tokens(rng, 32);
  auto rotated = long_block;
  std::rotate(rotated.begin(), rotated.begin() + 16, rotated.end());
  BOOST_TEST(hash_block(parent, long_block.data(), 32).lo
             != hash_block(parent, rotated.data(), 32).lo);
}

/// A block of 16 tokens whose chunk `c` holds words x and y (the rest 7s).
static std::vector<token_id> with_chunk(std::size_t c, std::uint64_t x,
                                        std::uint64_t y) {
  std::vector<token_id> t(16, 7);
  std::memcpy(t.data() + 4 * c, &x, sizeof(x));
  std::memcpy(t.data() + 4 * c + 2, &y, sizeof(y));
  return t;
}

BOOST_AUTO_TEST_CASE(words_that_zero_a_product_or_swap_its_factors_still_count) {
  // The multiply-fold has two weak spots a prompt could aim at, knowing
  // the seed: a word equal to its key zeroes the product, and swapping
  // the (keyed) factors keeps it. Neither may make two blocks collide.
  const block_hash parent{0x0123456789abcdefull, 0xfedcba9876543210ull};
  for (std::size_t c = 0; c < 4; ++c) {
    auto k = kvactor::detail::keys_of(parent, c);
    // Both products zero, two ways (an earlier version collided here in
    // all 128 bits).
    auto a = with_chunk(c, k.x_lo, k.y_hi);
    auto b = with_chunk(c, k.x_hi, k.y_lo);
    auto ha = hash_block(parent, a.data(), 16);
    auto hb = hash_block(parent, b.data(), 16);
    BOOST_TEST(ha.lo != hb.lo, "chunk " << c);
    BOOST_TEST(ha.hi != hb.hi, "chunk " << c);
    // The lo lane's product zero, any second word: still distinct.
    std::set<std::uint64_t> los;
    for (std::uint64_t y = 0; y < 64; ++y) {
      auto t = with_chunk(c, k.x_lo, y * 0x9e3779b97f4a7c15ull);
      los.insert(hash_block(parent, t.data(), 16).lo);
    }
    BOOST_TEST(los.size() == 64u, "chunk " << c);
    // Swapped factors: (x, y) and (y ^ kx ^ ky, x ^ kx ^ ky) multiply the
    // same in the lo lane.
    std::uint64_t x = 0x0000000500000003ull;
    std::uint64_t y = 0x0000000b00000009ull;
    auto p = with_chunk(c, x, y);
    auto q = with_chunk(c, y ^ k.x_lo ^ k.y_lo, x ^ k.x_lo ^ k.y_lo);
    BOOST_TEST(hash_block(parent, p.data(), 16).lo
               != hash_block(parent, q.data(), 16).lo, "chunk " << c);
  }
}

BOOST_AUTO_TEST_CASE(chains_spread_over_every_bit_and_the_index_slots) {
  // 65536 chained blocks of prompts that differ little (as shared system
  // prompts do): every bit of both lanes is set close to half the time,
  // and the index's slots (flat_index takes the top bits after a Fibonacci
  // multiply) fill evenly.
  std::mt19937_64 rng{3};
  auto tokens = random_tokens(rng, 16);
  constexpr int n = 65536;
  std::vector<int> lo_ones(64, 0);
  std::vector<int> hi_ones(64, 0);
  std::vector<int> slots(4096, 0);
  std::set<std::uint64_t> distinct;
  block_hash h{0, 0};
  for (int i = 0; i < n; ++i) {
    tokens[i % 16] = static_cast<token_id>(i); // one token changes per block
    h = hash_block(h, tokens.data(), tokens.size());
    distinct.insert(h.lo);
    for (int b = 0; b < 64; ++b) {
      lo_ones[b] += static_cast<int>((h.lo >> b) & 1);
      hi_ones[b] += static_cast<int>((h.hi >> b) & 1);
    }
    ++slots[(h.lo * 0x9e3779b97f4a7c15ull) >> 52];
  }
  BOOST_TEST(distinct.size() == std::size_t{n});
  for (int b = 0; b < 64; ++b) {
    // Binomial(65536, 1/2): sd 128, so +-1 % is 5 sd.
    BOOST_TEST(std::abs(lo_ones[b] - n / 2) < n / 100, "lo bit " << b);
    BOOST_TEST(std::abs(hi_ones[b] - n / 2) < n / 100, "hi bit " << b);
  }
  double chi2 = 0;
  const double expected = double(n) / slots.size();
  for (auto c : slots)
    chi2 += (c - expected) * (c - expected) / expected;
  // 4095 degrees of freedom: mean 4095, sd 90.5; 4600 is 5.6 sd out.
  BOOST_TEST(chi2 < 4600.0);
}

BOOST_AUTO_TEST_CASE(the_function_is_pinned) {
  // Routers outside the process compute the same hashes from prompts (and
  // KV events publish `lo`): a change to the function must be deliberate,
  // and must change this value and the README together (and be said in
  // the commit: KV event consumers recompute).
  std::vector<token_id> tokens(16);
  for (std::size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<token_id>(1000 + i);
  auto h = hash_block(block_hash{0, 0}, tokens.data(), tokens.size());
  BOOST_TEST(h.lo == 0x58227359543a8c68ull);
  BOOST_TEST(h.hi == 0xb7489050ded3bb95ull);
}

BOOST_AUTO_TEST_SUITE_END()
