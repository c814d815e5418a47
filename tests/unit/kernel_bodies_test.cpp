// The cuda backend's kernels, run on the CPU: every thread of each kernel's
// grid executes kernel_bodies.hpp's code one after another (exact for these
// kernels, whose threads share nothing), on random data and random block
// mappings, and the whole output buffer is compared with a plain copy made
// here. The kernels move a test type whose copies are logged, so the tests
// also see that every target element is stored exactly once (no thread
// repeats or skips work, whatever the grid) and that no load or store
// touches the guard bytes around each buffer. Runs everywhere, GPU or not:
// it checks the kernels' index math, their grid-stride loops (grids smaller
// than the work, as large batches clamp to) and their bounds. The GPU tests
// then check the same kernels on the device against the host backend.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/device/kernel_bodies.hpp"

namespace k = kvactor::detail::kernel;
using kvactor::detail::block_pair;

namespace {

/// What the kernels touched while the log is on: stores into each watched
/// buffer, counted per element, and any access to a guard zone.
struct access_log {
  struct watched {
    const char* lo;
    const char* hi;
    std::size_t elem;
    std::vector<std::uint32_t> stores;
  };
  std::vector<watched> buffers;
  std::vector<std::pair<const char*, const char*>> guards;
  std::size_t guard_hits = 0;

  void touch(const void* p) {
    auto c = static_cast<const char*>(p);
    for (auto& g : guards)
      if (c >= g.first && c < g.second)
        ++guard_hits;
  }
  void store(const void* p) {
    touch(p);
    auto c = static_cast<const char*>(p);
    for (auto& b : buffers)
      if (c >= b.lo && c < b.hi)
        ++b.stores[static_cast<std::size_t>(c - b.lo) / b.elem];
  }
};

access_log* current_log = nullptr;

/// An N-byte vector (int4, int2, int, short or char on the device) whose
/// copies are logged: a load copy-constructs from the source element, a
/// store assigns to the target element.
template <std::size_t N>
struct alignas(N) vec {
  unsigned char b[N];
  vec() = default;
  vec(const vec& x) {
    if (current_log != nullptr)
      current_log->touch(&x);
    std::memcpy(b, x.b, N);
  }
  vec& operator=(const vec& x) {
    if (current_log != nullptr)
      current_log->store(this);
    std::memcpy(b, x.b, N);
    return *this;
  }
};

using v16 = vec<16>;

/// Bytes of a buffer that the kernel under test must store into exactly
/// once; all others it must not store into.
struct target_bytes {
  std::vector<bool> bytes;
  explicit target_bytes(std::size_t n) : bytes(n, false) {}
  void mark(std::size_t offset, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i)
      bytes[offset + i] = true;
  }
};

/// Runs f(thread_pos) for every thread of a grid of g (x, y) CUDA blocks of
/// threads_per_block threads.
template <class F>
void run_grid(k::grid_dims g, F&& f) {
  for (std::int64_t y = 0; y < g.y; ++y)
    for (std::int64_t x = 0; x < g.x; ++x)
      for (int t = 0; t < k::threads_per_block; ++t)
        f(k::thread_pos{static_cast<unsigned>(x), static_cast<unsigned>(y),
                        static_cast<unsigned>(g.x), static_cast<unsigned>(g.y),
                        static_cast<unsigned>(t)});
}

/// `bytes` bytes of storage typed as T (so that the kernels' T accesses are
/// accesses to T objects), filled with random bytes, between two guard zones
/// as long as one round of a CUDA block's copy (what a missing bound check
/// overruns by at most).
template <class T>
struct buffer {
  static constexpr std::size_t guard = k::copy_unroll * k::threads_per_block;
  std::size_t size;
  std::vector<T> data;
  buffer(std::size_t bytes, std::mt19937_64& rng)
    : size(bytes), data((bytes + sizeof(T) - 1) / sizeof(T) + 2 * guard) {
    auto p = reinterpret_cast<char*>(data.data());
    for (std::size_t i = 0; i < data.size() * sizeof(T); ++i)
      p[i] = static_cast<char>(rng());
  }
  char* bytes_of() {
    return reinterpret_cast<char*>(data.data() + guard);
  }
  std::vector<char> snapshot() {
    return {bytes_of(), bytes_of() + size};
  }
  void guard_in(access_log& log) {
    auto all = reinterpret_cast<const char*>(data.data());
    log.guards.emplace_back(all, bytes_of());
    log.guards.emplace_back(bytes_of() + size, all + data.size() * sizeof(T));
  }
  void watch_in(access_log& log) {
    log.buffers.push_back({bytes_of(), bytes_of() + size, sizeof(T),
                           std::vector<std::uint32_t>(size / sizeof(T), 0)});
  }
};

