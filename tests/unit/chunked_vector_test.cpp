// chunked_vector: elements built and destroyed exactly once, in place
// across chunk boundaries; references that survive growth; iteration; the
// alignment of an over-aligned element (the pool's 64-byte sequences).
#include <cstdint>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/actors/chunked_vector.hpp"

using kvactor::detail::chunked_vector;

namespace {

/// Counts the live instances, to show each is destroyed exactly once.
struct counted {
  static inline int live = 0;
  int value;
  explicit counted(int v) : value(v) {
    ++live;
  }
  counted(const counted& x) : value(x.value) {
    ++live;
  }
  ~counted() {
    --live;
  }
};

struct alignas(64) line {
  std::uint64_t x = 7;
};

} // namespace

BOOST_AUTO_TEST_SUITE(chunked_vector_suite)

BOOST_AUTO_TEST_CASE(elements_never_move_as_chunks_are_added) {
  chunked_vector<std::string, 2> v; // 4 per chunk
  std::vector<const std::string*> at;
  for (int i = 0; i < 50; ++i) {
    at.push_back(&v.emplace_back(std::to_string(i)));
    BOOST_REQUIRE_EQUAL(v.size(), static_cast<std::size_t>(i + 1));
  }
  for (int i = 0; i < 50; ++i) {
    BOOST_TEST(&v[static_cast<std::size_t>(i)] == at[static_cast<std::size_t>(i)]);
    BOOST_TEST(v[static_cast<std::size_t>(i)] == std::to_string(i));
  }
  BOOST_TEST(v.back() == "49");
}

BOOST_AUTO_TEST_CASE(pop_back_and_clear_destroy_each_element_once) {
  counted::live = 0;
  {
    chunked_vector<counted, 3> v; // 8 per chunk
    for (int i = 0; i < 20; ++i)
      v.emplace_back(i);
    BOOST_TEST(counted::live == 20);
    for (int i = 0; i < 9; ++i) // back across a chunk boundary
      v.pop_back();
    BOOST_TEST(counted::live == 11);
    BOOST_TEST(v.back().value == 10);
    v.emplace_back(99); // into the kept chunk
    BOOST_TEST(v[11].value == 99);
    BOOST_TEST(counted::live == 12);
    v.clear();
    BOOST_TEST(counted::live == 0);
    BOOST_TEST(v.empty());
    for (int i = 0; i < 5; ++i)
      v.emplace_back(i);
    BOOST_TEST(counted::live == 5);
  } // the destructor takes the rest
  BOOST_TEST(counted::live == 0);
}

BOOST_AUTO_TEST_CASE(iteration_visits_every_element_in_order) {
  chunked_vector<int, 1> v;
  BOOST_TEST((v.begin() == v.end()));
  for (int i = 0; i < 9; ++i)
    v.emplace_back(i * i);
  std::vector<int> seen;
  for (auto& x : v)
    seen.push_back(x);
  const auto& cv = v;
  std::size_t n = 0;
  for (auto i = cv.begin(); i != cv.end(); ++i, ++n)
    BOOST_TEST(i.index() == n);
  BOOST_TEST(n == 9u);
  BOOST_TEST(seen == (std::vector<int>{0, 1, 4, 9, 16, 25, 36, 49, 64}));
}

BOOST_AUTO_TEST_CASE(over_aligned_elements_are_aligned) {
  chunked_vector<line, 4> v;
  for (int i = 0; i < 100; ++i) {
    auto& x = v.emplace_back();
    BOOST_TEST(reinterpret_cast<std::uintptr_t>(&x) % 64 == 0u);
    BOOST_TEST(x.x == 7u);
  }
}

BOOST_AUTO_TEST_SUITE_END()
