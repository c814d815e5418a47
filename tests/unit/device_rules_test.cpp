// The CUDA-free rules the cuda backend builds on, tested where there is no
// GPU: swap coalescing (runs consecutive on both sides) and the strided
// copies that move the runs, the cross-stream hazard rules, and the mark on
// a wake's thread.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/device/hazards.hpp"
#include "kvactor/device/storage.hpp"
#include "kvactor/device/swap_plan.hpp"

using namespace kvactor;

BOOST_AUTO_TEST_SUITE(device_rules_suite)

BOOST_AUTO_TEST_CASE(coalesce_moves_merges_runs_consecutive_on_both_sides) {
  using detail::swap_run;
  auto runs = detail::coalesce_moves(
    {{7, 2}, {3, 10}, {4, 11}, {5, 12}, {8, 3}, {9, 9}, {20, 0}});
  std::vector<swap_run> want{{3, 10, 3}, {7, 2, 2}, {9, 9, 1}, {20, 0, 1}};
  BOOST_REQUIRE(runs.size() == want.size());
  for (std::size_t i = 0; i < runs.size(); ++i) {
    BOOST_TEST(runs[i].device_first == want[i].device_first);
    BOOST_TEST(runs[i].host_first == want[i].host_first);
    BOOST_TEST(runs[i].count == want[i].count);
  }
  BOOST_TEST(detail::coalesce_moves({}).empty());
  // Random batches: every move covered exactly once, runs maximal.
  std::mt19937_64 rng{606};
  for (int round = 0; round < 50; ++round) {
    std::vector<block_id> dev(64), host(64);
    std::iota(dev.begin(), dev.end(), 0u);
    std::iota(host.begin(), host.end(), 0u);
    std::shuffle(dev.begin(), dev.end(), rng);
    std::shuffle(host.begin(), host.end(), rng);
    std::vector<block_move> moves;
    const auto n = rng() % 64;
    std::sort(dev.begin(), dev.begin() + static_cast<std::ptrdiff_t>(n));
    for (std::size_t i = 0; i < n; ++i)
      moves.push_back({dev[i], round % 2 ? host[i] : dev[i] + 100});
    std::shuffle(moves.begin(), moves.end(), rng);
    std::vector<block_move> covered;
    for (auto& r : detail::coalesce_moves(moves))
      for (std::uint32_t k = 0; k < r.count; ++k)
        covered.push_back({r.device_first + k, r.host_first + k});
    auto by_dev = [](const block_move& x, const block_move& y) {
      return x.device_block < y.device_block;
    };
    std::sort(moves.begin(), moves.end(), by_dev);
    BOOST_TEST((covered == moves));
    if (round % 2 == 0) // host = device + 100: runs are the device runs
      for (auto& r : detail::coalesce_moves(moves))
        BOOST_TEST(std::count_if(moves.begin(), moves.end(), [&](auto& m) {
                     return m.device_block == r.device_first + r.count;
                   }) == 0);
  }
}

BOOST_AUTO_TEST_CASE(split_runs_sends_long_runs_to_copy_engines) {
  using detail::swap_run;
  const std::vector<swap_run> runs{{0, 0, 1}, {4, 8, 4}, {10, 2, 3}, {20, 30, 8}};
  // 32 KiB blocks: 128 KiB from 4 blocks on.
  auto split = detail::split_runs(runs, 32 * 1024);
  BOOST_REQUIRE(split.by_kernel.size() == 2u);
  BOOST_REQUIRE(split.by_copy_engine.size() == 2u);
  BOOST_TEST(split.by_kernel[0].device_first == 0u);
  BOOST_TEST(split.by_kernel[1].device_first == 10u);
  BOOST_TEST(split.by_copy_engine[0].device_first == 4u);
  BOOST_TEST(split.by_copy_engine[1].device_first == 20u);
  // 128 KiB blocks: every run to the copy engines; threshold 0 likewise.
  BOOST_TEST(detail::split_runs(runs, 128 * 1024).by_kernel.empty());
  BOOST_TEST(detail::split_runs(runs, 16, 0).by_kernel.empty());
  // A threshold past every run: all to the kernel.
  BOOST_TEST(detail::split_runs(runs, 16, 1 << 20).by_copy_engine.empty());
  BOOST_TEST(detail::split_runs({}, 16).by_kernel.empty());
}

