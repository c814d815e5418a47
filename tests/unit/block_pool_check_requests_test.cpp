// check_invariant catches each broken rule about requests, the request
// table and the block lists: every case corrupts one thing in a pool in
// every kind of state (corrupt_pool_fixture.hpp) and expects the check to
// fail naming it.
#include <utility>

#include <boost/test/unit_test.hpp>

#include "corrupt_pool_fixture.hpp"

using namespace kvactor;
using namespace kvactor::test;

BOOST_FIXTURE_TEST_SUITE(block_pool_check_requests_suite, corrupt_pool_fixture)

// -- requests -------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(check_catches_a_request_without_a_tenant) {
  seq(1).tenant = 99;
  expect_broken("request 1 has no tenant");
}

BOOST_AUTO_TEST_CASE(check_catches_a_table_that_does_not_fit_the_tokens) {
  seq(5).num_tokens = 20;
  expect_broken("request 5 holds 2/0/0 device/host/incoming blocks for 20 tokens");
}

BOOST_AUTO_TEST_CASE(check_catches_host_hashes_that_do_not_fit_the_host_blocks) {
  seq(6).host_hashes.emplace_back();
  expect_broken("request 6 has 2 hashes for 1 host blocks");
}

BOOST_AUTO_TEST_CASE(check_catches_a_ghost_with_no_swap_in_progress) {
  ghost().where = detail::residency::swapped;
  ghost().blocks.clear();
  expect_broken("request 7 has a release pending but no swap in progress");
}

BOOST_AUTO_TEST_CASE(check_catches_an_ended_request_left_in_the_id_index) {
  seq(5).release_pending = true;
  expect_broken("request 5 has ended but is in the id index");
}

BOOST_AUTO_TEST_CASE(check_catches_a_ghost_without_its_release_pending) {
  ghost().release_pending = false;
  expect_broken("ghost of request 7 has no release pending");
}

BOOST_AUTO_TEST_CASE(check_catches_a_block_out_of_range_in_a_table) {
  seq(5).blocks[0] = 9999;
  expect_broken("request 5 holds block 9999 out of range");
}

BOOST_AUTO_TEST_CASE(check_catches_a_host_block_out_of_range_in_a_table) {
  seq(6).host_blocks[0] = 999;
  expect_broken("request 6 holds host block 999 out of range or held twice");
}

BOOST_AUTO_TEST_CASE(check_catches_hashed_blocks_that_do_not_add_up_to_the_tokens) {
  // 9 tokens: 2 hashed blocks and 1 tail token. One block fewer leaves
  // 4 tokens unaccounted for; more blocks than the tokens fill, too.
  seq(1).num_hashed = 1;
  expect_broken("request 1 has 1 hashed blocks and 1 tail tokens for 9 tokens");
  seq(1).num_hashed = 3;
  seq(1).hashable = false; // not hashing any more: the count must still fit
  expect_broken("request 1 has 3 hashed blocks");
}

BOOST_AUTO_TEST_CASE(check_catches_a_tail_of_a_whole_block) {
  // 9 tokens as 1 hashed block and 5 in the tail: the sum fits, the tail
  // should have been hashed.
  seq(1).num_hashed = 1;
  seq(1).tail = run(4, 5);
  expect_broken("request 1 has 1 hashed blocks and 5 tail tokens for 9 tokens");
}

BOOST_AUTO_TEST_CASE(check_catches_drafts_counted_wrong_or_indexed) {
  // 1 holds 9 tokens, 2 blocks of them hashed: more drafts than tokens,
  // or drafts among its hashed tokens, break the count.
  seq(1).drafts = 10;
  expect_broken("request 1 has 10 draft tokens of 9");
  seq(1).drafts = 5;
  expect_broken("request 1 has 2 hashed blocks and 1 tail tokens");
  seq(1).drafts = 0;
  BOOST_TEST(invariant(*pool) == "ok");
  // 9's first block (indexed, full) holding drafts: a prompt could find
  // K/V the verifier may yet reject.
  seq(9).hashable = false;
  seq(9).num_hashed = 0;
  seq(9).drafts = 6;
  expect_broken("holds draft tokens but is indexed");
}

