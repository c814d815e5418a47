// block_pool_core's tenant policy, driven directly, one promise per case:
// quotas and reservations at their edges, prefix-cache isolation, retention
// levels, pins, the choice of preemption victims and admission headroom.
// Every case ends with check_invariant() passing (the fixture checks it).
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/actors/block_pool_core.hpp"
#include "kvactor/messages/error.hpp"
#include "pool_test_support.hpp"

using namespace kvactor;
using namespace kvactor::test;
using kvactor::detail::block_pool_core;

namespace {

tenant_config tenant(std::string name, std::uint64_t max_blocks = 0,
                     std::uint64_t reserved = 0,
                     priority prio = priority::normal, std::string ns = "") {
  tenant_config t;
  t.name = std::move(name);
  t.max_blocks = max_blocks;
  t.reserved_blocks = reserved;
  t.priority = prio;
  t.prefix_namespace = std::move(ns);
  return t;
}

using kvactor::test::prompt_req;
using kvactor::test::tokens_req;

/// The shared helpers, for a request of priority `prio`.
allocation_request tokens_req(request_id id, std::uint64_t n,
                              std::string tenant_name, priority prio) {
  auto req = tokens_req(id, n, std::move(tenant_name));
  req.priority = prio;
  return req;
}

allocation_request prompt_req(request_id id, std::vector<token_id> prompt,
                              std::string tenant_name, priority prio) {
  auto req = prompt_req(id, std::move(prompt), std::move(tenant_name));
  req.priority = prio;
  return req;
}

/// Requests, block counts, counters and tenants as text; allocation
/// failures only if `with_failures`, index hashes only if `with_hashes`.
std::string describe(const block_pool_core& pool, bool with_failures = true,
                     bool with_hashes = true) {
  std::ostringstream out;
  std::map<request_id, const detail::sequence*> seqs;
  pool.for_each_sequence([&](const detail::sequence& s) { seqs[s.id] = &s; });
  for (auto& [id, s] : seqs) {
    out << "req " << id << " tenant " << s->tenant << " tokens "
        << s->num_tokens << " blocks";
    for (auto b : s->blocks)
      out << ' ' << b;
    out << '\n';
  }
  out << "used " << pool.used_blocks() << " cached " << pool.cached_blocks()
      << " free " << pool.free_blocks() << " pinned " << pool.pinned_blocks()
      << '\n';
  auto& c = pool.counters();
  out << "counters " << c.allocations << ' ' << c.blocks_allocated << ' '
      << c.prefix_hit_blocks << ' ' << c.blocks_freed << ' ' << c.blocks_cached
      << ' ' << c.evictions << ' ' << c.query_tokens << ' ' << c.hit_tokens;
  if (with_failures)
    out << ' ' << c.allocation_failures;
  out << '\n';
  for (auto& t : pool.tenants()) {
    out << "tenant " << t.config.name << ' ' << t.used << ' ' << t.active << ' '
        << t.query_tokens << ' ' << t.hit_tokens;
    if (with_failures)
      out << ' ' << t.failures;
    out << '\n';
  }
  std::map<block_id, std::uint64_t> index;
  pool.for_each_indexed([&](std::uint64_t h, block_id b) { index[b] = h; });
  for (auto& [b, h] : index)
    out << "indexed " << b << (with_hashes ? " " + std::to_string(h) : "")
        << '\n';
  return out.str();
}

struct policy_fixture {
  cache_config cfg;
  std::unique_ptr<block_pool_core> pool_;

  policy_fixture() {
    cfg.block_size = 4;
    cfg.model = model_config{2, 2, 8, dtype::fp16};
    cfg.storage = "none";
    cfg.tenants = {tenant_config{}};
    make(16);
  }

  ~policy_fixture() {
    ok();
  }

  block_pool_core& make(std::uint32_t num_blocks) {
    if (pool_)
      ok();
    pool_ = std::make_unique<block_pool_core>(cfg, num_blocks);
    pool_->record_events(true);
    return *pool_;
  }

  block_pool_core& pool() {
    return *pool_;
  }

  void ok() {
    auto err = pool_->check_invariant();
    BOOST_TEST(!err, (err ? render(err) : std::string{}));
  }

  std::vector<block_id> blocks(request_id id) const {
    auto s = pool_->find(id);
    return s ? s->blocks : std::vector<block_id>{};
  }

