// The manager's allocate and its queries (can_alloc, lookup, list, table,
// stats), and what a peer that sends a message matching no handler gets.
#include "fixture.hpp"

#include <set>

#include <caf/all.hpp>

using namespace kvactor;
using namespace kvactor::test;

namespace {

/// The stats fields an operation that failed must leave alone.
void check_unchanged(const cache_manager_stats& x, const cache_manager_stats& y) {
  BOOST_TEST(x.total_memory_bytes == y.total_memory_bytes);
  BOOST_TEST(x.used_memory_bytes == y.used_memory_bytes);
  BOOST_TEST(x.active_caches == y.active_caches);
  BOOST_TEST(x.total_blocks == y.total_blocks);
  BOOST_TEST(x.free_blocks == y.free_blocks);
  BOOST_TEST(x.cache_hit_rate == y.cache_hit_rate);
  BOOST_TEST(x.eviction_count == y.eviction_count);
  BOOST_TEST(x.allocation_count == y.allocation_count);
  BOOST_TEST(x.cached_blocks == y.cached_blocks);
  BOOST_TEST(x.preemption_count == y.preemption_count);
  BOOST_TEST(x.prefix_query_tokens == y.prefix_query_tokens);
  BOOST_TEST(x.prefix_hit_tokens == y.prefix_hit_tokens);
  BOOST_REQUIRE(x.tenants.size() == y.tenants.size());
  for (std::size_t i = 0; i < x.tenants.size(); ++i) {
    BOOST_TEST(x.tenants[i].blocks_used == y.tenants[i].blocks_used);
    BOOST_TEST(x.tenants[i].active_requests == y.tenants[i].active_requests);
  }
}

} // namespace

BOOST_FIXTURE_TEST_SUITE(allocate, cache_fixture)

BOOST_AUTO_TEST_CASE(allocate_gives_a_table_of_ceil_tokens_over_block_size_blocks) {
  std::set<block_id> seen;
  std::uint64_t held = 0;
  request_id id = 1;
  for (std::uint64_t n : {0, 1, 3, 4, 5, 8, 9, 17}) {
    auto res = allocate(id, n);
    BOOST_REQUIRE_MESSAGE(res, "allocate " << n << ": " << outcome(res));
    BOOST_TEST(res->table.num_blocks() == blocks_for(n, 4));
    BOOST_TEST(res->table.num_tokens == n);
    BOOST_TEST(res->table.block_size == 4u);
    BOOST_TEST(static_cast<bool>(res->handle));
    for (auto b : res->table.blocks) {
      BOOST_TEST(b < 64u);
      BOOST_TEST(seen.insert(b).second, "block " << b << " handed out twice");
    }
    held += res->table.num_blocks();
    ++id;
  }
  auto s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->total_blocks == 64u);
  BOOST_TEST(s->free_blocks == 64u - held);
  BOOST_TEST(s->active_caches == 8u);
  BOOST_TEST(s->allocation_count == 8u);
  BOOST_TEST(s->allocation_failures == 0u);
  BOOST_TEST(s->block_size == 4u);
  BOOST_TEST(s->total_memory_bytes == 64u * bytes_per_block);
  BOOST_TEST(s->used_memory_bytes == held * bytes_per_block);
  // 2 layers x K,V x 4 tokens x 2 heads x 8 dims x 2 bytes.
  BOOST_TEST(bytes_per_block == 2u * 2 * 4 * 2 * 8 * 2);
}