BOOST_AUTO_TEST_CASE(check_catches_an_unflagged_holder_of_a_shared_partial_block) {
  // 9 and 10 hold the same 2 tokens of their last block: one of them may
  // write in place (its next slot is no one else's), not both - each
  // would write over the other's next token.
  seq(9).tail_shared = false;
  BOOST_TEST(invariant(*pool) == "ok");
  seq(10).tail_shared = false;
  expect_broken("may write into its last block");
  seq(9).tail_shared = true;
  // Nor may the fork alone: it would append in place into a block its
  // parent wrote, and its writes would go unrecorded (write_lineage: only
  // the full path records; a fork's first append takes it).
  expect_broken("request 10 would append in place into");
  // 1 holds its last block (the copy's source) alone: no rule to break.
  seq(10).tail_shared = true;
  seq(1).tail_shared = false;
  BOOST_TEST(invariant(*pool) == "ok");
  // With fewer tokens in it than another holder, 10 would write over
  // the token 9 added.
  seq(10).tail_shared = false;
  seq(9).num_tokens = 7;
  seq(9).tail.push_back(1);
  expect_broken("request 10 may write into its last block");
  // The one holder with the most tokens may write (it appended in place
  // while a copy of the block was in flight, and that copy failed since).
  seq(10).tail_shared = true;
  seq(9).tail_shared = false;
  BOOST_TEST(invariant(*pool) == "ok");
}

// -- the request table ----------------------------------------------------------------

BOOST_AUTO_TEST_CASE(check_catches_a_slot_both_live_and_free) {
  access::free_slots(*pool).push_back(access::slot_of(*pool, 1));
  expect_broken("the request table's slots are not live, ghost or free exactly once");
}

BOOST_AUTO_TEST_CASE(check_catches_an_id_index_key_naming_another_request) {
  // Every slot still listed once, but 5 and 6 find each other's.
  auto s5 = access::slot_of(*pool, 5);
  auto s6 = access::slot_of(*pool, 6);
  access::seq_index(*pool).assign(5, s6);
  access::seq_index(*pool).assign(6, s5);
  expect_broken("the id index names a slot holding another request");
}

// -- the free stack and the LRU -------------------------------------------------------

BOOST_AUTO_TEST_CASE(check_catches_a_block_twice_on_the_free_stack) {
  auto& fs = access::free_blocks(*pool);
  fs.push(fs.ids().front());
  expect_broken("is on the free stack twice or out of range");
}

BOOST_AUTO_TEST_CASE(check_catches_a_block_on_two_lists) {
  access::free_blocks(*pool).push(lru[0]);
  expect_broken("block " + std::to_string(lru[0]) + " is on two lists");
}

BOOST_AUTO_TEST_CASE(check_catches_a_block_on_the_wrong_lru_level) {
  meta(lru[0]).level = static_cast<std::uint8_t>(meta(lru[0]).level + 1);
  expect_broken("block " + std::to_string(lru[0]) + " is on the wrong LRU level");
}

BOOST_AUTO_TEST_CASE(check_catches_an_lru_level_size_that_is_not_its_length) {
  auto level = meta(lru[0]).level;
  ++access::lru_size(*pool, level);
  expect_broken("LRU level " + std::to_string(level)
                + ": 2 blocks listed, its size says 3");
}

BOOST_AUTO_TEST_CASE(check_catches_an_lru_total_that_is_not_the_sum_of_its_levels) {
  ++access::lru_total(*pool);
  expect_broken("2 blocks on the LRU levels, its size says 3");
}

BOOST_AUTO_TEST_CASE(check_catches_an_lru_prev_link_that_is_wrong) {
  // 3's blocks were released last first: lru[1] is at the head, then lru[0].
  access::lru_prev(*pool)[lru[0]] = lru[0];
  expect_broken("links back to " + std::to_string(lru[0]) + ", not to "
                + std::to_string(lru[1]));
}

BOOST_AUTO_TEST_SUITE_END()
