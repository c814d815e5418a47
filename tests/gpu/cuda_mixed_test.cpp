// The cuda backend against the host backend on random mixed sequences of
// every operation, submitted in rounds while all of the storage's streams
// are held, so that only its cross-stream events can order the conflicts.
// Part of cuda_storage_suite (device_check.sh runs the suites by name).
#include "twin.hpp"

#if KVACTOR_HAVE_CUDA

#include <memory>

#include "batches.hpp"
#include "kvactor/device/cuda_storage.hpp"
#include "stream_gate.hpp"

using namespace kvactor;
using namespace kvactor::test;

namespace {

/// One operation of a sequence, planned and its device buffer filled before
/// anything is submitted (allocations and uploads would synchronise, or
/// take time in which held work could not run anyway).
struct step {
  enum class kind : std::uint8_t { copy, swap_out, swap_in, write, gather };
  kind what = kind::copy;
  std::vector<block_copy> pairs;
  std::vector<block_move> moves;
  std::uint32_t layer = 0;
  std::vector<std::int64_t> slots;
  std::vector<block_id> blocks;
  std::size_t n = 0; ///< tokens written or gathered
  /// write: the K then V rows; gather: the host backend's output (K, V).
  bytes host;
  /// write: `host` on the device; gather: the cuda output, poisoned as
  /// `host` was before the host backend wrote it.
  std::unique_ptr<device_buffer> dev;
};

step plan(const storage_layout& l, std::mt19937_64& rng) {
  const auto row = row_bytes(l);
  step s;
  switch (rng() % 5) {
    case 0:
      s.what = step::kind::copy;
      s.pairs = random_pairs(l.num_blocks, rng);
      s.pairs.resize(std::min<std::size_t>(s.pairs.size(), 1 + rng() % 6));
      break;
    case 1:
    case 2:
      s.moves = random_moves(l, rng);
      s.moves.resize(std::min<std::size_t>(s.moves.size(), 1 + rng() % 8));
      s.what = rng() % 2 == 0 ? step::kind::swap_out : step::kind::swap_in;
      break;
    case 3:
      s.what = step::kind::write;
      s.n = 1 + rng() % 64;
      s.slots = random_slots(l, s.n, rng);
      s.host.resize(2 * s.n * row);
      fill_random(s.host.data(), s.host.size(), rng);
      s.layer = static_cast<std::uint32_t>(rng() % l.num_layers);
      break;
    default: {
      s.what = step::kind::gather;
      auto ids = shuffled(l.num_blocks, rng);
      s.blocks.assign(ids.begin(), ids.begin() + 1 + rng() % 4);
      s.n = s.blocks.size() * l.block_size;
      s.host.assign(2 * s.n * row, 0x5A);
      s.layer = static_cast<std::uint32_t>(rng() % l.num_layers);
    }
  }
  if (!s.host.empty()) {
    s.dev = std::make_unique<device_buffer>(s.host.size());
    s.dev->upload(s.host);
  }
  return s;
}

/// Submits `s` to both backends: the host one runs it at once.
void submit(twin& tw, step& s) {
  const auto k_bytes = s.n * row_bytes(tw.layout);
  auto dev = s.dev ? static_cast<std::uint8_t*>(s.dev->data) : nullptr;
  switch (s.what) {
    case step::kind::copy:
      expect_ok(tw.host->copy_blocks(s.pairs), "host copy");
      expect_ok(tw.cuda->copy_blocks(s.pairs), "cuda copy");
      break;
    case step::kind::swap_out:
      expect_ok(tw.host->swap_out(s.moves), "host swap_out");
      expect_ok(tw.cuda->swap_out(s.moves), "cuda swap_out");
      break;
    case step::kind::swap_in:
      expect_ok(tw.host->swap_in(s.moves), "host swap_in");
      expect_ok(tw.cuda->swap_in(s.moves), "cuda swap_in");
      break;
    case step::kind::write:
      expect_ok(tw.host->write_slots(s.layer, s.host.data(),
                                     s.host.data() + k_bytes, s.slots.data(),
                                     s.n),
                "host write");
      expect_ok(tw.cuda->write_slots(s.layer, dev, dev + k_bytes,
                                     s.slots.data(), s.n),
                "cuda write");
      break;
    case step::kind::gather:
      expect_ok(tw.host->gather_blocks(s.layer, s.blocks, s.n, s.host.data(),
                                       s.host.data() + k_bytes),
                "host gather");
      expect_ok(tw.cuda->gather_blocks(s.layer, s.blocks, s.n, dev,
                                       dev + k_bytes),
                "cuda gather");
  }
}

/// The storage's three work streams held. open() (or the destructor) opens
/// all three before any gate synchronises its stream, so that no stream's
/// synchronisation waits on another still held.
struct all_streams_held {
  explicit all_streams_held(twin& tw)
    : compute(stream_of(tw, cuda_storage::stream_role::compute)),
      to_host(stream_of(tw, cuda_storage::stream_role::device_to_host)),
      to_device(stream_of(tw, cuda_storage::stream_role::host_to_device)) {
  }
  ~all_streams_held() {
    open();
  }
  void open() {
    compute.open();
    to_host.open();
    to_device.open();
  }
  bool forced() const {
    return compute.forced() || to_host.forced() || to_device.forced();
  }
  stream_gate compute;
  stream_gate to_host;
  stream_gate to_device;
};

/// Steps per round: each may take an upload ring slot on the held compute
/// stream, and the ring has 16 (stream_gate.hpp).
constexpr std::size_t round_steps = 10;

} // namespace

BOOST_AUTO_TEST_SUITE(cuda_storage_suite,
                      *boost::unit_test::precondition(gpu_present{}))

BOOST_AUTO_TEST_CASE(random_mixed_sequences_match_host_backend) {
  // Every kind of op, in rounds submitted while all three streams are held:
  // no op of a round can have run before the round's last one was queued,
  // so the result equals the host backend's sequential one only if every
  // conflict across streams within a round was ordered by an event.
  // Conflicts between rounds are not tested here (the previous round may
  // have finished before the next is submitted).
  std::mt19937_64 rng{test_seed()};
  for (auto& l : {test_shapes()[0], test_shapes()[3]}) {
    twin tw{l, rng};
    std::vector<step> steps;
    for (int i = 0; i < 60; ++i)
      steps.push_back(plan(l, rng));
    for (std::size_t first = 0; first < steps.size(); first += round_steps) {
      all_streams_held held{tw};
      const auto last = std::min(first + round_steps, steps.size());
      for (auto i = first; i < last; ++i)
        submit(tw, steps[i]);
      held.open();
      BOOST_TEST(!held.forced(), "a call waited on the host for a held stream");
    }
    BOOST_TEST(tw.same("mixed sequence"));
    for (auto& s : steps)
      if (s.what == step::kind::gather)
        BOOST_TEST((s.dev->download() == s.host));
  }
}

BOOST_AUTO_TEST_SUITE_END()

#endif // KVACTOR_HAVE_CUDA
