// Pressure policy and its messages: swapping to the host tier through the
// manager (bytes checked), pinned prefixes, KV-event subscriptions; and
// replies that must arrive when a request ends while one of its messages
// is in flight. The supervisor's preemption: critical_test.cpp.
#include "fixture.hpp"

#include <chrono>
#include <thread>

#include <algorithm>

#include <caf/all.hpp>

using namespace kvactor;
using namespace kvactor::test;

namespace {

struct swap_fixture : cache_fixture {
  swap_fixture() : cache_fixture(host_tier_config()) {
  }

  caf::expected<std::uint32_t> swap_out(request_id id) {
    return ask<std::uint32_t>(mgr, swap_out_atom::value, id);
  }
  caf::expected<block_table> swap_in(request_id id) {
    return ask<block_table>(mgr, swap_in_atom::value, id);
  }
};

cache_config pin_config() {
  auto c = small_config();
  c.max_pinned_blocks = 4;
  return c;
}

struct pin_fixture : cache_fixture {
  pin_fixture() : cache_fixture(pin_config()) {
  }

  caf::expected<std::uint32_t> pin(std::string tenant,
                                   std::vector<token_id> tokens,
                                   std::uint64_t ttl_ms) {
    return ask<std::uint32_t>(mgr, pin_atom::value, std::move(tenant),
                              std::move(tokens), ttl_ms, std::uint64_t{0});
  }
};

std::vector<kv_event_batch> kv_batches(caf::scoped_actor& sub) {
  std::vector<kv_event_batch> out;
  bool more = true;
  while (more)
    sub->receive([&](kv_event_atom, kv_event_batch& b) { out.push_back(b); },
                 caf::after(std::chrono::seconds(0)) >> [&] { more = false; });
  return out;
}

} // namespace

// -- swapping -----------------------------------------------------------------------

BOOST_FIXTURE_TEST_SUITE(swapping, swap_fixture)

BOOST_AUTO_TEST_CASE(swap_out_and_back_in_through_the_manager_keeps_the_bytes) {
  auto a = allocate(1, 7);
  BOOST_REQUIRE(a);
  for (std::uint32_t layer = 0; layer < 2; ++layer)
    BOOST_REQUIRE(write_tokens(a->table, layer, 0, 7, 21));
  auto k0 = gather(0, a->table);
  auto k1 = gather(1, a->table);
  BOOST_REQUIRE(k0 && k1);
  BOOST_TEST(value_or(swap_out(1), 0u) == 2u);
  auto s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->free_blocks == 64u);
  BOOST_TEST(s->host_total_blocks == 8u);
  BOOST_TEST(s->host_free_blocks == 6u);
  BOOST_TEST(s->swap_out_count == 1u);
  auto info = lookup(1);
  BOOST_REQUIRE(info);
  BOOST_TEST(info->second.swapped);
  // Swapped out: it cannot grow, and cannot be swapped out again.
  BOOST_TEST(outcome(extend(1, 1)) == "invalid_request");
  BOOST_TEST(outcome(swap_out(1)) == "invalid_request");
  // Another request takes the freed blocks and overwrites them.
  auto b = allocate(2, 8);
  BOOST_REQUIRE(b);
  BOOST_REQUIRE(write_tokens(b->table, 0, 0, 8, 77));
  auto t = swap_in(1);
  BOOST_REQUIRE_MESSAGE(t, outcome(t));
  BOOST_TEST(t->num_tokens == 7u);
  BOOST_TEST(t->num_blocks() == 2u);
  BOOST_TEST(value_or(table(1), block_table{}) == *t);
  auto back0 = gather(0, *t);
  auto back1 = gather(1, *t);
  BOOST_REQUIRE(back0 && back1);
  BOOST_TEST(back0->keys == k0->keys);
  BOOST_TEST(back0->values == k0->values);
  BOOST_TEST(back1->keys == k1->keys);
  BOOST_TEST(back1->values == k1->values);
  s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->host_free_blocks == 8u);
  BOOST_TEST(s->swap_in_count == 1u);
  BOOST_TEST(!must(lookup(1)).second.swapped);
  // Resident again: it grows.
  BOOST_TEST(outcome(extend(1, 1)) == "ok");
  BOOST_TEST(outcome(swap_in(1)) == "invalid_request");
}