  std::uint64_t used_by(std::size_t t) const {
    return pool_->tenants()[t].used;
  }

  /// Allocates and requires success; returns the hit tokens.
  std::uint64_t alloc(const allocation_request& req) {
    auto res = pool().allocate(req);
    if (!res)
      BOOST_FAIL("allocate " << req.id << ": " << render(res.error()));
    ok();
    return res->hit_tokens;
  }

  /// allocate(req)'s error code, checking that can_allocate agreed.
  std::string try_alloc(const allocation_request& req) {
    bool can = pool().can_allocate(req);
    auto res = pool().allocate(req);
    BOOST_TEST(can == static_cast<bool>(res), "can_allocate disagrees on " << req.id);
    ok();
    return code(res);
  }

  void release(request_id id) {
    auto res = pool().release(id);
    if (!res)
      BOOST_FAIL("release " << id << ": " << render(res.error()));
    ok();
  }

  /// Evicts `n` blocks and returns them in eviction order.
  std::vector<block_id> evicted(std::uint32_t n) {
    pool().take_events();
    BOOST_TEST(pool().evict(n) == n);
    std::vector<block_id> out;
    for (auto& e : pool().take_events())
      if (!e.stored)
        out.push_back(e.block);
    ok();
    return out;
  }
};

using ids = std::vector<block_id>;
using reqs = std::vector<request_id>;

} // namespace

BOOST_FIXTURE_TEST_SUITE(tenant_policy_suite, policy_fixture)

// -- quotas -------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(exactly_the_quota_succeeds_and_one_block_more_changes_nothing) {
  cfg.tenants = {tenant_config{}, tenant("q", 5)};
  make(16);
  alloc(tokens_req(1, 16, "q")); // 4
  alloc(tokens_req(2, 4, "q"));  // 1: exactly max_blocks
  BOOST_TEST(used_by(1) == 5u);
  auto before = describe(pool(), false);
  BOOST_TEST(try_alloc(tokens_req(3, 1, "q")) == "quota_exceeded");
  BOOST_TEST(code(pool().extend(2, 1, nullptr)) == "quota_exceeded");
  BOOST_TEST(describe(pool(), false) == before);
  BOOST_TEST(pool().tenants()[1].failures == 1u);
  BOOST_TEST(pool().counters().allocation_failures == 1u);
  // A request that needs no block fits.
  alloc(tokens_req(4, 0, "q"));
  alloc(tokens_req(5, 20)); // other tenants are not affected
  release(2);
  BOOST_TEST(try_alloc(tokens_req(6, 5, "q")) == "quota_exceeded"); // 2 > 1
  alloc(tokens_req(6, 4, "q"));
  BOOST_TEST(used_by(1) == 5u);
}

BOOST_AUTO_TEST_CASE(revived_cached_hits_count_toward_quota_hits_in_use_do_not) {
  cfg.tenants = {tenant_config{}, tenant("q", 4)};
  make(16);
  auto p = run(10, 9); // 3 blocks, 2 of them full and indexed
  alloc(prompt_req(1, p, "q"));
  release(1);
  BOOST_TEST(pool().cached_blocks() == 2u);
  BOOST_TEST(used_by(1) == 0u);
  alloc(tokens_req(2, 8, "q")); // 2
  // Reviving 2 cached blocks and taking 1: 5 > 4.
  BOOST_TEST(try_alloc(prompt_req(3, p, "q")) == "quota_exceeded");
  release(2);
  BOOST_TEST(alloc(prompt_req(3, p, "q")) == 8u); // 2 revived + 1
  BOOST_TEST(used_by(1) == 3u);
  // Hits on blocks in use are free of charge: only the last block counts.
  BOOST_TEST(alloc(prompt_req(4, p, "q")) == 8u);
  BOOST_TEST(used_by(1) == 4u);
  BOOST_TEST(try_alloc(prompt_req(5, p, "q")) == "quota_exceeded");
}

BOOST_AUTO_TEST_CASE(unknown_tenant_is_refused_and_changes_nothing) {
  cfg.tenants = {tenant_config{}, tenant("a", 4)};
  make(16);
  alloc(tokens_req(1, 4, "a"));
  auto before = describe(pool());
  BOOST_TEST(try_alloc(tokens_req(2, 4, "nobody")) == "unknown_tenant");
  BOOST_TEST(try_alloc(prompt_req(2, run(0, 9), "A")) == "unknown_tenant");
  BOOST_TEST(describe(pool()) == before); // not even a failure is counted
  BOOST_TEST(code(pool().tenant_index("nobody")) == "unknown_tenant");
  BOOST_TEST(pool().tenant_index("a").value() == 1u);
  BOOST_TEST(pool().tenant_index("").value() == 0u);
}

