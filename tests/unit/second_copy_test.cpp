// A prefix block computed twice - a prompt of whole blocks recomputes its
// last one (a hit never covers a prompt's last token), or two requests fill
// identical blocks - while the request's later blocks are indexed as the
// hash's children. Whatever the first copy's fate, what stays cached must
// stay a prefix a lookup reaches: evicted before those children, it would
// leave them cached out of reach (counted in cached_blocks, never hit).
//  - First copy cached, unpinned: evicted at once, the new copy indexed.
//  - First copy held: the new one is a second copy, unindexed; released,
//    it moves the first copy (cached by then) behind the blocks it cached.
#include <cstdint>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "pool_fixture.hpp"

using namespace kvactor;
using namespace kvactor::test;

namespace {

struct second_copy_fixture : pool_fixture {
  std::vector<token_id> p = run(10, 8); // blocks A B, whole
  std::vector<token_id> y = run(20, 4); // block C, decoded after p

  void grow(request_id id, const std::vector<token_id>& toks) {
    auto res = pool().extend(id, toks.size(), toks.data());
    if (!res)
      BOOST_FAIL("extend " << id << ": " << render(res.error()));
    BOOST_TEST(invariant(pool()) == "ok");
  }

  /// Cached tokens a lookup of p + y (and one more token) finds.
  std::uint64_t reach() {
    auto res = pool().cached_prefix(prompt_req(99, p + y + run(30, 1)));
    BOOST_TEST_REQUIRE(static_cast<bool>(res));
    return *res;
  }
};

} // namespace

BOOST_FIXTURE_TEST_SUITE(second_copy_suite, second_copy_fixture)

BOOST_AUTO_TEST_CASE(a_recomputed_block_takes_a_cached_first_copys_place) {
  alloc(prompt_req(1, p));
  release(1); // A B cached
  auto evictions = pool().counters().evictions;
  BOOST_TEST(alloc(prompt_req(2, p)) == 4u); // A hit, B recomputed
  auto mine = blocks(2);
  BOOST_REQUIRE_EQUAL(mine.size(), 2u);
  // The first B is gone, the request's copy indexed in its place.
  BOOST_TEST(pool().cached_blocks() == 0u);
  BOOST_TEST(pool().counters().evictions == evictions + 1);
  // Pressure while the request runs finds nothing to evict that its
  // chain needs.
  BOOST_TEST(pool().evict(16) == 0u);
  grow(2, y);
  release(2);
  BOOST_TEST(reach() == 12u);
  // Leaf first: C, then B, then A.
  BOOST_TEST(pool().evict(1) == 1u);
  BOOST_TEST(reach() == 8u);
  BOOST_TEST(pool().evict(1) == 1u);
  BOOST_TEST(reach() == 4u);
  BOOST_TEST(pool().cached_blocks() == 1u);
}

BOOST_AUTO_TEST_CASE(a_second_copy_moves_its_first_copy_behind_what_it_cached) {
  alloc(prompt_req(1, p));                   // holds A B
  BOOST_TEST(alloc(prompt_req(2, p)) == 4u); // A hit; B in use: a second copy
  BOOST_TEST(blocks(2)[1] != blocks(1)[1]);
  grow(2, y);                                 // C, under B's hash
  release(1);                                 // B cached (A still held)
  release(2);                                 // C cached; A cached
  BOOST_TEST(pool().cached_blocks() == 3u);
  BOOST_TEST(reach() == 12u);
  // Evicted leaf first: C before the first B, which the second copy's
  // release moved behind it.
  BOOST_TEST(pool().evict(1) == 1u);
  BOOST_TEST(reach() == 8u);
  BOOST_TEST(pool().evict(1) == 1u);
  BOOST_TEST(reach() == 4u);
}

BOOST_AUTO_TEST_CASE(a_second_copy_takes_the_place_of_a_first_copy_evicted_meanwhile) {
  // The first copy's holder ends while the second copy's still runs, and
  // pressure evicts the first copy: the second copy is indexed in its
  // place (a stored event with its tokens), so what its holder indexed
  // below that hash stays reachable.
  pool().record_events(true);
  alloc(prompt_req(1, p));                   // holds A B
  BOOST_TEST(alloc(prompt_req(2, p)) == 4u); // A hit; B held: a second copy
  auto second = blocks(2)[1];
  grow(2, y);                                 // C, under B's hash
  release(1);                                 // B cached
  pool().take_events();
  BOOST_TEST(pool().evict(1) == 1u);          // B (the LRU's front)
  auto events = pool().take_events();
  BOOST_REQUIRE_EQUAL(events.size(), 2u);
  BOOST_TEST(!events[0].stored);
  BOOST_TEST(events[1].stored);
  BOOST_TEST(events[1].block == second);
  BOOST_TEST(events[1].tokens == part(p, 4, 8), boost::test_tools::per_element());
  release(2);
  BOOST_TEST(reach() == 12u);
  BOOST_TEST(invariant(pool()) == "ok");
}

BOOST_AUTO_TEST_CASE(a_pinned_first_copy_expired_and_evicted_gives_way_too) {
  cfg.max_pinned_blocks = 4;
  make(16);
  alloc(prompt_req(1, p));
  release(1);
  BOOST_TEST(pool().pin(0, p, 10, 0).value() == 2u);
  BOOST_TEST(alloc(prompt_req(2, p)) == 4u); // B pinned: a second copy
  grow(2, y);
  BOOST_TEST(pool().expire_pins(10) == 2u);
  BOOST_TEST(pool().evict(1) == 1u);          // the first B
  release(2);
  BOOST_TEST(reach() == 12u);
}

BOOST_AUTO_TEST_CASE(the_copy_in_its_place_keeps_its_retention_level) {
  // A critical request's prompt, cached at the top level; a normal one's
  // below it. A low request recomputes the critical prompt's last block:
  // its copy takes the first copy's level too, and eviction takes the
  // normal prompt's blocks first.
  auto hi = prompt_req(1, p);
  hi.priority = priority::critical;
  alloc(hi);
  release(1);
  auto q = run(60, 8);
  alloc(prompt_req(3, q));
  release(3);
  auto lo = prompt_req(2, p);
  lo.priority = priority::low;
  BOOST_TEST(alloc(lo) == 4u);
  release(2);
  BOOST_TEST(pool().evict(1) == 1u);
  auto reach_of = [&](const std::vector<token_id>& x) {
    return pool().cached_prefix(prompt_req(98, x + run(30, 1))).value();
  };
  BOOST_TEST(reach_of(p) == 8u);
  BOOST_TEST(reach_of(q) == 4u);
}

BOOST_AUTO_TEST_CASE(a_pinned_first_copy_stays_and_serves) {
  cfg.max_pinned_blocks = 4;
  make(16);
  alloc(prompt_req(1, p));
  release(1);
  BOOST_TEST(pool().pin(0, p, 1000, 0).value() == 2u);
  BOOST_TEST(alloc(prompt_req(2, p)) == 4u);
  BOOST_TEST(pool().pinned_blocks() == 2u); // the pinned B stays indexed
  grow(2, y);
  release(2);
  BOOST_TEST(reach() == 12u);
  BOOST_TEST(pool().evict(16) == 1u); // C; A and B pinned
  BOOST_TEST(reach() == 8u);
}

BOOST_AUTO_TEST_SUITE_END()
