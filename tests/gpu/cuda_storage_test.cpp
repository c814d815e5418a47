// The cuda backend's operations against the host backend: fresh random bytes
// and random block mappings each run, poisoned outputs, fp16/bf16 shapes at
// several block sizes and head counts, odd shapes and offset pointers for
// narrow vectors; the swap also through its batched fallback for planes past
// the max pitch, and with every run by the swap kernel.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>

#include "twin.hpp"

#if KVACTOR_HAVE_CUDA

#include <cuda_runtime_api.h>

#include "batches.hpp"
#include "kvactor/device/cuda_storage.hpp"
#include "kvactor/device/swap_plan.hpp"

using namespace kvactor;
using namespace kvactor::test;

namespace {

/// Runs of consecutive ids on both sides (the coalesced swap path).
std::vector<block_move> run_moves(const storage_layout& l) {
  std::vector<block_move> moves;
  const auto n = std::min(l.num_blocks, l.num_host_blocks);
  for (std::uint32_t i = 0; i + 1 < n; ++i)
    if (i % 5 != 4) // runs of 4, broken by a gap
      moves.push_back({l.num_blocks - n + i, i + 1});
  return moves;
}

} // namespace

BOOST_AUTO_TEST_SUITE(cuda_storage_suite,
                      *boost::unit_test::precondition(gpu_present{}))

BOOST_AUTO_TEST_CASE(copy_blocks_matches_host_backend) {
  std::mt19937_64 rng{test_seed()};
  for (auto& l : test_shapes()) {
    twin tw{l, rng};
    for (int round = 0; round < 3; ++round) { // queued back to back
      auto pairs = random_pairs(l.num_blocks, rng);
      expect_ok(tw.host->copy_blocks(pairs), "host copy");
      expect_ok(tw.cuda->copy_blocks(pairs), "cuda copy");
    }
    BOOST_TEST(tw.same("copy_blocks"));
  }
}

BOOST_AUTO_TEST_CASE(swap_without_2d_copies_matches_host_backend) {
  // The path of pools whose planes are wider than cudaDevAttrMaxPitch,
  // forced with max_pitch 0: every (run, plane) piece in one batched copy.
  // Driven through the launcher on the storage's own memory and stream.
  std::mt19937_64 rng{test_seed()};
  for (auto& l : test_shapes()) {
    twin tw{l, rng};
    auto& cuda = static_cast<cuda_storage&>(*tw.cuda);
    const detail::pool_geometry pool{cuda.layer_base(0), l.num_layers,
                                     l.num_blocks, l.block_size, row_bytes(l)};
    auto swap = [&](const std::vector<block_move>& moves, bool out) {
      auto runs = detail::coalesce_moves(moves);
      auto role = out ? cuda_storage::stream_role::device_to_host
                      : cuda_storage::stream_role::host_to_device;
      auto err = detail::launch_swap(
        pool, cuda.host_layer_base(0), l.num_host_blocks, runs.data(),
        runs.size(),
        out ? detail::swap_direction::device_to_host
            : detail::swap_direction::host_to_device,
        0, cuda.native_stream(role));
      BOOST_REQUIRE_MESSAGE(err == 0, detail::cuda_error_text(err));
    };
    auto out = random_moves(l, rng);
    expect_ok(tw.host->swap_out(out), "host swap_out");
    swap(out, true);
    BOOST_TEST(tw.same("swap_out, batched pieces")); // synchronises the device
    auto in = run_moves(l);
    expect_ok(tw.host->swap_in(in), "host swap_in runs");
    swap(in, false);
    BOOST_TEST(tw.same("swap_in, batched pieces"));
  }
}