BOOST_AUTO_TEST_CASE(allocate_with_a_cached_prompt_shares_full_blocks_and_leaves_the_last_token) {
  auto prompt = make_tokens(12, 7); // three full blocks
  auto a = allocate(make_prompt_request(cfg, 1, prompt));
  BOOST_REQUIRE(a);
  BOOST_TEST(a->table.num_blocks() == 3u);
  BOOST_TEST(a->table.num_tokens == 12u);
  // Same prompt: at most (12 - 1) / 4 = 2 blocks shared, the third computed.
  auto b = allocate(make_prompt_request(cfg, 2, prompt));
  BOOST_REQUIRE(b);
  BOOST_REQUIRE(b->table.num_blocks() == 3u);
  BOOST_TEST(b->table.blocks[0] == a->table.blocks[0]);
  BOOST_TEST(b->table.blocks[1] == a->table.blocks[1]);
  BOOST_TEST(b->table.blocks[2] != a->table.blocks[2]);
  // One more token: all three full blocks are shared, the fourth is fresh.
  auto longer = prompt;
  longer.push_back(99);
  auto c = allocate(make_prompt_request(cfg, 3, longer));
  BOOST_REQUIRE(c);
  BOOST_REQUIRE(c->table.num_blocks() == 4u);
  for (int i = 0; i < 3; ++i)
    BOOST_TEST(c->table.blocks[i] == a->table.blocks[i]);
  // A prompt that differs in its second block shares only the first.
  auto other = prompt;
  other[5] += 1;
  auto d = allocate(make_prompt_request(cfg, 4, other));
  BOOST_REQUIRE(d);
  BOOST_TEST(d->table.blocks[0] == a->table.blocks[0]);
  BOOST_TEST(d->table.blocks[1] != a->table.blocks[1]);
  // Used blocks: a's 3 + b's 1 + c's 1 + d's 2.
  BOOST_TEST(used_blocks() == 7u);
  // Hit tokens over looked-up tokens: (0 + 8 + 12 + 4) / (12 + 12 + 13 + 12).
  auto s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->prefix_query_tokens == 49u);
  BOOST_TEST(s->prefix_hit_tokens == 24u);
  BOOST_TEST(s->cache_hit_rate == 24.0 / 49.0);
}

BOOST_AUTO_TEST_CASE(allocate_with_a_prompt_and_zero_initial_tokens_takes_the_prompt_length) {
  auto req = make_prompt_request(cfg, 1, make_tokens(10, 8));
  req.initial_tokens = 0;
  auto a = allocate(req);
  BOOST_REQUIRE(a);
  BOOST_TEST(a->table.num_tokens == 10u);
  BOOST_TEST(a->table.num_blocks() == 3u);
  auto info = lookup(1);
  BOOST_REQUIRE(info);
  BOOST_TEST(info->second.request.initial_tokens == 10u);
}

BOOST_AUTO_TEST_CASE(allocate_after_the_prompt_owner_ended_revives_cached_blocks) {
  auto prompt = make_tokens(9, 3); // two full blocks and one token
  auto a = allocate(make_prompt_request(cfg, 1, prompt));
  BOOST_REQUIRE(a);
  BOOST_TEST(value_or(free(1), 99) == 3u);
  auto s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->cached_blocks == 2u);
  BOOST_TEST(s->free_blocks == 64u);
  auto b = allocate(make_prompt_request(cfg, 2, prompt));
  BOOST_REQUIRE(b);
  BOOST_TEST(b->table.blocks[0] == a->table.blocks[0]);
  BOOST_TEST(b->table.blocks[1] == a->table.blocks[1]);
  s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->cached_blocks == 0u);
  BOOST_TEST(s->free_blocks == 61u);
  BOOST_TEST(s->cache_hit_rate == 8.0 / 18.0);
}

BOOST_AUTO_TEST_CASE(prompts_of_different_tenants_do_not_share_blocks) {
  auto prompt = make_tokens(12, 5);
  auto a = allocate(make_prompt_request(cfg, 1, prompt));
  BOOST_REQUIRE(a);
  auto req = make_prompt_request(cfg, 2, prompt);
  req.tenant = "b";
  auto b = allocate(req);
  BOOST_REQUIRE(b);
  for (int i = 0; i < 3; ++i)
    BOOST_TEST(b->table.blocks[i] != a->table.blocks[i]);
  auto s = stats();
  BOOST_REQUIRE(s);
  BOOST_REQUIRE(s->tenants.size() == 2u);
  BOOST_TEST(s->tenants[0].name == "default");
  BOOST_TEST(s->tenants[0].blocks_used == 3u);
  BOOST_TEST(s->tenants[0].active_requests == 1u);
  BOOST_TEST(s->tenants[1].name == "b");
  BOOST_TEST(s->tenants[1].blocks_used == 3u);
  BOOST_TEST(s->tenants[1].active_requests == 1u);
}

