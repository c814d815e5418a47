// storage::write_layers (every layer's write in one op) on the host backend,
// against write_slots called layer by layer on a twin with the same bytes:
// packed and strided inputs, skipped slots, a slot named twice; a bad batch
// fails whole, naming what was wrong, and writes nothing. (The cuda
// backend's single launch is compared with this one by gpu_tests.)
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/device/storage.hpp"
#include "kvactor/messages/error.hpp"
#include "host_storage_support.hpp"

using namespace kvactor;
using namespace kvactor::test::host_storage_tests;

namespace {

using bytes = std::vector<std::uint8_t>;

storage_layout shape(std::uint32_t layers, std::uint32_t blocks,
                     std::uint32_t block_size, std::uint32_t heads,
                     std::uint32_t dim, kvactor::dtype dt) {
  return layout_of(layers, blocks, block_size, heads, dim, dt, 0);
}

bytes pools_of(storage& st) {
  auto p = static_cast<const std::uint8_t*>(st.layer_base(0));
  return bytes(p, p + st.layout().device_bytes());
}

/// Two host storages holding the same random bytes.
struct pair_of_hosts {
  pair_of_hosts(const storage_layout& l, std::mt19937_64& rng)
    : a(make_host(l)), b(make_host(l)) {
    fill_random(static_cast<std::uint8_t*>(a->layer_base(0)),
                l.device_bytes(), rng);
    std::memcpy(b->layer_base(0), a->layer_base(0), l.device_bytes());
  }
  std::unique_ptr<storage> a, b;
};

/// `n` random slots, one in five -1, one in seven naming an earlier one's.
std::vector<std::int64_t> random_slots(const storage_layout& l, std::size_t n,
                                       std::mt19937_64& rng) {
  const auto total = std::uint64_t{l.num_blocks} * l.block_size;
  std::vector<std::int64_t> slots(n);
  for (auto& s : slots)
    s = rng() % 5 == 0 ? -1 : static_cast<std::int64_t>(rng() % total);
  for (std::size_t i = 1; i < n; ++i)
    if (rng() % 7 == 0)
      slots[i] = slots[rng() % i];
  return slots;
}

} // namespace

BOOST_AUTO_TEST_SUITE(write_layers_suite)

BOOST_AUTO_TEST_CASE(write_layers_equals_write_slots_layer_by_layer) {
  std::mt19937_64 rng{20261204};
  for (auto& l : {shape(4, 16, 4, 2, 8, dtype::fp16),
                  shape(3, 20, 16, 1, 4, dtype::fp8_e4m3),
                  shape(5, 9, 1, 3, 5, dtype::fp32)}) {
    for (std::size_t pad : {std::size_t{0}, std::size_t{24}}) {
      pair_of_hosts twins{l, rng};
      const auto row = l.row_bytes();
      const std::size_t n = l.num_blocks * l.block_size / 2 + 1;
      // Every layer but the first, or (strided) every layer.
      const std::uint32_t first = pad == 0 ? 1 : 0;
      const std::uint32_t count = l.num_layers - first;
      // pad 0: layers packed (stride 0 = n rows); else a larger stride.
      const std::size_t stride = n * row + pad;
      const auto slots = random_slots(l, n, rng);
      bytes key(count * stride), value(count * stride);
      fill_random(key.data(), key.size(), rng);
      fill_random(value.data(), value.size(), rng);
      auto t = twins.a->write_layers(first, count, key.data(), value.data(),
                                     pad == 0 ? 0 : stride, slots.data(), n);
      BOOST_REQUIRE_MESSAGE(t, why(t));
      for (std::uint32_t i = 0; i < count; ++i) {
        auto u = twins.b->write_slots(first + i, key.data() + i * stride,
                                      value.data() + i * stride, slots.data(),
                                      n);
        BOOST_REQUIRE_MESSAGE(u, why(u));
      }
      BOOST_TEST((pools_of(*twins.a) == pools_of(*twins.b)));
    }
  }
}

BOOST_AUTO_TEST_CASE(a_bad_batch_fails_whole_and_writes_nothing) {
  std::mt19937_64 rng{7};
  const auto l = shape(4, 8, 4, 2, 8, dtype::fp16);
  auto st = make_host(l);
  fill_random(static_cast<std::uint8_t*>(st->layer_base(0)), l.device_bytes(),
              rng);
  const auto before = pools_of(*st);
  const std::size_t n = 6;
  bytes key(4 * n * l.row_bytes()), value(key.size());
  std::vector<std::int64_t> slots{0, 5, -1, 9, 31, 2};
  auto fails = [&](caf::expected<ticket> t, const char* what) {
    BOOST_TEST_CONTEXT(what) {
      BOOST_REQUIRE(!t);
      BOOST_TEST(has_code(t.error(), errc::invalid_request));
      BOOST_TEST(why(t).find("write_layers") != std::string::npos);
      BOOST_TEST(why(t).find(what) != std::string::npos);
    }
  };
  fails(st->write_layers(0, 0, key.data(), value.data(), 0, slots.data(), n),
        "no layers");
  fails(st->write_layers(2, 3, key.data(), value.data(), 0, slots.data(), n),
        "layers out of range");
  fails(st->write_layers(4, 1, key.data(), value.data(), 0, slots.data(), n),
        "layers out of range");
  fails(st->write_layers(0, 2, key.data(), value.data(), n * l.row_bytes() - 1,
                         slots.data(), n),
        "layer stride shorter");
  fails(st->write_layers(1, UINT32_MAX, key.data(), value.data(), 0,
                         slots.data(), n),
        "layers out of range"); // first + count wraps in 32 bits
  fails(st->write_layers(0, 2, key.data(), value.data(),
                         static_cast<std::size_t>(PTRDIFF_MAX), slots.data(), n),
        "past the address space");
  fails(st->write_layers(0, 2, nullptr, value.data(), 0, slots.data(), n),
        "null pointer");
  slots[4] = 32; // one past the last slot: every layer must stay unwritten
  fails(st->write_layers(0, 4, key.data(), value.data(), 0, slots.data(), n),
        "slot out of range");
  BOOST_TEST((pools_of(*st) == before));
  // An empty batch of tokens is fine and writes nothing, whatever its
  // stride (no rows to reach).
  for (std::size_t stride : {std::size_t{0}, std::size_t{1},
                             static_cast<std::size_t>(PTRDIFF_MAX)}) {
    auto t = st->write_layers(0, 4, nullptr, nullptr, stride, nullptr, 0);
    BOOST_REQUIRE_MESSAGE(t, why(t));
  }
  BOOST_TEST((pools_of(*st) == before));
  // The bookkeeping-only backend takes the same checks, then has no bytes.
  storage_options opts;
  opts.kind = "none";
  opts.layout = l;
  auto none = make_storage(opts);
  BOOST_REQUIRE_MESSAGE(none, why(none));
  fails((*none)->write_layers(3, 2, key.data(), value.data(), 0, slots.data(),
                              n),
        "layers out of range");
}

BOOST_AUTO_TEST_SUITE_END()