BOOST_AUTO_TEST_CASE(swap_fails_cleanly_for_unknown_requests_and_a_full_host_tier) {
  BOOST_TEST(outcome(swap_out(9)) == "unknown_request");
  BOOST_TEST(outcome(swap_in(9)) == "unknown_request");
  BOOST_REQUIRE(allocate(1, 4 * 6)); // 6 blocks
  BOOST_REQUIRE(allocate(2, 4 * 3)); // 3 blocks
  BOOST_REQUIRE(swap_out(1));
  auto before = stats();
  BOOST_TEST(outcome(swap_out(2)) == "out_of_blocks"); // 2 host blocks left
  auto after = stats();
  BOOST_REQUIRE(before && after);
  BOOST_TEST(after->free_blocks == before->free_blocks);
  BOOST_TEST(after->host_free_blocks == before->host_free_blocks);
  BOOST_TEST(!must(lookup(2)).second.swapped);
  BOOST_TEST(outcome(extend(2, 1)) == "ok");
  // Freeing a swapped request returns its host blocks.
  BOOST_TEST(outcome(free(1)) == "ok");
  auto s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->host_free_blocks == 8u);
  BOOST_TEST(outcome(swap_out(2)) == "ok");
}

BOOST_AUTO_TEST_CASE(swap_in_without_free_device_blocks_fails_and_stays_swapped) {
  BOOST_REQUIRE(allocate(1, 4 * 4));
  BOOST_REQUIRE(swap_out(1));
  BOOST_REQUIRE(allocate(2, 4 * 62)); // 2 blocks left, 1 needs 4
  auto before = stats();
  BOOST_TEST(outcome(swap_in(1)) == "out_of_blocks");
  auto after = stats();
  BOOST_REQUIRE(before && after);
  BOOST_TEST(after->free_blocks == before->free_blocks);
  BOOST_TEST(after->host_free_blocks == before->host_free_blocks);
  BOOST_TEST(value_or(lookup(1), std::make_pair(request_handle_actor{}, request_info{})).second.swapped);
  BOOST_REQUIRE(free(2));
  BOOST_TEST(outcome(swap_in(1)) == "ok");
}

BOOST_AUTO_TEST_CASE(a_swapped_request_cannot_fork_or_grow_but_can_end_every_way) {
  caf::scoped_actor sub{sys};
  subscribe(topic::lifecycle, sub);
  for (request_id id = 1; id <= 3; ++id) {
    BOOST_REQUIRE(allocate(id, 5)); // 2 blocks each
    BOOST_REQUIRE(swap_out(id));
  }
  BOOST_TEST(must(stats()).host_free_blocks == 2u);
  BOOST_TEST(outcome(fork(1, 9)) == "invalid_request");
  step_request req;
  extend_op op;
  op.id = 1;
  op.num_tokens = 1;
  req.extends = {op};
  auto res = step(req);
  BOOST_REQUIRE(res);
  BOOST_REQUIRE(res->failed.size() == 1u);
  BOOST_TEST(outcome(res->failed[0].error) == "invalid_request");
  BOOST_TEST(res->preempted.empty());
  // Ended by free, by preemption, by its handle dying: host blocks return.
  BOOST_REQUIRE(free(1));
  BOOST_REQUIRE(preempt(2));
  auto h3 = lookup(3);
  BOOST_REQUIRE(h3);
  caf::anon_send_exit(h3->first, caf::exit_reason::kill);
  run();
  auto s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->host_free_blocks == 8u);
  BOOST_TEST(s->active_caches == 0u);
  auto ended = ended_events(sub);
  BOOST_REQUIRE(ended.size() == 3u);
  BOOST_TEST(ended[2].reason == end_reason::reclaimed);
}

BOOST_AUTO_TEST_CASE(swapping_a_forked_request_leaves_its_sibling_alone) {
  auto a = allocate(1, 6);
  BOOST_REQUIRE(a);
  BOOST_REQUIRE(write_tokens(a->table, 0, 0, 6, 60));
  BOOST_REQUIRE(fork(1, 2));
  BOOST_TEST(value_or(swap_out(2), 0u) == 2u);
  BOOST_TEST(used_blocks() == 2u); // the parent still holds both
  BOOST_TEST(value_or(table(1), block_table{}) == a->table);
  auto t = swap_in(2);
  BOOST_REQUIRE(t);
  BOOST_TEST(used_blocks() == 4u); // no longer shared
  auto p = gather(0, a->table);
  auto c = gather(0, *t);
  BOOST_REQUIRE(p && c);
  BOOST_TEST(p->keys == c->keys);
  BOOST_TEST(p->values == c->values);
}

BOOST_AUTO_TEST_SUITE_END()

