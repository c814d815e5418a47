// The facade's request lifecycle on the threaded scheduler: start, allocate
// (with prefix sharing), extend, append, deallocate, can_allocate, stats,
// get_handle and list_handles.
#include <algorithm>
#include <set>

#include "fixture.hpp"

using namespace kvtest;

namespace {

std::size_t ceil_blocks(std::uint64_t n) {
  return static_cast<std::size_t>((n + test_block_size - 1) / test_block_size);
}

} // namespace

BOOST_FIXTURE_TEST_SUITE(facade_api, watchdog)

BOOST_AUTO_TEST_CASE(start_rejects_a_bad_config_naming_the_field) {
  auto base = small_config();
  caf::actor_system_config sys_cfg;
  configure(sys_cfg, base);
  caf::actor_system sys{sys_cfg};
  struct bad_case {
    const char* field;
    std::function<void(cache_config&)> edit;
  };
  std::vector<bad_case> cases{
    {"block_size", [](cache_config& c) { c.block_size = 3; }},
    {"model.num_layers", [](cache_config& c) { c.model.num_layers = 0; }},
    {"model.head_dim", [](cache_config& c) { c.model.head_dim = 5000; }},
    {"layout", [](cache_config& c) { c.layout = "striped"; }},
    {"storage", [](cache_config& c) { c.storage = "disk"; }},
    {"num_gpu_blocks", [](cache_config& c) { c.num_gpu_blocks = 0; }},
    {"pressure.high", [](cache_config& c) { c.pressure.high = 0.5; }},
    {"tenants", [](cache_config& c) { c.tenants.clear(); }},
    {"tenants[1].name",
     [](cache_config& c) { c.tenants.push_back(c.tenants.front()); }},
    {"prefix_caching", [](cache_config& c) { c.layout = "contiguous"; }},
    {"gpu_memory_utilization",
     [](cache_config& c) { c.gpu_memory_utilization = 1.5; }},
  };
  for (auto& bc : cases) {
    BOOST_TEST_CONTEXT("field " << bc.field) {
      auto cfg = base;
      bc.edit(cfg);
      auto started = kv_cache_manager::start(sys, cfg);
      BOOST_REQUIRE(!started);
      KV_CHECK_ERROR(started.error(), errc::invalid_config, bc.field);
    }
  }
  // A failed start leaves the system usable.
  auto ok = kv_cache_manager::start(sys, base);
  BOOST_REQUIRE_MESSAGE(ok, why(ok));
  BOOST_TEST(ok->stats().total_blocks == 64u);
}

BOOST_AUTO_TEST_CASE(allocate_gives_ceil_n_over_block_size_blocks_and_n_tokens) {
  cache_fixture f;
  std::set<block_id> seen;
  std::size_t total = 0;
  request_id id = 1;
  for (std::uint64_t n : {0, 1, 3, 4, 5, 8, 17}) {
    BOOST_TEST_CONTEXT("n = " << n) {
      auto h = f.alloc(f.req(id, n));
      auto t = h->table();
      BOOST_TEST(t.blocks.size() == ceil_blocks(n));
      BOOST_TEST(t.num_tokens == n);
      BOOST_TEST(t.block_size == test_block_size);
      BOOST_TEST(h->num_tokens() == n);
      BOOST_TEST(h->id() == id);
      BOOST_TEST(h->is_valid());
      for (auto b : t.blocks) {
        BOOST_TEST(b < 64u);
        BOOST_TEST(seen.insert(b).second, "block " << b << " handed out twice");
      }
      total += t.blocks.size();
      ++id;
    }
  }
  auto s = f.checked_stats();
  BOOST_TEST(s.active_caches == 7u);
  BOOST_TEST(s.total_blocks - s.free_blocks == total);
  BOOST_TEST(s.used_memory_bytes == total * test_bytes_per_block);
  BOOST_TEST(s.allocation_count == 7u);
}