/// Runs `f` over grid `g` with logging on for `bufs` (every one guarded;
/// the first `num_out` watched for stores, in order), then checks each
/// watched buffer's stores against its targets and that no guard was hit.
template <class T, class F>
void run_logged(k::grid_dims g, std::vector<buffer<T>*> bufs,
                std::size_t num_out, const std::vector<target_bytes>& targets,
                F&& f) {
  access_log log;
  for (std::size_t i = 0; i < bufs.size(); ++i) {
    bufs[i]->guard_in(log);
    if (i < num_out)
      bufs[i]->watch_in(log);
  }
  current_log = &log;
  run_grid(g, f);
  current_log = nullptr;
  BOOST_TEST(log.guard_hits == 0u);
  for (std::size_t i = 0; i < num_out; ++i) {
    auto& w = log.buffers[i];
    std::size_t wrong = 0;
    for (std::size_t e = 0; e < w.stores.size(); ++e)
      wrong += w.stores[e] != (targets[i].bytes[e * sizeof(T)] ? 1u : 0u);
    BOOST_TEST(wrong == 0u, "buffer " << i << ": " << wrong
                                      << " elements not stored exactly as often as "
                                         "targeted (once, or never)");
  }
}

/// (src, dst) pairs over num_blocks blocks: destinations distinct and never a
/// source, as the storage's validation requires; sources may repeat (a
/// prefix block forked to several requests).
std::vector<block_pair> random_pairs(std::uint32_t num_blocks, std::size_t n,
                                     std::mt19937_64& rng) {
  std::vector<std::uint32_t> ids(num_blocks);
  for (std::uint32_t i = 0; i < num_blocks; ++i)
    ids[i] = i;
  std::shuffle(ids.begin(), ids.end(), rng);
  // The first n ids are destinations, sources come from the rest.
  std::vector<block_pair> pairs;
  for (std::size_t i = 0; i < n; ++i)
    pairs.push_back({ids[n + rng() % (num_blocks - n)],
                     static_cast<std::uint32_t>(ids[i])});
  return pairs;
}

template <class T>
void check_copy_blocks(std::uint32_t layers, std::uint32_t num_blocks,
                       std::int64_t block_bytes, std::size_t num_pairs,
                       k::grid_dims grid, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::int64_t planes = 2 * layers;
  const std::int64_t plane_bytes = block_bytes * num_blocks;
  buffer<T> pool(static_cast<std::size_t>(planes * plane_bytes), rng);
  auto pairs = random_pairs(num_blocks, num_pairs, rng);
  auto want = pool.snapshot();
  std::vector<target_bytes> targets{target_bytes(want.size())};
  for (std::int64_t q = 0; q < planes; ++q)
    for (auto& p : pairs) {
      auto dst = static_cast<std::size_t>(q * plane_bytes + p.dst * block_bytes);
      std::memcpy(want.data() + dst,
                  want.data() + q * plane_bytes + p.src * block_bytes,
                  static_cast<std::size_t>(block_bytes));
      targets[0].mark(dst, static_cast<std::size_t>(block_bytes));
    }
  run_logged<T>(grid, {&pool}, 1, targets, [&](k::thread_pos at) {
    k::copy_blocks_thread<T>(at, pool.bytes_of(), pairs.data(),
                             static_cast<std::int64_t>(pairs.size()), planes,
                             plane_bytes, block_bytes);
  });
  BOOST_TEST((pool.snapshot() == want));
}

