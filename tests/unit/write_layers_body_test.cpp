// kernel::write_layers_thread (kernel_bodies.hpp), the cuda write_layers
// kernel's per-thread work, run on the CPU over its whole grid: each row of
// CUDA blocks writes its own layer's K and V planes from its own layer's
// rows (packed or strided), skips slot -1, and touches nothing else -
// neither other layers' planes nor the bytes around the pool.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/device/kernel_bodies.hpp"

namespace k = kvactor::detail::kernel;

namespace {

struct alignas(16) v16 {
  unsigned char b[16];
};

/// Random bytes, viewed from `guard` bytes in (the rest: a guard zone on
/// either side that must come out unchanged).
struct bytes_with_guard {
  static constexpr std::size_t guard = 4096;
  std::vector<v16> data;
  std::size_t size;
  bytes_with_guard(std::size_t n, std::mt19937_64& rng)
    : data((n + 2 * guard) / sizeof(v16) + 1), size(n) {
    auto p = reinterpret_cast<unsigned char*>(data.data());
    for (std::size_t i = 0; i < data.size() * sizeof(v16); ++i)
      p[i] = static_cast<unsigned char>(rng());
  }
  char* at() {
    return reinterpret_cast<char*>(data.data()) + guard;
  }
  std::vector<char> all() const {
    auto p = reinterpret_cast<const char*>(data.data());
    return {p, p + data.size() * sizeof(v16)};
  }
};

void check_write_layers(std::int64_t layers, std::int64_t num_blocks,
                        std::int64_t block_size, std::int64_t row_bytes,
                        std::int64_t num_tokens, std::int64_t pad,
                        std::uint64_t seed) {
  std::mt19937_64 rng{seed};
  const std::int64_t plane = num_blocks * block_size * row_bytes;
  const std::int64_t stride = num_tokens * row_bytes + pad;
  bytes_with_guard pool(static_cast<std::size_t>(layers * 2 * plane), rng);
  bytes_with_guard key(static_cast<std::size_t>(layers * stride), rng);
  bytes_with_guard value(static_cast<std::size_t>(layers * stride), rng);
  std::vector<std::int64_t> all(static_cast<std::size_t>(num_blocks * block_size));
  for (std::size_t i = 0; i < all.size(); ++i)
    all[i] = static_cast<std::int64_t>(i);
  std::shuffle(all.begin(), all.end(), rng);
  std::vector<std::int64_t> slots(all.begin(), all.begin() + num_tokens);
  for (auto& s : slots)
    if (rng() % 4 == 0)
      s = -1;
  auto want = pool.all();
  for (std::int64_t y = 0; y < layers; ++y)
    for (std::int64_t t = 0; t < num_tokens; ++t) {
      if (slots[static_cast<std::size_t>(t)] < 0)
        continue;
      const auto dst = bytes_with_guard::guard + y * 2 * plane
                       + slots[static_cast<std::size_t>(t)] * row_bytes;
      const auto src = y * stride + t * row_bytes;
      std::memcpy(want.data() + dst, key.at() + src,
                  static_cast<std::size_t>(row_bytes));
      std::memcpy(want.data() + dst + plane, value.at() + src,
                  static_cast<std::size_t>(row_bytes));
    }
  const auto g = k::write_layers_grid(num_tokens, layers);
  BOOST_REQUIRE(g.y == layers);
  for (std::int64_t y = 0; y < g.y; ++y)
    for (std::int64_t x = 0; x < g.x; ++x)
      for (int th = 0; th < k::threads_per_block; ++th)
        k::write_layers_thread<v16, false>(
          k::thread_pos{static_cast<unsigned>(x), static_cast<unsigned>(y),
                        static_cast<unsigned>(g.x), static_cast<unsigned>(g.y),
                        static_cast<unsigned>(th)},
          pool.at(), plane, key.at(), value.at(), stride, slots.data(),
          num_tokens, row_bytes);
  BOOST_TEST((pool.all() == want));
}

} // namespace

BOOST_AUTO_TEST_SUITE(write_layers_body_suite)

BOOST_AUTO_TEST_CASE(each_row_of_blocks_writes_its_own_layer) {
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    check_write_layers(3, 8, 16, 64, 100, 0, seed);      // packed
    check_write_layers(4, 4, 4, 256, 12, 48, seed);      // strided
    check_write_layers(1, 4, 4, 4096 + 16, 12, 16, seed); // rows past a round
  }
}

BOOST_AUTO_TEST_SUITE_END()
