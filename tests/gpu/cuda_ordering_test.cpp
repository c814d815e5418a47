// The cuda backend's guarantees beyond the kernels: work on different
// streams stays in submission order per block, bad batches launch nothing,
// shortages and CUDA errors are reported with their text, tickets and wake.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <numeric>
#include <thread>

#include "twin.hpp"

#if KVACTOR_HAVE_CUDA

#include <cuda_runtime_api.h>

#include "kvactor/device/cuda_storage.hpp"
#include "stream_gate.hpp"

using namespace kvactor;
using namespace kvactor::test;

namespace {

using bytes = std::vector<std::uint8_t>;

/// 2 MiB blocks (32 layers x 16 tokens x 8 heads x 128 fp16, K and V), so a
/// swap of 64 blocks takes milliseconds: unordered work would overtake it.
storage_layout big_layout() {
  return make_layout(32, 160, 16, 8, 128, dtype::fp16, 80);
}

/// 64 random device blocks from [0, 128) whose largest id is `last` (the
/// coalesced swap copies it last), paired with random host blocks.
std::vector<block_move> swap_batch(std::mt19937_64& rng, block_id& last) {
  std::vector<block_id> dev(128);
  std::iota(dev.begin(), dev.end(), 0u);
  std::shuffle(dev.begin(), dev.end(), rng);
  dev.resize(64);
  std::vector<block_id> host(80);
  std::iota(host.begin(), host.end(), 0u);
  std::shuffle(host.begin(), host.end(), rng);
  std::vector<block_move> moves;
  for (std::size_t i = 0; i < dev.size(); ++i)
    moves.push_back({dev[i], host[i]});
  last = *std::max_element(dev.begin(), dev.end());
  return moves;
}

template <class F>
void both(twin& tw, F f) {
  auto h = f(*tw.host);
  BOOST_REQUIRE_MESSAGE(h, "host: " << why(h));
  auto c = f(*tw.cuda);
  BOOST_REQUIRE_MESSAGE(c, "cuda: " << why(c));
}

} // namespace

BOOST_AUTO_TEST_SUITE(cuda_ordering_suite,
                      *boost::unit_test::precondition(gpu_present{}))

BOOST_AUTO_TEST_CASE(swap_out_then_copy_over_its_source_swaps_the_old_bytes) {
  std::mt19937_64 rng{test_seed()};
  twin tw{big_layout(), rng};
  for (int round = 0; round < 3; ++round) {
    block_id last = 0;
    auto moves = swap_batch(rng, last);
    both(tw, [&](storage& s) { return s.swap_out(moves); });
    // Overwrite the block the swap copies last, at once, on another stream.
    const block_id fresh = 130 + static_cast<block_id>(round);
    both(tw, [&](storage& s) { return s.copy_blocks({{fresh, last}}); });
    BOOST_TEST(tw.same("swap_out then copy_blocks"));
  }
}

BOOST_AUTO_TEST_CASE(copy_then_swap_out_of_its_destination_swaps_the_new_bytes) {
  std::mt19937_64 rng{test_seed()};
  twin tw{big_layout(), rng};
  for (int round = 0; round < 3; ++round) {
    std::vector<block_copy> pairs;
    for (block_id i = 0; i < 24; ++i) // 48 MiB of copying before the swap
      pairs.push_back({128 + i, static_cast<block_id>(round * 40 + i)});
    std::vector<block_move> moves;
    for (block_id i = 0; i < 24; ++i)
      moves.push_back({static_cast<block_id>(round * 40 + i), 79 - i});
    // The compute stream is held until both are submitted: the copy cannot
    // have finished before the swap's read of its destination is queued, so
    // only an event between the streams keeps the swap from reading first.
    stream_gate gate{stream_of(tw, cuda_storage::stream_role::compute)};
    both(tw, [&](storage& s) { return s.copy_blocks(pairs); });
    both(tw, [&](storage& s) { return s.swap_out(moves); });
    gate.open();
    BOOST_TEST(!gate.forced(), "a call waited on the host for the held stream");
    BOOST_TEST(tw.same("copy_blocks then swap_out"));
  }
}

