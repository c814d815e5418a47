// The host storage backend against an element-by-element reference on random
// data and random block mappings; validation that changes nothing;
// make_storage's kinds and errors.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/device/host_storage.hpp"
#include "kvactor/device/storage.hpp"
#include "kvactor/messages/error.hpp"
#include "host_storage_support.hpp"

using namespace kvactor;
using namespace kvactor::test::host_storage_tests;

namespace {

using bytes = std::vector<std::uint8_t>;

bool has(const caf::error& err, errc code) {
  return has_code(err, code);
}

/// Shapes with different element sizes, odd dimensions and 1-token blocks.
std::vector<storage_layout> shapes() {
  return {layout_of(2, 16, 4, 2, 8, dtype::fp16, 12),
          layout_of(3, 20, 16, 1, 4, dtype::fp8_e4m3, 8),
          layout_of(1, 9, 1, 3, 5, dtype::fp32, 5),
          layout_of(2, 12, 8, 4, 16, dtype::bf16, 12)};
}

/// Element-by-element reference of the documented layout
/// [num_layers][2][blocks][block_size][num_heads][head_dim].
struct reference {
  storage_layout l;
  bytes dev;
  bytes host;

  std::size_t offset(std::uint32_t blocks, std::uint32_t layer,
                     std::uint32_t kv, std::uint64_t block, std::uint32_t tok,
                     std::uint32_t head, std::uint32_t d) const {
    auto index = ((((std::uint64_t{layer} * 2 + kv) * blocks + block)
                     * l.block_size
                   + tok)
                    * l.num_heads
                  + head)
                   * l.head_dim
                 + d;
    return index * l.elem_bytes();
  }

  /// Visits every element of one block of one layer's K or V.
  template <class F>
  void each_element(F f) const {
    for (std::uint32_t tok = 0; tok < l.block_size; ++tok)
      for (std::uint32_t h = 0; h < l.num_heads; ++h)
        for (std::uint32_t d = 0; d < l.head_dim; ++d)
          f(tok, h, d);
  }

  void move(bytes& to_mem, std::uint32_t to_blocks, block_id to,
            const bytes& from_mem, std::uint32_t from_blocks, block_id from) {
    for (std::uint32_t layer = 0; layer < l.num_layers; ++layer)
      for (std::uint32_t kv = 0; kv < 2; ++kv)
        each_element([&](std::uint32_t t, std::uint32_t h, std::uint32_t d) {
          std::memcpy(&to_mem[offset(to_blocks, layer, kv, to, t, h, d)],
                      &from_mem[offset(from_blocks, layer, kv, from, t, h, d)],
                      l.elem_bytes());
        });
  }

  /// Byte offset of (token, head, d) in a [tokens, heads, dim] buffer.
  std::size_t row_offset(std::uint64_t token, std::uint32_t h,
                         std::uint32_t d) const {
    return ((token * l.num_heads + h) * l.head_dim + d) * l.elem_bytes();
  }
};

/// Random pools in both the storage and a reference copy of them.
reference randomize(storage& st, std::mt19937_64& rng) {
  reference ref{st.layout(), {}, {}};
  ref.dev.resize(ref.l.device_bytes());
  ref.host.resize(ref.l.host_bytes());
  fill_random(ref.dev.data(), ref.dev.size(), rng);
  fill_random(ref.host.data(), ref.host.size(), rng);
  std::memcpy(st.layer_base(0), ref.dev.data(), ref.dev.size());
  if (!ref.host.empty())
    std::memcpy(st.host_layer_base(0), ref.host.data(), ref.host.size());
  return ref;
}

bytes device_bytes_of(storage& st) {
  auto p = static_cast<const std::uint8_t*>(st.layer_base(0));
  return bytes(p, p + st.layout().device_bytes());
}

bytes host_bytes_of(storage& st) {
  auto p = static_cast<const std::uint8_t*>(st.host_layer_base(0));
  return p == nullptr ? bytes{} : bytes(p, p + st.layout().host_bytes());
}

std::vector<block_id> shuffled(std::uint32_t n, std::mt19937_64& rng) {
  std::vector<block_id> ids(n);
  std::iota(ids.begin(), ids.end(), 0u);
  std::shuffle(ids.begin(), ids.end(), rng);
  return ids;
}

} // namespace

