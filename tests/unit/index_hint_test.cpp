// index_hint (the manager's prefetch of the pool's id index): the address
// it computes is the line where the index holds the id, in the table the
// pool published last - also after the table grew and moved.
#include <cstdint>
#include <cstring>

#include <boost/test/unit_test.hpp>

#include "kvactor/actors/index_hint.hpp"

using kvactor::detail::flat_index;
using kvactor::detail::index_hint;

namespace {

/// The key stored at address `at` of a flat_index table (a slot starts with
/// its 64-bit key).
std::uint64_t key_at(std::uintptr_t at) {
  std::uint64_t key;
  std::memcpy(&key, reinterpret_cast<const void*>(at), sizeof key);
  return key;
}

} // namespace

BOOST_AUTO_TEST_SUITE(index_hint_suite)

BOOST_AUTO_TEST_CASE(nothing_before_the_first_publish) {
  index_hint hint;
  BOOST_TEST(hint.first_probe(42) == 0u);
  hint.prefetch(42); // a no-op
}

BOOST_AUTO_TEST_CASE(points_at_the_slot_holding_the_id_as_the_table_grows) {
  flat_index index;
  index_hint hint;
  hint.publish(index);
  auto first_table = index.where().table;
  std::uint32_t moved = 0;
  for (std::uint64_t id = 1; id <= 4000; ++id) {
    index.insert(id * 7919, static_cast<std::uint32_t>(id));
    auto before = hint.first_probe(1);
    hint.publish(index);
    moved += hint.first_probe(1) != before;
    // The first probe of every key inserted so far lies in the current
    // table; with linear probing a key sits at or after its first probe,
    // and a key alone in its run sits exactly there.
    auto at = hint.first_probe(id * 7919);
    auto site = index.where();
    auto slots = std::uintptr_t{1} << (64 - site.shift); // of the newest table
    BOOST_TEST_REQUIRE(at >= site.table);
    BOOST_TEST_REQUIRE(at < site.table + slots * 16); // 16 bytes a slot
  }
  BOOST_TEST(index.where().table != first_table);
  BOOST_TEST(moved >= 5u); // 16 -> 8192 slots: every doubling republished
  // In a table this sparse most keys are at their first probe - once the
  // last growth's old table has retired (until then, a key not yet moved
  // across is not in the table published: its prefetch is wasted).
  BOOST_TEST(!index.growing());
  std::uint32_t exact = 0;
  for (std::uint64_t id = 1; id <= 4000; ++id)
    exact += key_at(hint.first_probe(id * 7919)) == id * 7919;
  BOOST_TEST(exact > 2400u);
}

BOOST_AUTO_TEST_SUITE_END()
