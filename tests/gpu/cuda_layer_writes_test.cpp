// A forward pass's write_slots queued back to back against the host
// backend: the cuda backend reuses a repeated mapping's plan, upload and
// hazard group, and launches the next layers' kernels to overlap the ones
// before them (write_chain.hpp). Every input is on the device before the
// first write, and the compute stream is held while the calls are
// submitted, so the kernels then run back to back, as in a forward pass.
// Layers written twice with one mapping must end with the later bytes, and
// ops in between must stay ordered against the writes.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "twin.hpp"

#if KVACTOR_HAVE_CUDA

#include <cuda_runtime_api.h>

#include "batches.hpp"
#include "kvactor/device/cuda_storage.hpp"
#include "stream_gate.hpp"

using namespace kvactor;
using namespace kvactor::test;

namespace {

/// One write's fresh random K/V rows, on the host and on the device.
struct layer_input {
  layer_input(std::size_t n, std::size_t row, std::mt19937_64& rng)
    : host(2 * n * row), dev(2 * n * row), n(n), row(row) {
    fill_random(host.data(), host.size(), rng);
    dev.upload(host); // waits until the bytes landed
  }
  const std::uint8_t* host_key() const {
    return host.data();
  }
  const std::uint8_t* host_value() const {
    return host.data() + n * row;
  }
  const std::uint8_t* dev_key() const {
    return static_cast<const std::uint8_t*>(dev.data);
  }
  const std::uint8_t* dev_value() const {
    return dev_key() + n * row;
  }
  bytes host;
  device_buffer dev;
  std::size_t n, row;
};

/// Writes `layer` of both backends from `in`; the cuda write is not waited
/// for.
ticket write_both(twin& tw, std::uint32_t layer,
                  const std::vector<std::int64_t>& slots,
                  const layer_input& in) {
  expect_ok(tw.host->write_slots(layer, in.host_key(), in.host_value(),
                                 slots.data(), slots.size()),
            "host write");
  auto t = tw.cuda->write_slots(layer, in.dev_key(), in.dev_value(),
                                slots.data(), slots.size());
  expect_ok(t, "cuda write");
  return *t;
}

cuda_storage& cuda_of(twin& tw) {
  auto c = dynamic_cast<cuda_storage*>(tw.cuda.get());
  BOOST_REQUIRE(c != nullptr);
  return *c;
}

cudaStream_t compute_stream(twin& tw) {
  return static_cast<cudaStream_t>(
    cuda_of(tw).native_stream(cuda_storage::stream_role::compute));
}

/// On Hopper on, the kernels ran with programmatic dependent launch - else
/// none of the overlap's waits ran, and a suite of chains proved little. A
/// driver that refused the launch attribute turns it off (kernels.cu). Each
/// test that chains checks it: run alone (--run_test), it must not pass
/// without it.
void check_programmatic_launch_was_used() {
  int dev = 0, major = 0;
  BOOST_REQUIRE(cudaGetDevice(&dev) == cudaSuccess);
  BOOST_REQUIRE(cudaDeviceGetAttribute(&major,
                                       cudaDevAttrComputeCapabilityMajor, dev)
                == cudaSuccess);
  const auto refusal = detail::programmatic_launch_refusal();
  BOOST_TEST_MESSAGE("programmatic dependent launch: "
                     << (detail::programmatic_launch_ok() ? "used"
                                                          : "not available")
                     << (refusal.empty() ? "" : ", refused: ") << refusal);
  if (major >= 9)
    BOOST_TEST(detail::programmatic_launch_ok(),
               "compute capability " << major
                 << ", yet no programmatic launch: "
                 << (refusal.empty()
                       ? "no refusal kept, so the build has no sm_90 code (or "
                         "the device could not be asked)"
                       : "the driver refused the launch attribute: "
                           + refusal));
}

} // namespace

BOOST_AUTO_TEST_SUITE(cuda_layer_writes_suite,
                      *boost::unit_test::precondition(gpu_present{}))

