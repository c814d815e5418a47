// A forward pass's write_slots, queued back to back without waits, against
// the host backend: the cuda backend reuses a repeated mapping's plan, its
// upload and its blocks' hazard group, and lets the next layers' kernels
// overlap the ones before them (write_chain.hpp). Layers written twice
// with the same mapping must still end with the later bytes, and ops in
// between must still be ordered against the writes.
#include <algorithm>

#include "twin.hpp"

#if KVACTOR_HAVE_CUDA

#include <cuda_runtime_api.h>

#include "batches.hpp"

using namespace kvactor;
using namespace kvactor::test;

namespace {

/// Writes layer `layer` of both backends from fresh random K/V rows,
/// keeping the device copy alive in `keep` (the writes are not waited for).
ticket write_both(twin& tw, std::uint32_t layer,
                  const std::vector<std::int64_t>& slots,
                  std::vector<std::unique_ptr<device_buffer>>& keep,
                  std::mt19937_64& rng) {
  const auto row = row_bytes(tw.layout);
  const auto n = slots.size();
  bytes kv(2 * n * row);
  fill_random(kv.data(), kv.size(), rng);
  keep.push_back(std::make_unique<device_buffer>(kv.size()));
  keep.back()->upload(kv);
  auto d = static_cast<std::uint8_t*>(keep.back()->data);
  expect_ok(tw.host->write_slots(layer, kv.data(), kv.data() + n * row,
                                 slots.data(), n),
            "host write");
  auto t = tw.cuda->write_slots(layer, d, d + n * row, slots.data(), n);
  expect_ok(t, "cuda write");
  return *t;
}

} // namespace

BOOST_AUTO_TEST_SUITE(cuda_layer_writes_suite,
                      *boost::unit_test::precondition(gpu_present{}))

BOOST_AUTO_TEST_CASE(layer_writes_queued_back_to_back_match_host_backend) {
  // Per step: every layer with one mapping (some slots named twice), then
  // random layers again with it (repeats restart the chain), now and then
  // another op in between that reads or writes the same blocks (a copy, a
  // gather, a swap out), which the next write must wait for.
  std::mt19937_64 rng{test_seed()};
  for (auto& l : test_shapes()) {
    twin tw{l, rng};
    std::vector<std::unique_ptr<device_buffer>> keep;
    const auto row = row_bytes(l);
    const std::size_t n = std::min<std::size_t>(l.num_blocks * l.block_size,
                                                200);
    ticket last = 0;
    for (int step = 0; step < 3; ++step) {
      auto slots = random_slots(l, n, rng);
      name_again(slots, 7, rng);
      for (std::uint32_t layer = 0; layer < l.num_layers; ++layer)
        last = write_both(tw, layer, slots, keep, rng);
      for (int extra = 0; extra < 12; ++extra) {
        const auto layer = static_cast<std::uint32_t>(rng() % l.num_layers);
        switch (rng() % 6) {
        case 0: {
          auto pairs = random_pairs(l.num_blocks, rng);
          expect_ok(tw.host->copy_blocks(pairs), "host copy");
          expect_ok(tw.cuda->copy_blocks(pairs), "cuda copy");
          break;
        }
        case 1: {
          auto ids = shuffled(l.num_blocks, rng);
          std::vector<block_id> blocks(ids.begin(),
                                       ids.begin() + l.num_blocks / 3 + 1);
          const std::size_t m = blocks.size() * l.block_size;
          bytes hk(m * row), hv(m * row);
          keep.push_back(std::make_unique<device_buffer>(2 * m * row));
          auto d = static_cast<std::uint8_t*>(keep.back()->data);
          expect_ok(tw.host->gather_blocks(layer, blocks, m, hk.data(),
                                           hv.data()),
                    "host gather");
          expect_ok(tw.cuda->gather_blocks(layer, blocks, m, d, d + m * row),
                    "cuda gather");
          break;
        }
        case 2: {
          auto moves = random_moves(l, rng);
          expect_ok(tw.host->swap_out(moves), "host swap_out");
          expect_ok(tw.cuda->swap_out(moves), "cuda swap_out");
          break;
        }
        default:
          break;
        }
        last = write_both(tw, layer, slots, keep, rng);
      }
    }
    BOOST_REQUIRE(!tw.cuda->wait(last));
    BOOST_TEST(tw.same("layer writes back to back"));
  }
}

BOOST_AUTO_TEST_CASE(a_layer_written_twice_in_a_row_keeps_the_later_bytes) {
  // Kernels long enough to overlap if nothing held them back (4096 tokens
  // of 8 heads x 128 fp16 per layer, 8 us each on an H200): every layer,
  // then each layer twice in a row with new bytes, then every layer again.
  // A second write of a layer racing its first would leave some of the
  // first's rows behind.
  std::mt19937_64 rng{test_seed()};
  const auto l = make_layout(8, 320, 16, 8, 128, dtype::fp16, 0);
  twin tw{l, rng};
  std::vector<std::unique_ptr<device_buffer>> keep;
  auto slots = random_slots(l, 4096, rng);
  ticket last = 0;
  for (std::uint32_t layer = 0; layer < l.num_layers; ++layer)
    last = write_both(tw, layer, slots, keep, rng);
  for (std::uint32_t layer = 0; layer < l.num_layers; ++layer) {
    last = write_both(tw, layer, slots, keep, rng);
    last = write_both(tw, layer, slots, keep, rng);
  }
  for (std::uint32_t layer = l.num_layers; layer-- > 0;)
    last = write_both(tw, layer, slots, keep, rng);
  BOOST_REQUIRE(!tw.cuda->wait(last));
  BOOST_TEST(tw.same("layers written twice in a row"));
}

BOOST_AUTO_TEST_SUITE_END()

#endif // KVACTOR_HAVE_CUDA