BOOST_AUTO_TEST_CASE(allocate_with_a_prompt_shares_its_cached_full_blocks) {
  cache_fixture f;
  auto prompt_a = iota_tokens(100, 10); // 2 full blocks + 2 tokens
  auto a = f.alloc(f.req(1, 0, 256, prompt_a));
  auto ta = a->table();
  BOOST_REQUIRE_EQUAL(ta.blocks.size(), 3u);
  BOOST_TEST(ta.num_tokens == 10u);
  // Same first 8 tokens, then its own: the 2 full blocks are shared.
  auto prompt_b = iota_tokens(100, 8);
  for (token_id t : {7, 8, 9})
    prompt_b.push_back(t);
  auto req_b = f.req(2, 0, 256, prompt_b);
  req_b.initial_tokens = 0; // 0 also means "the prompt's length"
  auto b = f.alloc(req_b);
  auto tb = b->table();
  BOOST_REQUIRE_EQUAL(tb.blocks.size(), 3u);
  BOOST_TEST(tb.num_tokens == 11u);
  BOOST_TEST(tb.blocks[0] == ta.blocks[0]);
  BOOST_TEST(tb.blocks[1] == ta.blocks[1]);
  BOOST_TEST(tb.blocks[2] != ta.blocks[2]);
  BOOST_TEST(f.used_blocks() == 4u);
  // A prompt of exactly 2 cached blocks shares only the first: its last
  // token must be computed.
  auto c = f.alloc(f.req(3, 0, 256, iota_tokens(100, 8)));
  auto tc = c->table();
  BOOST_REQUIRE_EQUAL(tc.blocks.size(), 2u);
  BOOST_TEST(tc.blocks[0] == ta.blocks[0]);
  BOOST_TEST(tc.blocks[1] != ta.blocks[1]);
  // A different prompt shares nothing.
  auto d = f.alloc(f.req(4, 0, 256, iota_tokens(5000, 9)));
  for (auto blk : d->table().blocks)
    BOOST_TEST((std::count(ta.blocks.begin(), ta.blocks.end(), blk) == 0));
  auto s = f.checked_stats();
  BOOST_TEST(s.prefix_query_tokens == 10u + 11u + 8u + 9u);
  BOOST_TEST(s.prefix_hit_tokens == 8u + 4u);
  BOOST_TEST(s.cache_hit_rate
             == static_cast<double>(s.prefix_hit_tokens) / s.prefix_query_tokens);
  BOOST_TEST(f.used_blocks() == 4u + 1u + 3u);
}

BOOST_AUTO_TEST_CASE(extend_adds_the_tokens_and_the_blocks_they_need) {
  cache_fixture f;
  auto h = f.alloc(f.req(1, 5));
  auto t0 = h->table();
  BOOST_REQUIRE_EQUAL(t0.blocks.size(), 2u);
  BOOST_TEST(!f.m().extend(*h, 3));
  auto t1 = h->table();
  BOOST_TEST(t1.num_tokens == 8u);
  BOOST_TEST(t1.blocks == t0.blocks);
  BOOST_TEST(!f.m().extend(*h, 1));
  auto t2 = h->table();
  BOOST_TEST(t2.num_tokens == 9u);
  BOOST_REQUIRE_EQUAL(t2.blocks.size(), 3u);
  BOOST_TEST((std::equal(t0.blocks.begin(), t0.blocks.end(), t2.blocks.begin())));
  BOOST_TEST(!f.m().extend(*h, 0));
  BOOST_TEST(h->num_tokens() == 9u);
  BOOST_TEST(!f.m().extend(*h, 7));
  BOOST_TEST(h->num_tokens() == 16u);
  BOOST_TEST(h->table().blocks.size() == 4u);
  BOOST_TEST(f.used_blocks() == 4u);
}

BOOST_AUTO_TEST_CASE(extend_past_max_sequence_length_fails_and_changes_nothing) {
  cache_fixture f;
  auto h = f.alloc(f.req(1, 10, 12));
  auto before = h->table();
  auto used = f.used_blocks();
  KV_CHECK_ERROR(f.m().extend(*h, 3), errc::exceeds_max_sequence_length,
                 "request 1", "max_sequence_length 12");
  BOOST_TEST(h->table() == before);
  BOOST_TEST(f.used_blocks() == used);
  BOOST_TEST(!f.m().extend(*h, 2));
  BOOST_TEST(h->num_tokens() == 12u);
  KV_CHECK_ERROR(f.m().extend(*h, 1), errc::exceeds_max_sequence_length,
                 "max_sequence_length 12");
  KV_CHECK_ERROR(f.m().append(*h, {1}), errc::exceeds_max_sequence_length);
  BOOST_TEST(h->num_tokens() == 12u);
}