BOOST_AUTO_TEST_CASE(allocate_of_a_live_id_fails_with_duplicate_request) {
  BOOST_REQUIRE(allocate(1, 5));
  auto before = stats();
  auto res = allocate(1, 3);
  BOOST_TEST(outcome(res) == "duplicate_request");
  auto after = stats();
  BOOST_REQUIRE(before && after);
  check_unchanged(*before, *after);
  // The id is free again once the request ended.
  BOOST_REQUIRE(free(1));
  BOOST_TEST(outcome(allocate(1, 3)) == "ok");
}

BOOST_AUTO_TEST_CASE(allocate_for_an_unknown_tenant_fails_with_unknown_tenant) {
  auto req = make_request(cfg, 1, 4);
  req.tenant = "nobody";
  auto before = stats();
  BOOST_TEST(outcome(allocate(req)) == "unknown_tenant");
  auto after = stats();
  BOOST_REQUIRE(before && after);
  check_unchanged(*before, *after);
  BOOST_TEST(outcome(lookup(1)) == "unknown_request");
}

BOOST_AUTO_TEST_CASE(allocate_with_a_wrong_shape_or_dtype_fails_with_invalid_request) {
  std::vector<std::pair<std::string, allocation_request>> bad;
  auto add = [&](std::string what, auto change) {
    auto req = make_request(cfg, 1, 4);
    change(req);
    bad.emplace_back(std::move(what), std::move(req));
  };
  add("zero layers", [](auto& r) { r.num_layers = 0; });
  add("zero heads", [](auto& r) { r.num_heads = 0; });
  add("zero head_dim", [](auto& r) { r.head_dim = 0; });
  add("3 layers", [](auto& r) { r.num_layers = 3; });
  add("4 heads", [](auto& r) { r.num_heads = 4; });
  add("head_dim 16", [](auto& r) { r.head_dim = 16; });
  add("dtype fp32", [](auto& r) { r.dtype = dtype::fp32; });
  add("dtype bf16", [](auto& r) { r.dtype = dtype::bf16; });
  add("max_sequence_length 0", [](auto& r) { r.max_sequence_length = 0; });
  add("initial_tokens != prompt length", [](auto& r) {
    r.prompt = make_tokens(6, 1);
    r.initial_tokens = 5;
  });
  add("negative token id", [](auto& r) {
    r.prompt = {1, 2, -3};
    r.initial_tokens = 3;
  });
  auto before = stats();
  for (auto& [what, req] : bad) {
    BOOST_TEST_CONTEXT(what) {
      BOOST_TEST(outcome(allocate(req)) == "invalid_request");
      BOOST_TEST(value_or(can_alloc(req), true) == false);
    }
  }
  auto after = stats();
  BOOST_REQUIRE(before && after);
  check_unchanged(*before, *after);
  BOOST_TEST(after->allocation_failures == before->allocation_failures);
}

BOOST_AUTO_TEST_CASE(allocate_past_max_sequence_length_fails) {
  auto before = stats();
  BOOST_TEST(outcome(allocate(1, 9, 8)) == "exceeds_max_sequence_length");
  auto req = make_prompt_request(cfg, 2, make_tokens(9, 2), 8);
  BOOST_TEST(outcome(allocate(req)) == "exceeds_max_sequence_length");
  auto after = stats();
  BOOST_REQUIRE(before && after);
  check_unchanged(*before, *after);
  // Exactly max_sequence_length is fine.
  BOOST_TEST(outcome(allocate(3, 8, 8)) == "ok");
}

