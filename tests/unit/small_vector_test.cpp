// small_vector (a sequence's block table): inline up to N elements, then on
// the heap - checked against std::vector in a seeded random model test that
// crosses the inline limit both ways, and through copies and moves of
// either kind.
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/actors/small_vector.hpp"

using kvactor::detail::small_vector;
using vec = small_vector<std::uint32_t, 4>;
using ref = std::vector<std::uint32_t>;

namespace {

bool same(const vec& v, const ref& r) {
  if (v.size() != r.size() || v.empty() != r.empty()
      || v.capacity() < v.size())
    return false;
  for (std::size_t i = 0; i < r.size(); ++i)
    if (v[i] != r[i] || v.data()[i] != r[i])
      return false;
  return ref(v.begin(), v.end()) == r
         && ref(v.rbegin(), v.rend()) == ref(r.rbegin(), r.rend())
         && (r.empty() || v.back() == r.back());
}

} // namespace

BOOST_AUTO_TEST_SUITE(small_vector_suite)

BOOST_AUTO_TEST_CASE(stays_inline_up_to_n_then_moves_to_the_heap) {
  vec v;
  BOOST_TEST(v.is_inline());
  BOOST_TEST(v.capacity() == 4u);
  for (std::uint32_t x = 0; x < 4; ++x)
    v.push_back(x);
  BOOST_TEST(v.is_inline());
  v.push_back(4);
  BOOST_TEST(!v.is_inline());
  BOOST_TEST(v.capacity() >= 5u);
  BOOST_TEST(same(v, ref{0, 1, 2, 3, 4}));
  v.clear(); // the heap buffer stays for the next elements
  BOOST_TEST(!v.is_inline());
  BOOST_TEST(v.empty());
  vec w{v}; // a copy of an empty table is inline
  BOOST_TEST(w.is_inline());
  static_assert(sizeof(small_vector<std::uint32_t, 14>) == 64,
                "a sequence's block table fills one cache line");
}

BOOST_AUTO_TEST_CASE(a_move_takes_the_heap_buffer_and_empties_the_source) {
  vec v;
  for (std::uint32_t x = 0; x < 9; ++x)
    v.push_back(x);
  auto* buffer = v.data();
  vec w{std::move(v)};
  BOOST_TEST(w.data() == buffer);
  BOOST_TEST(v.empty());
  BOOST_TEST(v.is_inline());
  v.push_back(7); // the moved-from vector is usable
  BOOST_TEST(same(v, ref{7}));
  w = std::move(v); // frees w's heap buffer, takes v's inline elements
  BOOST_TEST(same(w, ref{7}));
  BOOST_TEST(w.is_inline());
}

BOOST_AUTO_TEST_CASE(matches_std_vector_over_random_operations) {
  for (std::uint32_t seed = 1; seed <= 30; ++seed) {
    std::mt19937_64 rng{seed};
    vec v;
    ref r;
    for (int step = 0; step < 2000; ++step) {
      auto x = static_cast<std::uint32_t>(rng());
      switch (rng() % 10) {
        case 0:
        case 1:
        case 2:
        case 3:
          v.push_back(x);
          r.push_back(x);
          break;
        case 4:
          if (!r.empty()) {
            v.pop_back();
            r.pop_back();
          }
          break;
        case 5: {
          ref src(rng() % 12);
          for (auto& y : src)
            y = static_cast<std::uint32_t>(rng());
          v.assign(src.begin(), src.end());
          r = src;
          break;
        }
        case 6: {
          vec copy{v};
          BOOST_TEST_REQUIRE(same(copy, r), "seed " << seed << " step " << step);
          v = std::move(copy);
          break;
        }
        case 7: {
          vec other;
          for (auto k = rng() % 8; k > 0; --k)
            other.push_back(static_cast<std::uint32_t>(k));
          other = v; // copy assignment over a vector of either kind
          v = vec{std::move(other)};
          break;
        }
        case 8: {
          v.reserve(rng() % 16);
          if (!r.empty()) {
            auto i = rng() % r.size();
            v[i] = x;
            r[i] = x;
          }
          auto& self = v;
          v = self; // self-assignment changes nothing
          break;
        }
        default:
          if (rng() % 8 == 0) {
            v.clear();
            r.clear();
          }
      }
      BOOST_TEST_REQUIRE(same(v, r), "seed " << seed << " step " << step);
      BOOST_TEST_REQUIRE((v == vec{v}));
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