BOOST_AUTO_TEST_SUITE(host_storage_suite)

BOOST_AUTO_TEST_CASE(copy_blocks_matches_reference_on_random_pairs) {
  std::mt19937_64 rng{101};
  for (auto& l : shapes()) {
    auto st = make_host(l);
    auto ref = randomize(*st, rng);
    auto ids = shuffled(l.num_blocks, rng);
    std::vector<block_copy> pairs;
    for (std::uint32_t i = 0; i + 1 < l.num_blocks / 2 * 2; i += 2)
      if (rng() % 4 != 0)
        pairs.push_back({ids[i], ids[i + 1]});
    for (auto& p : pairs)
      ref.move(ref.dev, l.num_blocks, p.dst, ref.dev, l.num_blocks, p.src);
    auto t = st->copy_blocks(pairs);
    BOOST_REQUIRE_MESSAGE(t, why(t));
    BOOST_TEST(st->done(*t));
    BOOST_TEST(!st->wait(*t));
    BOOST_TEST((device_bytes_of(*st) == ref.dev));
  }
}

BOOST_AUTO_TEST_CASE(swap_out_then_in_match_reference_on_random_mappings) {
  std::mt19937_64 rng{202};
  for (auto& l : shapes()) {
    auto st = make_host(l);
    auto ref = randomize(*st, rng);
    auto dev = shuffled(l.num_blocks, rng);
    auto host = shuffled(l.num_host_blocks, rng);
    auto n = std::min(l.num_blocks, l.num_host_blocks) - 1;
    std::vector<block_move> out;
    for (std::uint32_t i = 0; i < n; ++i)
      out.push_back({dev[i], host[i]});
    for (auto& m : out)
      ref.move(ref.host, l.num_host_blocks, m.host_block, ref.dev,
               l.num_blocks, m.device_block);
    auto t = st->swap_out(out);
    BOOST_REQUIRE_MESSAGE(t, why(t));
    BOOST_TEST((host_bytes_of(*st) == ref.host));
    BOOST_TEST((device_bytes_of(*st) == ref.dev));
    // Back into other device blocks, in a different order.
    auto back = shuffled(l.num_blocks, rng);
    std::vector<block_move> in;
    for (std::uint32_t i = 0; i < n; ++i)
      in.push_back({back[i], host[n - 1 - i]});
    for (auto& m : in)
      ref.move(ref.dev, l.num_blocks, m.device_block, ref.host,
               l.num_host_blocks, m.host_block);
    auto t2 = st->swap_in(in);
    BOOST_REQUIRE_MESSAGE(t2, why(t2));
    BOOST_TEST(*t2 > *t);
    BOOST_TEST((device_bytes_of(*st) == ref.dev));
  }
}

BOOST_AUTO_TEST_CASE(write_slots_scatters_rows_skips_minus_one_last_token_wins) {
  std::mt19937_64 rng{303};
  for (auto& l : shapes()) {
    auto st = make_host(l);
    auto ref = randomize(*st, rng);
    const auto slots_total = l.num_blocks * l.block_size;
    const std::size_t n = slots_total / 2 + 1;
    std::vector<std::int64_t> slots(n);
    auto order = shuffled(slots_total, rng);
    for (std::size_t i = 0; i < n; ++i)
      slots[i] = rng() % 5 == 0 ? -1 : std::int64_t{order[i]};
    // Some tokens name an earlier token's slot again: the later one wins
    // (the reference below applies the tokens in order).
    for (std::size_t i = 1; i < n; ++i)
      if (rng() % 7 == 0)
        slots[i] = slots[rng() % i];
    const auto row = std::size_t{l.num_heads} * l.head_dim * l.elem_bytes();
    bytes key(n * row), value(n * row);
    fill_random(key.data(), key.size(), rng);
    fill_random(value.data(), value.size(), rng);
    const std::uint32_t layer = l.num_layers - 1;
    for (std::size_t i = 0; i < n; ++i) {
      if (slots[i] < 0)
        continue;
      auto b = static_cast<std::uint64_t>(slots[i]) / l.block_size;
      auto o = static_cast<std::uint32_t>(slots[i] % l.block_size);
      for (std::uint32_t h = 0; h < l.num_heads; ++h)
        for (std::uint32_t d = 0; d < l.head_dim; ++d) {
          std::memcpy(&ref.dev[ref.offset(l.num_blocks, layer, 0, b, o, h, d)],
                      &key[ref.row_offset(i, h, d)], l.elem_bytes());
          std::memcpy(&ref.dev[ref.offset(l.num_blocks, layer, 1, b, o, h, d)],
                      &value[ref.row_offset(i, h, d)], l.elem_bytes());
        }
    }
    auto t = st->write_slots(layer, key.data(), value.data(), slots.data(), n);
    BOOST_REQUIRE_MESSAGE(t, why(t));
    BOOST_TEST((device_bytes_of(*st) == ref.dev));
  }
}

