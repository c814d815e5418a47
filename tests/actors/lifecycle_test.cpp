// A request's life through the manager and its handle actor: extend, append,
// free (fork with copy-on-write: fork_test.cpp; the device actor's own
// messages: device_actor_test.cpp).
#include "fixture.hpp"

#include <caf/all.hpp>

using namespace kvactor;
using namespace kvactor::test;

BOOST_FIXTURE_TEST_SUITE(lifecycle, cache_fixture)

// -- extend and append -----------------------------------------------------------

BOOST_AUTO_TEST_CASE(extend_through_the_manager_adds_blocks_as_tokens_need_them) {
  auto a = allocate(1, 3);
  BOOST_REQUIRE(a);
  auto t = extend(1, 1); // 4 tokens: still one block
  BOOST_REQUIRE(t);
  BOOST_TEST(t->num_tokens == 4u);
  BOOST_TEST(t->blocks == a->table.blocks);
  t = extend(1, 1); // 5: a second block
  BOOST_REQUIRE(t);
  BOOST_TEST(t->num_tokens == 5u);
  BOOST_REQUIRE(t->num_blocks() == 2u);
  BOOST_TEST(t->blocks[0] == a->table.blocks[0]);
  t = extend(1, 11); // 16: four blocks
  BOOST_REQUIRE(t);
  BOOST_TEST(t->num_tokens == 16u);
  BOOST_TEST(t->num_blocks() == 4u);
  t = extend(1, 0); // nothing
  BOOST_REQUIRE(t);
  BOOST_TEST(t->num_tokens == 16u);
  BOOST_TEST(t->num_blocks() == 4u);
  BOOST_TEST(value_or(table(1), block_table{}) == *t);
  BOOST_TEST(used_blocks() == 4u);
  // From an empty request too.
  BOOST_REQUIRE(allocate(2, 0));
  t = extend(2, 9);
  BOOST_REQUIRE(t);
  BOOST_TEST(t->num_blocks() == 3u);
  BOOST_TEST(used_blocks() == 7u);
}

BOOST_AUTO_TEST_CASE(the_handle_actor_extends_appends_and_reports_like_the_manager) {
  auto a = allocate(1, 2, 64);
  BOOST_REQUIRE(a);
  auto& h = a->handle;
  BOOST_TEST(value_or(handle_table(h), block_table{}) == a->table);
  auto t = handle_extend(h, 3);
  BOOST_REQUIRE(t);
  BOOST_TEST(t->num_tokens == 5u);
  BOOST_TEST(t->num_blocks() == 2u);
  t = handle_append(h, make_tokens(4, 1));
  BOOST_REQUIRE(t);
  BOOST_TEST(t->num_tokens == 9u);
  BOOST_TEST(t->num_blocks() == 3u);
  BOOST_TEST(value_or(table(1), block_table{}) == *t);
  BOOST_TEST(value_or(handle_table(h), block_table{}) == *t);
  auto s = handle_stats(h);
  BOOST_REQUIRE(s);
  BOOST_TEST(s->blocks_allocated == 3u);
  BOOST_TEST(s->tokens_stored == 9u);
  BOOST_TEST(s->memory_bytes == 3 * bytes_per_block);
  BOOST_TEST(s->utilization == 9.0 / 12.0);
  BOOST_TEST(s->last_access > 0u);
  auto info = handle_info(h);
  BOOST_REQUIRE(info);
  BOOST_TEST(info->request.id == 1u);
  BOOST_TEST(info->request.max_sequence_length == 64u);
  // The manager's append reaches the same request.
  t = append(1, make_tokens(3, 2));
  BOOST_REQUIRE(t);
  BOOST_TEST(t->num_tokens == 12u);
  BOOST_TEST(t->num_blocks() == 3u);
  // Errors through the handle: too long, bad token ids.
  BOOST_TEST(outcome(handle_extend(h, 53)) == "exceeds_max_sequence_length");
  BOOST_TEST(outcome(handle_append(h, {1, -2})) == "invalid_request");
  BOOST_TEST(outcome(append(1, {-1})) == "invalid_request");
  BOOST_TEST(value_or(handle_table(h), block_table{}).num_tokens == 12u);
  BOOST_TEST(outcome(handle_extend(h, 52)) == "ok");
}