// -- reservations -------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(no_other_tenant_takes_a_reserved_tenants_shortfall) {
  cfg.tenants = {tenant_config{}, tenant("r", 0, 6)};
  make(16);
  alloc(tokens_req(1, 32)); // 8
  alloc(tokens_req(2, 3));  // 9
  alloc(tokens_req(3, 4));  // 10: all the others may take
  auto before = describe(pool(), false);
  BOOST_TEST(try_alloc(tokens_req(4, 1)) == "out_of_blocks");
  BOOST_TEST(describe(pool(), false) == before);
  // A fork takes nothing; its copy on write would take one.
  BOOST_REQUIRE(pool().fork(2, 4));
  BOOST_TEST(code(pool().extend(4, 1, nullptr)) == "out_of_blocks");
  release(4);
  BOOST_TEST(code(pool().extend(2, 1, nullptr)) == "ok"); // fills its block
  BOOST_TEST(code(pool().extend(2, 1, nullptr)) == "out_of_blocks");
  BOOST_TEST(pool().free_blocks() == 6u);
  // Cached blocks serve the reservation as much as free ones.
  release(2);
  release(3);
  alloc(prompt_req(5, run(0, 8))); // 2 indexed blocks
  release(5);                      // 2 cached, 6 free
  BOOST_TEST(try_alloc(tokens_req(6, 9)) == "out_of_blocks"); // 3 > 2
  alloc(tokens_req(6, 8));         // 2 free ones
  alloc(tokens_req(7, 24, "r"));   // 4 free and both cached
  BOOST_TEST(pool().counters().evictions == 2u);
  BOOST_TEST(pool().free_blocks() == 0u);
}

BOOST_AUTO_TEST_CASE(a_reserved_tenant_gets_its_reservation_under_contention) {
  cfg.tenants = {tenant_config{}, tenant("r1", 0, 4), tenant("r2", 0, 4)};
  make(16);
  // The default tenant takes everything it may, leaving cached blocks.
  alloc(prompt_req(1, run(0, 24))); // 6 indexed
  release(1);
  alloc(tokens_req(2, 32)); // 8 free ones: 6 cached, 2 free left
  BOOST_TEST(try_alloc(tokens_req(3, 1)) == "out_of_blocks");
  // r1 gets its 4 in pieces, evicting as needed; it may not take r2's.
  alloc(tokens_req(10, 4, "r1"));
  alloc(tokens_req(11, 8, "r1"));
  alloc(tokens_req(12, 1, "r1"));
  BOOST_TEST(used_by(1) == 4u);
  BOOST_TEST(try_alloc(tokens_req(13, 1, "r1")) == "out_of_blocks");
  // Past its reservation, r1 competes like anyone: releasing the default
  // tenant's blocks lets it grow, but never into r2's four.
  release(2);
  alloc(tokens_req(13, 32, "r1")); // 8 more: 12 in all, r2's 4 left
  BOOST_TEST(try_alloc(tokens_req(14, 1, "r1")) == "out_of_blocks");
  alloc(tokens_req(20, 16, "r2"));
  BOOST_TEST(used_by(2) == 4u);
  BOOST_TEST(pool().free_blocks() == 0u);
  // Falling below the reservation again makes the shortfall held anew.
  release(20);
  release(10);
  BOOST_TEST(try_alloc(tokens_req(14, 8, "r1")) == "out_of_blocks"); // 2 > 1
  alloc(tokens_req(14, 4, "r1"));
  alloc(tokens_req(21, 16, "r2"));
}