BOOST_AUTO_TEST_CASE(extend_of_an_ended_request_fails_with_invalid_handle) {
  cache_fixture f;
  auto h = f.alloc(f.req(1, 4));
  auto clone = h->clone_handle();
  BOOST_REQUIRE(!f.m().deallocate(1));
  KV_CHECK_ERROR(f.m().extend(*h, 1), errc::invalid_handle, "request 1");
  KV_CHECK_ERROR(f.m().extend(*clone, 1), errc::invalid_handle, "request 1");
  KV_CHECK_ERROR(f.m().append(*h, {1, 2}), errc::invalid_handle, "request 1");
  BOOST_TEST(f.used_blocks() == 0u);
  // A new request under the same id is not reachable through the old handle.
  auto again = f.alloc(f.req(1, 4));
  KV_CHECK_ERROR(f.m().extend(*h, 1), errc::invalid_handle);
  BOOST_TEST(again->num_tokens() == 4u);
  BOOST_TEST(again->cache_id() != h->cache_id());
}

BOOST_AUTO_TEST_CASE(a_handle_of_another_cache_is_refused_and_changes_nothing) {
  // Two caches in one process (a draft and a target model, say) may number
  // their requests alike: request 1 of the second cache has the same id and
  // the same incarnation number as request 1 of the first.
  cache_fixture a;
  cache_fixture b;
  auto ha = a.alloc(a.req(1, 0, 256, iota_tokens(1, 5)));
  auto hb = b.alloc(b.req(1, 0, 256, iota_tokens(1, 5)));
  auto used_a = a.used_blocks();
  auto used_b = b.used_blocks();
  KV_CHECK_ERROR(b.m().extend(*ha, 3), errc::invalid_handle, "request 1",
                 "another cache");
  KV_CHECK_ERROR(b.m().append(*ha, {6, 7}), errc::invalid_handle,
                 "another cache");
  KV_CHECK_ERROR(b.m().append(*ha, {6, 7}, 1), errc::invalid_handle,
                 "another cache");
  KV_CHECK_ERROR(b.m().settle_drafts(*ha, 0), errc::invalid_handle,
                 "another cache");
  KV_CHECK_ERROR(b.m().extend(*ha->clone_handle(), 1), errc::invalid_handle,
                 "another cache");
  BOOST_TEST(ha->num_tokens() == 5u);
  BOOST_TEST(hb->num_tokens() == 5u);
  BOOST_TEST(a.used_blocks() == used_a);
  BOOST_TEST(b.used_blocks() == used_b);
  // Each facade still serves its own handles.
  BOOST_TEST(!a.m().append(*ha, {6, 7}, 1));
  BOOST_TEST(!a.m().settle_drafts(*ha, 1));
  BOOST_TEST(!b.m().extend(*hb, 2));
  BOOST_TEST(ha->num_tokens() == 7u);
  BOOST_TEST(hb->num_tokens() == 7u);
}

BOOST_AUTO_TEST_CASE(append_grows_and_makes_full_blocks_findable) {
  cache_fixture f;
  auto a = f.alloc(f.req(1, 0, 256, iota_tokens(1, 2)));
  BOOST_TEST(!f.m().append(*a, iota_tokens(3, 7)));
  auto ta = a->table();
  BOOST_TEST(ta.num_tokens == 9u);
  BOOST_REQUIRE_EQUAL(ta.blocks.size(), 3u);
  // A later prompt of those 9 tokens finds the 2 full blocks append filled.
  auto b = f.alloc(f.req(2, 0, 256, iota_tokens(1, 9)));
  auto tb = b->table();
  BOOST_REQUIRE_EQUAL(tb.blocks.size(), 3u);
  BOOST_TEST(tb.blocks[0] == ta.blocks[0]);
  BOOST_TEST(tb.blocks[1] == ta.blocks[1]);
  BOOST_TEST(tb.blocks[2] != ta.blocks[2]);
  // A negative token id is refused; nothing changed.
  KV_CHECK_ERROR(f.m().append(*a, {5, -3}), errc::invalid_request, "-3");
  BOOST_TEST(a->table() == ta);
}