BOOST_AUTO_TEST_CASE(layer_writes_queued_back_to_back_match_host_backend) {
  // Per step, behind a held compute stream: one mapping (some slots named
  // twice) written to every layer, then random layers again - patterns
  // like x y x y and x y y x, which restart the chain - and now and then
  // another op on the same blocks (a copy, a gather of any layer, a swap
  // out) that the next write must wait for. Short writes (tens of tokens),
  // so that many kernels are resident at once once the stream opens.
  std::mt19937_64 rng{test_seed()};
  std::uint64_t reused = 0, overlapped = 0;
  for (auto& l : test_shapes()) {
    twin tw{l, rng};
    const auto row = row_bytes(l);
    const std::size_t n = std::min<std::size_t>(l.num_blocks * l.block_size,
                                                48);
    for (int step = 0; step < 4; ++step) {
      auto slots = random_slots(l, n, rng);
      name_again(slots, 7, rng);
      // The writes' layers, and before which write an op comes (0 none,
      // 1 copy, 2 gather, 3 swap out): at most 4 ops a step, so that with
      // the mapping's upload again after each, at most 9 calls take one of
      // the upload ring's 16 slots while the stream is held.
      std::vector<std::uint32_t> layers;
      for (std::uint32_t layer = 0; layer < l.num_layers; ++layer)
        layers.push_back(layer);
      const auto x = static_cast<std::uint32_t>(rng() % l.num_layers);
      const auto y = static_cast<std::uint32_t>(rng() % l.num_layers);
      for (auto layer : {x, y, x, y, x, y, y, x})
        layers.push_back(layer);
      for (int extra = 0; extra < 8; ++extra)
        layers.push_back(static_cast<std::uint32_t>(rng() % l.num_layers));
      std::vector<int> op_before(layers.size(), 0);
      for (int k = 0; k < 4; ++k)
        op_before[1 + rng() % (layers.size() - 1)] = 1 + static_cast<int>(rng() % 3);
      std::vector<std::unique_ptr<layer_input>> inputs;
      for (std::size_t j = 0; j < layers.size(); ++j)
        inputs.push_back(std::make_unique<layer_input>(n, row, rng));
      auto ids = shuffled(l.num_blocks, rng);
      std::vector<block_id> gathered(ids.begin(),
                                     ids.begin() + l.num_blocks / 3 + 1);
      const std::size_t m = gathered.size() * l.block_size;
      // Room for 4 gathers each: what each read, compared at the end.
      bytes hk(m * row * 4), hv(m * row * 4);
      device_buffer dk{m * row * 4}, dv{m * row * 4};
      std::size_t gathers = 0;
      ticket last = 0;
      {
        stream_gate gate{compute_stream(tw)};
        for (std::size_t j = 0; j < layers.size(); ++j) {
          switch (op_before[j]) {
          case 1: {
            auto pairs = random_pairs(l.num_blocks, rng);
            expect_ok(tw.host->copy_blocks(pairs), "host copy");
            expect_ok(tw.cuda->copy_blocks(pairs), "cuda copy");
            break;
          }
          case 2: {
            const auto layer = static_cast<std::uint32_t>(rng() % l.num_layers);
            const std::size_t at = gathers * m * row;
            auto k = static_cast<std::uint8_t*>(dk.data) + at;
            auto v = static_cast<std::uint8_t*>(dv.data) + at;
            ++gathers;
            expect_ok(tw.host->gather_blocks(layer, gathered, m,
                                             hk.data() + at, hv.data() + at),
                      "host gather");
            expect_ok(tw.cuda->gather_blocks(layer, gathered, m, k, v),
                      "cuda gather");
            break;
          }
          case 3: {
            auto moves = random_moves(l, rng);
            expect_ok(tw.host->swap_out(moves), "host swap_out");
            expect_ok(tw.cuda->swap_out(moves), "cuda swap_out");
            break;
          }
          default:
            break;
          }
          last = write_both(tw, layers[j], slots, *inputs[j]);
        }
        gate.open();
        BOOST_REQUIRE(!gate.forced());
      }
      BOOST_REQUIRE(!tw.cuda->wait(last));
      // Each step alone, so that a later step cannot hide a wrong row.
      BOOST_TEST(tw.same("layer writes back to back"));
      const auto read = gathers * m * row;
      auto got_k = dk.download(), got_v = dv.download();
      BOOST_TEST(std::equal(hk.begin(), hk.begin() + read, got_k.begin()));
      BOOST_TEST(std::equal(hv.begin(), hv.begin() + read, got_v.begin()));
    }
    reused += cuda_of(tw).next_layer_writes().reused;
    overlapped += cuda_of(tw).next_layer_writes().overlapped;
  }
  // The shortcut and the overlap were chosen. Whether the GPU overlapped
  // the kernels is the device's: gpu_bench's gated storage line shows it.
  BOOST_TEST(reused > 0u);
  BOOST_TEST(overlapped > 0u);
  check_programmatic_launch_was_used();
}