BOOST_AUTO_TEST_CASE(pinning_cannot_take_a_reserved_tenants_shortfall) {
  cfg.tenants = {tenant_config{}, tenant("r", 0, 6)};
  cfg.max_pinned_blocks = 16;
  make(16);
  auto p = run(0, 40); // 10 full blocks
  alloc(prompt_req(1, p));
  release(1);               // 10 cached, 6 free
  alloc(tokens_req(2, 40)); // 6 free + 4 evicted: 6 cached left, for r
  BOOST_TEST(pool().cached_blocks() == 6u);
  auto before = describe(pool(), false);
  BOOST_TEST(code(pool().pin(0, p, 100, 0)) == "out_of_blocks");
  BOOST_TEST(describe(pool(), false) == before);
  alloc(tokens_req(3, 24, "r"));
  // r may pin cached blocks of its own shortfall.
  make(16);
  auto rp = run(200, 24);
  alloc(prompt_req(1, rp, "r"));
  release(1);               // 6 cached
  alloc(tokens_req(2, 40)); // the 10 free ones
  BOOST_TEST(pool().pin(1, rp, 100, 0).value() == 6u);
  BOOST_TEST(try_alloc(tokens_req(3, 1)) == "out_of_blocks");
}

// Were a namespace peer to pin r's prefix while r holds it, r's blocks would
// stay pinned and cached, on no list, once r ended: r below its reservation
// with nothing left for it. So such a pin is refused.
BOOST_AUTO_TEST_CASE(a_peer_cannot_pin_blocks_a_reserved_tenant_is_using) {
  cfg.tenants = {tenant_config{}, tenant("a", 0, 0, priority::normal, "team"),
                 tenant("r", 0, 6, priority::normal, "team")};
  cfg.max_pinned_blocks = 16;
  make(16);
  auto rp = run(200, 24);
  alloc(prompt_req(1, rp, "r")); // its 6, all indexed
  auto pinned = pool().pin(1, rp, 100, 0);
  BOOST_REQUIRE(!pinned);
  BOOST_TEST(has_code(pinned.error(), errc::invalid_request));
  BOOST_TEST(pool().pinned_blocks() == 0u);
  alloc(tokens_req(2, 40)); // the other 10
  release(1);
  BOOST_TEST(try_alloc(tokens_req(3, 4, "r")) == "ok");
}

// -- isolation ----------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(a_tenant_cannot_tell_that_another_cached_a_prompt) {
  cfg.tenants = {tenant_config{}, tenant("a"), tenant("b")};
  cfg.max_pinned_blocks = 8;
  auto p = run(10, 13); // 3 full blocks + 1
  auto q = run(50, 13); // as long, different
  // Two pools alike but for the prompt a cached; b asks both the same.
  auto twin = [&](const std::vector<token_id>& a_prompt) {
    auto pool = std::make_unique<block_pool_core>(cfg, 10);
    BOOST_REQUIRE(pool->allocate(prompt_req(1, a_prompt, "a")));
    BOOST_REQUIRE(pool->release(1));                  // 3 cached
    BOOST_REQUIRE(pool->allocate(tokens_req(2, 12))); // 4 free left
    return pool;
  };
  auto seen = twin(p);
  auto fresh = twin(q);
  std::vector<std::string> answers[2];
  int i = 0;
  for (auto* pool : {seen.get(), fresh.get()}) {
    auto& out = answers[i++];
    auto table = [&](request_id id) {
      std::string s;
      for (auto b : pool->find(id)->blocks)
        s += std::to_string(b) + " ";
      return s;
    };
    out.push_back(std::to_string(pool->can_allocate(prompt_req(3, p, "b"))));
    auto res = pool->allocate(prompt_req(3, p, "b")); // 4 fresh
    out.push_back(code(res) + " " + std::to_string(res ? res->hit_tokens : 99)
                  + " " + table(3));
    res = pool->allocate(prompt_req(4, p, "b")); // its own 3, and evicts
    out.push_back(code(res) + " " + std::to_string(res ? res->hit_tokens : 99)
                  + " " + table(4));
    auto pinned = pool->pin(2, p, 10, 0);
    out.push_back(code(pinned) + " " + std::to_string(pinned ? *pinned : 99));
    auto& b = pool->tenants()[2];
    out.push_back(std::to_string(b.query_tokens) + "/" + std::to_string(b.hit_tokens)
                  + "/" + std::to_string(b.used) + "/" + std::to_string(b.failures));
    out.push_back(describe(*pool, true, false));
    BOOST_TEST(!pool->check_invariant());
  }
  BOOST_TEST(answers[0] == answers[1], boost::test_tools::per_element());
  BOOST_TEST(seen->tenants()[2].hit_tokens == 12u); // its own prompt only
  // Yet the prefix a cached is there, for a.
  BOOST_REQUIRE(seen->release(2));
  BOOST_TEST(seen->allocate(prompt_req(5, p, "a")).value().hit_tokens == 8u);
  BOOST_REQUIRE(fresh->release(2));
  BOOST_TEST(fresh->allocate(prompt_req(5, p, "a")).value().hit_tokens == 0u);
}

