// Storage kind none: validates like the others, completes at once, holds no
// data.
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/device/storage.hpp"
#include "kvactor/messages/error.hpp"

using namespace kvactor;

namespace {

/// The error of a failed expected, "" otherwise (error() of a value is UB).
template <class T>
std::string why(const caf::expected<T>& x) {
  return x ? std::string{} : render(x.error());
}

} // namespace

BOOST_AUTO_TEST_SUITE(null_storage_suite)

BOOST_AUTO_TEST_CASE(none_validates_batches_and_holds_no_data) {
  storage_options opts;
  opts.kind = "none";
  opts.layout.num_layers = 80;
  opts.layout.num_blocks = 100000; // a model too large to back
  opts.layout.block_size = 16;
  opts.layout.num_heads = 64;
  opts.layout.head_dim = 128;
  opts.layout.num_host_blocks = 10;
  auto st = make_storage(opts);
  BOOST_REQUIRE_MESSAGE(st, why(st));
  auto& s = **st;
  BOOST_TEST((s.kind() == storage_kind::none));
  BOOST_TEST(s.layer_base(0) == nullptr);
  BOOST_TEST(s.host_layer_base(0) == nullptr);
  int wakes = 0;
  s.set_wake([&] { ++wakes; });
  auto a = s.copy_blocks({{1, 2}, {3, 4}});
  auto b = s.swap_out({{5, 9}});
  auto c = s.swap_in({{5, 9}});
  BOOST_REQUIRE(a && b && c);
  BOOST_TEST(*c > *b);
  BOOST_TEST(*b > *a);
  BOOST_TEST(s.done(*c));
  BOOST_TEST(!s.wait(*c));
  BOOST_TEST(wakes == 3);
  auto bad = s.copy_blocks({{1, 100000}});
  BOOST_REQUIRE(!bad);
  BOOST_TEST(has_code(bad.error(), errc::invalid_request));
  BOOST_TEST(!s.copy_blocks({{1, 2}, {3, 2}}));
  BOOST_TEST(!s.swap_out({{5, 10}}));
  BOOST_TEST(!s.swap_in({{5, 1}, {6, 1}}));
  std::vector<std::int64_t> slots{0};
  char buf[8] = {};
  auto w = s.write_slots(0, buf, buf, slots.data(), 1);
  BOOST_REQUIRE(!w);
  BOOST_TEST(has_code(w.error(), errc::invalid_request));
  BOOST_TEST(render(w.error()).find("storage none holds no data")
             != std::string::npos);
  auto g = s.gather_blocks(0, {0}, 1, buf, buf);
  BOOST_REQUIRE(!g);
  BOOST_TEST(has_code(g.error(), errc::invalid_request));
  BOOST_TEST(wakes == 3);
}

BOOST_AUTO_TEST_SUITE_END()