BOOST_AUTO_TEST_CASE(gather_blocks_fills_exactly_num_tokens_rows) {
  std::mt19937_64 rng{404};
  constexpr std::uint8_t poison = 0xA5;
  for (auto& l : shapes()) {
    auto st = make_host(l);
    auto ref = randomize(*st, rng);
    auto ids = shuffled(l.num_blocks, rng);
    std::vector<block_id> blocks(ids.begin(), ids.begin() + l.num_blocks / 2);
    // A partial last block when the block holds more than one token.
    const std::size_t n = blocks.size() * l.block_size - (l.block_size > 1);
    const auto row = std::size_t{l.num_heads} * l.head_dim * l.elem_bytes();
    const std::size_t guard = 3 * row;
    bytes key(n * row + guard, poison), value(n * row + guard, poison);
    bytes want_k = key, want_v = value;
    const std::uint32_t layer = l.num_layers / 2;
    for (std::size_t i = 0; i < n; ++i) {
      auto b = blocks[i / l.block_size];
      auto o = static_cast<std::uint32_t>(i % l.block_size);
      for (std::uint32_t h = 0; h < l.num_heads; ++h)
        for (std::uint32_t d = 0; d < l.head_dim; ++d) {
          std::memcpy(&want_k[ref.row_offset(i, h, d)],
                      &ref.dev[ref.offset(l.num_blocks, layer, 0, b, o, h, d)],
                      l.elem_bytes());
          std::memcpy(&want_v[ref.row_offset(i, h, d)],
                      &ref.dev[ref.offset(l.num_blocks, layer, 1, b, o, h, d)],
                      l.elem_bytes());
        }
    }
    auto t = st->gather_blocks(layer, blocks, n, key.data(), value.data());
    BOOST_REQUIRE_MESSAGE(t, why(t));
    BOOST_TEST((key == want_k));
    BOOST_TEST((value == want_v));
    BOOST_TEST((device_bytes_of(*st) == ref.dev));
  }
}