BOOST_AUTO_TEST_CASE(tenants_of_a_shared_namespace_hit_each_others_prefixes) {
  cfg.tenants = {tenant_config{}, tenant("a", 0, 0, priority::normal, "team"),
                 tenant("b", 0, 0, priority::normal, "team"), tenant("c")};
  make(32);
  auto p = run(10, 13);
  alloc(prompt_req(1, p, "a"));
  BOOST_TEST(alloc(prompt_req(2, p, "b")) == 12u);
  BOOST_TEST(alloc(prompt_req(3, p, "c")) == 0u);
  BOOST_TEST(alloc(prompt_req(4, p, "")) == 0u);
  release(1);
  release(2);
  BOOST_TEST(alloc(prompt_req(5, p, "b")) == 12u); // revived from the cache
  BOOST_TEST(pool().tenants()[2].hit_tokens == 24u);
  BOOST_TEST(pool().tenants()[1].hit_tokens == 0u);
}

BOOST_AUTO_TEST_CASE(a_shared_prefix_is_stored_and_removed_under_one_tenant) {
  cfg.tenants = {tenant_config{}, tenant("a", 0, 0, priority::normal, "team"),
                 tenant("b", 0, 0, priority::normal, "team")};
  make(16);
  auto p = run(10, 9);
  alloc(prompt_req(1, p, "a"));
  release(1);
  alloc(prompt_req(2, p, "b")); // revives a's blocks: now charged to b
  BOOST_TEST(used_by(2) == 3u);
  release(2);
  // A router pairing events by (tenant, hash) must see both ends.
  std::map<std::pair<std::uint16_t, std::uint64_t>, int> live;
  for (auto& e : pool().take_events())
    live[{e.tenant, e.hash}] += e.stored ? 1 : -1;
  BOOST_TEST(pool().evict(16) == 2u);
  for (auto& e : pool().take_events())
    live[{e.tenant, e.hash}] += e.stored ? 1 : -1;
  for (auto& [key, n] : live)
    BOOST_TEST(n == 0, "tenant " << key.first << " hash " << key.second);
}

// -- retention ----------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(a_low_priority_tenants_cache_goes_before_a_high_ones) {
  cfg.tenants = {tenant_config{}, tenant("lo", 0, 0, priority::low),
                 tenant("hi", 0, 0, priority::high)};
  make(16);
  alloc(prompt_req(1, run(10, 5), "hi"));  // 0 1
  alloc(prompt_req(2, run(20, 5), "lo"));  // 2 3
  alloc(prompt_req(3, run(30, 5), "lo", priority::critical)); // 4 5
  alloc(prompt_req(4, run(40, 5), "", priority::low));        // 6 7
  release(2);
  release(1); // the high tenant's, released after a low one's
  release(3);
  release(4);
  // Levels: lo/normal 1, lo/critical 3, default/low 4, hi/normal 9.
  BOOST_TEST(detail::retention_of(priority::low, priority::critical)
             < detail::retention_of(priority::normal, priority::low));
  BOOST_TEST((evicted(4) == ids{2, 4, 6, 0}));
}

BOOST_AUTO_TEST_CASE(request_priority_orders_retention_within_a_tenant) {
  alloc(prompt_req(1, run(10, 5), "", priority::high));   // 0 1
  alloc(prompt_req(2, run(20, 5), "", priority::normal)); // 2 3
  alloc(prompt_req(3, run(30, 5), "", priority::low));    // 4 5
  release(3);
  release(1);
  release(2);
  BOOST_TEST((evicted(3) == ids{4, 2, 0}));
}