// -- pins -----------------------------------------------------------------------------

BOOST_FIXTURE_TEST_SUITE(pins, pin_fixture)

BOOST_AUTO_TEST_CASE(a_pinned_prefix_is_not_evicted_when_the_pool_runs_short) {
  auto prompt = make_tokens(12, 40);
  BOOST_REQUIRE(allocate(make_prompt_request(cfg, 1, prompt)));
  BOOST_REQUIRE(free(1));
  BOOST_TEST(value_or(pin("", prompt, 600000), 0u) == 3u);
  // 61 blocks are takeable; the pinned three are not.
  BOOST_REQUIRE(allocate(2, 4 * 61));
  BOOST_TEST(outcome(allocate(3, 1)) == "out_of_blocks");
  BOOST_REQUIRE(free(2));
  // The pinned prefix is still found.
  auto longer = prompt;
  longer.push_back(5);
  auto a = allocate(make_prompt_request(cfg, 4, longer));
  BOOST_REQUIRE(a);
  auto s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->prefix_hit_tokens == 12u);
  // Errors: an unknown tenant, more than max_pinned_blocks.
  BOOST_TEST(outcome(pin("nobody", prompt, 1000)) == "unknown_tenant");
  auto other = make_tokens(8, 41);
  BOOST_REQUIRE(allocate(make_prompt_request(cfg, 5, other)));
  BOOST_TEST(outcome(pin("", other, 1000)) == "quota_exceeded");
}

// With GC only on demand nothing else expires pins: the pool lets a pin
// whose time ran out go before an operation that needs its blocks.
BOOST_AUTO_TEST_CASE(an_expired_pin_never_keeps_blocks_from_an_allocation) {
  auto prompt = make_tokens(12, 40);
  BOOST_REQUIRE(allocate(make_prompt_request(cfg, 1, prompt)));
  BOOST_REQUIRE(free(1));
  BOOST_TEST(value_or(pin("", prompt, 1), 0u) == 3u); // 1 ms
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  BOOST_REQUIRE(allocate(2, 4 * 64)); // every block, the pinned three too
}

// Nor from a pin: an expired pin counts against max_pinned_blocks (4) no
// longer, with or without a GC pass since.
BOOST_AUTO_TEST_CASE(an_expired_pin_never_counts_against_the_pin_quota) {
  auto prompt = make_tokens(12, 40);
  auto other = make_tokens(12, 41);
  BOOST_REQUIRE(allocate(make_prompt_request(cfg, 1, prompt)));
  BOOST_REQUIRE(free(1));
  BOOST_REQUIRE(allocate(make_prompt_request(cfg, 2, other)));
  BOOST_REQUIRE(free(2));
  BOOST_TEST(value_or(pin("", prompt, 1), 0u) == 3u); // 1 ms
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto n = pin("", other, 600000); // the first thing after the expiry
  BOOST_TEST(value_or(n, 0u) == 3u, outcome(n)); // 3 + 3 > 4 if counted
}

BOOST_AUTO_TEST_SUITE_END()

// -- KV events and races ----------------------------------------------------------------

BOOST_FIXTURE_TEST_SUITE(events_and_races, cache_fixture)