BOOST_AUTO_TEST_CASE(swap_copies_move_every_plane_of_every_block) {
  // Replays the strided copies with memcpy, as cudaMemcpy2DAsync would do
  // them (and as the per-plane pieces do when a pitch is too wide), between
  // a 3-layer device pool of 40 blocks and a host tier of 24, and checks the
  // whole of both sides against a block-by-block copy.
  detail::pool_geometry pool;
  pool.num_layers = 3;
  pool.num_blocks = 40;
  pool.block_size = 4;
  pool.row_bytes = 24;
  const std::uint32_t host_blocks = 24;
  const std::size_t bb = pool.block_bytes();
  const std::size_t planes = 2 * pool.num_layers;
  std::mt19937_64 rng{707};
  auto random_bytes = [&](std::size_t n) {
    std::vector<char> v(n);
    for (auto& c : v)
      c = static_cast<char>(rng());
    return v;
  };
  for (int round = 0; round < 40; ++round) {
    auto dev = random_bytes(planes * pool.num_blocks * bb);
    auto host = random_bytes(planes * host_blocks * bb);
    std::vector<block_id> d(pool.num_blocks), h(host_blocks);
    std::iota(d.begin(), d.end(), 0u);
    std::iota(h.begin(), h.end(), 0u);
    std::shuffle(d.begin(), d.end(), rng);
    // Half the rounds keep the host ids in order, so long runs form.
    if (round % 2 == 0)
      std::shuffle(h.begin(), h.end(), rng);
    else
      std::sort(d.begin(), d.begin() + host_blocks);
    std::vector<block_move> moves;
    for (std::size_t i = 0, n = rng() % (host_blocks + 1); i < n; ++i)
      moves.push_back({d[i], h[i]});
    const bool to_host = round % 4 < 2;
    auto dir = to_host ? detail::swap_direction::device_to_host
                       : detail::swap_direction::host_to_device;
    auto want_dev = dev;
    auto want_host = host;
    for (auto& m : moves)
      for (std::size_t q = 0; q < planes; ++q) {
        char* dp = want_dev.data() + (q * pool.num_blocks + m.device_block) * bb;
        char* hp = want_host.data() + (q * host_blocks + m.host_block) * bb;
        if (to_host)
          std::memcpy(hp, dp, bb);
        else
          std::memcpy(dp, hp, bb);
      }
    auto runs = detail::coalesce_moves(moves);
    auto copies = detail::swap_copies(pool, host_blocks, runs.data(),
                                      runs.size(), dir);
    BOOST_REQUIRE(copies.size() == runs.size());
    char* dst = to_host ? host.data() : dev.data();
    const char* src = to_host ? dev.data() : host.data();
    const std::size_t dst_size = to_host ? host.size() : dev.size();
    const std::size_t src_size = to_host ? dev.size() : host.size();
    for (auto& c : copies) {
      BOOST_REQUIRE(c.height == planes);
      // In bounds on both sides before any byte moves.
      BOOST_REQUIRE(c.dst + (c.height - 1) * c.dpitch + c.width <= dst_size);
      BOOST_REQUIRE(c.src + (c.height - 1) * c.spitch + c.width <= src_size);
      for (std::size_t q = 0; q < c.height; ++q)
        std::memcpy(dst + c.dst + q * c.dpitch, src + c.src + q * c.spitch,
                    c.width);
    }
    BOOST_TEST((dev == want_dev));
    BOOST_TEST((host == want_host));
  }
}