BOOST_AUTO_TEST_CASE(a_block_held_by_a_high_and_a_low_request_keeps_the_higher_level) {
  auto p = run(10, 9); // blocks 0 and 1 shared
  for (bool high_first : {true, false}) {
    make(16);
    alloc(prompt_req(1, p, "", priority::high)); // 0 1 2
    alloc(prompt_req(2, p, "", priority::low));  // 0 1 3
    alloc(prompt_req(3, run(50, 5), "", priority::normal)); // 4 5
    release(high_first ? 1 : 2);
    release(high_first ? 2 : 1);
    release(3); // released last, but normal < high
    BOOST_TEST((evicted(2) == ids{4, 1}), "high first " << high_first);
  }
  // A revived block is worth what its new holders are.
  make(16);
  alloc(prompt_req(1, p, "", priority::high));
  release(1);
  alloc(prompt_req(2, p, "", priority::low));
  alloc(prompt_req(3, run(50, 5), "", priority::normal));
  release(2);
  release(3);
  BOOST_TEST((evicted(3) == ids{1, 0, 3}));
}

// -- pins ---------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(a_pinned_prefix_is_kept_until_its_time_runs_out) {
  cfg.max_pinned_blocks = 4;
  make(8);
  auto p = run(10, 9);
  alloc(prompt_req(1, p)); // 0 1 2
  release(1);
  BOOST_TEST(pool().pin(0, p, 100, 1000).value() == 2u);
  BOOST_TEST(pool().pinned_blocks() == 2u);
  BOOST_TEST(pool().cached_blocks() == 0u);
  BOOST_TEST(pool().evict(8) == 0u);
  BOOST_TEST(try_alloc(tokens_req(2, 4 * 7)) == "out_of_blocks");
  alloc(tokens_req(2, 4 * 6));
  release(2);
  // Still findable while pinned, and pinned again once released.
  BOOST_TEST(alloc(prompt_req(3, p)) == 8u);
  release(3);
  BOOST_TEST(pool().cached_blocks() == 0u);
  BOOST_TEST(pool().pin(0, p, 200, 1000).value() == 2u); // until 1200 now
  BOOST_TEST(pool().expire_pins(1100) == 0u);
  BOOST_TEST(pool().expire_pins(1199) == 0u);
  BOOST_TEST(pool().pinned_blocks() == 2u);
  BOOST_TEST(pool().expire_pins(1200) == 2u);
  BOOST_TEST(pool().pinned_blocks() == 0u);
  BOOST_TEST(pool().cached_blocks() == 2u);
  alloc(tokens_req(4, 32)); // 6 free, and evicts both
  BOOST_TEST(pool().counters().evictions == 2u);
}

BOOST_AUTO_TEST_CASE(pinning_past_the_cap_pins_nothing_and_zero_disables_it) {
  cfg.max_pinned_blocks = 3;
  make(16);
  auto p = run(10, 9);
  auto q = run(50, 9);
  alloc(prompt_req(1, p));
  alloc(prompt_req(2, q)); // in use: pinning needs no cached state
  BOOST_TEST(pool().pin(0, p, 10, 0).value() == 2u);
  auto before = describe(pool());
  BOOST_TEST(code(pool().pin(0, q, 10, 0)) == "quota_exceeded");
  BOOST_TEST(describe(pool()) == before);
  BOOST_TEST(pool().pin(0, p, 10, 0).value() == 2u); // already pinned: free
  BOOST_TEST(pool().pin(0, std::vector<token_id>(q.begin(), q.begin() + 4), 10, 0)
               .value() == 1u);
  BOOST_TEST(pool().pinned_blocks() == 3u);
  release(1);
  release(2);
  BOOST_TEST(pool().cached_blocks() == 1u); // q's second block
  BOOST_TEST(code(pool().pin(7, p, 10, 0)) == "unknown_tenant");
  cfg.max_pinned_blocks = 0;
  make(16);
  alloc(prompt_req(1, p));
  BOOST_TEST(code(pool().pin(0, p, 10, 0)) == "quota_exceeded");
  BOOST_TEST(pool().pinned_blocks() == 0u);
}

BOOST_AUTO_TEST_CASE(a_pinned_prefix_is_usable_when_the_pool_is_full) {
  cfg.max_pinned_blocks = 4;
  make(6);
  auto p = run(10, 9);
  alloc(prompt_req(1, p)); // 0 1 2
  BOOST_TEST(pool().pin(0, p, 100, 0).value() == 2u);
  release(1);               // 0 1 pinned, 2 free
  alloc(tokens_req(2, 12)); // 2 3 4: one block free
  // Two pinned hits and one fresh block: only the fresh one is taken.
  BOOST_TEST(try_alloc(prompt_req(3, p)) == "ok");
  BOOST_TEST((blocks(3) == ids{0, 1, 5}));
}