BOOST_AUTO_TEST_CASE(swap_kernel_alone_matches_host_backend) {
  // Every run by the swap kernel, long ones too (the storage gives those to
  // the copy engines), at the default grid and at one CUDA block. Driven
  // through the launcher on the storage's own memory and stream.
  std::mt19937_64 rng{test_seed()};
  for (auto& l : test_shapes()) {
    twin tw{l, rng};
    auto& cuda = static_cast<cuda_storage&>(*tw.cuda);
    const detail::pool_geometry pool{cuda.layer_base(0), l.num_layers,
                                     l.num_blocks, l.block_size, row_bytes(l)};
    auto swap = [&](const std::vector<block_move>& moves, bool out, int ctas) {
      auto runs = detail::coalesce_moves(moves);
      auto role = out ? cuda_storage::stream_role::device_to_host
                      : cuda_storage::stream_role::host_to_device;
      device_buffer dev{runs.size() * sizeof(detail::swap_run) + 1};
      BOOST_REQUIRE(cudaMemcpy(dev.data, runs.data(),
                               runs.size() * sizeof(detail::swap_run),
                               cudaMemcpyHostToDevice)
                    == cudaSuccess);
      landed(); // before the storage's non-blocking stream reads them
      auto err = detail::launch_swap_kernel(
        pool, cuda.host_layer_base(0), l.num_host_blocks,
        static_cast<const detail::swap_run*>(dev.data), runs.size(),
        out ? detail::swap_direction::device_to_host
            : detail::swap_direction::host_to_device,
        cuda.native_stream(role), ctas);
      BOOST_REQUIRE_MESSAGE(err == 0, detail::cuda_error_text(err));
      BOOST_REQUIRE(cudaStreamSynchronize(static_cast<cudaStream_t>(
                      cuda.native_stream(role)))
                    == cudaSuccess); // before dev goes
    };
    auto out = random_moves(l, rng);
    expect_ok(tw.host->swap_out(out), "host swap_out");
    swap(out, true, 0);
    BOOST_TEST(tw.same("swap_out by the kernel"));
    auto in = run_moves(l);
    expect_ok(tw.host->swap_in(in), "host swap_in runs");
    swap(in, false, 1);
    BOOST_TEST(tw.same("swap_in runs by the kernel, one CUDA block"));
    in = random_moves(l, rng);
    expect_ok(tw.host->swap_in(in), "host swap_in");
    swap(in, false, 0);
    BOOST_TEST(tw.same("swap_in by the kernel"));
  }
}

BOOST_AUTO_TEST_CASE(swap_out_and_in_match_host_backend) {
  std::mt19937_64 rng{test_seed()};
  for (auto& l : test_shapes()) {
    twin tw{l, rng};
    auto out = random_moves(l, rng);
    expect_ok(tw.host->swap_out(out), "host swap_out");
    expect_ok(tw.cuda->swap_out(out), "cuda swap_out");
    auto runs = run_moves(l);
    expect_ok(tw.host->swap_out(runs), "host swap_out runs");
    expect_ok(tw.cuda->swap_out(runs), "cuda swap_out runs");
    BOOST_TEST(tw.same("swap_out"));
    auto in = random_moves(l, rng);
    expect_ok(tw.host->swap_in(in), "host swap_in");
    expect_ok(tw.cuda->swap_in(in), "cuda swap_in");
    expect_ok(tw.host->swap_in(runs), "host swap_in runs");
    expect_ok(tw.cuda->swap_in(runs), "cuda swap_in runs");
    BOOST_TEST(tw.same("swap_in"));
  }
}

BOOST_AUTO_TEST_CASE(one_mapping_for_every_layer_matches_host_backend) {
  // As a forward pass writes: the same slot mapping (some slots named
  // twice) for every layer, each layer its own K/V, then a new mapping for
  // every layer again. The cuda backend checks and plans a mapping once
  // and recognises it for the next layers (slot_plan.hpp).
  std::mt19937_64 rng{test_seed()};
  for (auto& l : test_shapes()) {
    twin tw{l, rng};
    const auto row = row_bytes(l);
    const std::size_t n = std::min<std::size_t>(l.num_blocks * l.block_size,
                                                200);
    for (int step = 0; step < 2; ++step) {
      auto slots = random_slots(l, n, rng);
      name_again(slots, 7, rng);
      for (std::uint32_t layer = 0; layer < l.num_layers; ++layer) {
        bytes kv(2 * n * row);
        fill_random(kv.data(), kv.size(), rng);
        device_buffer dkv{kv.size()};
        dkv.upload(kv);
        auto d = static_cast<std::uint8_t*>(dkv.data);
        expect_ok(tw.host->write_slots(layer, kv.data(), kv.data() + n * row,
                                       slots.data(), n),
                  "host write");
        auto t = tw.cuda->write_slots(layer, d, d + n * row, slots.data(), n);
        expect_ok(t, "cuda write");
        BOOST_REQUIRE(!tw.cuda->wait(*t)); // before dkv goes
      }
    }
    BOOST_TEST(tw.same("one mapping for every layer"));
  }
}

