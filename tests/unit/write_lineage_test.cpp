// write_lineage on its own: epochs' tokens, what a write records, what a
// hit or a fork takes on, and which ended epochs drop out (the pool's use of
// it is checked by lineage_oracle_test.cpp and the model tests).
#include <boost/test/unit_test.hpp>

#include "kvactor/actors/write_lineage.hpp"

using kvactor::detail::write_lineage;
using token_set = write_lineage::token_set;

namespace {

/// Request `cache_id` holds block `b` it did not write, as the pool's
/// admission does for one hit.
bool acquire(write_lineage& l, std::uint64_t cache_id, kvactor::block_id b,
             bool writer_may_live) {
  token_set took;
  l.take_on(took, b, writer_may_live);
  return l.adopt(cache_id, std::move(took));
}

} // namespace

BOOST_AUTO_TEST_SUITE(write_lineage_suite)

BOOST_AUTO_TEST_CASE(each_epoch_has_a_token_of_its_own) {
  write_lineage l{4};
  auto first = l.current(7, false);
  l.begin(first);
  BOOST_TEST(l.live(first));
  BOOST_TEST(!l.end(first)); // nobody took it on
  BOOST_TEST(!l.live(first));
  auto second = l.restart(7);
  auto third = l.restart(7);
  BOOST_TEST(second != first);
  BOOST_TEST(third != second);
  BOOST_TEST(l.current(7, true) == third);
  BOOST_TEST(l.live(second)); // until ended, as any epoch
  BOOST_TEST(l.current(8, false) != first);
  BOOST_TEST(!l.live(0));
}

BOOST_AUTO_TEST_CASE(a_hit_takes_on_the_writer_and_what_it_was_over) {
  write_lineage l{4};
  auto a = l.current(1, false), b = l.current(2, false),
       c = l.current(3, false);
  for (auto t : {a, b, c})
    l.begin(t);
  // B hit A's block 0 and wrote block 1 over it; C hits block 1.
  BOOST_TEST(!l.wrote(0, a, 1, false));
  BOOST_TEST(acquire(l, 2, 0, true));
  BOOST_TEST(l.wrote(1, b, 2, true));
  BOOST_TEST((l.deps(1) == token_set{a, b})); // sorted
  BOOST_TEST(acquire(l, 3, 1, true));
  BOOST_TEST((l.acc(3) == token_set{a, b}));
  BOOST_TEST(l.depends_on(1, a));
  BOOST_TEST(!l.depends_on(0, b));
  // Both were taken on by another: their ends report it.
  BOOST_TEST(l.end(a));
  BOOST_TEST(l.end(b));
  BOOST_TEST(!l.end(c));
}

BOOST_AUTO_TEST_CASE(a_cached_blocks_writer_is_not_taken_on) {
  write_lineage l{2};
  auto a = l.current(1, false);
  l.begin(a);
  l.wrote(0, a, 1, false);
  BOOST_TEST(!acquire(l, 2, 0, false));
  BOOST_TEST(l.acc(2).empty());
  BOOST_TEST(!l.end(a)); // nobody took it on
}

BOOST_AUTO_TEST_CASE(ended_epochs_drop_out_when_more_is_taken_on) {
  write_lineage l{4};
  auto a = l.current(1, false), b = l.current(2, false),
       c = l.current(3, false);
  for (auto t : {a, b, c})
    l.begin(t);
  l.wrote(0, a, 1, false);
  l.wrote(1, c, 3, false);
  BOOST_TEST(acquire(l, 2, 0, true));
  l.end(a); // confirmed: no longer anyone's concern
  // Still in what a write records (harmless: a never turns bad)...
  BOOST_TEST(l.wrote(2, b, 2, true));
  BOOST_TEST((l.deps(2) == token_set{a, b}));
  // ...until the request takes more on.
  BOOST_TEST(acquire(l, 2, 1, true));
  BOOST_TEST((l.acc(2) == token_set{c}));
  BOOST_TEST(!acquire(l, 4, 0, true)); // a's block: nothing live
  // Written again in the same epoch: left as it was (one compare).
  BOOST_TEST(l.wrote(2, b, 2, true));
  BOOST_TEST((l.deps(2) == token_set{a, b}));
  // Taken fresh: nothing recorded.
  l.clear(2);
  BOOST_TEST(l.deps(2).empty());
  BOOST_TEST(!l.has_set(2));
}

BOOST_AUTO_TEST_CASE(a_fork_takes_on_its_parent_and_its_parents_acc) {
  write_lineage l{4};
  auto a = l.current(1, false), p = l.current(2, false),
       f = l.current(3, false);
  for (auto t : {a, p, f})
    l.begin(t);
  l.wrote(0, a, 1, false);
  BOOST_TEST(acquire(l, 2, 0, true)); // the parent hit A's block
  BOOST_TEST(l.inherit(3, 2, p, true));
  BOOST_TEST((l.acc(3) == token_set{a, p}));
  BOOST_TEST(l.acquired(3, p));
  BOOST_TEST(l.end(p)); // the fork took it on
  l.forget(3);
  BOOST_TEST(l.acc(3).empty());
}

BOOST_AUTO_TEST_SUITE_END()
