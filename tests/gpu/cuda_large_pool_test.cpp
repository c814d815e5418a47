// The cuda backend on pools past 4 GiB, two ways: planes wider than 2^31
// bytes (4.6 GB in all: every operation on blocks past byte 2^31 of their
// plane, past 2^32 for V, where 32-bit offsets would wrap, and the swap's
// long runs must take its batched copies, a plane being wider than
// cudaDevAttrMaxPitch; its short runs take the swap kernel); and eight
// planes under that pitch (4.5 GB: the long runs' 2D copies, whose last
// rows end past 2^32). Only the blocks touched are compared, against a
// host backend holding just those.
#include "twin.hpp"

#if KVACTOR_HAVE_CUDA

#include <algorithm>
#include <cstring>
#include <numeric>

#include <cuda_runtime_api.h>

#include "batches.hpp"

using namespace kvactor;
using namespace kvactor::test;

namespace {

/// 1 layer of 70,000 blocks of 16 tokens x 8 heads x 128 fp16 (32 KiB):
/// planes of 2,293,760,000 bytes, block 65,536 starts at byte 2^31.
storage_layout wide_planes() {
  return make_layout(1, 70000, 16, 8, 128, dtype::fp16, 64);
}

/// 4 layers of 17,000 such blocks: 8 planes of 557,056,000 bytes, under the
/// maximum pitch; the last (layer 3's V) starts at byte 3.9e9, and its
/// blocks past 4,126 end past 2^32.
storage_layout many_planes() {
  return make_layout(4, 17000, 16, 8, 128, dtype::fp16, 64);
}

constexpr std::size_t num_touched = 48;

/// The device blocks a case touches, all from `lowest` up: a run of 8 at
/// the bottom, 32 random ones, a run of 8 ending at the last block. Host
/// reference block i stands for touched[i].
std::vector<block_id> touched_blocks(std::mt19937_64& rng, block_id lowest,
                                     block_id num_blocks) {
  std::vector<block_id> t;
  for (block_id b = lowest; b < lowest + 8; ++b)
    t.push_back(b);
  std::vector<block_id> middle(num_blocks - 8 - (lowest + 8));
  std::iota(middle.begin(), middle.end(), block_id(lowest + 8));
  std::shuffle(middle.begin(), middle.end(), rng);
  t.insert(t.end(), middle.begin(), middle.begin() + 32);
  for (block_id b = num_blocks - 8; b < num_blocks; ++b)
    t.push_back(b);
  return t;
}

/// Skips the case, saying why, without a device or with too little free
/// device memory for the pool (plus 1 GiB for everything else).
struct large_pool_fits {
  boost::test_tools::assertion_result
  operator()(boost::unit_test::test_unit_id) const {
    boost::test_tools::assertion_result r{false};
    if (!cuda_device_available()) {
      r.message() << "no CUDA device: skipped";
      return r;
    }
    std::size_t free_bytes = 0, total = 0;
    if (auto err = cudaMemGetInfo(&free_bytes, &total)) {
      cudaGetLastError();
      r.message() << "cudaMemGetInfo: " << cudaGetErrorString(err)
                  << ": skipped";
      return r;
    }
    const auto need = std::max(wide_planes().device_bytes(),
                               many_planes().device_bytes())
                      + (std::size_t{1} << 30);
    if (free_bytes < need) {
      r.message() << "the device has " << free_bytes << " bytes free, a pool "
                  << "past 2^31 bytes per plane needs " << need << ": skipped";
      return r;
    }
    return true;
  }
};

/// Plane q (layer q / 2, K or V) of block `b` in `s`'s device pools.
std::uint8_t* block_at(storage& s, std::uint32_t q, block_id b) {
  const auto& l = s.layout();
  return static_cast<std::uint8_t*>(s.layer_base(0))
         + std::size_t{q} * l.num_blocks * l.block_bytes()
         + std::size_t{b} * l.block_bytes();
}

/// True if every plane of cuda block touched[i] equals host block i;
/// reports the first difference.
bool touched_match(storage& cuda, storage& host,
                   const std::vector<block_id>& touched,
                   const std::string& what) {
  const auto bb = cuda.layout().block_bytes();
  bytes got(bb);
  for (std::uint32_t q = 0; q < 2 * cuda.layout().num_layers; ++q)
    for (std::size_t i = 0; i < touched.size(); ++i) {
      BOOST_REQUIRE(cudaMemcpy(got.data(), block_at(cuda, q, touched[i]), bb,
                               cudaMemcpyDeviceToHost)
                    == cudaSuccess);
      if (std::memcmp(got.data(), block_at(host, q, block_id(i)), bb) != 0) {
        BOOST_ERROR(what << ": plane " << q << " of block " << touched[i]
                         << " differs");
        return false;
      }
    }
  return true;
}

/// Every operation on the touched blocks (from `lowest` up) of a `big`
/// pool, against the host backend; `batched` says which swap path the
/// pool's planes should take (checked against the device's maximum pitch).
void check_large_pool(const storage_layout& big, block_id lowest,
                      bool batched) {
  std::mt19937_64 rng{test_seed()};
  auto small = big;
  small.num_blocks = num_touched;
  storage_options opts;
  opts.kind = "cuda";
  opts.layout = big;
  auto c = make_storage(opts);
  BOOST_REQUIRE_MESSAGE(c, why(c));
  opts.kind = "host";
  opts.layout = small;
  auto h = make_storage(opts);
  BOOST_REQUIRE_MESSAGE(h, why(h));
  auto& cuda = **c;
  auto& host = **h;
  int max_pitch = 0;
  BOOST_REQUIRE(cudaDeviceGetAttribute(&max_pitch, cudaDevAttrMaxPitch, 0)
                == cudaSuccess);
  const auto plane = std::size_t{big.num_blocks} * big.block_bytes();
  const bool wide = plane > static_cast<std::size_t>(max_pitch);
  BOOST_TEST_MESSAGE(big.num_layers << " layers, planes of " << plane
                     << " bytes, max pitch " << max_pitch
                     << (wide ? ": swaps take the batched copies"
                              : ": swaps take 2D copies"));
  BOOST_TEST(wide == batched, "the swap path this case is for");

  // The same random bytes in the touched blocks and both host tiers.
  const auto touched = touched_blocks(rng, lowest, big.num_blocks);
  const auto bb = big.block_bytes();
  fill_random(host.layer_base(0), small.device_bytes(), rng);
  for (std::uint32_t q = 0; q < 2 * big.num_layers; ++q)
    for (std::size_t i = 0; i < num_touched; ++i)
      BOOST_REQUIRE(cudaMemcpy(block_at(cuda, q, touched[i]),
                               block_at(host, q, block_id(i)), bb,
                               cudaMemcpyHostToDevice)
                    == cudaSuccess);
  landed();
  fill_random(host.host_layer_base(0), small.host_bytes(), rng);
  std::memcpy(cuda.host_layer_base(0), host.host_layer_base(0),
              small.host_bytes());
  BOOST_REQUIRE(touched_match(cuda, host, touched, "after the upload"));

  // Each op on both, with host ids i where the device has touched[i]; queued
  // back to back, the storage orders the conflicts.
  auto dev = [&](std::size_t i) { return touched[i]; };
  std::vector<block_copy> hc, cc; // 0-11 onto 47-36
  for (block_id i = 0; i < 12; ++i) {
    hc.push_back({i, block_id(47 - i)});
    cc.push_back({dev(i), dev(47 - i)});
  }
  expect_ok(host.copy_blocks(hc), "host copy");
  expect_ok(cuda.copy_blocks(cc), "cuda copy");
  // Out: 40-47 (a run) to host 0-7, 16-39 to random host blocks 8-63.
  auto host_ids = shuffled(56, rng);
  std::vector<block_move> ho, co;
  for (block_id i = 16; i < 48; ++i) {
    const block_id to = i >= 40 ? i - 40 : 8 + host_ids[i - 16];
    ho.push_back({i, to});
    co.push_back({dev(i), to});
  }
  expect_ok(host.swap_out(ho), "host swap_out");
  expect_ok(cuda.swap_out(co), "cuda swap_out");
  // 300 tokens into random slots of the touched blocks, some skipped.
  const auto row = row_bytes(big);
  const std::size_t n = 300;
  auto order = shuffled(num_touched * big.block_size, rng);
  std::vector<std::int64_t> hs(n), cs(n);
  for (std::size_t i = 0; i < n; ++i) {
    const bool skip = rng() % 10 == 0;
    const auto b = order[i] / big.block_size, off = order[i] % big.block_size;
    hs[i] = skip ? -1 : std::int64_t{order[i]};
    cs[i] = skip ? -1 : std::int64_t{dev(b)} * big.block_size + off;
  }
  bytes kv(2 * n * row);
  fill_random(kv.data(), kv.size(), rng);
  device_buffer dkv{kv.size()};
  dkv.upload(kv);
  auto in = static_cast<std::uint8_t*>(dkv.data);
  // The top layer: its V plane is the pool's last.
  const auto top = big.num_layers - 1;
  expect_ok(host.write_slots(top, kv.data(), kv.data() + n * row, hs.data(), n),
            "host write");
  expect_ok(cuda.write_slots(top, in, in + n * row, cs.data(), n),
            "cuda write");
  // In: host 56-63 to 0-7 (a run), random host blocks 8-55 to 8-15.
  auto back = shuffled(48, rng);
  std::vector<block_move> hi, ci;
  for (block_id i = 0; i < 16; ++i) {
    const block_id from = i < 8 ? 56 + i : 8 + back[i];
    hi.push_back({i, from});
    ci.push_back({dev(i), from});
  }
  expect_ok(host.swap_in(hi), "host swap_in");
  expect_ok(cuda.swap_in(ci), "cuda swap_in");
  // Gather 20 of them, the last one partly, into poisoned outputs.
  auto pick = shuffled(num_touched, rng);
  pick.resize(20);
  std::vector<block_id> hb(pick.begin(), pick.end()), cb;
  for (auto i : pick)
    cb.push_back(dev(i));
  const std::size_t tokens = pick.size() * big.block_size - 3;
  const std::size_t size = tokens * row + 4 * row; // a poisoned guard after
  bytes hk(size, 0xA5), hv(size, 0xA5);
  device_buffer dk{size}, dv{size};
  dk.upload(hk);
  dv.upload(hv);
  expect_ok(host.gather_blocks(top, hb, tokens, hk.data(), hv.data()),
            "host gather");
  auto last = cuda.gather_blocks(top, cb, tokens, dk.data, dv.data);
  expect_ok(last, "cuda gather");

  BOOST_REQUIRE(!cuda.wait(*last));
  BOOST_TEST(touched_match(cuda, host, touched, "after every op"));
  BOOST_TEST(std::memcmp(cuda.host_layer_base(0), host.host_layer_base(0),
                         small.host_bytes())
             == 0);
  BOOST_TEST((dk.download() == hk));
  BOOST_TEST((dv.download() == hv));
}

} // namespace

BOOST_AUTO_TEST_SUITE(cuda_large_pool_suite,
                      *boost::unit_test::precondition(large_pool_fits{}))

BOOST_AUTO_TEST_CASE(blocks_past_2_pow_31_bytes_per_plane_match_host_backend) {
  check_large_pool(wide_planes(), 65537, true);
}

BOOST_AUTO_TEST_CASE(two_d_swap_copies_ending_past_2_pow_32_match_host_backend) {
  check_large_pool(many_planes(), 16000, false);
}

BOOST_AUTO_TEST_SUITE_END()

#endif // KVACTOR_HAVE_CUDA
