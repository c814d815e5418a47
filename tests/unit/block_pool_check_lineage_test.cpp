// check_invariant catches each broken rule about epochs (write_lineage) and
// the ends of pins: every case corrupts one thing in a pool in every kind
// of state (corrupt_pool_fixture.hpp) and expects the check to fail naming
// it.
#include <string>

#include <boost/test/unit_test.hpp>

#include "corrupt_pool_fixture.hpp"

using namespace kvactor;
using namespace kvactor::test;

BOOST_FIXTURE_TEST_SUITE(block_pool_check_lineage_suite, corrupt_pool_fixture)

// -- epochs ---------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(check_catches_a_live_request_whose_epoch_ended) {
  access::lineage(*pool).end(access::epoch(*pool, seq(5)));
  expect_broken("request 5's epoch is not live, though the request is");
}

BOOST_AUTO_TEST_CASE(check_catches_a_swapped_request_whose_epoch_ended) {
  // Away on the host, its epoch goes on: a swap-out confirms nothing.
  access::lineage(*pool).end(access::epoch(*pool, seq(6)));
  expect_broken("request 6's epoch is not live, though the request is");
}

BOOST_AUTO_TEST_CASE(check_catches_a_ghost_whose_epoch_is_live) {
  access::lineage(*pool).begin(access::epoch(*pool, ghost()));
  expect_broken("ghost request 7's epoch is live");
}

BOOST_AUTO_TEST_CASE(check_catches_a_live_epoch_no_request_has) {
  auto& lineage = access::lineage(*pool);
  auto before = lineage.live_epochs();
  lineage.begin(0x5eed'0000'0000'0001ull);
  expect_broken(std::to_string(before + 1) + " live epochs for "
                + std::to_string(before) + " live requests");
}

BOOST_AUTO_TEST_CASE(check_catches_an_append_in_place_into_a_block_its_epoch_did_not_write) {
  // 11 holds a partly filled last block of its own, which it writes in
  // place: that block's writer must be 11's epoch - here 5's wrote it.
  require(pool->allocate(tokens_req(11, 6)));
  auto& s = seq(11);
  BOOST_REQUIRE(!s.tail_shared);
  auto b = s.blocks.back();
  auto& other = seq(5);
  access::lineage(*pool).wrote(b, access::epoch(*pool, other), other.cache_id,
                               false);
  expect_broken("request 11 would append in place into " + blk(b)
                + ", which its epoch did not write");
}

BOOST_AUTO_TEST_CASE(check_catches_a_cached_block_whose_writer_is_still_live) {
  // A cached block's writer let it go (share_indexed counts on it).
  auto& s = seq(1);
  access::lineage(*pool).wrote(lru[0], access::epoch(*pool, s), s.cache_id,
                               false);
  expect_broken(blk(lru[0]) + " is cached, its writer's epoch live on the "
                              "device");
}

BOOST_AUTO_TEST_CASE(check_catches_a_cached_pinned_block_whose_writer_is_still_live) {
  auto& s = seq(9);
  access::lineage(*pool).wrote(pinned[1], access::epoch(*pool, s), s.cache_id,
                               false);
  expect_broken(blk(pinned[1]) + " is cached, its writer's epoch live on the "
                                 "device");
}

BOOST_AUTO_TEST_CASE(a_cached_block_whose_writer_is_away_on_the_host_is_no_break) {
  // What a request wrote and let go at its swap-out is cached, its epoch
  // live until it comes back: not a corruption.
  auto& s = seq(6);
  access::lineage(*pool).wrote(lru[0], access::epoch(*pool, s), s.cache_id,
                               false);
  auto err = pool->check_invariant();
  BOOST_TEST(!err, render(err));
}

// -- pins' ends -----------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(check_catches_a_pin_ending_after_its_blocks_deadline) {
  // A pin ending at a block ends no later than the block's own pin.
  auto& list = access::pinned(*pool);
  BOOST_REQUIRE(!list.empty());
  auto b = list[0];
  auto until = access::pin_until(*pool)[b];
  access::pin_ends(*pool)[0].pins.push_back({999, until + 7});
  expect_broken(blk(b) + "'s pin ends at " + std::to_string(until)
                + ", before a pin ending there (" + std::to_string(until + 7)
                + ")");
}

BOOST_AUTO_TEST_CASE(check_catches_pin_ends_that_are_not_one_per_pinned_block) {
  access::pin_ends(*pool).emplace_back();
  auto n = access::pinned(*pool).size();
  expect_broken("pin ends for " + std::to_string(n + 1) + " of "
                + std::to_string(n) + " pinned blocks");
}

BOOST_AUTO_TEST_SUITE_END()