BOOST_AUTO_TEST_CASE(a_layer_written_twice_in_a_row_keeps_the_later_bytes) {
  // Queued behind a held stream: every layer, then each layer twice in a
  // row with new bytes, then every layer again, last to first. A write of
  // a layer racing the one before it would leave some of the earlier rows
  // behind. 4096 tokens of 8 heads x 128 fp16 a layer make 8 us kernels of
  // one or two waves on an H200; 256 tokens make kernels of 64 CUDA
  // blocks, several of which are resident at once.
  std::mt19937_64 rng{test_seed()};
  const auto l = make_layout(8, 320, 16, 8, 128, dtype::fp16, 0);
  for (std::size_t tokens : {4096, 256}) {
    twin tw{l, rng};
    const auto slots = random_slots(l, tokens, rng);
    std::vector<std::uint32_t> layers;
    for (std::uint32_t layer = 0; layer < l.num_layers; ++layer)
      layers.push_back(layer);
    for (std::uint32_t layer = 0; layer < l.num_layers; ++layer) {
      layers.push_back(layer);
      layers.push_back(layer);
    }
    for (std::uint32_t layer = l.num_layers; layer-- > 0;)
      layers.push_back(layer);
    std::vector<std::unique_ptr<layer_input>> inputs;
    for (std::size_t j = 0; j < layers.size(); ++j)
      inputs.push_back(std::make_unique<layer_input>(slots.size(),
                                                     row_bytes(l), rng));
    ticket last = 0;
    {
      stream_gate gate{compute_stream(tw)};
      for (std::size_t j = 0; j < layers.size(); ++j)
        last = write_both(tw, layers[j], slots, *inputs[j]);
      gate.open();
      BOOST_REQUIRE(!gate.forced());
    }
    // The last write's ticket alone: it ends only once every kernel of
    // its chain did.
    BOOST_TEST(tw.same_after(last, "layers written twice in a row"));
    const auto counts = cuda_of(tw).next_layer_writes();
    BOOST_TEST(counts.reused == layers.size() - 1);
    // Layer 0's second pass restarts the chain and so does each repeat:
    // 7 next layers of the first pass, each layer's first write of the
    // second pass but layer 0's, and the third pass but its first.
    BOOST_TEST(counts.overlapped == 7u + 7u + 7u);
  }
}

BOOST_AUTO_TEST_CASE(launcher_chains_with_no_event_between_match_host_backend) {
  // The storage records a ticket's event after every write_slots kernel, so
  // the cases above never run two programmatically launched kernels back
  // to back (whether an event between lets the next one launch early is
  // not documented). Here the launcher alone, nothing between its kernels:
  // behind a held compute stream, every layer (launch, then work), every
  // layer from the last down (launch on the layer just written, then
  // work), and every layer again from the first. Short writes, so that many
  // kernels are resident at once when the stream opens. The slots are
  // distinct: the launcher has no last-writer rule (the storage's plan has).
  std::mt19937_64 rng{test_seed()};
  using detail::write_overlap;
  const auto l = make_layout(8, 320, 16, 8, 128, dtype::fp16, 0);
  const auto row = row_bytes(l);
  std::vector<std::uint32_t> layers;
  std::vector<write_overlap> modes;
  for (int pass = 0; pass < 3; ++pass)
    for (std::uint32_t i = 0; i < l.num_layers; ++i) {
      layers.push_back(pass == 1 ? l.num_layers - 1 - i : i);
      modes.push_back(i == 0 ? write_overlap::launch : write_overlap::work);
    }
  for (std::size_t tokens : {48, 256}) {
    twin tw{l, rng};
    const auto slots = random_slots(l, tokens, rng);
    bytes slot_bytes(tokens * sizeof(std::int64_t));
    std::memcpy(slot_bytes.data(), slots.data(), slot_bytes.size());
    device_buffer dev_slots{slot_bytes.size()};
    dev_slots.upload(slot_bytes);
    std::vector<std::unique_ptr<layer_input>> inputs;
    for (std::size_t j = 0; j < layers.size(); ++j)
      inputs.push_back(std::make_unique<layer_input>(tokens, row, rng));
    const detail::pool_geometry geo{tw.cuda->layer_base(0), l.num_layers,
                                    l.num_blocks, l.block_size, row};
    const auto stream = compute_stream(tw);
    {
      stream_gate gate{stream};
      for (std::size_t j = 0; j < layers.size(); ++j) {
        const auto& in = *inputs[j];
        expect_ok(tw.host->write_slots(layers[j], in.host_key(),
                                       in.host_value(), slots.data(), tokens),
                  "host write");
        const int err = detail::launch_write_slots(
          geo, layers[j], in.dev_key(), in.dev_value(),
          static_cast<const std::int64_t*>(dev_slots.data), tokens, stream,
          0, modes[j]);
        BOOST_REQUIRE_MESSAGE(err == 0, "launch_write_slots: "
                                          << detail::cuda_error_text(err));
      }
      gate.open();
      BOOST_REQUIRE(!gate.forced());
    }
    BOOST_REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
    BOOST_TEST(tw.same("launcher chains, no event between"));
  }
  check_programmatic_launch_was_used();
}