BOOST_AUTO_TEST_CASE(swap_in_then_reads_and_writes_see_the_swapped_in_bytes) {
  std::mt19937_64 rng{test_seed()};
  twin tw{big_layout(), rng};
  const auto row = row_bytes(tw.layout);
  std::vector<block_move> moves;
  for (block_id i = 0; i < 64; ++i)
    moves.push_back({i, static_cast<block_id>(79 - i)});
  both(tw, [&](storage& s) { return s.swap_in(moves); });
  // Read-after-write on the compute stream: gather and copy the last block.
  const std::vector<block_id> blocks{63, 62};
  const std::size_t n = 2 * tw.layout.block_size;
  bytes hk(n * row, 0), hv(n * row, 0);
  device_buffer dk{n * row}, dv{n * row};
  dk.upload(hk);
  dv.upload(hv);
  BOOST_REQUIRE(tw.host->gather_blocks(31, blocks, n, hk.data(), hv.data()));
  BOOST_REQUIRE(tw.cuda->gather_blocks(31, blocks, n, dk.data, dv.data));
  both(tw, [&](storage& s) { return s.copy_blocks({{63, 150}}); });
  // Write-after-write: write_slots into a block a swap_in is filling. (This
  // swap_in also writes blocks the gather read, but it copies block 63 last,
  // well after the gather could have run: that write-after-read is tested
  // where it can fail, with the reads held, in the next case.)
  both(tw, [&](storage& s) { return s.swap_in(moves); });
  std::vector<std::int64_t> slots{63 * 16 + 3};
  bytes kv(2 * row);
  fill_random(kv.data(), kv.size(), rng);
  device_buffer dkv{kv.size()};
  dkv.upload(kv);
  auto dev = static_cast<std::uint8_t*>(dkv.data);
  BOOST_REQUIRE(tw.host->write_slots(5, kv.data(), kv.data() + row,
                                     slots.data(), 1));
  BOOST_REQUIRE(tw.cuda->write_slots(5, dev, dev + row, slots.data(), 1));
  BOOST_TEST((dk.download() == hk));
  BOOST_TEST((dv.download() == hv));
  BOOST_TEST(tw.same("swap_in then gather, copy, write"));
}

BOOST_AUTO_TEST_CASE(reads_then_swap_in_over_their_block_read_the_old_bytes) {
  std::mt19937_64 rng{test_seed()};
  twin tw{big_layout(), rng};
  const auto row = row_bytes(tw.layout);
  // Host ids going down keep every run one block long, and runs are copied
  // in device-id order: the swap_in's first copy writes block 0.
  std::vector<block_move> moves;
  for (block_id i = 0; i < 8; ++i)
    moves.push_back({i, static_cast<block_id>(79 - i)});
  const std::vector<block_id> blocks{0, 100};
  const std::size_t n = 2 * tw.layout.block_size;
  bytes hk(n * row, 0), hv(n * row, 0);
  device_buffer dk{n * row}, dv{n * row};
  dk.upload(hk);
  dv.upload(hv);
  {
    // The reads of block 0 wait behind the gate on the compute stream; the
    // swap_in that overwrites it goes on the host-to-device stream, which
    // is not held: only the event it waits for keeps it from writing block
    // 0 before the reads ran.
    stream_gate gate{stream_of(tw, cuda_storage::stream_role::compute)};
    BOOST_REQUIRE(tw.host->gather_blocks(7, blocks, n, hk.data(), hv.data()));
    BOOST_REQUIRE(tw.cuda->gather_blocks(7, blocks, n, dk.data, dv.data));
    both(tw, [&](storage& s) { return s.copy_blocks({{0, 150}}); });
    BOOST_REQUIRE(tw.host->swap_in(moves));
    auto swap = tw.cuda->swap_in(moves);
    BOOST_REQUIRE_MESSAGE(swap, why(swap));
    // Unordered, the swap (16 MiB, about 0.3 ms) would have finished by now.
    std::this_thread::sleep_for(std::chrono::milliseconds{50});
    BOOST_TEST(!tw.cuda->finished(*swap),
               "the swap_in ran before the reads it must wait for");
    gate.open();
    BOOST_TEST(!gate.forced(), "a call waited on the host for the held stream");
  }
  BOOST_TEST((dk.download() == hk));
  BOOST_TEST((dv.download() == hv));
  BOOST_TEST(tw.same("reads then swap_in over their block"));
}