BOOST_FIXTURE_TEST_CASE(allocate_of_more_blocks_than_the_pool_has_fails_and_changes_nothing,
                        lazy_fixture) {
  // 64 blocks of 4 tokens: 257 tokens need 65, which no wait would give.
  auto before = stats();
  BOOST_TEST(outcome(allocate(1, 257, 1000)) == "exceeds_capacity");
  auto after = stats();
  BOOST_REQUIRE(before && after);
  check_unchanged(*before, *after);
  BOOST_TEST(after->allocation_failures == before->allocation_failures + 1);
  // Partly used pool, with a prompt whose first blocks are cached.
  auto prompt = make_tokens(16, 11);
  BOOST_REQUIRE(allocate(make_prompt_request(cfg, 2, prompt)));
  BOOST_REQUIRE(free(2));
  BOOST_REQUIRE(allocate(3, 4 * 58, 1000)); // 58 blocks used, 4 cached
  before = stats();
  BOOST_REQUIRE(before);
  BOOST_TEST(before->cached_blocks == 4u);
  auto longer = prompt;
  for (int i = 0; i < 20; ++i)
    longer.push_back(i); // 9 blocks: 4 hit (cached, revived) + 5 fresh > 6
  BOOST_TEST(outcome(allocate(make_prompt_request(cfg, 4, longer))) == "out_of_blocks");
  after = stats();
  BOOST_REQUIRE(after);
  check_unchanged(*before, *after);
  BOOST_TEST(after->allocation_failures == before->allocation_failures + 1);
  BOOST_TEST(outcome(lookup(4)) == "unknown_request");
  // What fits, fits exactly: 6 blocks, 4 of them the cached prefix.
  longer.resize(24);
  BOOST_TEST(outcome(allocate(make_prompt_request(cfg, 4, longer))) == "ok");
  BOOST_TEST(used_blocks() == 64u);
  BOOST_TEST(outcome(allocate(5, 1)) == "out_of_blocks");
  BOOST_TEST(outcome(allocate(6, 0)) == "ok"); // no block needed
}

BOOST_AUTO_TEST_CASE(allocate_on_another_device_than_the_storage_fails_with_invalid_request) {
  auto req = make_request(cfg, 1, 4);
  req.device = device{device_kind::cuda, 0};
  auto before = stats();
  BOOST_TEST(outcome(allocate(req)) == "invalid_request");
  BOOST_TEST(value_or(can_alloc(req), true) == false);
  auto after = stats();
  BOOST_REQUIRE(before && after);
  check_unchanged(*before, *after);
  req.device = device{device_kind::cpu, 0};
  BOOST_TEST(outcome(allocate(req)) == "ok");
}

BOOST_AUTO_TEST_CASE(can_alloc_answers_whether_allocate_would_succeed) {
  BOOST_TEST(value_or(can_alloc(make_request(cfg, 1, 256)), false) == true);
  BOOST_TEST(value_or(can_alloc(make_request(cfg, 1, 257, 1000)), true) == false);
  BOOST_REQUIRE(allocate(1, 200));
  // A live id cannot be allocated again.
  BOOST_TEST(value_or(can_alloc(make_request(cfg, 1, 4)), true) == false);
  BOOST_TEST(value_or(can_alloc(make_request(cfg, 2, 56)), false) == true);
  BOOST_TEST(value_or(can_alloc(make_request(cfg, 2, 57)), true) == false);
  auto req = make_request(cfg, 2, 4);
  req.tenant = "nobody";
  BOOST_TEST(value_or(can_alloc(req), true) == false);
  // can_alloc takes nothing.
  BOOST_TEST(used_blocks() == 50u);
  BOOST_TEST(outcome(allocate(2, 56)) == "ok");
}

