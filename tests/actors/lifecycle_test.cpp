// A request's life through the manager and its handle actor: extend, append,
// fork with copy-on-write (bytes checked on the host backend), free; and the
// device actor's own messages.
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

// -- fork and copy-on-write ---------------------------------------------------------

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

// -- the device actor -------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(device_actor_writes_gathers_copies_and_rejects_bad_batches) {
  auto info = ask<storage_info>(cache.device, info_atom::value);
  BOOST_REQUIRE(info);
  BOOST_TEST(info->kind == "host");
  BOOST_TEST(info->num_blocks == 64u);
  BOOST_TEST(info->bytes_per_block == bytes_per_block);
  BOOST_TEST((info->device == device{device_kind::cpu, 0}));
  auto a = allocate(1, 8);
  auto b = allocate(2, 8);
  BOOST_REQUIRE(a && b);
  BOOST_REQUIRE(value_or(write_tokens(a->table, 1, 0, 8, 3), 0u) == 8u);
  // Copy a's blocks over b's: b then reads like a.
  std::vector<block_copy> pairs{{a->table.blocks[0], b->table.blocks[0]},
                                {a->table.blocks[1], b->table.blocks[1]}};
  BOOST_TEST(value_or(ask<std::uint32_t>(cache.device, copy_atom::value, pairs), 0u) == 2u);
  auto ga = gather(1, a->table);
  auto gb = gather(1, b->table);
  BOOST_REQUIRE(ga && gb);
  BOOST_TEST(ga->keys == gb->keys);
  BOOST_TEST(ga->values == gb->values);
  BOOST_TEST(ga->num_tokens == 8u);
  BOOST_TEST(ga->layer == 1u);
  // Slots of -1 are skipped, and the reply counts what was written.
  slot_write skip;
  skip.layer = 1;
  skip.slots = {-1, static_cast<std::int64_t>(b->table.slot(0)), -1};
  skip.keys.assign(3 * row_bytes(), 9);
  skip.values.assign(3 * row_bytes(), 9);
  BOOST_TEST(value_or(ask<std::uint32_t>(cache.device, write_atom::value, skip), 9u) == 1u);
  skip.slots = {-1, -1, -1};
  BOOST_TEST(value_or(ask<std::uint32_t>(cache.device, write_atom::value, skip), 9u) == 0u);
  // Bad batches: out-of-range ids, a destination that is also a source,
  // sizes that do not match, too many tokens to gather, a bad layer.
  std::vector<block_copy> bad_ids{{0, 64}};
  BOOST_TEST(outcome(ask<std::uint32_t>(cache.device, copy_atom::value, bad_ids)) == "invalid_request");
  std::vector<block_copy> chained{{0, 1}, {1, 2}};
  BOOST_TEST(outcome(ask<std::uint32_t>(cache.device, copy_atom::value, chained)) == "invalid_request");
  slot_write short_write;
  short_write.slots = {0, 1};
  short_write.keys.resize(row_bytes());
  short_write.values.resize(2 * row_bytes());
  BOOST_TEST(outcome(ask<std::uint32_t>(cache.device, write_atom::value, short_write)) == "invalid_request");
  slot_write bad_slot;
  bad_slot.slots = {64 * 4};
  bad_slot.keys.resize(row_bytes());
  bad_slot.values.resize(row_bytes());
  BOOST_TEST(outcome(ask<std::uint32_t>(cache.device, write_atom::value, bad_slot)) == "invalid_request");
  BOOST_TEST(outcome(ask<gathered_kv>(cache.device, gather_atom::value, std::uint32_t{0},
                                      a->table.blocks, std::uint64_t{9}))
             == "invalid_request");
  BOOST_TEST(outcome(ask<gathered_kv>(cache.device, gather_atom::value, std::uint32_t{2},
                                      a->table.blocks, std::uint64_t{8}))
             == "invalid_request");
  // No host tier configured: swapping fails.
  std::vector<block_move> moves{{a->table.blocks[0], 0}};
  BOOST_TEST(outcome(ask<std::uint32_t>(cache.device, swap_out_atom::value, moves)) == "invalid_request");
  // A bad batch changed nothing.
  auto ga2 = gather(1, a->table);
  BOOST_REQUIRE(ga2);
  BOOST_TEST(ga2->keys == ga->keys);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_CASE(device_actor_swaps_blocks_out_and_back_byte_for_byte) {
  cache_fixture f{host_tier_config()};
  auto a = f.allocate(1, 8);
  BOOST_REQUIRE(a);
  for (std::uint32_t layer = 0; layer < 2; ++layer)
    BOOST_REQUIRE(f.write_tokens(a->table, layer, 0, 8, 11));
  auto before0 = f.gather(0, a->table);
  auto before1 = f.gather(1, a->table);
  BOOST_REQUIRE(before0 && before1);
  std::vector<block_move> out{{a->table.blocks[0], 5}, {a->table.blocks[1], 2}};
  BOOST_TEST(value_or(f.ask<std::uint32_t>(f.cache.device, swap_out_atom::value, out), 0u) == 2u);
  // Overwrite the device blocks, then swap back into two other blocks.
  BOOST_REQUIRE(f.write_tokens(a->table, 0, 0, 8, 99));
  auto b = f.allocate(2, 8);
  BOOST_REQUIRE(b);
  std::vector<block_move> in{{b->table.blocks[0], 5}, {b->table.blocks[1], 2}};
  BOOST_TEST(value_or(f.ask<std::uint32_t>(f.cache.device, swap_in_atom::value, in), 0u) == 2u);
  auto after0 = f.gather(0, b->table);
  auto after1 = f.gather(1, b->table);
  BOOST_REQUIRE(after0 && after1);
  BOOST_TEST(after0->keys == before0->keys);
  BOOST_TEST(after0->values == before0->values);
  BOOST_TEST(after1->keys == before1->keys);
  BOOST_TEST(after1->values == before1->values);
  std::vector<block_move> bad{{0, 8}};
  BOOST_TEST(outcome(f.ask<std::uint32_t>(f.cache.device, swap_in_atom::value, bad)) == "invalid_request");
}