// -- victims ------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(victims_go_by_request_priority_then_tenant_priority) {
  cfg.tenants = {tenant_config{}, tenant("lo", 0, 0, priority::low),
                 tenant("hi", 0, 0, priority::high)};
  make(64);
  alloc(tokens_req(1, 8, "hi", priority::low));
  alloc(tokens_req(2, 8, "lo", priority::normal));
  alloc(tokens_req(3, 8, "", priority::low));
  alloc(tokens_req(4, 8, "lo", priority::low));
  alloc(tokens_req(5, 8, "hi", priority::normal));
  BOOST_TEST((pool().choose_victims(100) == reqs{4, 3, 1, 2, 5}));
  // It stops once the victims free enough: 2 + 2 + 2 >= 5.
  BOOST_TEST((pool().choose_victims(5) == reqs{4, 3, 1}));
  BOOST_TEST((pool().choose_victims(1) == reqs{4}));
  BOOST_TEST(pool().choose_victims(0).empty());
}

BOOST_AUTO_TEST_CASE(among_equals_the_tenant_furthest_over_its_fair_share_goes_first) {
  // Fair shares: 40 / 4 tenants = 10, but c's is its reservation, 12.
  cfg.tenants = {tenant_config{}, tenant("a"), tenant("b"), tenant("c", 0, 12)};
  make(40);
  alloc(tokens_req(6, 48, "c")); // 12
  alloc(tokens_req(1, 8, "a"));  // 2
  alloc(tokens_req(2, 8, "a"));  // 2
  alloc(tokens_req(3, 40, "a")); // 10: a holds 14, 4 over
  alloc(tokens_req(4, 8, "b"));  // 2
  alloc(tokens_req(5, 40, "b")); // 10: b holds 12, 2 over
  alloc(tokens_req(7, 4, "c"));  // 1: c holds 13, 1 over
  // a's newest, then b's (2 over beats c's 1), then c's until it is back at
  // its reservation (never below), then a and b alike: the newest.
  BOOST_TEST((pool().choose_victims(100) == reqs{3, 5, 7, 2, 4, 1}));
  BOOST_TEST((pool().choose_victims(20) == reqs{3, 5}));
}

BOOST_AUTO_TEST_CASE(a_tenant_at_or_below_its_reservation_is_never_a_victim) {
  cfg.tenants = {tenant_config{}, tenant("r", 0, 4, priority::low)};
  make(16);
  alloc(tokens_req(1, 16, "r", priority::low)); // exactly its 4
  alloc(tokens_req(2, 8, "", priority::high));
  BOOST_TEST((pool().choose_victims(100) == reqs{2}));
  alloc(tokens_req(3, 4, "r", priority::low)); // 5: one over
  BOOST_TEST((pool().choose_victims(100) == reqs{3, 2}));
  release(1); // 1: below
  BOOST_TEST((pool().choose_victims(100) == reqs{2}));
}

BOOST_AUTO_TEST_CASE(only_requests_holding_blocks_of_their_own_are_victims) {
  auto p = run(10, 8);
  alloc(prompt_req(1, p));  // 2 full blocks
  BOOST_REQUIRE(pool().fork(1, 2));
  alloc(tokens_req(3, 0));
  alloc(prompt_req(4, p)); // shares block 0; computes its last token anew
  BOOST_TEST(blocks(4)[0] == blocks(1)[0]);
  BOOST_TEST(blocks(4)[1] != blocks(1)[1]);
  BOOST_TEST((pool().choose_victims(100) == reqs{4}));
}

// -- admission headroom -------------------------------------------------------------