BOOST_AUTO_TEST_CASE(lookup_list_and_table_describe_live_requests) {
  auto req = make_prompt_request(cfg, 7, make_tokens(6, 1), 100);
  req.priority = priority::high;
  req.tenant = "b";
  auto a = allocate(req);
  BOOST_REQUIRE(a);
  auto b = allocate(3, 9);
  BOOST_REQUIRE(b);
  auto found = lookup(7);
  BOOST_REQUIRE(found);
  BOOST_TEST((found->first == a->handle));
  auto& info = found->second;
  BOOST_TEST(info.request.id == 7u);
  BOOST_TEST(info.request.initial_tokens == 6u);
  BOOST_TEST(info.request.max_sequence_length == 100u);
  BOOST_TEST(info.request.tenant == "b");
  BOOST_TEST((info.request.priority == priority::high));
  BOOST_TEST(info.request.prompt.empty());
  BOOST_TEST(info.cache_id != 0u);
  BOOST_TEST(!info.swapped);
  auto entries = list();
  BOOST_REQUIRE(entries);
  BOOST_REQUIRE(entries->size() == 2u);
  BOOST_TEST((*entries)[0].id == 3u); // sorted by id
  BOOST_TEST((*entries)[1].id == 7u);
  BOOST_TEST(((*entries)[1].handle == a->handle));
  BOOST_TEST((*entries)[1].info.cache_id == info.cache_id);
  BOOST_TEST(value_or(table(7), block_table{}) == a->table);
  BOOST_TEST(value_or(table(3), block_table{}) == b->table);
  BOOST_TEST(outcome(table(4)) == "unknown_request");
  BOOST_TEST(outcome(lookup(4)) == "unknown_request");
  // The handle answers for itself too.
  auto hinfo = handle_info(a->handle);
  BOOST_REQUIRE(hinfo);
  BOOST_TEST(hinfo->cache_id == info.cache_id);
  BOOST_TEST(hinfo->request.id == 7u);
  // A new incarnation of an id gets a new cache id.
  BOOST_REQUIRE(free(7));
  BOOST_REQUIRE(allocate(7, 1));
  auto again = lookup(7);
  BOOST_REQUIRE(again);
  BOOST_TEST(again->second.cache_id != info.cache_id);
  entries = list();
  BOOST_REQUIRE(entries);
  BOOST_TEST(entries->size() == 2u);
}

BOOST_AUTO_TEST_CASE(stats_count_allocations_and_tenants) {
  BOOST_REQUIRE(allocate(1, 8));
  auto req = make_request(cfg, 2, 5);
  req.tenant = "b";
  BOOST_REQUIRE(allocate(req));
  BOOST_TEST(outcome(allocate(3, 1000, 1000)) == "exceeds_capacity");
  auto s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->active_caches == 2u);
  BOOST_TEST(s->allocation_count == 2u);
  BOOST_TEST(s->allocation_failures == 1u);
  BOOST_TEST(s->free_blocks == 60u);
  BOOST_TEST(s->cached_blocks == 0u);
  BOOST_TEST(s->cache_hit_rate == 0.0);
  BOOST_TEST((s->pressure == memory_pressure::low));
  BOOST_REQUIRE(s->tenants.size() == 2u);
  BOOST_TEST(s->tenants[0].blocks_used == 2u);
  BOOST_TEST(s->tenants[0].allocation_failures == 1u);
  BOOST_TEST(s->tenants[1].blocks_used == 2u);
  BOOST_TEST(s->tenants[1].active_requests == 1u);
}

BOOST_AUTO_TEST_CASE(a_message_that_matches_no_handler_is_answered_with_an_error) {
  BOOST_REQUIRE(allocate(1, 4));
  auto before = stats();
  auto dyn = caf::actor_cast<caf::actor>(mgr);
  // Each of these reaches the manager as a request and must come back as
  // an error: a payload of the wrong type, wrong argument types for a known
  // atom, an unknown atom.
  std::vector<caf::message> bad{
    caf::make_message(allocate_atom::value, std::string{"not a request"}),
    caf::make_message(free_atom::value, std::string{"1"}),
    caf::make_message(caf::atom("bogus"), 1),
  };
  for (auto& msg : bad) {
    BOOST_TEST_CONTEXT(caf::to_string(msg)) {
      caf::error err;
      bool replied = false;
      auto rh = self->request(dyn, caf::infinite, msg);
      run();
      BOOST_REQUIRE_MESSAGE(!self->mailbox().empty(), "no reply");
      rh.receive([&](std::uint32_t) { replied = true; },
                 [&](caf::error& e) {
                   replied = true;
                   err = std::move(e);
                 });
      BOOST_TEST(replied);
      BOOST_TEST(outcome(err) == "unexpected_message");
    }
  }
  auto after = stats();
  BOOST_REQUIRE(before && after);
  check_unchanged(*before, *after);
  // The manager still serves.
  BOOST_TEST(outcome(allocate(2, 4)) == "ok");
}

BOOST_AUTO_TEST_SUITE_END()