BOOST_AUTO_TEST_CASE(swap_in_then_swap_out_over_its_host_blocks_swaps_in_the_old_bytes) {
  std::mt19937_64 rng{test_seed()};
  twin tw{big_layout(), rng};
  std::vector<block_move> in, out;
  for (block_id i = 0; i < 8; ++i) {
    in.push_back({static_cast<block_id>(10 + i), i});
    out.push_back({static_cast<block_id>(100 + i), i});
  }
  {
    // The swap_in reads host blocks 0-7 behind the gate on the
    // host-to-device stream; the swap_out that overwrites them goes on the
    // device-to-host stream, which is not held: only the event it waits for
    // keeps it from overwriting them before they were read.
    stream_gate gate{stream_of(tw, cuda_storage::stream_role::host_to_device)};
    both(tw, [&](storage& s) { return s.swap_in(in); });
    BOOST_REQUIRE(tw.host->swap_out(out));
    auto swap = tw.cuda->swap_out(out);
    BOOST_REQUIRE_MESSAGE(swap, why(swap));
    // Unordered, the swap_out (16 MiB, about 0.3 ms) would be done by now.
    std::this_thread::sleep_for(std::chrono::milliseconds{50});
    BOOST_TEST(!tw.cuda->finished(*swap),
               "the swap_out ran before the swap_in it must wait for");
    gate.open();
    BOOST_TEST(!gate.forced(), "a call waited on the host for the held stream");
  }
  BOOST_TEST(tw.same("swap_in then swap_out over its host blocks"));
}

BOOST_AUTO_TEST_CASE(swap_out_then_swap_in_of_the_same_host_block_round_trips) {
  std::mt19937_64 rng{test_seed()};
  twin tw{big_layout(), rng};
  block_id last = 0;
  auto out = swap_batch(rng, last);
  both(tw, [&](storage& s) { return s.swap_out(out); });
  // Immediately back, on the other copy stream, into other blocks.
  std::vector<block_move> in;
  for (std::size_t i = 0; i < out.size(); ++i)
    in.push_back({static_cast<block_id>(159 - i), out[i].host_block});
  in.resize(30);
  both(tw, [&](storage& s) { return s.swap_in(in); });
  BOOST_TEST(tw.same("swap_out then swap_in"));
}

BOOST_AUTO_TEST_CASE(bad_batches_fail_launch_nothing_and_change_nothing) {
  std::mt19937_64 rng{test_seed()};
  auto l = make_layout(2, 16, 16, 8, 128, dtype::fp16, 8);
  twin tw{l, rng};
  auto& c = *tw.cuda;
  auto first = c.copy_blocks({{0, 1}});
  BOOST_REQUIRE(first);
  BOOST_REQUIRE(!c.wait(*first));
  BOOST_REQUIRE(tw.host->copy_blocks({{0, 1}}));
  const auto row = row_bytes(l);
  device_buffer buf{64 * row};
  auto dev = static_cast<std::uint8_t*>(buf.data);
  std::vector<std::int64_t> slots{0, 1, 16 * 16};
  bytes pageable(64 * row, 7);
  std::vector<std::pair<const char*, caf::expected<ticket>>> bad;
  bad.emplace_back("copy id out of range", c.copy_blocks({{2, 3}, {4, 16}}));
  bad.emplace_back("copy dst is src", c.copy_blocks({{2, 3}, {3, 4}}));
  bad.emplace_back("swap_out host out of range", c.swap_out({{0, 0}, {1, 8}}));
  bad.emplace_back("swap_in device repeated", c.swap_in({{0, 0}, {0, 1}}));
  bad.emplace_back("slot out of range",
                   c.write_slots(0, dev, dev + row, slots.data(), 3));
  slots.back() = 2;
  bad.emplace_back("layer out of range",
                   c.write_slots(2, dev, dev + row, slots.data(), 3));
  bad.emplace_back("pageable key", c.write_slots(0, pageable.data(), dev + row,
                                                 slots.data(), 3));
  bad.emplace_back("gather block out of range",
                   c.gather_blocks(0, {1, 99}, 20, dev, dev + 32 * row));
  bad.emplace_back("gather too many tokens",
                   c.gather_blocks(0, {1}, 17, dev, dev + 32 * row));
  bad.emplace_back("gather pageable output",
                   c.gather_blocks(0, {1}, 16, pageable.data(), dev));
  for (auto& [what, r] : bad) {
    BOOST_CHECK_MESSAGE(!r, what << ": accepted");
    if (!r)
      BOOST_CHECK_MESSAGE(has_code(r.error(), errc::invalid_request),
                          what << ": " << render(r.error()));
  }
  // No ticket was issued for any of them, and the storage still works.
  auto next = c.copy_blocks({{5, 6}});
  BOOST_REQUIRE_MESSAGE(next, why(next));
  BOOST_TEST(*next == *first + 1);
  BOOST_REQUIRE(tw.host->copy_blocks({{5, 6}}));
  BOOST_TEST(!c.wait(*next));
  BOOST_TEST(tw.same("after rejected batches"));
}