BOOST_AUTO_TEST_CASE(invalid_batches_fail_and_change_nothing) {
  std::mt19937_64 rng{505};
  auto l = shapes().front();
  auto st = make_host(l);
  randomize(*st, rng);
  const auto dev0 = device_bytes_of(*st);
  const auto host0 = host_bytes_of(*st);
  const block_id nb = l.num_blocks;
  const block_id nh = l.num_host_blocks;
  const auto row = std::size_t{l.num_heads} * l.head_dim * l.elem_bytes();
  bytes key(8 * row, 1), value(8 * row, 2), out(64 * row, 3);
  auto expect_invalid = [&](const caf::expected<ticket>& r, const char* what) {
    BOOST_CHECK_MESSAGE(!r, what << ": accepted");
    if (!r)
      BOOST_CHECK_MESSAGE(has(r.error(), errc::invalid_request),
                          what << ": " << render(r.error()));
    BOOST_CHECK_MESSAGE(device_bytes_of(*st) == dev0, what << ": pools changed");
    BOOST_CHECK_MESSAGE(host_bytes_of(*st) == host0, what << ": tier changed");
  };
  // Each bad batch starts with good entries, which must not be applied.
  expect_invalid(st->copy_blocks({{0, 1}, {2, nb}}), "copy dst out of range");
  expect_invalid(st->copy_blocks({{0, 1}, {nb, 3}}), "copy src out of range");
  expect_invalid(st->copy_blocks({{0, 1}, {2, 1}}), "copy dst repeated");
  expect_invalid(st->copy_blocks({{0, 1}, {1, 2}}), "copy dst is a src");
  expect_invalid(st->copy_blocks({{4, 4}}), "copy onto itself");
  expect_invalid(st->swap_out({{0, 0}, {1, nh}}), "swap_out host out of range");
  expect_invalid(st->swap_out({{0, 0}, {nb, 1}}), "swap_out device out of range");
  expect_invalid(st->swap_out({{0, 0}, {0, 1}}), "swap_out device repeated");
  expect_invalid(st->swap_out({{0, 0}, {1, 0}}), "swap_out host repeated");
  expect_invalid(st->swap_in({{0, 0}, {1, 0}}), "swap_in host repeated");
  expect_invalid(st->swap_in({{0, 0}, {0, 1}}), "swap_in device repeated");
  std::vector<std::int64_t> slots{0, -1, 5, std::int64_t{nb} * l.block_size};
  expect_invalid(st->write_slots(0, key.data(), value.data(), slots.data(), 4),
                 "slot out of range");
  slots.back() = -2;
  expect_invalid(st->write_slots(0, key.data(), value.data(), slots.data(), 4),
                 "slot below -1");
  slots.back() = std::numeric_limits<std::int64_t>::max();
  expect_invalid(st->write_slots(0, key.data(), value.data(), slots.data(), 4),
                 "slot at the int64 maximum");
  slots.back() = std::numeric_limits<std::int64_t>::min();
  expect_invalid(st->write_slots(0, key.data(), value.data(), slots.data(), 4),
                 "slot at the int64 minimum");
  slots.back() = 7;
  expect_invalid(st->write_slots(l.num_layers, key.data(), value.data(),
                                 slots.data(), 4),
                 "write layer out of range");
  expect_invalid(st->write_slots(0, nullptr, value.data(), slots.data(), 4),
                 "write null key");
  const std::vector<block_id> blocks{0, 1, 2};
  expect_invalid(st->gather_blocks(0, blocks, 3 * l.block_size + 1, out.data(),
                                   out.data() + 32 * row),
                 "gather too many tokens");
  expect_invalid(st->gather_blocks(0, {0, nb}, 2, out.data(),
                                   out.data() + 32 * row),
                 "gather block out of range");
  expect_invalid(st->gather_blocks(l.num_layers, blocks, 2, out.data(),
                                   out.data() + 32 * row),
                 "gather layer out of range");
  BOOST_TEST((out == bytes(64 * row, 3)));
  // No host tier: any swap is out of range.
  auto no_tier = l;
  no_tier.num_host_blocks = 0;
  auto st2 = make_host(no_tier);
  BOOST_TEST(st2->host_layer_base(0) == nullptr);
  auto r = st2->swap_out({{0, 0}});
  BOOST_TEST(!r);
  BOOST_TEST(static_cast<bool>(st2->swap_out({})));
}

BOOST_AUTO_TEST_CASE(tickets_increase_complete_at_once_and_wake) {
  auto st = make_host(shapes().front());
  int wakes = 0;
  st->set_wake([&] { ++wakes; });
  auto a = st->copy_blocks({});
  auto b = st->copy_blocks({{0, 1}});
  auto c = st->swap_out({{2, 3}});
  BOOST_REQUIRE(a && b && c);
  BOOST_TEST(*a >= 1u);
  BOOST_TEST(*b > *a);
  BOOST_TEST(*c > *b);
  BOOST_TEST(st->done(*c));
  BOOST_TEST(!st->wait(*c));
  BOOST_TEST(st->finished(*a)); // each ticket on its own, too
  BOOST_TEST(!st->wait_one(*b));
  BOOST_TEST(wakes == 3);
  BOOST_TEST(!st->copy_blocks({{0, 0}}));
  BOOST_TEST(wakes == 3);
}