BOOST_AUTO_TEST_CASE(swap_copies_of_a_pool_past_4_gib_keep_exact_offsets) {
  // The copies' offsets at the top of a pool whose planes are far past 4 GiB
  // (1.2M blocks of 32 KiB: 39 GB a plane, 2.5 TB over 64 planes), without
  // allocating it: every offset, and the last byte each copy touches,
  // against exact 128-bit arithmetic - a 32-bit product anywhere wraps.
  detail::pool_geometry pool;
  pool.num_layers = 32;
  pool.num_blocks = 1'200'000;
  pool.block_size = 16;
  pool.row_bytes = 8 * 128 * 2; // 8 heads x 128 dims, fp16
  const std::uint32_t host_blocks = 300'000;
  using u128 = unsigned __int128;
  const u128 bb = u128{pool.block_size} * pool.row_bytes;
  const u128 planes = u128{2} * pool.num_layers;
  const u128 dev_size = planes * pool.num_blocks * bb;
  const u128 host_size = planes * host_blocks * bb;
  std::vector<detail::swap_run> runs{{pool.num_blocks - 10, host_blocks - 10, 10},
                                     {0, 0, 1},
                                     {600'000, 150'000, 70'000}};
  for (auto dir : {detail::swap_direction::device_to_host,
                   detail::swap_direction::host_to_device}) {
    const bool to_host = dir == detail::swap_direction::device_to_host;
    auto copies = detail::swap_copies(pool, host_blocks, runs.data(),
                                      runs.size(), dir);
    BOOST_REQUIRE(copies.size() == runs.size());
    for (std::size_t i = 0; i < runs.size(); ++i) {
      const auto& c = copies[i];
      const u128 dev = u128{runs[i].device_first} * bb;
      const u128 host = u128{runs[i].host_first} * bb;
      const u128 dev_pitch = u128{pool.num_blocks} * bb;
      const u128 host_pitch = u128{host_blocks} * bb;
      BOOST_TEST((u128{c.dst} == (to_host ? host : dev)));
      BOOST_TEST((u128{c.src} == (to_host ? dev : host)));
      BOOST_TEST((u128{c.dpitch} == (to_host ? host_pitch : dev_pitch)));
      BOOST_TEST((u128{c.spitch} == (to_host ? dev_pitch : host_pitch)));
      BOOST_TEST((u128{c.width} == u128{runs[i].count} * bb));
      BOOST_TEST((u128{c.height} == planes));
      // The last plane's row ends inside each side, at the run's end.
      const u128 dst_end = u128{c.dst} + u128{c.height - 1} * c.dpitch + c.width;
      const u128 src_end = u128{c.src} + u128{c.height - 1} * c.spitch + c.width;
      BOOST_TEST((dst_end <= (to_host ? host_size : dev_size)));
      BOOST_TEST((src_end <= (to_host ? dev_size : host_size)));
      // The same end in size_t, as the per-plane pieces compute it.
      BOOST_TEST((u128{c.dst + (c.height - 1) * c.dpitch + c.width} == dst_end));
    }
  }
}

BOOST_AUTO_TEST_CASE(hazard_tracker_orders_conflicts_across_streams_only) {
  detail::hazard_tracker hz{8, 3};
  using waits = detail::hazard_tracker::waits;
  waits w{};
  hz.need_write(0, 0, w);
  BOOST_TEST((w == waits{}));
  hz.note_read(1, 1, 5); // swap_out (stream 1) reads block 1
  w = {};
  hz.need_write(1, 0, w); // copy onto 1 on stream 0: write-after-read
  BOOST_TEST(w[1] == 5u);
  w = {};
  hz.need_read(1, 0, w); // read-after-read: nothing
  BOOST_TEST((w == waits{}));
  w = {};
  hz.need_write(1, 1, w); // same stream: ordered by the stream
  BOOST_TEST((w == waits{}));
  hz.note_write(1, 0, 6);
  w = {};
  hz.need_read(1, 2, w); // read-after-write
  BOOST_TEST(w[0] == 6u);
  BOOST_TEST(w[1] == 0u); // covered by ticket 6, which waited for 5
  w = {};
  hz.need_write(1, 2, w); // write-after-write
  BOOST_TEST(w[0] == 6u);
  hz.note_read(2, 0, 7);
  hz.note_read(2, 1, 8);
  hz.note_read(2, 0, 9);
  w = {};
  hz.need_write(2, 2, w); // newest read of each other stream
  BOOST_TEST(w[0] == 9u);
  BOOST_TEST(w[1] == 8u);
}

BOOST_AUTO_TEST_CASE(hazard_tracker_orders_every_conflict_of_random_sequences) {
  // The property the cuda backend's bytes rest on, checked on seeded random
  // sequences: ops reading and writing random blocks on random streams, each
  // used as cuda_storage uses the tracker (every need_* of an op, then its
  // note_*). An op runs after the earlier ops of its stream and after each
  // ticket it waits for, and so after everything those ran after; every
  // earlier op that conflicts with it (a write of a block it touches, a read
  // of a block it writes) must be among them. Tickets are indices + 1.
  constexpr std::size_t num_streams = 3, num_blocks = 6, num_ops = 150;
  constexpr auto none = static_cast<std::size_t>(-1);
  using waits = detail::hazard_tracker::waits;
  std::mt19937_64 rng{20261207};
  for (int run = 0; run < 40; ++run) {
    detail::hazard_tracker hz{num_blocks, num_streams};
    struct op {
      std::size_t stream = 0;
      std::vector<bool> reads, writes;
    };
    std::vector<op> ops;
    std::vector<std::vector<bool>> after; // after[j][i]: j runs after op i
    std::vector<std::size_t> last_on(num_streams, none);
    for (std::size_t j = 0; j < num_ops; ++j) {
      op o;
      o.stream = rng() % num_streams;
      o.reads.assign(num_blocks, false);
      o.writes.assign(num_blocks, false);
      for (std::size_t b = 0; b < num_blocks; ++b) {
        auto r = rng() % 4; // reads and writes of one op are disjoint
        o.reads[b] = r == 0;
        o.writes[b] = r == 1;
      }
      waits w{};
      for (std::size_t b = 0; b < num_blocks; ++b) {
        const auto id = static_cast<block_id>(b);
        if (o.reads[b])
          hz.need_read(id, o.stream, w);
        if (o.writes[b])
          hz.need_write(id, o.stream, w);
      }
      std::vector<bool> runs_after(num_ops, false);
      auto inherit = [&](std::size_t i) {
        runs_after[i] = true;
        for (std::size_t k = 0; k < i; ++k)
          if (after[i][k])
            runs_after[k] = true;
      };
      if (last_on[o.stream] != none)
        inherit(last_on[o.stream]);
      for (std::size_t s = 0; s < w.size(); ++s) {
        if (w[s] == 0)
          continue;
        const auto i = static_cast<std::size_t>(w[s] - 1);
        BOOST_REQUIRE(s != o.stream);
        BOOST_REQUIRE(i < j);
        BOOST_REQUIRE(ops[i].stream == s); // a ticket of the stream named
        inherit(i);
      }
      for (std::size_t i = 0; i < j; ++i) {
        bool conflict = false;
        for (std::size_t b = 0; b < num_blocks; ++b)
          conflict = conflict
                     || (ops[i].writes[b] && (o.reads[b] || o.writes[b]))
                     || (ops[i].reads[b] && o.writes[b]);
        if (conflict && !runs_after[i])
          BOOST_FAIL("run " << run << ": op " << j << " (stream " << o.stream
                            << ") may overtake conflicting op " << i
                            << " (stream " << ops[i].stream << ")");
      }
      const ticket t = j + 1;
      for (std::size_t b = 0; b < num_blocks; ++b) {
        const auto id = static_cast<block_id>(b);
        if (o.reads[b])
          hz.note_read(id, o.stream, t);
        if (o.writes[b])
          hz.note_write(id, o.stream, t);
      }
      after.push_back(std::move(runs_after));
      ops.push_back(std::move(o));
      last_on[ops.back().stream] = j;
    }
  }
}

BOOST_AUTO_TEST_CASE(a_wake_scope_marks_its_thread_only) {
  // The device actor asks in_wake() before dropping a storage: on a wake's
  // thread (a CUDA host callback) it hands the storage to another thread.
  BOOST_TEST(!storage::in_wake());
  bool other_thread = true;
  {
    detail::wake_scope scope;
    BOOST_TEST(storage::in_wake());
    std::thread([&] { other_thread = storage::in_wake(); }).join();
  }
  BOOST_TEST(!other_thread);
  BOOST_TEST(!storage::in_wake());
}

BOOST_AUTO_TEST_SUITE_END()