BOOST_AUTO_TEST_CASE(kv_event_subscribers_see_stored_and_removed_blocks_in_numbered_batches) {
  caf::scoped_actor sub{sys};
  subscribe(topic::kv_events, sub);
  auto prompt = make_tokens(9, 50); // two full blocks
  auto a = allocate(make_prompt_request(cfg, 1, prompt));
  BOOST_REQUIRE(a);
  auto batches = kv_batches(sub);
  BOOST_REQUIRE(batches.size() == 1u);
  BOOST_TEST(batches[0].seq == 1u);
  BOOST_TEST(batches[0].block_size == 4u);
  auto evs = batches[0].events; // a copy: batches is reassigned below
  BOOST_REQUIRE(evs.size() == 2u);
  BOOST_TEST(evs[0].stored);
  BOOST_TEST(evs[0].block == a->table.blocks[0]);
  BOOST_TEST(evs[0].parent_hash == 0u);
  BOOST_TEST(evs[1].block == a->table.blocks[1]);
  BOOST_TEST(evs[1].parent_hash == evs[0].block_hash);
  BOOST_TEST(evs[0].tenant == "default");
  BOOST_TEST(evs[0].token_ids == std::vector<token_id>(prompt.begin(), prompt.begin() + 4));
  // Appending a full block stores one more; evicting removes them.
  BOOST_REQUIRE(append(1, make_tokens(3, 51)));
  batches = kv_batches(sub);
  BOOST_REQUIRE(batches.size() == 1u);
  BOOST_TEST(batches[0].seq == 2u);
  BOOST_REQUIRE(batches[0].events.size() == 1u);
  BOOST_TEST(batches[0].events[0].parent_hash == evs[1].block_hash);
  BOOST_REQUIRE(free(1));
  BOOST_TEST(kv_batches(sub).empty()); // cached: still in the index
  BOOST_TEST(value_or(ask<std::uint32_t>(pool, evict_atom::value, std::uint32_t{10}), 0u) == 3u);
  batches = kv_batches(sub);
  BOOST_REQUIRE(batches.size() == 1u);
  BOOST_TEST(batches[0].seq == 3u);
  BOOST_TEST(batches[0].events.size() == 3u);
  for (auto& ev : batches[0].events)
    BOOST_TEST(!ev.stored);
  unsubscribe(topic::kv_events, sub);
  BOOST_REQUIRE(allocate(make_prompt_request(cfg, 2, prompt)));
  BOOST_TEST(kv_batches(sub).empty());
  // Back again: what went unheard meanwhile counts as one batch (seq 4),
  // so the next one it hears shows the gap.
  subscribe(topic::kv_events, sub);
  BOOST_REQUIRE(free(2));
  BOOST_TEST(value_or(ask<std::uint32_t>(pool, evict_atom::value, std::uint32_t{10}), 0u) == 2u);
  batches = kv_batches(sub);
  BOOST_REQUIRE(batches.size() == 1u);
  BOOST_TEST(batches[0].seq == 5u);
  BOOST_TEST(batches[0].events.size() == 2u);
}

BOOST_AUTO_TEST_CASE(a_first_subscriber_after_index_changes_starts_past_seq_one) {
  // Nobody listened while the prompt was indexed: no batch was numbered
  // then, but the subscriber must still see it lacks the picture.
  auto prompt = make_tokens(9, 50);
  BOOST_REQUIRE(allocate(make_prompt_request(cfg, 1, prompt)));
  caf::scoped_actor sub{sys};
  subscribe(topic::kv_events, sub);
  BOOST_REQUIRE(append(1, make_tokens(3, 51))); // one more full block
  auto batches = kv_batches(sub);
  BOOST_REQUIRE(batches.size() == 1u);
  BOOST_TEST(batches[0].seq == 2u);
  BOOST_TEST(batches[0].events.size() == 1u);
  // A second subscriber joins where the count is; the first sees no gap.
  caf::scoped_actor late{sys};
  subscribe(topic::kv_events, late);
  BOOST_REQUIRE(free(1));
  BOOST_TEST(value_or(ask<std::uint32_t>(pool, evict_atom::value, std::uint32_t{10}), 0u) == 3u);
  batches = kv_batches(sub);
  BOOST_REQUIRE(batches.size() == 1u);
  BOOST_TEST(batches[0].seq == 3u);
  auto heard = kv_batches(late);
  BOOST_REQUIRE(heard.size() == 1u);
  BOOST_TEST(heard[0].seq == 3u);
}

BOOST_AUTO_TEST_CASE(an_extend_racing_a_preemption_is_still_answered) {
  auto a = allocate(1, 6);
  BOOST_REQUIRE(a);
  auto f = fork(1, 2);
  BOOST_REQUIRE(f);
  // The child's extend needs a copy-on-write (pool, then device); the
  // preemption from another actor ends the request meanwhile.
  caf::scoped_actor other{sys};
  self->send(f->handle, extend_atom::value, std::uint64_t{1});
  other->send(mgr, preempt_atom::value, request_id{2});
  run();
  std::string got = "no reply";
  self->receive([&](block_table&) { got = "ok"; },
                [&](caf::error& err) { got = outcome(err); },
                caf::after(std::chrono::seconds(0)) >> [] {});
  BOOST_TEST_MESSAGE("extend racing a preemption: " << got);
  BOOST_TEST(got != "no reply");
  std::string preempted = "no reply";
  other->receive([&](std::uint32_t) { preempted = "ok"; },
                 [&](caf::error& err) { preempted = outcome(err); },
                 caf::after(std::chrono::seconds(0)) >> [] {});
  BOOST_TEST(preempted == "ok");
  BOOST_TEST(outcome(lookup(2)) == "unknown_request");
  BOOST_TEST(used_blocks() == 2u);
}