BOOST_AUTO_TEST_CASE(shortages_report_the_cuda_error_and_sizes) {
  storage_options opts;
  opts.kind = "cuda";
  opts.layout = big_layout();
  opts.layout.num_blocks = 4000000; // 8 TB
  auto r = make_storage(opts);
  BOOST_REQUIRE(!r);
  BOOST_TEST(has_code(r.error(), errc::device_failure));
  auto text = render(r.error());
  BOOST_TEST_MESSAGE(text);
  BOOST_TEST(text.find("cudaMalloc") != std::string::npos);
  BOOST_TEST(text.find(std::to_string(opts.layout.device_bytes()))
             != std::string::npos);
  // Nothing left for the next launch check on this thread to report as its
  // own (the runtime keeps the last non-sticky error until it is read).
  BOOST_TEST(cudaPeekAtLastError() == cudaSuccess,
             "a failed make_storage left a CUDA error behind");
  opts.layout = big_layout();
  opts.device_index = 99;
  r = make_storage(opts);
  BOOST_REQUIRE(!r);
  BOOST_TEST(has_code(r.error(), errc::device_failure));
  BOOST_TEST(cudaPeekAtLastError() == cudaSuccess,
             "a failed make_storage left a CUDA error behind");
  // And the runtime is still usable afterwards.
  opts.device_index = 0;
  r = make_storage(opts);
  BOOST_TEST(static_cast<bool>(r), why(r));
}

BOOST_AUTO_TEST_CASE(zero_blocks_sizes_the_pool_from_free_memory) {
  storage_options opts;
  opts.kind = "cuda";
  opts.layout = big_layout();
  opts.layout.num_blocks = 0;
  opts.layout.num_host_blocks = 0;
  opts.gpu_memory_utilization = 0.02;
  std::size_t free_bytes = 0, total = 0;
  BOOST_REQUIRE(cudaMemGetInfo(&free_bytes, &total) == cudaSuccess);
  auto r = make_storage(opts);
  BOOST_REQUIRE_MESSAGE(r, why(r));
  auto& s = **r;
  const auto want = 0.02 * static_cast<double>(free_bytes)
                    / static_cast<double>(s.layout().bytes_per_block());
  BOOST_TEST(s.layout().num_blocks > 0u);
  BOOST_TEST(std::abs(s.layout().num_blocks - want) <= 2.0);
  BOOST_TEST((s.where() == device{device_kind::cuda, 0}));
  opts.gpu_memory_utilization = 1.5;
  auto bad = make_storage(opts);
  BOOST_REQUIRE(!bad);
  BOOST_TEST(has_code(bad.error(), errc::invalid_config));
}

BOOST_AUTO_TEST_CASE(tickets_complete_in_order_and_wake_the_caller) {
  std::mt19937_64 rng{test_seed()};
  std::atomic<int> wakes{0}; // outlives tw, whose callbacks count here
  twin tw{big_layout(), rng};
  tw.cuda->set_wake([&] { ++wakes; });
  block_id last = 0;
  auto moves = swap_batch(rng, last);
  auto a = tw.cuda->swap_out(moves);
  auto b = tw.cuda->copy_blocks({{140, 141}});
  auto c = tw.cuda->swap_in({{150, 70}});
  BOOST_REQUIRE(a && b && c);
  BOOST_TEST(*a < *b);
  BOOST_TEST(*b < *c);
  BOOST_TEST(!tw.cuda->wait_one(*b)); // b alone, whatever became of a
  BOOST_TEST(tw.cuda->finished(*b));
  BOOST_TEST(!tw.cuda->wait(*c));
  BOOST_TEST(tw.cuda->done(*a));
  BOOST_TEST(tw.cuda->done(*c));
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (wakes.load() < 3 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  BOOST_TEST(wakes.load() == 3);
  tw.cuda->set_wake(nullptr);
}

BOOST_AUTO_TEST_SUITE_END()

#endif // KVACTOR_HAVE_CUDA