template <class T, bool EarlySlot = true>
void check_write_slots(std::uint32_t num_blocks, std::int64_t block_size,
                       std::int64_t row_bytes, std::int64_t num_tokens,
                       k::grid_dims grid, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::int64_t plane_bytes = num_blocks * block_size * row_bytes;
  buffer<T> k_plane(static_cast<std::size_t>(plane_bytes), rng);
  buffer<T> v_plane(static_cast<std::size_t>(plane_bytes), rng);
  buffer<T> key(static_cast<std::size_t>(num_tokens * row_bytes), rng);
  buffer<T> value(static_cast<std::size_t>(num_tokens * row_bytes), rng);
  // Distinct slots (slot_plan.cpp keeps only each slot's last writer), a
  // quarter of them -1 (padding).
  std::vector<std::int64_t> all(static_cast<std::size_t>(num_blocks * block_size));
  for (std::size_t i = 0; i < all.size(); ++i)
    all[i] = static_cast<std::int64_t>(i);
  std::shuffle(all.begin(), all.end(), rng);
  std::vector<std::int64_t> slots(all.begin(), all.begin() + num_tokens);
  for (auto& s : slots)
    if (rng() % 4 == 0)
      s = -1;
  auto want_k = k_plane.snapshot();
  auto want_v = v_plane.snapshot();
  std::vector<target_bytes> targets(2, target_bytes(want_k.size()));
  for (std::int64_t t = 0; t < num_tokens; ++t) {
    if (slots[t] < 0)
      continue;
    auto n = static_cast<std::size_t>(row_bytes);
    auto dst = static_cast<std::size_t>(slots[t] * row_bytes);
    std::memcpy(want_k.data() + dst, key.bytes_of() + t * row_bytes, n);
    std::memcpy(want_v.data() + dst, value.bytes_of() + t * row_bytes, n);
    targets[0].mark(dst, n);
    targets[1].mark(dst, n);
  }
  run_logged<T>(grid, {&k_plane, &v_plane, &key, &value}, 2, targets,
                [&](k::thread_pos at) {
    k::write_slots_thread<T, false, EarlySlot>(at, k_plane.bytes_of(),
                                        v_plane.bytes_of(), key.bytes_of(),
                                        value.bytes_of(), slots.data(),
                                        num_tokens, row_bytes);
  });
  BOOST_TEST((k_plane.snapshot() == want_k));
  BOOST_TEST((v_plane.snapshot() == want_v));
}

template <class T>
void check_gather(std::uint32_t num_blocks, std::int64_t block_size,
                  std::int64_t row_bytes, std::size_t num_list,
                  std::int64_t num_tokens, k::grid_dims grid,
                  std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::int64_t block_bytes = block_size * row_bytes;
  const std::int64_t plane_bytes = num_blocks * block_bytes;
  buffer<T> k_plane(static_cast<std::size_t>(plane_bytes), rng);
  buffer<T> v_plane(static_cast<std::size_t>(plane_bytes), rng);
  // Output one block longer than needed: the poison past num_tokens rows
  // must survive.
  auto out_bytes = static_cast<std::size_t>((num_tokens + block_size) * row_bytes);
  buffer<T> key_out(out_bytes, rng);
  buffer<T> value_out(out_bytes, rng);
  std::vector<std::uint32_t> blocks;
  for (std::size_t i = 0; i < num_list; ++i)
    blocks.push_back(static_cast<std::uint32_t>(rng() % num_blocks));
  auto want_k = key_out.snapshot();
  auto want_v = value_out.snapshot();
  std::vector<target_bytes> targets(2, target_bytes(want_k.size()));
  for (std::int64_t t = 0; t < num_tokens; ++t) {
    auto src = blocks[static_cast<std::size_t>(t / block_size)] * block_bytes
               + (t % block_size) * row_bytes;
    auto n = static_cast<std::size_t>(row_bytes);
    std::memcpy(want_k.data() + t * row_bytes, k_plane.bytes_of() + src, n);
    std::memcpy(want_v.data() + t * row_bytes, v_plane.bytes_of() + src, n);
  }
  targets[0].mark(0, static_cast<std::size_t>(num_tokens * row_bytes));
  targets[1].mark(0, static_cast<std::size_t>(num_tokens * row_bytes));
  auto chunks = k::gather_chunks(static_cast<std::int64_t>(num_list),
                                 num_tokens, block_size);
  run_logged<T>(grid, {&key_out, &value_out, &k_plane, &v_plane}, 2, targets,
                [&](k::thread_pos at) {
    k::gather_blocks_thread<T>(at, k_plane.bytes_of(), v_plane.bytes_of(),
                               blocks.data(), key_out.bytes_of(),
                               value_out.bytes_of(), chunks, num_tokens,
                               block_size, row_bytes);
  });
  BOOST_TEST((key_out.snapshot() == want_k));
  BOOST_TEST((value_out.snapshot() == want_v));
}

} // namespace