// The pool hands request 2 a fresh block C for its copy of shared block B;
// a preemption ends request 2 while the copy may still be pending, and
// request 3 is allocated and written. C (and B) stay held until the device
// copied, so request 3 never gets C while a copy can still land in it.
BOOST_AUTO_TEST_CASE(a_copy_on_write_cut_short_by_a_preemption_leaves_a_reused_block_alone) {
  auto a = allocate(1, 6);
  BOOST_REQUIRE(a);
  BOOST_REQUIRE(write_tokens(a->table, 0, 0, 6, 1));
  auto f = fork(1, 2);
  BOOST_REQUIRE(f);
  auto held = f->handle.address();
  caf::scoped_actor other{sys};
  self->send(f->handle, extend_atom::value, std::uint64_t{1});
  sched.run_once(); // the handle asks the pool
  other->send(mgr, preempt_atom::value, request_id{2});
  run_except(held);
  self->send(mgr, allocate_atom::value, make_request(cfg, 3, 4));
  run_except(held);
  block_table t3;
  self->receive([&](request_handle_actor&, block_table& t) { t3 = t; },
                caf::after(std::chrono::seconds(0)) >> [] {});
  BOOST_REQUIRE(t3.num_blocks() == 1u);
  BOOST_TEST(t3.blocks[0] != a->table.blocks[0]);
  BOOST_TEST(t3.blocks[0] != a->table.blocks[1]);
  slot_write w;
  w.layer = 0;
  for (std::uint64_t i = 0; i < 4; ++i)
    w.slots.push_back(static_cast<std::int64_t>(t3.slot(i)));
  w.keys.assign(4 * row_bytes(), 0xAB);
  w.values.assign(4 * row_bytes(), 0xCD);
  self->send(cache.device, write_atom::value, w);
  run_except(held);
  self->receive([](std::uint32_t) {}, caf::after(std::chrono::seconds(0)) >> [] {});
  // Now the held handle runs: it asks the device for its copy.
  run();
  auto g = gather(0, t3);
  BOOST_REQUIRE(g);
  BOOST_TEST((g->keys == w.keys && g->values == w.values),
             "request 3's block was overwritten by request 2's stale copy");
}

BOOST_AUTO_TEST_CASE(handle_stats_racing_a_free_is_still_answered) {
  auto a = allocate(1, 6);
  BOOST_REQUIRE(a);
  caf::scoped_actor other{sys};
  self->send(a->handle, stats_atom::value);
  other->send(mgr, free_atom::value, request_id{1});
  run();
  std::string got = "no reply";
  self->receive([&](cache_handle_stats&) { got = "ok"; },
                [&](caf::error& err) { got = outcome(err); },
                caf::after(std::chrono::seconds(0)) >> [] {});
  BOOST_TEST_MESSAGE("stats racing a free: " << got);
  BOOST_TEST(got != "no reply");
  BOOST_TEST(used_blocks() == 0u);
}

BOOST_AUTO_TEST_CASE(pinning_is_refused_when_disabled) {
  auto prompt = make_tokens(8, 42); // max_pinned_blocks is 0 here
  BOOST_REQUIRE(allocate(make_prompt_request(cfg, 1, prompt)));
  BOOST_TEST(outcome(ask<std::uint32_t>(mgr, pin_atom::value, std::string{},
                                        prompt, std::uint64_t{1000},
                                        std::uint64_t{0}))
             == "quota_exceeded");
}

BOOST_AUTO_TEST_CASE(step_preemptions_reach_lifecycle_subscribers_but_send_no_owner_notice) {
  // A step's preemptions are the stepping scheduler's decision: the owner
  // hears of them through the lifecycle topic, not by a notice.
  BOOST_REQUIRE(allocate(1, 4 * 62));
  BOOST_REQUIRE(allocate(2, 8));
  caf::scoped_actor sub{sys};
  subscribe(topic::lifecycle, sub);
  step_request req;
  extend_op a;
  a.id = 1;
  a.num_tokens = 4;
  extend_op b;
  b.id = 2;
  b.num_tokens = 1;
  req.extends = {a, b};
  BOOST_REQUIRE(step(req));
  auto ended = ended_events(sub);
  BOOST_REQUIRE(ended.size() == 1u);
  BOOST_TEST(ended[0].id == 2u);
  BOOST_TEST(ended[0].reason == end_reason::preempted);
  BOOST_TEST(preempt_notices(self).empty());
}

BOOST_AUTO_TEST_SUITE_END()