BOOST_AUTO_TEST_CASE(extend_past_max_sequence_length_fails_and_changes_nothing) {
  auto a = allocate(1, 6, 8);
  BOOST_REQUIRE(a);
  auto before = stats();
  BOOST_TEST(outcome(extend(1, 3)) == "exceeds_max_sequence_length");
  BOOST_TEST(outcome(append(1, make_tokens(3, 1))) == "exceeds_max_sequence_length");
  BOOST_TEST(outcome(extend(1, std::uint64_t{1} << 63)) == "exceeds_max_sequence_length");
  BOOST_TEST(outcome(extend(1, ~std::uint64_t{0})) == "exceeds_max_sequence_length");
  auto after = stats();
  BOOST_REQUIRE(before && after);
  BOOST_TEST(after->free_blocks == before->free_blocks);
  BOOST_TEST(value_or(table(1), block_table{}) == a->table);
  auto t = extend(1, 2); // exactly max_sequence_length
  BOOST_REQUIRE(t);
  BOOST_TEST(t->num_tokens == 8u);
  BOOST_TEST(outcome(extend(1, 1)) == "exceeds_max_sequence_length");
}

BOOST_AUTO_TEST_CASE(extend_of_an_unknown_request_fails_with_unknown_request) {
  BOOST_TEST(outcome(extend(5, 1)) == "unknown_request");
  BOOST_TEST(outcome(append(5, {1})) == "unknown_request");
  BOOST_REQUIRE(allocate(5, 1));
  BOOST_REQUIRE(free(5));
  BOOST_TEST(outcome(extend(5, 1)) == "unknown_request");
  BOOST_TEST(used_blocks() == 0u);
}

BOOST_AUTO_TEST_CASE(extend_without_free_blocks_fails_and_changes_nothing) {
  auto a = allocate(1, 246, 1000); // 62 blocks, 2 tokens of room
  BOOST_REQUIRE(a);
  BOOST_REQUIRE(allocate(2, 4, 1000)); // 1 block: 1 left
  auto before = stats();
  BOOST_TEST(outcome(extend(1, 7)) == "out_of_blocks"); // needs 2 blocks
  auto after = stats();
  BOOST_REQUIRE(before && after);
  BOOST_TEST(after->free_blocks == before->free_blocks);
  BOOST_TEST(value_or(table(1), block_table{}) == a->table);
  auto t = extend(1, 6); // one block: fits
  BOOST_REQUIRE(t);
  BOOST_TEST(t->num_blocks() == 63u);
  BOOST_TEST(outcome(extend(1, 1)) == "out_of_blocks");
  // Past the pool on its own: no wait would help.
  BOOST_REQUIRE(free(2));
  BOOST_TEST(outcome(extend(1, 9)) == "exceeds_capacity");
  BOOST_TEST(value_or(table(1), block_table{}).num_blocks() == 63u);
}

BOOST_AUTO_TEST_CASE(append_fills_blocks_that_a_later_prompt_hits) {
  auto prompt = make_tokens(6, 9);
  auto generated = make_tokens(6, 10);
  auto a = allocate(make_prompt_request(cfg, 1, prompt));
  BOOST_REQUIRE(a);
  auto t = append(1, generated);
  BOOST_REQUIRE(t);
  BOOST_REQUIRE(t->num_blocks() == 3u);
  // A prompt continuing the whole sequence finds all three blocks.
  auto all = prompt;
  all.insert(all.end(), generated.begin(), generated.end());
  all.push_back(1);
  auto b = allocate(make_prompt_request(cfg, 2, all));
  BOOST_REQUIRE(b);
  BOOST_REQUIRE(b->table.num_blocks() == 4u);
  for (int i = 0; i < 3; ++i)
    BOOST_TEST(b->table.blocks[i] == t->blocks[i]);
  // The blocks stay findable after both ended.
  BOOST_REQUIRE(free(1));
  BOOST_REQUIRE(free(2));
  auto s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->cached_blocks == 3u);
  auto c = allocate(make_prompt_request(cfg, 3, all));
  BOOST_REQUIRE(c);
  for (int i = 0; i < 3; ++i)
    BOOST_TEST(c->table.blocks[i] == t->blocks[i]);
  // Unnamed tokens end the chain: nothing after them is findable.
  BOOST_REQUIRE(allocate(make_prompt_request(cfg, 4, make_tokens(6, 20))));
  BOOST_REQUIRE(extend(4, 2));
  BOOST_REQUIRE(append(4, make_tokens(8, 21)));
  auto probe = make_tokens(6, 20);
  probe.resize(16, 0);
  auto d = allocate(make_prompt_request(cfg, 5, probe));
  BOOST_REQUIRE(d);
  auto t4 = table(4);
  BOOST_REQUIRE(t4);
  BOOST_TEST(d->table.blocks[0] == t4->blocks[0]);
  BOOST_TEST(d->table.blocks[1] != t4->blocks[1]);
}