BOOST_AUTO_TEST_CASE(many_swaps_in_a_row_match_host_backend) {
  // More swaps in each direction than a swap ring has slots (16), queued
  // back to back: scattered blocks (the swap kernel) and runs (the copy
  // engines where a run is long enough) in the same calls, host blocks
  // reused from swap to swap (write after write and after read).
  std::mt19937_64 rng{test_seed()};
  for (auto& l : test_shapes()) {
    twin tw{l, rng};
    for (int round = 0; round < 40; ++round) { // 20 each way
      auto mixed = random_moves(l, rng);
      auto runs = run_moves(l);
      mixed.resize(mixed.size() / 2);
      // Runs on device blocks and host blocks the scattered half leaves.
      std::vector<bool> dev_used(l.num_blocks), host_used(l.num_host_blocks);
      for (auto& m : mixed) {
        dev_used[m.device_block] = true;
        host_used[m.host_block] = true;
      }
      for (auto& m : runs)
        if (!dev_used[m.device_block] && !host_used[m.host_block]) {
          dev_used[m.device_block] = true;
          host_used[m.host_block] = true;
          mixed.push_back(m);
        }
      const bool out = round % 2 == 0;
      expect_ok(out ? tw.host->swap_out(mixed) : tw.host->swap_in(mixed),
                "host swap");
      expect_ok(out ? tw.cuda->swap_out(mixed) : tw.cuda->swap_in(mixed),
                "cuda swap");
    }
    BOOST_TEST(tw.same("many swaps in a row"));
  }
}

BOOST_AUTO_TEST_CASE(write_slots_matches_host_backend) {
  std::mt19937_64 rng{test_seed()};
  for (auto& l : test_shapes()) {
    twin tw{l, rng};
    const auto row = row_bytes(l);
    const std::size_t n = std::min<std::size_t>(l.num_blocks * l.block_size,
                                                300);
    // Device memory inputs.
    auto slots = random_slots(l, n, rng);
    bytes key(n * row), value(n * row);
    fill_random(key.data(), key.size(), rng);
    fill_random(value.data(), value.size(), rng);
    device_buffer dk{key.size()}, dv{value.size()};
    dk.upload(key);
    dv.upload(value);
    const std::uint32_t layer = l.num_layers - 1;
    expect_ok(tw.host->write_slots(layer, key.data(), value.data(),
                                   slots.data(), n),
              "host write");
    expect_ok(tw.cuda->write_slots(layer, dk.data, dv.data, slots.data(), n),
              "cuda write");
    // Pinned host memory inputs (read by the kernel over the bus), and
    // tokens that name an earlier token's slot again: the last one wins, as
    // on the host backend (no two threads race for a slot).
    auto slots2 = random_slots(l, n, rng);
    name_again(slots2, 5, rng);
    void* pk = nullptr;
    void* pv = nullptr;
    BOOST_REQUIRE(cudaHostAlloc(&pk, n * row, cudaHostAllocDefault) == cudaSuccess);
    BOOST_REQUIRE(cudaHostAlloc(&pv, n * row, cudaHostAllocDefault) == cudaSuccess);
    fill_random(pk, n * row, rng);
    fill_random(pv, n * row, rng);
    expect_ok(tw.host->write_slots(0, pk, pv, slots2.data(), n), "host write");
    expect_ok(tw.cuda->write_slots(0, pk, pv, slots2.data(), n), "cuda write");
    BOOST_TEST(tw.same("write_slots"));
    cudaFreeHost(pk);
    cudaFreeHost(pv);
  }
}