BOOST_AUTO_TEST_CASE(make_storage_picks_kinds_and_rejects_bad_options) {
  storage_options opts;
  opts.layout = shapes().front();
  opts.kind = "host";
  auto host = make_storage(opts);
  BOOST_REQUIRE(host);
  BOOST_TEST(((*host)->kind() == storage_kind::host));
  BOOST_TEST(to_string((*host)->kind()) == std::string{"host"});
  BOOST_TEST(((*host)->where() == device{}));
  BOOST_TEST((*host)->layer_base(opts.layout.num_layers) == nullptr);
  BOOST_TEST(static_cast<std::byte*>((*host)->layer_base(1))
               - static_cast<std::byte*>((*host)->layer_base(0))
             == static_cast<std::ptrdiff_t>(
               opts.layout.layer_bytes(opts.layout.num_blocks)));
  opts.kind = "none";
  auto none = make_storage(opts);
  BOOST_REQUIRE(none);
  BOOST_TEST(((*none)->kind() == storage_kind::none));
  BOOST_TEST((*none)->layer_base(0) == nullptr);
  opts.kind = "auto";
  auto any = make_storage(opts);
  BOOST_REQUIRE(any);
  BOOST_TEST(((*any)->kind() == (cuda_device_available() ? storage_kind::cuda
                                                          : storage_kind::host)));
  if (!cuda_device_available()) {
    // Falling back to host with the pool to be sized from GPU memory: the
    // error names the config's field and the fallback.
    auto unsized = opts;
    unsized.layout.num_blocks = 0;
    auto r = make_storage(unsized);
    BOOST_REQUIRE(!r);
    BOOST_TEST(has(r.error(), errc::invalid_config));
    auto msg = render(r.error());
    BOOST_TEST(msg.find("num_gpu_blocks: storage 'auto' found no CUDA device")
                 != std::string::npos,
               msg);
  }
  opts.kind = "tpu";
  auto bad = make_storage(opts);
  BOOST_REQUIRE(!bad);
  BOOST_TEST(has(bad.error(), errc::invalid_config));
  BOOST_TEST(render(bad.error()).find("tpu") != std::string::npos);
  for (auto kind : {"host", "none"}) {
    opts.kind = kind;
    auto zero = opts;
    zero.layout.num_blocks = 0;
    auto r = make_storage(zero);
    BOOST_CHECK_MESSAGE(!r && has(r.error(), errc::invalid_config), kind);
    zero = opts;
    zero.layout.num_heads = 0;
    r = make_storage(zero);
    BOOST_CHECK_MESSAGE(!r && has(r.error(), errc::invalid_config), kind);
    // Slot ids split into block and offset by a shift.
    auto odd = opts;
    odd.layout.block_size = 24;
    r = make_storage(odd);
    BOOST_CHECK_MESSAGE(!r && has(r.error(), errc::invalid_config), kind);
    if (!r)
      BOOST_TEST(render(r.error()).find("block_size must be a power of two: 24")
                 != std::string::npos, render(r.error()));
  }
  if (!cuda_device_available()) {
    opts.kind = "cuda";
    auto cuda = make_storage(opts);
    BOOST_REQUIRE(!cuda);
    BOOST_TEST(has(cuda.error(), errc::device_failure));
    BOOST_TEST_MESSAGE("storage cuda without a device: " << render(cuda.error()));
  }
}

BOOST_AUTO_TEST_CASE(host_allocation_failure_names_the_bytes) {
  storage_options opts;
  opts.kind = "host";
  opts.layout = layout_of(1, 0xfffffff0u, 16, 64, 128, dtype::fp32, 0);
  auto r = make_storage(opts);
  BOOST_REQUIRE(!r);
  BOOST_TEST(has(r.error(), errc::device_failure));
  BOOST_TEST(render(r.error()).find(std::to_string(opts.layout.device_bytes()))
             != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