BOOST_AUTO_TEST_CASE(reserve_expected_keeps_room_for_the_promised_growth) {
  cfg.admission.policy = "reserve_expected";
  cfg.admission.default_expected_output = 12;
  make(16);
  auto req = [](request_id id, std::uint64_t out, std::uint64_t max_len = 1000) {
    auto r = tokens_req(id, 4);
    r.expected_output_tokens = out;
    r.max_sequence_length = max_len;
    return r;
  };
  alloc(req(1, 100, 48)); // 1 block now, 12 expected: 11 promised
  // Each of these takes 1 block, leaving 14 free for 11 + its own growth.
  BOOST_TEST(pool().can_allocate(req(2, 12)));       // 4 blocks: grows 3
  BOOST_TEST(!pool().can_allocate(req(2, 13)));      // 5 blocks: grows 4
  BOOST_TEST(pool().can_allocate(req(2, 0)));        // the default, 12
  BOOST_TEST(pool().can_allocate(req(2, 1000, 16))); // capped at 16 tokens
  BOOST_TEST(!pool().can_allocate(req(2, 1000, 17)));
  auto refused = pool().allocate(req(2, 13));
  BOOST_REQUIRE(!refused);
  BOOST_TEST(code(refused.error()) == "out_of_blocks");
  BOOST_TEST(render(refused.error()).find("headroom") != std::string::npos);
  BOOST_TEST(try_alloc(req(2, 13)) == "out_of_blocks");
  BOOST_TEST(try_alloc(req(2, 12)) == "ok");
  // 14 free, 14 promised: nothing more is admitted...
  BOOST_TEST(try_alloc(req(3, 0, 4)) == "out_of_blocks");
  // ...but extends are never refused for headroom, past promises included.
  BOOST_TEST(code(pool().extend(2, 40, nullptr)) == "ok"); // 10 blocks
  BOOST_TEST(code(pool().extend(1, 16, nullptr)) == "ok"); // the last 4
  BOOST_TEST(pool().free_blocks() == 0u);
  BOOST_TEST(code(pool().extend(1, 1, nullptr)) == "out_of_blocks");
  // Ending a request returns its blocks and its promise.
  release(1);
  BOOST_TEST(try_alloc(req(3, 4)) == "ok"); // 5 free: 1 + 1 growth
  // The same requests under "immediate" are all admitted.
  cfg.admission.policy = "immediate";
  make(16);
  alloc(req(1, 100, 48));
  alloc(req(2, 13));
  alloc(req(3, 1000));
}

BOOST_AUTO_TEST_CASE(growth_within_the_promise_leaves_admissions_unchanged) {
  cfg.admission.policy = "reserve_expected";
  cfg.admission.default_expected_output = 20;
  make(16);
  auto req = [](request_id id, std::uint64_t out) {
    auto r = tokens_req(id, 4);
    r.expected_output_tokens = out;
    return r;
  };
  alloc(tokens_req(1, 4)); // 1 block, 24 tokens expected: 5 promised
  alloc(tokens_req(2, 4)); // 14 free, 10 promised
  // A third takes 1 and leaves 13: room for 10 and its own 3, not 4.
  BOOST_TEST(pool().can_allocate(req(3, 12)));
  BOOST_TEST(!pool().can_allocate(req(3, 16)));
  // Growing within the promise takes promised blocks: nothing changes.
  BOOST_REQUIRE(pool().extend(1, 16, nullptr)); // 5 blocks of its 6
  BOOST_TEST(pool().can_allocate(req(3, 12)));
  BOOST_TEST(!pool().can_allocate(req(3, 16)));
  // Growing past it eats the headroom.
  BOOST_REQUIRE(pool().extend(1, 8, nullptr)); // 7 blocks
  BOOST_TEST(!pool().can_allocate(req(3, 12)));
  BOOST_TEST(try_alloc(req(3, 8)) == "ok");
}

BOOST_AUTO_TEST_CASE(the_watermark_holds_blocks_back_from_admissions_only) {
  cfg.admission.watermark = 0.25; // 4 of 16
  make(16);
  alloc(tokens_req(1, 44)); // 11
  alloc(tokens_req(2, 4));  // 12: exactly 4 left
  BOOST_TEST(try_alloc(tokens_req(3, 1)) == "out_of_blocks");
  alloc(tokens_req(3, 0)); // takes nothing
  BOOST_TEST(code(pool().extend(2, 16, nullptr)) == "ok");
  BOOST_TEST(pool().free_blocks() == 0u);
  step_request step;
  step.admits.push_back(tokens_req(4, 1));
  release(1);
  auto r = pool().run_step(step);
  BOOST_TEST(r.admitted.size() == 1u); // 11 free, 10 left
  step.admits = {tokens_req(5, 28), tokens_req(6, 1)};
  r = pool().run_step(step);
  BOOST_TEST(r.admitted.size() == 0u);
  BOOST_TEST(r.admission_blocked);
  BOOST_TEST(r.blocked == 5u);
}

BOOST_AUTO_TEST_SUITE_END()