BOOST_AUTO_TEST_CASE(a_prefill_chunk_admits_the_cached_prefix_and_one_chunk) {
  cache_fixture f;
  auto prompt = iota_tokens(1, 30); // 7 full blocks of 4, and 2 tokens
  f.alloc(f.req(1, 0, 256, prompt)); // indexes the 7
  auto req = f.req(2, 0, 256, prompt);
  req.prefill_chunk = 1;
  auto b = f.alloc(req);
  BOOST_TEST(b->table().num_tokens == 29u); // 28 cached, 1 computed
  // A new prompt in chunks of 5: only what was admitted is findable...
  auto fresh = iota_tokens(100, 14);
  req = f.req(3, 0, 256, fresh);
  req.prefill_chunk = 5;
  auto c = f.alloc(req);
  auto tc = c->table();
  BOOST_TEST(tc.num_tokens == 5u);
  auto other = f.alloc(f.req(4, 0, 256, fresh))->table();
  BOOST_TEST(other.blocks[0] == tc.blocks[0]);
  BOOST_TEST(other.blocks[1] != tc.blocks[1]);
  // ...and the rest once its chunks come, with their token ids.
  auto later = iota_tokens(500, 14);
  req = f.req(5, 0, 256, later);
  req.prefill_chunk = 5;
  auto e = f.alloc(req);
  BOOST_TEST(!f.m().append(*e, {later.begin() + 5, later.begin() + 10}));
  BOOST_TEST(!f.m().append(*e, {later.begin() + 10, later.end()}));
  auto te = e->table();
  BOOST_TEST(te.num_tokens == 14u);
  auto g = f.alloc(f.req(6, 0, 256, later))->table();
  BOOST_TEST(g.blocks[1] == te.blocks[1]);
  BOOST_TEST(g.blocks[2] == te.blocks[2]);
  BOOST_TEST(g.blocks[3] != te.blocks[3]);
  // Without a prompt a chunk means nothing: refused.
  req = f.req(7, 8);
  req.prefill_chunk = 4;
  KV_CHECK_ERROR(error_of(f.m().allocate(req)), errc::invalid_request,
                 "prefill_chunk 4 needs a prompt");
}

BOOST_AUTO_TEST_CASE(a_cache_salt_keeps_prefixes_apart_and_pins_by_it) {
  auto cfg = small_config();
  cfg.max_pinned_blocks = 8;
  cache_fixture f{cfg};
  auto prompt = iota_tokens(1, 10); // 2 full blocks of 4
  auto salted = [&](request_id id, std::uint64_t salt) {
    auto req = f.req(id, 0, 256, prompt);
    req.cache_salt = salt;
    return f.alloc(req)->table();
  };
  auto a = salted(1, 11); // say, LoRA adapter 11
  auto b = salted(2, 12); // adapter 12: the same tokens, other K/V
  auto c = salted(3, 11);
  auto plain = salted(4, 0);
  BOOST_TEST(b.blocks[0] != a.blocks[0]);
  BOOST_TEST(c.blocks[0] == a.blocks[0]);
  BOOST_TEST(c.blocks[1] == a.blocks[1]);
  BOOST_TEST(plain.blocks[0] != a.blocks[0]);
  BOOST_TEST(plain.blocks[0] != b.blocks[0]);
  // A pin finds the prefix under its salt only.
  auto ttl = std::chrono::milliseconds{10000};
  auto pinned = f.m().pin_prefix("", prompt, ttl, 11);
  BOOST_REQUIRE(pinned);
  BOOST_TEST(*pinned == 2u);
  pinned = f.m().pin_prefix("", prompt, ttl, 13);
  BOOST_REQUIRE(pinned);
  BOOST_TEST(*pinned == 0u);
}