// -- free ------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(free_returns_blocks_and_keeps_hashed_full_blocks_cached) {
  auto a = allocate(make_prompt_request(cfg, 1, make_tokens(10, 4)));
  BOOST_REQUIRE(a);
  BOOST_REQUIRE(allocate(2, 7));
  BOOST_TEST(used_blocks() == 5u);
  BOOST_TEST(value_or(free(1), 0u) == 3u);
  auto s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->free_blocks == 62u);
  BOOST_TEST(s->cached_blocks == 2u); // the prompt's two full blocks
  BOOST_TEST(s->active_caches == 1u);
  BOOST_TEST(value_or(free(2), 0u) == 2u);
  s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->free_blocks == 64u);
  BOOST_TEST(s->cached_blocks == 2u);
  BOOST_TEST(s->used_memory_bytes == 0u);
  BOOST_TEST(s->active_caches == 0u);
}

BOOST_AUTO_TEST_CASE(second_free_fails_with_unknown_request) {
  BOOST_REQUIRE(allocate(1, 5));
  BOOST_TEST(outcome(free(1)) == "ok");
  BOOST_TEST(outcome(free(1)) == "unknown_request");
  BOOST_TEST(outcome(free(2)) == "unknown_request");
  BOOST_TEST(outcome(lookup(1)) == "unknown_request");
}

BOOST_AUTO_TEST_CASE(the_handle_actor_terminates_after_free_and_refuses_messages) {
  auto a = allocate(1, 5);
  BOOST_REQUIRE(a);
  self->monitor(a->handle);
  BOOST_REQUIRE(free(1));
  run();
  BOOST_REQUIRE(received_down(self, a->handle.address()));
  // A request to the dead actor bounces with an error.
  caf::error err;
  bool answered = false;
  self->request(a->handle, caf::infinite, table_atom::value)
    .receive([&](block_table&) { answered = true; },
             [&](caf::error& e) { err = std::move(e); });
  BOOST_TEST(!answered);
  BOOST_TEST(outcome(err) == "request_receiver_down");
  BOOST_TEST(outcome(handle_extend(a->handle, 1)) != "ok");
  BOOST_TEST(used_blocks() == 0u);
}

BOOST_AUTO_TEST_CASE(free_through_the_handle_actor_ends_the_request) {
  auto a = allocate(1, 9);
  BOOST_REQUIRE(a);
  self->monitor(a->handle);
  BOOST_TEST(value_or(handle_free(a->handle), 0u) == 3u);
  BOOST_TEST(received_down(self, a->handle.address()));
  BOOST_TEST(outcome(lookup(1)) == "unknown_request");
  BOOST_TEST(used_blocks() == 0u);
}

BOOST_AUTO_TEST_CASE(a_stale_handle_does_not_touch_a_new_request_with_the_same_id) {
  auto a = allocate(1, 4);
  BOOST_REQUIRE(a);
  BOOST_REQUIRE(free(1));
  auto b = allocate(1, 8);
  BOOST_REQUIRE(b);
  // The old handle is gone: nothing it could be asked reaches request 1.
  BOOST_TEST(outcome(handle_extend(a->handle, 4)) != "ok");
  BOOST_TEST(outcome(handle_free(a->handle)) != "ok");
  BOOST_TEST(value_or(table(1), block_table{}) == b->table);
  BOOST_TEST(outcome(lookup(1)) == "ok");
}

BOOST_AUTO_TEST_SUITE_END()