BOOST_AUTO_TEST_CASE(fresh_pools_read_zeros_as_the_host_backends_do) {
  // The host backend's pools and host tier are zero pages; a cuda storage
  // zeroes its own at start, so a block nobody wrote reads the same on both.
  const auto l = test_shapes().front();
  BOOST_REQUIRE(l.num_host_blocks > 0);
  std::uintptr_t junk_at = 0;
  {
    // Garbage where the pools will likely be: cudaMalloc recycles.
    device_buffer junk{l.device_bytes()};
    BOOST_REQUIRE(cudaMemset(junk.data, 0xA5, junk.size) == cudaSuccess);
    BOOST_REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    junk_at = reinterpret_cast<std::uintptr_t>(junk.data);
  }
  void* host_junk = nullptr;
  BOOST_REQUIRE(cudaHostAlloc(&host_junk, l.host_bytes(), cudaHostAllocDefault)
                == cudaSuccess);
  std::memset(host_junk, 0xA5, l.host_bytes());
  const auto host_junk_at = reinterpret_cast<std::uintptr_t>(host_junk);
  BOOST_REQUIRE(cudaFreeHost(host_junk) == cudaSuccess);
  storage_options opts;
  opts.layout = l;
  opts.kind = "cuda";
  auto c = make_storage(opts);
  BOOST_REQUIRE_MESSAGE(c, why(c));
  // Whether the checks below meant something: memory elsewhere, or pinned
  // memory that came back from the OS, may be zero anyway.
  BOOST_TEST_MESSAGE("fresh pools "
                     << (reinterpret_cast<std::uintptr_t>((*c)->layer_base(0))
                             == junk_at
                           ? "are"
                           : "are not")
                     << " where the device junk was");
  BOOST_TEST_MESSAGE("fresh host tier "
                     << (reinterpret_cast<std::uintptr_t>((*c)->host_layer_base(0))
                             == host_junk_at
                           ? "is"
                           : "is not")
                     << " where the pinned junk was");
  std::vector<std::uint8_t> got(l.device_bytes(), 0xFF);
  BOOST_REQUIRE(cudaMemcpy(got.data(), (*c)->layer_base(0), got.size(),
                           cudaMemcpyDeviceToHost)
                == cudaSuccess);
  const auto nonzero = std::count_if(got.begin(), got.end(),
                                     [](std::uint8_t b) { return b != 0; });
  BOOST_TEST(nonzero == 0, nonzero << " of " << got.size()
                                   << " bytes of fresh pools are not zero");
  const auto tier = static_cast<const std::uint8_t*>((*c)->host_layer_base(0));
  const auto tier_nonzero = std::count_if(tier, tier + l.host_bytes(),
                                          [](std::uint8_t b) { return b != 0; });
  BOOST_TEST(tier_nonzero == 0, tier_nonzero << " of " << l.host_bytes()
                                             << " bytes of a fresh host tier "
                                                "are not zero");
}

BOOST_AUTO_TEST_CASE(gather_blocks_matches_host_backend) {
  std::mt19937_64 rng{test_seed()};
  constexpr std::uint8_t poison = 0xA5;
  for (auto& l : test_shapes()) {
    twin tw{l, rng};
    const auto row = row_bytes(l);
    auto ids = shuffled(l.num_blocks, rng);
    std::vector<block_id> blocks(ids.begin(), ids.begin() + l.num_blocks / 2);
    blocks.push_back(blocks.front()); // a request may list a block twice
    const std::size_t n = blocks.size() * l.block_size - (l.block_size > 1);
    const std::size_t size = n * row + 4 * row; // a poisoned guard after
    bytes hk(size, poison), hv(size, poison);
    device_buffer dk{size}, dv{size};
    dk.upload(hk);
    dv.upload(hv);
    const std::uint32_t layer = l.num_layers / 2;
    expect_ok(tw.host->gather_blocks(layer, blocks, n, hk.data(), hv.data()),
              "host gather");
    expect_ok(tw.cuda->gather_blocks(layer, blocks, n, dk.data, dv.data),
              "cuda gather");
    BOOST_TEST((dk.download() == hk));
    BOOST_TEST((dv.download() == hv));
    BOOST_TEST(tw.same("gather_blocks"));
  }
}