BOOST_AUTO_TEST_CASE(deallocate_invalidates_every_reference_and_returns_blocks) {
  cache_fixture f;
  auto h = f.alloc(f.req(7, 9));
  auto clone = h->clone_handle();
  auto found = f.m().get_handle(7);
  BOOST_REQUIRE(found);
  auto listed = f.m().list_handles();
  BOOST_REQUIRE_EQUAL(listed.size(), 1u);
  auto& entry = listed.front().second;
  for (auto* r : {h.get(), clone.get(), found.get(), entry.get()}) {
    BOOST_TEST(r->is_valid());
    BOOST_TEST(r->cache_id() == h->cache_id());
    BOOST_TEST(r->num_tokens() == 9u);
  }
  BOOST_TEST(f.used_blocks() == 3u);
  BOOST_REQUIRE(!f.m().deallocate(7));
  for (auto* r : {h.get(), clone.get(), found.get(), entry.get()}) {
    BOOST_TEST(!r->is_valid());
    BOOST_TEST(r->table().blocks.empty());
    BOOST_TEST(r->num_tokens() == 0u);
    BOOST_TEST(r->stats().blocks_allocated == 0u);
    KV_CHECK_ERROR(error_of(r->key_cache(0)), errc::invalid_handle, "request 7");
    KV_CHECK_ERROR(error_of(r->value_cache(0)), errc::invalid_handle);
    KV_CHECK_ERROR(error_of(r->kv_cache(1)), errc::invalid_handle);
  }
  BOOST_TEST(f.used_blocks() == 0u);
  BOOST_TEST(f.checked_stats().active_caches == 0u);
  BOOST_TEST(!f.m().get_handle(7));
  BOOST_TEST(f.m().list_handles().empty());
  KV_CHECK_ERROR(f.m().deallocate(7), errc::unknown_request, "request 7");
  // A clone made after the end is just as invalid.
  BOOST_TEST(!h->clone_handle()->is_valid());
}

BOOST_AUTO_TEST_CASE(can_allocate_answers_without_changing_anything) {
  cache_fixture f;
  auto h = f.alloc(f.req(1, 8));
  auto before = f.checked_stats();
  BOOST_TEST(f.m().can_allocate(f.req(2, 8)));
  // 64 blocks, critical pressure at 61: one request may hold 60.
  BOOST_TEST(f.m().can_allocate(f.req(2, 60 * 4)));
  BOOST_TEST(!f.m().can_allocate(f.req(2, 60 * 4 + 1)));   // 61 blocks
  BOOST_TEST(!f.m().can_allocate(f.req(1, 4)));            // duplicate
  auto bad_shape = f.req(2, 4);
  bad_shape.num_heads = 3;
  BOOST_TEST(!f.m().can_allocate(bad_shape));
  auto bad_tenant = f.req(2, 4);
  bad_tenant.tenant = "nobody";
  BOOST_TEST(!f.m().can_allocate(bad_tenant));
  BOOST_TEST(!f.m().can_allocate(f.req(2, 300, 256))); // > max length
  auto after = f.checked_stats();
  BOOST_TEST(after.free_blocks == before.free_blocks);
  BOOST_TEST(after.active_caches == before.active_caches);
  BOOST_TEST(after.allocation_count == before.allocation_count);
  BOOST_TEST(after.allocation_failures == before.allocation_failures);
  BOOST_TEST(!f.m().get_handle(2));
  // What it promised holds (62 blocks in use are critical pressure, where
  // the cache may preempt the newest request on its own: not checked here).
  BOOST_TEST(static_cast<bool>(f.m().allocate(f.req(2, 60 * 4))));
}

