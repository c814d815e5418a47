// A request forked through the manager and its handle actor: the child shares
// every block, a write into a shared block copies it first (bytes checked on
// the host backend), and a copy without a free block changes nothing.
#include "fixture.hpp"

#include <caf/all.hpp>

using namespace kvactor;
using namespace kvactor::test;

BOOST_FIXTURE_TEST_SUITE(lifecycle, cache_fixture)

BOOST_AUTO_TEST_CASE(fork_shares_every_block_of_the_parent) {
  auto a = allocate(1, 10);
  BOOST_REQUIRE(a);
  auto before = stats();
  auto f = fork(1, 2);
  BOOST_REQUIRE(f);
  BOOST_TEST(f->table == a->table);
  BOOST_TEST((f->handle != a->handle));
  auto after = stats();
  BOOST_REQUIRE(before && after);
  BOOST_TEST(after->free_blocks == before->free_blocks);
  BOOST_TEST(after->active_caches == 2u);
  BOOST_TEST(after->allocation_count == before->allocation_count + 1);
  auto info = lookup(2);
  BOOST_REQUIRE(info);
  BOOST_TEST(info->second.request.id == 2u);
  BOOST_TEST(info->second.request.max_sequence_length == 256u);
  // Ending the parent leaves the child's blocks in use.
  BOOST_TEST(value_or(free(1), 99) == 0u);
  BOOST_TEST(used_blocks() == 3u);
  BOOST_TEST(value_or(table(2), block_table{}) == a->table);
  BOOST_TEST(value_or(free(2), 99) == 3u);
  BOOST_TEST(used_blocks() == 0u);
}

BOOST_AUTO_TEST_CASE(fork_of_an_unknown_parent_or_onto_a_live_id_fails) {
  BOOST_REQUIRE(allocate(1, 5));
  BOOST_REQUIRE(allocate(2, 5));
  auto before = stats();
  BOOST_TEST(outcome(fork(3, 4)) == "unknown_request");
  BOOST_TEST(outcome(fork(1, 2)) == "duplicate_request");
  BOOST_TEST(outcome(fork(1, 1)) == "duplicate_request");
  auto after = stats();
  BOOST_REQUIRE(before && after);
  BOOST_TEST(after->active_caches == before->active_caches);
  BOOST_TEST(after->allocation_count == before->allocation_count);
  BOOST_TEST(after->free_blocks == before->free_blocks);
  BOOST_TEST(outcome(lookup(4)) == "unknown_request");
}

BOOST_AUTO_TEST_CASE(extend_into_a_shared_block_after_fork_copies_on_write) {
  auto a = allocate(1, 6); // blocks [x, y], y half full
  BOOST_REQUIRE(a);
  for (std::uint32_t layer = 0; layer < 2; ++layer)
    BOOST_REQUIRE(value_or(write_tokens(a->table, layer, 0, 6, 1), 0u) == 6u);
  auto parent_before = gather(0, a->table);
  BOOST_REQUIRE(parent_before);
  auto f = fork(1, 2);
  BOOST_REQUIRE(f);
  BOOST_REQUIRE(f->table == a->table);
  // The child's append goes into y, which the parent shares: y is copied.
  auto t = extend(2, 1);
  BOOST_REQUIRE(t);
  BOOST_REQUIRE(t->num_blocks() == 2u);
  BOOST_TEST(t->num_tokens == 7u);
  BOOST_TEST(t->blocks[0] == a->table.blocks[0]);
  BOOST_TEST(t->blocks[1] != a->table.blocks[1]);
  BOOST_TEST(value_or(table(1), block_table{}) == a->table);
  BOOST_TEST(used_blocks() == 3u);
  auto s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->cow_copies == 1u);
  // The copy holds the parent's six tokens, every layer, K and V.
  for (std::uint32_t layer = 0; layer < 2; ++layer) {
    auto p = gather(layer, a->table);
    auto six = *t;
    six.num_tokens = 6;
    auto c = gather(layer, six);
    BOOST_REQUIRE(p && c);
    BOOST_TEST(p->keys == c->keys);
    BOOST_TEST(p->values == c->values);
    BOOST_TEST(p->keys.size() == 6 * row_bytes());
  }
  // Writing the child's new token leaves the parent's bytes alone.
  for (std::uint32_t layer = 0; layer < 2; ++layer)
    BOOST_REQUIRE(value_or(write_tokens(*t, layer, 6, 1, 7), 0u) == 1u);
  auto parent_after = gather(0, a->table);
  BOOST_REQUIRE(parent_after);
  BOOST_TEST(parent_after->keys == parent_before->keys);
  BOOST_TEST(parent_after->values == parent_before->values);
  // y is the parent's alone now: its append copies nothing.
  auto tp = extend(1, 1);
  BOOST_REQUIRE(tp);
  BOOST_TEST(tp->blocks == a->table.blocks);
  s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->cow_copies == 1u);
  BOOST_TEST(used_blocks() == 3u);
}

BOOST_AUTO_TEST_CASE(append_through_the_handle_into_a_shared_block_copies_on_write) {
  auto a = allocate(make_prompt_request(cfg, 1, make_tokens(5, 3)));
  BOOST_REQUIRE(a);
  for (std::uint32_t layer = 0; layer < 2; ++layer)
    BOOST_REQUIRE(write_tokens(a->table, layer, 0, 5, 4));
  auto f = fork(1, 2);
  BOOST_REQUIRE(f);
  auto t = handle_append(f->handle, make_tokens(2, 5));
  BOOST_REQUIRE(t);
  BOOST_REQUIRE(t->num_blocks() == 2u);
  BOOST_TEST(t->blocks[0] == a->table.blocks[0]);
  BOOST_TEST(t->blocks[1] != a->table.blocks[1]);
  auto five = *t;
  five.num_tokens = 5;
  auto p = gather(1, a->table);
  auto c = gather(1, five);
  BOOST_REQUIRE(p && c);
  BOOST_TEST(p->keys == c->keys);
  BOOST_TEST(p->values == c->values);
}

BOOST_AUTO_TEST_CASE(extend_at_a_block_boundary_after_fork_copies_nothing) {
  auto a = allocate(1, 8);
  BOOST_REQUIRE(a);
  BOOST_REQUIRE(fork(1, 2));
  auto t = extend(2, 1);
  BOOST_REQUIRE(t);
  BOOST_REQUIRE(t->num_blocks() == 3u);
  BOOST_TEST(t->blocks[0] == a->table.blocks[0]);
  BOOST_TEST(t->blocks[1] == a->table.blocks[1]);
  auto s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->cow_copies == 0u);
  BOOST_TEST(used_blocks() == 3u);
}

BOOST_AUTO_TEST_CASE(copy_on_write_without_a_free_block_fails_and_changes_nothing) {
  auto a = allocate(1, 250, 1000); // 63 blocks, the last one half full
  BOOST_REQUIRE(a);
  BOOST_REQUIRE(allocate(9, 4)); // the 64th
  BOOST_REQUIRE(fork(1, 2));
  BOOST_TEST(outcome(extend(2, 1)) == "out_of_blocks");
  BOOST_TEST(value_or(table(2), block_table{}) == a->table);
  BOOST_REQUIRE(free(9));
  auto t = extend(2, 1);
  BOOST_REQUIRE(t);
  BOOST_TEST(t->blocks.back() != a->table.blocks.back());
}

BOOST_AUTO_TEST_SUITE_END()