/// The swap kernel between a pool of `num_blocks` and a host tier of
/// `num_host`, both `planes` planes of `block_bytes` blocks: random runs
/// (disjoint on each side, lengths 1-3), each direction.
template <class T>
void check_swap_runs(std::uint32_t planes, std::uint32_t num_blocks,
                     std::uint32_t num_host, std::int64_t block_bytes,
                     bool to_host, k::grid_dims grid, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::int64_t dev_plane = block_bytes * num_blocks;
  const std::int64_t host_plane = block_bytes * num_host;
  buffer<T> pool(static_cast<std::size_t>(planes * dev_plane), rng);
  buffer<T> tier(static_cast<std::size_t>(planes * host_plane), rng);
  // Runs: walk both sides in random strides, so runs never overlap.
  std::vector<kvactor::detail::swap_run> runs;
  std::uint32_t d = 0, h = 0;
  while (true) {
    d += static_cast<std::uint32_t>(rng() % 3);
    h += static_cast<std::uint32_t>(rng() % 3);
    const auto count = 1 + static_cast<std::uint32_t>(rng() % 3);
    if (d + count > num_blocks || h + count > num_host)
      break;
    runs.push_back({d, h, count});
    d += count;
    h += count;
  }
  std::shuffle(runs.begin(), runs.end(), rng);
  auto& dst = to_host ? tier : pool;
  auto& src = to_host ? pool : tier;
  auto want = dst.snapshot();
  std::vector<target_bytes> targets{target_bytes(want.size())};
  for (std::int64_t q = 0; q < planes; ++q)
    for (auto& r : runs) {
      const auto n = static_cast<std::size_t>(r.count * block_bytes);
      const auto dev = static_cast<std::size_t>(q * dev_plane
                                                + r.device_first * block_bytes);
      const auto host = static_cast<std::size_t>(q * host_plane
                                                 + r.host_first * block_bytes);
      const auto to = to_host ? host : dev;
      std::memcpy(want.data() + to, src.bytes_of() + (to_host ? dev : host), n);
      targets[0].mark(to, n);
    }
  run_logged<T>(grid, {&dst, &src}, 1, targets, [&](k::thread_pos at) {
    k::swap_runs_thread<T>(at, pool.bytes_of(), tier.bytes_of(), runs.data(),
                           static_cast<std::int64_t>(runs.size()), planes,
                           dev_plane, host_plane, block_bytes, to_host);
  });
  BOOST_TEST((dst.snapshot() == want));
}

BOOST_AUTO_TEST_SUITE(kernel_bodies_suite)

BOOST_AUTO_TEST_CASE(grids_cover_the_work_and_clamp_to_cuda_limits) {
  auto g = k::copy_blocks_grid(5, 6);
  BOOST_TEST(g.x == 5);
  BOOST_TEST(g.y == 6);
  g = k::copy_blocks_grid(std::int64_t{1} << 40, 70000);
  BOOST_TEST(g.x == k::max_grid_x);
  BOOST_TEST(g.y == k::max_grid_y);
  g = k::copy_blocks_grid(5, 64, 8); // 8 planes per CUDA block
  BOOST_TEST(g.y == 8);
  g = k::copy_blocks_grid(5, 6, 4); // rounded up: no plane left out
  BOOST_TEST(g.y == 2);
  g = k::copy_blocks_grid(0, 0); // never a zero grid
  BOOST_TEST(g.x == 1);
  BOOST_TEST(g.y == 1);
  // One warp per row, two rows (K, V) per token.
  BOOST_TEST(k::write_slots_grid(4).x == 1);
  BOOST_TEST(k::write_slots_grid(5).x == 2);
  BOOST_TEST(k::write_slots_grid(4096).x == 1024);
  BOOST_TEST(k::write_slots_grid(4096, 4).x == 256);
  BOOST_TEST(k::write_slots_grid(5, 4).x == 1);
  BOOST_TEST(k::gather_blocks_grid(7).y == 2);
  // A gather reads only the list blocks its tokens need.
  BOOST_TEST(k::gather_chunks(10, 33, 16) == 3);
  BOOST_TEST(k::gather_chunks(2, 33, 16) == 2);
  BOOST_TEST(k::gather_chunks(10, 32, 16) == 2);
}

BOOST_AUTO_TEST_CASE(copy_blocks_copies_every_plane_of_every_pair) {
  // 3 layers, 12 blocks of 4 tokens x 48 bytes; the launcher's grid and a
  // smaller one that makes the block loops stride over pairs and planes.
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    check_copy_blocks<v16>(3, 12, 192, 5, k::copy_blocks_grid(5, 6), seed);
    check_copy_blocks<v16>(3, 12, 192, 5, {2, 4}, seed);
    check_copy_blocks<v16>(3, 12, 192, 5, k::copy_blocks_grid(5, 6, 4), seed);
    // A block larger than one round of the whole CUDA block (256 threads x
    // 8 vectors = 32 KiB), with a ragged last round.
    check_copy_blocks<v16>(1, 4, 40960 + 16 * 3, 2, k::copy_blocks_grid(2, 2), seed);
  }
  // Narrow vectors when alignment allows no wider ones.
  check_copy_blocks<vec<2>>(2, 9, 6, 4, k::copy_blocks_grid(4, 4), 4);
  check_copy_blocks<vec<1>>(2, 9, 7, 4, {3, 1}, 5);
}