BOOST_AUTO_TEST_CASE(stats_fields_are_consistent) {
  cache_fixture f;
  auto s0 = f.checked_stats();
  BOOST_TEST(s0.total_blocks == 64u);
  BOOST_TEST(s0.free_blocks == 64u);
  BOOST_TEST(s0.total_memory_bytes == 64u * test_bytes_per_block);
  BOOST_TEST(s0.used_memory_bytes == 0u);
  BOOST_TEST(s0.active_caches == 0u);
  BOOST_TEST(s0.block_size == test_block_size);
  BOOST_TEST(s0.pressure == memory_pressure::low);
  BOOST_TEST(s0.cache_hit_rate == 0.0);
  BOOST_REQUIRE_EQUAL(s0.tenants.size(), 1u);
  BOOST_TEST(s0.tenants[0].name == "default");

  auto prompt = iota_tokens(40, 9); // 3 blocks, 2 of them full
  auto p = f.alloc(f.req(1, 0, 256, prompt));
  auto r = f.alloc(f.req(2, 5));
  auto s1 = f.checked_stats();
  BOOST_TEST(s1.active_caches == 2u);
  BOOST_TEST(s1.free_blocks == 59u);
  BOOST_TEST(s1.used_memory_bytes == 5u * test_bytes_per_block);
  BOOST_TEST(s1.allocation_count == 2u);
  BOOST_TEST(s1.cached_blocks == 0u);
  BOOST_TEST(s1.tenants[0].blocks_used == 5u);
  BOOST_TEST(s1.tenants[0].active_requests == 2u);

  // Deallocated: the prompt's 2 full blocks stay cached, and count as free.
  BOOST_REQUIRE(!f.m().deallocate(1));
  auto s2 = f.checked_stats();
  BOOST_TEST(s2.free_blocks == 62u);
  BOOST_TEST(s2.cached_blocks == 2u);
  BOOST_TEST(s2.active_caches == 1u);
  BOOST_TEST(s2.used_memory_bytes == 2u * test_bytes_per_block);

  // The same prompt again revives them: 8 of 9 tokens hit.
  auto q = f.alloc(f.req(3, 0, 256, prompt));
  auto s3 = f.checked_stats();
  BOOST_TEST(s3.cached_blocks == 0u);
  BOOST_TEST(s3.free_blocks == 59u);
  BOOST_TEST(s3.prefix_query_tokens == 18u);
  BOOST_TEST(s3.prefix_hit_tokens == 8u);
  BOOST_TEST(s3.cache_hit_rate == 8.0 / 18.0);
  BOOST_TEST(s3.tenants[0].prefix_hit_tokens == 8u);

  // A refused allocation counts as a failure and takes nothing.
  auto refused = f.m().allocate(f.req(4, 100 * 4, 1000));
  BOOST_REQUIRE(!refused);
  KV_CHECK_ERROR(refused.error(), errc::exceeds_capacity, "needs 100 blocks");
  auto s4 = f.checked_stats();
  BOOST_TEST(s4.allocation_failures == 1u);
  BOOST_TEST(s4.tenants[0].allocation_failures == 1u);
  BOOST_TEST(s4.free_blocks == s3.free_blocks);
  BOOST_TEST(s4.allocation_count == 3u);
  BOOST_TEST(s4.free_blocks
             == s4.total_blocks - s4.used_memory_bytes / test_bytes_per_block);
}

BOOST_AUTO_TEST_CASE(get_handle_and_list_handles_see_the_live_requests) {
  cache_fixture f;
  BOOST_TEST(!f.m().get_handle(999));
  BOOST_TEST(f.m().list_handles().empty());
  auto h3 = f.alloc(f.req(3, 3));
  auto h1 = f.alloc(f.req(1, 1));
  auto h2 = f.alloc(f.req(2, 6));
  auto g = f.m().get_handle(2);
  BOOST_REQUIRE(g);
  BOOST_TEST(g->id() == 2u);
  BOOST_TEST(g->cache_id() == h2->cache_id());
  BOOST_TEST(g->table() == h2->table());
  BOOST_TEST(g->num_layers() == 2u);
  // The same cache: growth through one is seen by the other.
  BOOST_TEST(!f.m().extend(*g, 3));
  BOOST_TEST(h2->num_tokens() == 9u);
  auto all = f.m().list_handles();
  BOOST_REQUIRE_EQUAL(all.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    BOOST_TEST(all[i].first == i + 1);
    BOOST_TEST(all[i].second->id() == i + 1);
    BOOST_TEST(all[i].second->is_valid());
  }
  BOOST_TEST(all[0].second->num_tokens() == 1u);
  BOOST_TEST(all[2].second->cache_id() == h3->cache_id());
  BOOST_REQUIRE(!f.m().deallocate(2));
  all = f.m().list_handles();
  BOOST_REQUIRE_EQUAL(all.size(), 2u);
  BOOST_TEST(all[0].first == 1u);
  BOOST_TEST(all[1].first == 3u);
  BOOST_TEST(!g->is_valid());
  BOOST_TEST(!f.m().get_handle(2));
}

BOOST_AUTO_TEST_SUITE_END()