BOOST_AUTO_TEST_CASE(write_layers_matches_host_backend) {
  // Every layer's write in one op (one launch on cuda) - all layers packed,
  // then all but the first strided - with slots named twice, compared on
  // its own; then, behind a held stream, the same layers again through
  // write_layers and a pass of per-layer writes of the same mapping right
  // behind it, which must wait for it.
  std::mt19937_64 rng{test_seed()};
  for (auto& l : test_shapes()) {
    twin tw{l, rng};
    const auto row = row_bytes(l);
    const std::size_t n = std::min<std::size_t>(l.num_blocks * l.block_size,
                                                300);
    auto slots = random_slots(l, n, rng);
    name_again(slots, 5, rng);
    for (std::size_t pad : {std::size_t{0}, 3 * row + 8}) {
      const std::uint32_t first = pad == 0 || l.num_layers == 1 ? 0 : 1;
      const std::uint32_t count = l.num_layers - first;
      const std::size_t stride = n * row + pad;
      const std::size_t arg = pad == 0 ? 0 : stride;
      // Two batches of every layer's rows: one alone, one behind the gate.
      std::vector<bytes> keys(2), values(2);
      std::vector<std::unique_ptr<device_buffer>> dev;
      for (int b = 0; b < 2; ++b) {
        keys[b].resize(count * stride);
        values[b].resize(count * stride);
        fill_random(keys[b].data(), keys[b].size(), rng);
        fill_random(values[b].data(), values[b].size(), rng);
        dev.push_back(std::make_unique<device_buffer>(keys[b].size()));
        dev.back()->upload(keys[b]);
        dev.push_back(std::make_unique<device_buffer>(values[b].size()));
        dev.back()->upload(values[b]);
      }
      auto write_all = [&](int b) {
        expect_ok(tw.host->write_layers(first, count, keys[b].data(),
                                        values[b].data(), arg, slots.data(),
                                        n),
                  "host write_layers");
        auto t = tw.cuda->write_layers(first, count, dev[2 * b]->data,
                                       dev[2 * b + 1]->data, arg,
                                       slots.data(), n);
        expect_ok(t, "cuda write_layers");
        return *t;
      };
      BOOST_REQUIRE(!tw.cuda->wait(write_all(0)));
      BOOST_TEST(tw.same("write_layers"));
      std::vector<std::unique_ptr<layer_input>> inputs;
      for (std::uint32_t layer = first; layer < l.num_layers; ++layer)
        inputs.push_back(std::make_unique<layer_input>(n, row, rng));
      ticket last = 0;
      {
        stream_gate gate{compute_stream(tw)};
        last = write_all(1);
        for (std::uint32_t layer = first; layer < l.num_layers; ++layer)
          last = write_both(tw, layer, slots, *inputs[layer - first]);
        gate.open();
        BOOST_REQUIRE(!gate.forced());
      }
      BOOST_TEST(tw.same_after(last, "write_layers, then layer by layer"));
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

#endif // KVACTOR_HAVE_CUDA