BOOST_AUTO_TEST_CASE(write_slots_scatters_rows_and_skips_padding) {
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    // 16-token blocks, 8 heads x 4 dims x 2 bytes per row.
    check_write_slots<v16>(8, 16, 64, 100, k::write_slots_grid(100), seed);
    check_write_slots<v16>(8, 16, 64, 100, k::write_slots_grid(100, 3), seed);
    // Rows longer than a warp's round (32 lanes x 8 x 16 B = 4 KiB).
    check_write_slots<v16>(4, 4, 9600, 12, k::write_slots_grid(12, 2), seed);
    // The early slot read (the default) at its boundary: a row of exactly
    // one round (32 lanes x 8 x 16 B = 4 KiB) and of one vector more, which
    // takes the slot-first path; and that path for every row.
    check_write_slots<v16>(4, 4, 4096, 12, k::write_slots_grid(12), seed);
    check_write_slots<v16>(4, 4, 4096 + 16, 12, k::write_slots_grid(12), seed);
    check_write_slots<v16, false>(8, 16, 64, 100, k::write_slots_grid(100), seed);
    check_write_slots<v16, false>(4, 4, 9600, 12, k::write_slots_grid(12, 2), seed);
    // A grid of 3 CUDA blocks for 100 tokens: each warp strides over rows.
    check_write_slots<v16>(8, 16, 64, 100, {3, 1}, seed);
    // Rows longer than a warp's round (32 lanes x 8 x 16 B = 4 KiB).
    check_write_slots<v16>(2, 4, 4096 + 48, 7, {1, 1}, seed);
  }
  check_write_slots<vec<4>>(4, 8, 12, 20, k::write_slots_grid(20), 4);
  check_write_slots<vec<1>>(4, 8, 3, 20, {2, 1}, 5);
}

BOOST_AUTO_TEST_CASE(gather_copies_only_the_rows_of_its_tokens) {
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    // 37 tokens over a 5-block list of 16-token blocks: 3 chunks, the last
    // one 5 rows.
    auto chunks = k::gather_chunks(5, 37, 16);
    check_gather<v16>(10, 16, 64, 5, 37, k::gather_blocks_grid(chunks), seed);
    check_gather<v16>(10, 16, 64, 5, 37, {1, 2}, seed);
    // Exactly full blocks.
    check_gather<v16>(10, 16, 64, 4, 32, k::gather_blocks_grid(2), seed);
  }
  check_gather<vec<8>>(6, 4, 24, 3, 9, k::gather_blocks_grid(3), 4);
  check_gather<vec<1>>(6, 4, 5, 3, 9, {2, 2}, 5);
}

BOOST_AUTO_TEST_CASE(swap_runs_moves_every_plane_of_every_run_both_ways) {
  BOOST_TEST(k::swap_runs_grid(5).x == 5);
  BOOST_TEST(k::swap_runs_grid(1000).x == k::swap_ctas);
  BOOST_TEST(k::swap_runs_grid(1000, 3).x == 3);
  BOOST_TEST(k::swap_runs_grid(0).x == 1);
  for (std::uint64_t seed : {1u, 2u}) {
    for (bool out : {true, false}) {
      // 3 layers (6 planes), a pool of 30 blocks and a tier of 20: the
      // default grid (fewer CUDA blocks than pieces: strided), a grid of
      // one, and one larger than the work.
      check_swap_runs<v16>(6, 30, 20, 192, out, k::swap_runs_grid(60), seed);
      check_swap_runs<v16>(6, 30, 20, 192, out, {1, 1}, seed);
      check_swap_runs<v16>(2, 8, 8, 64, out, {200, 1}, seed);
      // Runs longer than one round of a CUDA block (32 KiB).
      check_swap_runs<v16>(2, 6, 6, 20000, out, k::swap_runs_grid(12), seed);
    }
  }
  check_swap_runs<vec<2>>(4, 9, 7, 6, true, {3, 1}, 5);
  check_swap_runs<vec<1>>(4, 9, 7, 7, false, {3, 1}, 6);
}

BOOST_AUTO_TEST_SUITE_END()