BOOST_AUTO_TEST_CASE(write_slots_from_offset_inputs_matches_host_backend) {
  // Rows a multiple of 16 bytes, but key and value 2, 4 or 8 bytes past a
  // 16-byte boundary (cudaMalloc's are 256-byte aligned): the vector width
  // must come from the pointers' address bits too (short, int, int2), not
  // from the rows alone, or the loads are misaligned.
  std::mt19937_64 rng{test_seed()};
  for (auto& l : test_shapes()) {
    const auto row = row_bytes(l);
    if (row % 16 != 0)
      continue;
    twin tw{l, rng};
    const std::size_t n = std::min<std::size_t>(l.num_blocks * l.block_size,
                                                300);
    for (std::size_t offset : {2, 4, 8}) {
      auto slots = random_slots(l, n, rng);
      bytes key(n * row), value(n * row);
      fill_random(key.data(), key.size(), rng);
      fill_random(value.data(), value.size(), rng);
      bytes k_at(offset), v_at(offset); // the same rows, `offset` bytes in
      k_at.insert(k_at.end(), key.begin(), key.end());
      v_at.insert(v_at.end(), value.begin(), value.end());
      device_buffer dk{k_at.size()}, dv{v_at.size()};
      dk.upload(k_at);
      dv.upload(v_at);
      const auto layer = static_cast<std::uint32_t>(offset % l.num_layers);
      expect_ok(tw.host->write_slots(layer, key.data(), value.data(),
                                     slots.data(), n),
                "host write");
      expect_ok(tw.cuda->write_slots(
                  layer, static_cast<std::uint8_t*>(dk.data) + offset,
                  static_cast<std::uint8_t*>(dv.data) + offset, slots.data(),
                  n),
                "cuda write");
    }
    BOOST_TEST(tw.same("write_slots from offset inputs"));
  }
}

BOOST_AUTO_TEST_CASE(gather_blocks_into_offset_outputs_matches_host_backend) {
  // As above for the outputs: rows a multiple of 16 bytes, key_out and
  // value_out 2, 4 or 8 bytes past a 16-byte boundary. The bytes before
  // them and a guard after them must keep their poison.
  std::mt19937_64 rng{test_seed()};
  constexpr std::uint8_t poison = 0xA5;
  for (auto& l : test_shapes()) {
    const auto row = row_bytes(l);
    if (row % 16 != 0)
      continue;
    twin tw{l, rng};
    for (std::size_t offset : {2, 4, 8}) {
      auto ids = shuffled(l.num_blocks, rng);
      std::vector<block_id> blocks(ids.begin(), ids.begin() + l.num_blocks / 2);
      const std::size_t n = blocks.size() * l.block_size - (l.block_size > 1);
      const std::size_t size = n * row + 4 * row; // a poisoned guard after
      bytes hk(size, poison), hv(size, poison);
      device_buffer dk{offset + size}, dv{offset + size};
      dk.upload(bytes(offset + size, poison));
      dv.upload(bytes(offset + size, poison));
      const auto layer = static_cast<std::uint32_t>(offset % l.num_layers);
      expect_ok(tw.host->gather_blocks(layer, blocks, n, hk.data(), hv.data()),
                "host gather");
      expect_ok(tw.cuda->gather_blocks(
                  layer, blocks, n, static_cast<std::uint8_t*>(dk.data) + offset,
                  static_cast<std::uint8_t*>(dv.data) + offset),
                "cuda gather");
      bytes want_k(offset, poison), want_v(offset, poison);
      want_k.insert(want_k.end(), hk.begin(), hk.end());
      want_v.insert(want_v.end(), hv.begin(), hv.end());
      BOOST_TEST((dk.download() == want_k), "key_out at +" << offset);
      BOOST_TEST((dv.download() == want_v), "value_out at +" << offset);
    }
    BOOST_TEST(tw.same("gather_blocks into offset outputs"));
  }
}

BOOST_AUTO_TEST_SUITE_END()

#else // no CUDA backend built

BOOST_AUTO_TEST_CASE(cuda_backend_not_built) {
  BOOST_TEST_MESSAGE("kvactor built without CUDA: GPU tests skipped");
  BOOST_TEST(!kvactor::cuda_device_available());
}

#endif
