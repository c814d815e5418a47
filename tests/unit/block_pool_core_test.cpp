// block_pool_core driven directly, one documented promise per case: sizes,
// prefix sharing, copy-on-write, eviction order, tenants, the step's policy.
// Every case ends with check_invariant() passing (the fixture checks it).
#include <cstdint>
#include <limits>
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

constexpr std::uint64_t u64_max = std::numeric_limits<std::uint64_t>::max();

/// block_size 4, a tiny model, one default tenant.
cache_config small_config() {
  cache_config cfg;
  cfg.block_size = 4;
  cfg.model = model_config{2, 2, 8, dtype::fp16};
  cfg.storage = "none";
  cfg.tenants = {tenant_config{}};
  return cfg;
}

tenant_config tenant(std::string name, std::uint64_t max_blocks = 0,
                     std::uint64_t reserved = 0, std::string ns = "") {
  tenant_config t;
  t.name = std::move(name);
  t.max_blocks = max_blocks;
  t.reserved_blocks = reserved;
  t.prefix_namespace = std::move(ns);
  return t;
}

std::vector<token_id> operator+(std::vector<token_id> x,
                                const std::vector<token_id>& y) {
  x.insert(x.end(), y.begin(), y.end());
  return x;
}

std::string str(const std::vector<block_copy>& xs) {
  std::ostringstream out;
  for (auto& c : xs)
    out << '(' << c.src << "->" << c.dst << ')';
  return out.str();
}

/// Everything observable about `pool` as text; allocation failures (which a
/// failed operation does count) only if `with_failures`.
std::string describe(const block_pool_core& pool, bool with_failures) {
  std::ostringstream out;
  std::map<request_id, const detail::sequence*> seqs;
  pool.for_each_sequence([&](const detail::sequence& s) { seqs[s.id] = &s; });
  for (auto& [id, s] : seqs) {
    out << "req " << id << " cache " << s->cache_id << " tenant " << s->tenant
        << " tokens " << s->num_tokens << " blocks";
    for (auto b : s->blocks)
      out << ' ' << b;
    out << " hashed " << s->hashable << '/' << s->num_hashed << '\n';
  }
  out << "used " << pool.used_blocks() << " cached " << pool.cached_blocks()
      << " free " << pool.free_blocks() << '\n';
  auto& c = pool.counters();
  out << "counters " << c.allocations << ' ' << c.blocks_allocated << ' '
      << c.prefix_hit_blocks << ' ' << c.blocks_freed << ' ' << c.blocks_cached
      << ' ' << c.evictions << ' ' << c.cow_copies << ' ' << c.preemptions << ' '
      << c.query_tokens << ' ' << c.hit_tokens;
  if (with_failures)
    out << ' ' << c.allocation_failures;
  out << '\n';
  for (auto& t : pool.tenants()) {
    out << "tenant " << t.config.name << ' ' << t.used << ' ' << t.active << ' '
        << t.query_tokens << ' ' << t.hit_tokens << ' ' << t.preemptions;
    if (with_failures)
      out << ' ' << t.failures;
    out << '\n';
  }
  return out.str();
}

/// A pool (16 blocks of 4 tokens by default) whose invariant is checked when
/// the case ends.
struct pool_fixture {
  cache_config cfg = small_config();
  std::unique_ptr<block_pool_core> pool_;

  pool_fixture() {
    make(16);
  }

  ~pool_fixture() {
    if (pool_)
      BOOST_TEST(invariant(*pool_) == "ok");
  }

  block_pool_core& make(std::uint32_t num_blocks) {
    if (pool_)
      BOOST_TEST(invariant(*pool_) == "ok");
    pool_ = std::make_unique<block_pool_core>(cfg, num_blocks);
    return *pool_;
  }

  block_pool_core& pool() {
    return *pool_;
  }

  std::vector<block_id> blocks(request_id id) const {
    auto s = pool_->find(id);
    return s ? s->blocks : std::vector<block_id>{};
  }

  std::uint64_t tokens(request_id id) const {
    auto s = pool_->find(id);
    return s ? s->num_tokens : 0;
  }

  /// Allocates and requires success; returns the hit tokens.
  std::uint64_t alloc(const allocation_request& req) {
    auto res = pool().allocate(req);
    if (!res)
      BOOST_FAIL("allocate " << req.id << ": " << render(res.error()));
    BOOST_TEST(invariant(pool()) == "ok");
    return res->hit_tokens;
  }

  void release(request_id id) {
    auto res = pool().release(id);
    if (!res)
      BOOST_FAIL("release " << id << ": " << render(res.error()));
    BOOST_TEST(invariant(pool()) == "ok");
  }
};

using ids = std::vector<block_id>;

} // namespace

BOOST_AUTO_TEST_SUITE(block_pool_core_suite)

// -- allocation ---------------------------------------------------------------

BOOST_FIXTURE_TEST_CASE(allocate_gives_ceil_n_over_block_size_blocks, pool_fixture) {
  make(64);
  std::uint64_t used = 0;
  block_id next = 0;
  for (std::uint64_t n = 0; n <= 13; ++n) {
    alloc(tokens_req(100 + n, n));
    auto want = (n + 3) / 4;
    BOOST_TEST(blocks(100 + n).size() == want);
    BOOST_TEST(tokens(100 + n) == n);
    auto table = pool().table(*pool().find(100 + n));
    BOOST_TEST(table.num_tokens == n);
    BOOST_TEST(table.block_size == 4u);
    // Fresh blocks come off the free list in order: 0, 1, 2, ...
    for (auto b : blocks(100 + n))
      BOOST_TEST(b == next++);
    used += want;
    BOOST_TEST(pool().used_blocks() == used);
  }
  // A prompt's length is the token count, with initial_tokens 0 or equal.
  alloc(prompt_req(1, run(1, 5)));
  BOOST_TEST(blocks(1).size() == 2u);
  BOOST_TEST(tokens(1) == 5u);
  auto req = prompt_req(2, run(50, 9));
  req.initial_tokens = 9;
  alloc(req);
  BOOST_TEST(blocks(2).size() == 3u);
  BOOST_TEST(pool().counters().allocations == 16u);
  BOOST_TEST(pool().num_sequences() == 16u);
  BOOST_TEST(pool().free_blocks() == 64 - pool().used_blocks());
}

BOOST_FIXTURE_TEST_CASE(prompt_prefix_is_shared_and_last_token_always_computed,
                        pool_fixture) {
  auto p = run(100, 12); // exactly 3 blocks
  BOOST_TEST(alloc(prompt_req(1, p)) == 0u);
  BOOST_TEST((blocks(1) == ids{0, 1, 2}));
  // The same 3-block prompt shares only 2: its last token must be computed.
  BOOST_TEST(alloc(prompt_req(2, p)) == 8u);
  BOOST_TEST((blocks(2) == ids{0, 1, 3}));
  // One token more and all 3 full blocks are shared.
  BOOST_TEST(alloc(prompt_req(3, p + std::vector<token_id>{7})) == 12u);
  BOOST_TEST((blocks(3) == ids{0, 1, 2, 4}));
  // A one-block prompt shares nothing.
  BOOST_TEST(alloc(prompt_req(4, run(100, 4))) == 0u);
  BOOST_TEST((blocks(4) == ids{5}));
  // A prompt that differs in its first block shares nothing after it either.
  auto q = p;
  q[0] = 999;
  BOOST_TEST(alloc(prompt_req(5, q + std::vector<token_id>{7})) == 0u);
  BOOST_TEST(pool().used_blocks() == 10u);
  auto& c = pool().counters();
  BOOST_TEST(c.query_tokens == 12u + 12 + 13 + 4 + 13);
  BOOST_TEST(c.hit_tokens == 20u);
  BOOST_TEST(c.prefix_hit_blocks == 5u);
  BOOST_TEST(pool().tenants()[0].hit_tokens == 20u);
}

BOOST_FIXTURE_TEST_CASE(hit_pins_cached_block_so_fresh_allocation_cannot_evict_it,
                        pool_fixture) {
  make(8);
  auto a = run(10, 9);
  alloc(prompt_req(1, a)); // 0 1 2
  release(1);              // 2 free; LRU 1, 0
  alloc(prompt_req(2, run(60, 5))); // 2 3
  release(2);                       // 3 free; LRU 1, 0, 2
  alloc(tokens_req(3, 20));         // 3 4 5 6 7: nothing free, 3 cached
  BOOST_TEST((blocks(3) == ids{3, 4, 5, 6, 7}));
  BOOST_TEST(pool().cached_blocks() == 3u);
  // Hits 0 and 1 sit at the front of the LRU; they are pinned before the
  // fresh block is taken, so the eviction takes block 2 instead.
  auto b = std::vector<token_id>(a.begin(), a.begin() + 8) + std::vector<token_id>{5};
  BOOST_TEST(alloc(prompt_req(4, b)) == 8u);
  BOOST_TEST((blocks(4) == ids{0, 1, 2}));
  BOOST_TEST(pool().counters().evictions == 1u);
  BOOST_TEST(pool().cached_blocks() == 0u);
  BOOST_TEST(pool().used_blocks() == 8u);
}

BOOST_FIXTURE_TEST_CASE(failed_allocation_changes_nothing, pool_fixture) {
  cfg.tenants = {tenant_config{}, tenant("q", 6)};
  // Two pools in the same state; only the first sees the failing requests.
  auto setup = [&](block_pool_core& p) {
    BOOST_REQUIRE(p.allocate(prompt_req(1, run(10, 9))));
    BOOST_REQUIRE(p.allocate(tokens_req(2, 14)));
    BOOST_REQUIRE(p.allocate(prompt_req(3, run(40, 13), "q")));
    BOOST_REQUIRE(p.release(1)); // two cached blocks
  };
  auto follow_up = [&](block_pool_core& p) {
    BOOST_REQUIRE(p.allocate(prompt_req(10, run(10, 9))));
    BOOST_REQUIRE(p.release(3));
    BOOST_REQUIRE(p.allocate(tokens_req(11, 20)));
    BOOST_REQUIRE(p.extend(2, 10, nullptr));
    BOOST_TEST(p.evict(2) == 2u);
    BOOST_REQUIRE(p.allocate(tokens_req(12, 8)));
  };
  block_pool_core twin(cfg, 16);
  setup(twin);
  setup(make(16));
  BOOST_TEST(pool().cached_blocks() == 2u);
  auto before = describe(pool(), false);
  auto failures = pool().counters().allocation_failures;
  // Out of blocks, with a cached prefix that would have been revived.
  BOOST_TEST(code(pool().allocate(prompt_req(20, run(10, 8) + run(0, 30)))) == "out_of_blocks");
  BOOST_TEST(describe(pool(), false) == before);
  // Out of blocks by one, where taking blocks would have meant evicting.
  BOOST_TEST(code(pool().allocate(tokens_req(21, 4 * 8 + 1))) == "out_of_blocks");
  BOOST_TEST(describe(pool(), false) == before);
  // Over the quota.
  BOOST_TEST(code(pool().allocate(tokens_req(22, 9, "q"))) == "quota_exceeded");
  BOOST_TEST(describe(pool(), false) == before);
  BOOST_TEST(invariant(pool()) == "ok");
  BOOST_TEST(pool().counters().allocation_failures == failures + 3);
  BOOST_TEST(pool().tenants()[0].failures == 2u);
  BOOST_TEST(pool().tenants()[1].failures == 1u);
  BOOST_TEST(!pool().find(20));
  // Free and LRU order too: the same operations give the same blocks.
  follow_up(pool());
  follow_up(twin);
  BOOST_TEST(describe(pool(), false) == describe(twin, false));
}

BOOST_FIXTURE_TEST_CASE(can_allocate_answers_what_allocate_would_do, pool_fixture) {
  make(4);
  alloc(prompt_req(1, run(10, 9))); // 3 blocks
  release(1);                       // 2 cached, 2 free
  BOOST_TEST(pool().can_allocate(tokens_req(2, 16)));
  BOOST_TEST(!pool().can_allocate(tokens_req(2, 17)));
  // Reviving a cached hit takes it from the pool as much as a fresh block.
  BOOST_TEST(pool().can_allocate(prompt_req(2, run(10, 8) + run(0, 8))));
  BOOST_TEST(!pool().can_allocate(prompt_req(2, run(10, 8) + run(0, 9))));
  auto before = describe(pool(), true);
  BOOST_TEST(!pool().can_allocate(tokens_req(2, 1, "nobody")));
  BOOST_TEST(describe(pool(), true) == before);
  alloc(tokens_req(2, 1));
  BOOST_TEST(!pool().can_allocate(tokens_req(2, 1))); // duplicate
}

// -- extend, fork, release ------------------------------------------------------

BOOST_FIXTURE_TEST_CASE(extend_past_max_sequence_length_fails_and_changes_nothing,
                        pool_fixture) {
  alloc(tokens_req(1, 6, "", 10));
  auto before = describe(pool(), true);
  BOOST_TEST(code(pool().extend(1, 5, nullptr)) == "exceeds_max_sequence_length");
  BOOST_TEST(describe(pool(), true) == before);
  auto ok = pool().extend(1, 4, nullptr);
  BOOST_REQUIRE(ok);
  BOOST_TEST(ok->changed);
  BOOST_TEST(ok->first_changed == 2u);
  BOOST_TEST((blocks(1) == ids{0, 1, 2}));
  BOOST_TEST(tokens(1) == 10u);
  before = describe(pool(), true);
  BOOST_TEST(code(pool().extend(1, 1, nullptr)) == "exceeds_max_sequence_length");
  BOOST_TEST(describe(pool(), true) == before);
  // Growing by nothing is allowed, even at the limit.
  auto none = pool().extend(1, 0, nullptr);
  BOOST_REQUIRE(none);
  BOOST_TEST(!none->changed);
  BOOST_TEST(describe(pool(), true) == before);
}

BOOST_FIXTURE_TEST_CASE(token_counts_near_the_integer_limit_fail_cleanly,
                        pool_fixture) {
  alloc(tokens_req(1, 5, "", 100));
  auto before = describe(pool(), true);
  // 5 + n wraps around to a small number: still past max_sequence_length.
  for (auto n : {u64_max, u64_max - 2, u64_max - 4})
    BOOST_TEST(code(pool().extend(1, n, nullptr)) == "exceeds_max_sequence_length");
  BOOST_TEST(describe(pool(), true) == before);
  // The same through a copy-on-write, where a wrapped block count once
  // cancelled out the copy and the loop took blocks forever.
  alloc(tokens_req(4, 6, "", 100));
  BOOST_REQUIRE(pool().fork(4, 5));
  before = describe(pool(), true);
  BOOST_TEST(code(pool().extend(5, u64_max - 3, nullptr)) == "exceeds_max_sequence_length");
  BOOST_TEST(describe(pool(), true) == before);
  // A limit near 2^64 and a count whose block count overflows a naive
  // ceil(n / block_size): too many blocks, not zero blocks.
  for (auto n : {u64_max, u64_max - 1, u64_max - 2})
    BOOST_TEST(code(pool().allocate(tokens_req(2, n, "", u64_max))) == "out_of_blocks");
  alloc(tokens_req(3, 0, "", u64_max));
  for (auto n : {u64_max, u64_max - 1, u64_max - 2})
    BOOST_TEST(code(pool().extend(3, n, nullptr)) == "out_of_blocks");
  BOOST_TEST(blocks(3).empty());
  BOOST_TEST(tokens(3) == 0u);
}

BOOST_FIXTURE_TEST_CASE(quota_is_checked_without_overflow, pool_fixture) {
  cfg.block_size = 1;
  cfg.tenants = {tenant_config{}, tenant("q", 5)};
  make(16);
  alloc(tokens_req(1, 2, "q"));
  // 2 used + (2^64 - 1) needed wraps to 1, which must not pass the quota.
  BOOST_TEST(code(pool().allocate(tokens_req(2, u64_max, "q", u64_max))) == "quota_exceeded");
  BOOST_TEST(code(pool().allocate(tokens_req(2, 4, "q"))) == "quota_exceeded");
  alloc(tokens_req(2, 3, "q"));
}

BOOST_FIXTURE_TEST_CASE(extend_into_shared_block_copies_on_write, pool_fixture) {
  alloc(tokens_req(1, 6)); // 0 1, block 1 half full
  auto forked = pool().fork(1, 2);
  BOOST_REQUIRE(forked);
  BOOST_TEST((blocks(2) == ids{0, 1}));
  auto res = pool().extend(2, 1, nullptr);
  BOOST_REQUIRE(res);
  BOOST_TEST(str(res->copies) == "(1->2)");
  BOOST_TEST(res->changed);
  BOOST_TEST(res->first_changed == 1u);
  BOOST_TEST((blocks(2) == ids{0, 2}));
  BOOST_TEST((blocks(1) == ids{0, 1})); // the parent keeps the original
  BOOST_TEST(pool().counters().cow_copies == 1u);
  BOOST_TEST(pool().used_blocks() == 3u);
  // Block 1 is the parent's alone now: it appends in place.
  res = pool().extend(1, 2, nullptr);
  BOOST_REQUIRE(res);
  BOOST_TEST(res->copies.empty());
  BOOST_TEST(!res->changed);
  BOOST_TEST((blocks(1) == ids{0, 1}));
  // A full shared last block is never written: appending takes a new block.
  alloc(tokens_req(3, 8)); // 3 4
  BOOST_REQUIRE(pool().fork(3, 4));
  res = pool().extend(4, 1, nullptr);
  BOOST_REQUIRE(res);
  BOOST_TEST(res->copies.empty());
  BOOST_TEST(res->first_changed == 2u);
  BOOST_TEST((blocks(4) == ids{3, 4, 5}));
  // A copy that does not fit fails and changes nothing.
  make(3);
  alloc(tokens_req(1, 6));
  BOOST_REQUIRE(pool().fork(1, 2));
  alloc(tokens_req(3, 1));
  auto before = describe(pool(), true);
  BOOST_TEST(code(pool().extend(2, 1, nullptr)) == "out_of_blocks");
  BOOST_TEST(describe(pool(), true) == before);
}

BOOST_FIXTURE_TEST_CASE(fork_shares_every_block, pool_fixture) {
  alloc(prompt_req(1, run(10, 10))); // 0 1 2
  auto res = pool().fork(1, 2);
  BOOST_REQUIRE(res);
  BOOST_TEST(res->hit_tokens == 0u);
  BOOST_TEST(res->cache_id != pool().find(1)->cache_id);
  BOOST_TEST((blocks(2) == ids{0, 1, 2}));
  BOOST_TEST(tokens(2) == 10u);
  BOOST_TEST(pool().used_blocks() == 3u);
  BOOST_TEST(pool().counters().allocations == 2u);
  BOOST_TEST(pool().counters().blocks_allocated == 3u);
  BOOST_TEST(pool().tenants()[0].active == 2u);
  // The parent can end first; the child keeps every block.
  BOOST_TEST(*pool().release(1) == 0u);
  BOOST_TEST((blocks(2) == ids{0, 1, 2}));
  BOOST_TEST(pool().used_blocks() == 3u);
  BOOST_TEST(*pool().release(2) == 3u);
  BOOST_TEST(pool().used_blocks() == 0u);
  // The fork inherited the hashing state: its own decode blocks get indexed.
  alloc(prompt_req(3, run(500, 6)));
  BOOST_REQUIRE(pool().fork(3, 4));
  auto more = run(506, 2);
  BOOST_REQUIRE(pool().extend(4, 2, more.data()));
  BOOST_TEST(alloc(prompt_req(5, run(500, 9))) == 8u);
}

BOOST_FIXTURE_TEST_CASE(release_returns_blocks_and_keeps_hashed_ones_cached,
                        pool_fixture) {
  alloc(prompt_req(1, run(10, 10))); // 0 1 2; 0 and 1 full and hashed
  auto freed = pool().release(1);
  BOOST_REQUIRE(freed);
  BOOST_TEST(*freed == 3u);
  BOOST_TEST(pool().used_blocks() == 0u);
  BOOST_TEST(pool().cached_blocks() == 2u);
  BOOST_TEST(pool().free_blocks() == 16u); // cached blocks count as free
  BOOST_TEST(pool().tenants()[0].active == 0u);
  BOOST_TEST(!pool().find(1));
  // The same prompt finds both cached blocks again; block 2, released first
  // and not indexed, is on top of the free stack.
  BOOST_TEST(alloc(prompt_req(2, run(10, 10))) == 8u);
  BOOST_TEST((blocks(2) == ids{0, 1, 2}));
  BOOST_TEST(pool().cached_blocks() == 0u);
  BOOST_TEST(pool().used_blocks() == 3u);
  BOOST_TEST(pool().counters().blocks_freed == 3u);
}

BOOST_FIXTURE_TEST_CASE(eviction_is_lru_and_tail_blocks_of_a_sequence_go_first,
                        pool_fixture) {
  alloc(prompt_req(1, run(10, 9))); // 0 1 2
  alloc(prompt_req(2, run(50, 9))); // 3 4 5
  release(1); // LRU: 1 0
  release(2); // LRU: 1 0 4 3
  pool().record_events(true);
  BOOST_TEST(pool().evict(3) == 3u);
  auto events = pool().take_events();
  BOOST_REQUIRE(events.size() == 3u);
  BOOST_TEST(!events[0].stored);
  BOOST_TEST(events[0].block == 1u);
  BOOST_TEST(events[1].block == 0u);
  BOOST_TEST(events[2].block == 4u);
  BOOST_TEST(pool().counters().evictions == 3u);
  BOOST_TEST(pool().evict(5) == 1u); // only block 3 was left
  BOOST_TEST(pool().evict(5) == 0u);
  // Lower retention levels go first, whenever released: a low-priority
  // request's blocks before a normal one's released earlier.
  auto normal = prompt_req(3, run(70, 5));
  auto low = prompt_req(4, run(90, 5));
  low.priority = priority::low;
  auto high = prompt_req(5, run(110, 5));
  high.priority = priority::high;
  alloc(high);
  alloc(normal);
  alloc(low);
  auto hb = blocks(5)[0];
  auto nb = blocks(3)[0];
  auto lb = blocks(4)[0];
  release(5);
  release(3);
  release(4);
  pool().take_events();
  BOOST_TEST(pool().evict(1) == 1u);
  BOOST_TEST(pool().take_events()[0].block == lb);
  BOOST_TEST(pool().evict(1) == 1u);
  BOOST_TEST(pool().take_events()[0].block == nb);
  BOOST_TEST(pool().evict(1) == 1u);
  BOOST_TEST(pool().take_events()[0].block == hb);
}

BOOST_FIXTURE_TEST_CASE(a_full_pool_evicts_the_least_recently_released_block,
                        pool_fixture) {
  make(4);
  alloc(prompt_req(1, run(10, 5))); // 0 1
  alloc(prompt_req(2, run(50, 5))); // 2 3
  release(2); // 3 free, LRU: 2
  release(1); // 1 free, LRU: 2 0
  alloc(tokens_req(3, 12)); // 1 3, then evicts 2
  BOOST_TEST((blocks(3) == ids{1, 3, 2}));
  BOOST_TEST(pool().counters().evictions == 1u);
  release(3);
  BOOST_TEST(alloc(prompt_req(4, run(10, 5))) == 4u); // 0 survived
  BOOST_TEST(alloc(prompt_req(5, run(50, 5))) == 0u); // 2 did not
}

// -- rejected requests ------------------------------------------------------------

BOOST_FIXTURE_TEST_CASE(duplicate_and_unknown_ids_are_rejected, pool_fixture) {
  alloc(tokens_req(1, 5));
  auto before = describe(pool(), true);
  BOOST_TEST(code(pool().allocate(tokens_req(1, 1))) == "duplicate_request");
  BOOST_TEST(code(pool().allocate(prompt_req(1, run(0, 3)))) == "duplicate_request");
  BOOST_TEST(code(pool().extend(9, 1, nullptr)) == "unknown_request");
  BOOST_TEST(code(pool().extend(9, 0, nullptr)) == "unknown_request");
  BOOST_TEST(code(pool().release(9)) == "unknown_request");
  BOOST_TEST(code(pool().preempt(9)) == "unknown_request");
  BOOST_TEST(code(pool().fork(9, 2)) == "unknown_request");
  BOOST_TEST(code(pool().fork(1, 1)) == "duplicate_request");
  alloc(tokens_req(2, 1));
  before = describe(pool(), true);
  BOOST_TEST(code(pool().fork(1, 2)) == "duplicate_request");
  BOOST_TEST(describe(pool(), true) == before);
  // Rejected requests are not allocation failures (no lack of blocks).
  BOOST_TEST(pool().counters().allocation_failures == 0u);
  // An id is free again once its request ended.
  release(1);
  BOOST_TEST(code(pool().release(1)) == "unknown_request");
  alloc(tokens_req(1, 1));
}

BOOST_FIXTURE_TEST_CASE(shape_mismatch_and_unknown_tenant_are_rejected,
                        pool_fixture) {
  auto before = describe(pool(), true);
  auto expect = [&](allocation_request req, const std::string& want) {
    BOOST_TEST(code(pool().allocate(req)) == want);
    BOOST_TEST(!pool().can_allocate(req));
    BOOST_TEST(describe(pool(), true) == before);
  };
  auto req = tokens_req(1, 4);
  req.num_layers = 3;
  expect(req, "invalid_request");
  req = tokens_req(1, 4);
  req.num_heads = 4;
  expect(req, "invalid_request");
  req = tokens_req(1, 4);
  req.head_dim = 64;
  expect(req, "invalid_request");
  req = tokens_req(1, 4);
  req.dtype = dtype::bf16;
  expect(req, "invalid_request");
  expect(tokens_req(1, 0, "", 0), "invalid_request"); // max_sequence_length 0
  req = prompt_req(1, run(0, 5));
  req.initial_tokens = 4;
  expect(req, "invalid_request");
  expect(prompt_req(1, {1, 2, -3}), "invalid_request");
  expect(tokens_req(1, 11, "", 10), "exceeds_max_sequence_length");
  expect(prompt_req(1, run(0, 11), "", 10), "exceeds_max_sequence_length");
  expect(tokens_req(1, 4, "nobody"), "unknown_tenant");
  // The tenant is checked first: "nobody" wins over a bad shape.
  req = tokens_req(1, 4, "nobody");
  req.num_layers = 1;
  expect(req, "unknown_tenant");
  // The default tenant answers to "" and to its name.
  alloc(tokens_req(1, 4, "default"));
  alloc(tokens_req(2, 4, ""));
  BOOST_TEST(pool().tenants()[0].active == 2u);
}

BOOST_FIXTURE_TEST_CASE(extend_rejects_negative_token_ids, pool_fixture) {
  alloc(prompt_req(1, run(0, 3)));
  auto before = describe(pool(), true);
  std::vector<token_id> bad{4, -1};
  BOOST_TEST(code(pool().extend(1, 2, bad.data())) == "invalid_request");
  BOOST_TEST(describe(pool(), true) == before);
}

// -- tenants ------------------------------------------------------------------------

BOOST_FIXTURE_TEST_CASE(quota_exceeded_at_exactly_quota_plus_one, pool_fixture) {
  cfg.tenants = {tenant_config{}, tenant("q", 5)};
  make(16);
  alloc(tokens_req(1, 20, "q")); // 5 blocks: exactly the quota
  BOOST_TEST(code(pool().allocate(tokens_req(2, 1, "q"))) == "quota_exceeded");
  BOOST_TEST(code(pool().extend(1, 1, nullptr)) == "quota_exceeded");
  BOOST_TEST(pool().can_allocate(tokens_req(2, 0, "q"))); // no blocks needed
  alloc(tokens_req(3, 20)); // other tenants are not affected
  release(1);
  BOOST_TEST(code(pool().allocate(tokens_req(2, 21, "q"))) == "quota_exceeded");
  alloc(tokens_req(2, 20, "q"));
  BOOST_TEST(pool().tenants()[1].used == 5u);
  BOOST_TEST(pool().tenants()[1].failures == 2u); // extend failures don't count
  release(2);
  // Reviving a cached block charges the tenant like a fresh one.
  alloc(prompt_req(4, run(10, 9), "q")); // 3 blocks
  release(4);                            // 2 cached
  alloc(tokens_req(5, 12, "q"));         // 3 blocks
  BOOST_TEST(code(pool().allocate(prompt_req(6, run(10, 9), "q"))) == "quota_exceeded");
  // A hit on a block the tenant already uses is free of charge.
  release(5);
  alloc(prompt_req(6, run(10, 9), "q")); // revives 2, takes 1
  BOOST_TEST(alloc(prompt_req(7, run(10, 9), "q")) == 8u);
  BOOST_TEST(pool().tenants()[1].used == 4u);
}

BOOST_FIXTURE_TEST_CASE(reservations_hold_blocks_for_their_tenant, pool_fixture) {
  cfg.tenants = {tenant_config{}, tenant("r", 0, 6)};
  make(16);
  BOOST_TEST(code(pool().allocate(tokens_req(1, 44))) == "out_of_blocks"); // 11 > 10
  alloc(tokens_req(1, 40)); // 10
  BOOST_TEST(code(pool().allocate(tokens_req(2, 1))) == "out_of_blocks");
  BOOST_TEST(pool().free_blocks() == 6u);
  alloc(tokens_req(3, 12, "r")); // 3 of its 6
  BOOST_TEST(code(pool().allocate(tokens_req(2, 1))) == "out_of_blocks");
  alloc(tokens_req(4, 12, "r")); // the other 3
  BOOST_TEST(pool().free_blocks() == 0u);
  // Past its reservation, r competes like anyone.
  release(1);
  alloc(tokens_req(5, 40, "r"));
  BOOST_TEST(pool().tenants()[1].used == 16u);
  BOOST_TEST(code(pool().allocate(tokens_req(2, 1))) == "out_of_blocks");
  // Once r falls below its reservation again, the shortfall is held anew.
  release(5);
  release(4);
  release(3);
  BOOST_TEST(code(pool().allocate(tokens_req(2, 44))) == "out_of_blocks");
  alloc(tokens_req(2, 40));
  // Cached blocks are free blocks for the reservation too.
  alloc(prompt_req(6, run(0, 24), "r")); // 6 full blocks, all indexed
  release(6);                            // 6 cached, none free
  BOOST_TEST(pool().cached_blocks() == 6u);
  BOOST_TEST(code(pool().allocate(tokens_req(8, 1))) == "out_of_blocks");
  alloc(tokens_req(7, 24, "r")); // evicts to serve r
  BOOST_TEST(pool().counters().evictions == 6u);
}

BOOST_FIXTURE_TEST_CASE(tenants_do_not_share_prefixes_unless_same_namespace,
                        pool_fixture) {
  cfg.tenants = {tenant_config{}, tenant("a"), tenant("b"), tenant("c", 0, 0, "team"),
                 tenant("d", 0, 0, "team")};
  make(32);
  auto p = run(10, 9);
  alloc(prompt_req(1, p, "a"));
  BOOST_TEST(alloc(prompt_req(2, p, "b")) == 0u);
  BOOST_TEST(alloc(prompt_req(3, p, "")) == 0u);
  BOOST_TEST(alloc(prompt_req(4, p, "c")) == 0u);
  BOOST_TEST(alloc(prompt_req(5, p, "d")) == 8u); // c's blocks
  BOOST_TEST(alloc(prompt_req(6, p, "a")) == 8u);
  // Sharing across tenants charges the block to whoever took it first.
  BOOST_TEST((blocks(5)[0] == blocks(4)[0]));
  BOOST_TEST(pool().tenants()[3].used == 3u);
  BOOST_TEST(pool().tenants()[4].used == 1u);
  release(4);
  BOOST_TEST(pool().tenants()[3].used == 2u); // still charged for d's hits
  BOOST_TEST(pool().tenants()[4].hit_tokens == 8u);
  BOOST_TEST(pool().tenants()[3].hit_tokens == 0u);
}

// -- reclaim, preempt ------------------------------------------------------------------

BOOST_FIXTURE_TEST_CASE(reclaim_ignores_a_newer_request_with_the_same_id,
                        pool_fixture) {
  auto first = pool().allocate(tokens_req(5, 8));
  BOOST_REQUIRE(first);
  release(5);
  auto second = pool().allocate(tokens_req(5, 4));
  BOOST_REQUIRE(second);
  BOOST_TEST(first->cache_id != second->cache_id);
  auto before = describe(pool(), true);
  auto stale = pool().reclaim(5, first->cache_id);
  BOOST_REQUIRE(stale);
  BOOST_TEST(*stale == 0u);
  BOOST_TEST(describe(pool(), true) == before);
  auto gone = pool().reclaim(6, first->cache_id); // no such request: nothing
  BOOST_REQUIRE(gone);
  BOOST_TEST(*gone == 0u);
  auto live = pool().reclaim(5, second->cache_id);
  BOOST_REQUIRE(live);
  BOOST_TEST(*live == 1u);
  BOOST_TEST(!pool().find(5));
  BOOST_TEST(pool().counters().preemptions == 0u);
}

BOOST_FIXTURE_TEST_CASE(preempt_releases_and_counts, pool_fixture) {
  cfg.tenants = {tenant_config{}, tenant("t")};
  make(16);
  alloc(prompt_req(1, run(0, 9), "t"));
  auto res = pool().preempt(1);
  BOOST_REQUIRE(res);
  BOOST_TEST(*res == 3u);
  BOOST_TEST(!pool().find(1));
  BOOST_TEST(pool().counters().preemptions == 1u);
  BOOST_TEST(pool().tenants()[1].preemptions == 1u);
  BOOST_TEST(pool().cached_blocks() == 2u); // recompute finds its prefix
  BOOST_TEST(alloc(prompt_req(1, run(0, 9), "t")) == 8u);
}

// -- the step -------------------------------------------------------------------------

namespace {

extend_op grow(request_id id, std::uint32_t n) {
  return extend_op{id, n};
}

} // namespace

BOOST_FIXTURE_TEST_CASE(run_step_preempts_newest_first_like_vllm, pool_fixture) {
  make(7);
  alloc(tokens_req(1, 8)); // 0 1
  alloc(tokens_req(2, 8)); // 2 3
  alloc(tokens_req(3, 8)); // 4 5; 6 free
  step_request step;
  step.extends = {grow(1, 4), grow(2, 8), grow(3, 4)};
  auto r = pool().run_step(step);
  // 1 takes block 6; 2 needs two, so 3 (the newest) is preempted for it.
  BOOST_TEST(r.preempted == std::vector<request_id>{3});
  BOOST_TEST(r.failed.empty());
  BOOST_REQUIRE(r.changed.size() == 2u);
  BOOST_TEST(r.changed[0].id == 1u);
  BOOST_TEST(r.changed[0].first == 2u);
  BOOST_TEST((r.changed[0].blocks == ids{6}));
  BOOST_TEST(r.changed[0].num_tokens == 12u);
  BOOST_TEST(r.changed[1].id == 2u);
  BOOST_TEST((r.changed[1].blocks == ids{4, 5}));
  BOOST_TEST((blocks(2) == ids{2, 3, 4, 5}));
  BOOST_TEST(!pool().find(3));
  BOOST_TEST(pool().counters().preemptions == 1u);
  BOOST_TEST(r.used_blocks == 7u);
  BOOST_TEST(r.free_blocks == 0u);
  BOOST_TEST(invariant(pool()) == "ok");
  // Several victims, newest first, until the oldest fits.
  make(8);
  for (request_id id = 1; id <= 4; ++id)
    alloc(tokens_req(id, 8)); // 2 blocks each, pool full
  step.extends = {grow(1, 24), grow(2, 1), grow(3, 1), grow(4, 1)};
  r = pool().run_step(step);
  BOOST_TEST((r.preempted == std::vector<request_id>{4, 3, 2}));
  BOOST_REQUIRE(r.changed.size() == 1u);
  BOOST_TEST(r.changed[0].id == 1u);
  BOOST_TEST(tokens(1) == 32u);
  BOOST_TEST(pool().num_sequences() == 1u);
  // Last in line and nothing to take: a request preempts itself.
  step.extends = {grow(1, 9)};
  r = pool().run_step(step);
  BOOST_TEST(r.preempted == std::vector<request_id>{1});
  BOOST_TEST(r.failed.empty());
  BOOST_TEST(pool().num_sequences() == 0u);
  // Without preempt_on_shortage the extend fails alone.
  alloc(tokens_req(1, 32));
  step.preempt_on_shortage = false;
  step.extends = {grow(1, 1)};
  r = pool().run_step(step);
  BOOST_TEST(r.preempted.empty());
  BOOST_REQUIRE(r.failed.size() == 1u);
  BOOST_TEST(code(r.failed[0].error) == "out_of_blocks");
  BOOST_TEST(tokens(1) == 32u);
  // Other failures never preempt.
  step.preempt_on_shortage = true;
  step.extends = {grow(1, 2000), grow(7, 1)};
  r = pool().run_step(step);
  BOOST_TEST(r.preempted.empty());
  BOOST_REQUIRE(r.failed.size() == 2u);
  BOOST_TEST(code(r.failed[0].error) == "exceeds_max_sequence_length");
  BOOST_TEST(code(r.failed[1].error) == "unknown_request");
}

BOOST_FIXTURE_TEST_CASE(run_step_frees_first_and_reports_copies_and_bad_ops,
                        pool_fixture) {
  make(4);
  alloc(tokens_req(1, 6)); // 0 1
  BOOST_REQUIRE(pool().fork(1, 2));
  alloc(tokens_req(3, 8)); // 2 3: the pool is full
  // Token ids that do not add up to the extends fail every extend.
  step_request step;
  step.frees = {3, 99};
  step.extends = {grow(2, 2), grow(1, 1)};
  step.tokens = run(0, 4);
  auto r = pool().run_step(step);
  BOOST_TEST(r.freed == std::vector<request_id>{3});
  BOOST_REQUIRE(r.failed.size() == 3u);
  BOOST_TEST(r.failed[0].id == 99u);
  BOOST_TEST(code(r.failed[0].error) == "unknown_request");
  BOOST_TEST(r.failed[1].id == 2u);
  BOOST_TEST(code(r.failed[1].error) == "invalid_request");
  BOOST_TEST(r.failed[2].id == 1u);
  BOOST_TEST(code(r.failed[2].error) == "invalid_request");
  BOOST_TEST(r.changed.empty());
  BOOST_TEST(tokens(1) == 6u);
  BOOST_TEST(tokens(2) == 6u);
  // 1 appends into the block it shares with 2: a copy, into a freed block.
  step = step_request{};
  step.extends = {grow(1, 1)};
  r = pool().run_step(step);
  BOOST_TEST(r.failed.empty());
  BOOST_REQUIRE(r.changed.size() == 1u);
  BOOST_TEST(r.changed[0].id == 1u);
  BOOST_TEST(r.changed[0].first == 1u);
  BOOST_TEST((r.changed[0].blocks == ids{2}));
  BOOST_TEST(r.changed[0].num_tokens == 7u);
  BOOST_TEST(str(r.copies) == "(1->2)");
  BOOST_TEST((blocks(2) == ids{0, 1}));
  BOOST_TEST(r.preempted.empty());
}

BOOST_FIXTURE_TEST_CASE(run_step_admits_fcfs_and_stops_at_first_that_does_not_fit,
                        pool_fixture) {
  make(8);
  step_request step;
  step.admits = {tokens_req(1, 8), tokens_req(2, 4, "nobody"), tokens_req(3, 40),
                 tokens_req(4, 4)};
  auto r = pool().run_step(step);
  BOOST_REQUIRE(r.admitted.size() == 1u);
  BOOST_TEST(r.admitted[0].id == 1u);
  BOOST_TEST((r.admitted[0].table.blocks == ids{0, 1}));
  BOOST_TEST(r.admitted[0].table.num_tokens == 8u);
  BOOST_TEST(r.admitted[0].cache_id == pool().find(1)->cache_id);
  BOOST_REQUIRE(r.failed.size() == 1u); // a bad request does not stop the line
  BOOST_TEST(r.failed[0].id == 2u);
  BOOST_TEST(code(r.failed[0].error) == "unknown_tenant");
  BOOST_TEST(r.admission_blocked);
  BOOST_TEST(r.blocked == 3u);
  BOOST_TEST(!pool().find(4)); // would fit, but waits behind 3
  BOOST_TEST(r.used_blocks == 2u);
  BOOST_TEST(r.free_blocks == 6u);
  BOOST_TEST(pool().counters().allocation_failures == 1u);
  // Hits are reported per admission.
  step.admits = {prompt_req(5, run(0, 9)), prompt_req(6, run(0, 9))};
  r = pool().run_step(step);
  BOOST_REQUIRE(r.admitted.size() == 2u);
  BOOST_TEST(r.admitted[0].hit_tokens == 0u);
  BOOST_TEST(r.admitted[1].hit_tokens == 8u);
  BOOST_TEST(!r.admission_blocked);
  BOOST_TEST(r.blocked == 0u);
}

BOOST_FIXTURE_TEST_CASE(run_step_skips_admission_after_preemption, pool_fixture) {
  make(4);
  alloc(tokens_req(1, 16)); // the whole pool
  step_request step;
  step.extends = {grow(1, 1)};
  step.admits = {tokens_req(2, 4), tokens_req(3, 4)};
  auto r = pool().run_step(step);
  BOOST_TEST(r.preempted == std::vector<request_id>{1});
  BOOST_TEST(r.admitted.empty());
  BOOST_TEST(r.admission_blocked);
  BOOST_TEST(r.blocked == 2u);
  BOOST_TEST(!pool().find(2));
  BOOST_TEST(pool().used_blocks() == 0u);
  // Unless asked to admit anyway.
  alloc(tokens_req(1, 16));
  step.admit_after_preemption = true;
  r = pool().run_step(step);
  BOOST_TEST(r.preempted == std::vector<request_id>{1});
  BOOST_TEST(r.admitted.size() == 2u);
  BOOST_TEST(!r.admission_blocked);
  // Frees are not preemptions: admission goes ahead after them.
  step = step_request{};
  step.frees = {2, 3};
  step.admits = {tokens_req(4, 16)};
  r = pool().run_step(step);
  BOOST_TEST(r.admitted.size() == 1u);
}

// -- hashing -----------------------------------------------------------------------------

BOOST_FIXTURE_TEST_CASE(decode_tokens_fill_blocks_that_become_findable,
                        pool_fixture) {
  make(32);
  // No prompt and no tokens yet: everything it decodes is hashed.
  alloc(tokens_req(1, 0));
  auto t = run(200, 10);
  BOOST_REQUIRE(pool().extend(1, 3, t.data()));
  BOOST_REQUIRE(pool().extend(1, 7, t.data() + 3));
  BOOST_TEST(pool().counters().blocks_cached == 2u);
  BOOST_TEST(alloc(prompt_req(2, run(200, 8) + std::vector<token_id>{1})) == 8u);
  // A prompt's partial block is indexed once decoding fills it.
  alloc(prompt_req(3, run(300, 6)));
  auto more = run(306, 2);
  BOOST_REQUIRE(pool().extend(3, 2, more.data()));
  BOOST_TEST(alloc(prompt_req(4, run(300, 9))) == 8u);
  // A step's flat token ids are cut in list order, one run per extend.
  alloc(tokens_req(7, 0));
  alloc(tokens_req(8, 0));
  step_request step;
  step.extends = {extend_op{7, 5}, extend_op{8, 4}};
  step.tokens = run(600, 5) + run(700, 4);
  auto r = pool().run_step(step);
  BOOST_TEST(r.failed.empty());
  BOOST_TEST(r.changed.size() == 2u);
  BOOST_TEST(alloc(prompt_req(9, run(600, 5))) == 4u);
  BOOST_TEST(alloc(prompt_req(10, run(700, 5))) == 4u);
  // A request allocated by count has unknown tokens: it is never hashed.
  alloc(tokens_req(5, 4));
  auto named = run(400, 8);
  BOOST_REQUIRE(pool().extend(5, 8, named.data()));
  BOOST_TEST(alloc(prompt_req(6, run(400, 9))) == 0u);
}

BOOST_FIXTURE_TEST_CASE(unnamed_tokens_end_hashing, pool_fixture) {
  auto u = run(10, 12);
  alloc(prompt_req(1, std::vector<token_id>(u.begin(), u.begin() + 6))); // 0 1
  BOOST_REQUIRE(pool().extend(1, 2, nullptr)); // fills block 1, unnamed
  BOOST_REQUIRE(pool().extend(1, 4, u.data() + 8)); // named, but too late
  BOOST_TEST(!pool().find(1)->hashable);
  BOOST_TEST(pool().counters().blocks_cached == 1u);
  BOOST_TEST(alloc(prompt_req(2, u + std::vector<token_id>{1})) == 4u);
}

BOOST_FIXTURE_TEST_CASE(events_record_store_and_evict_in_order, pool_fixture) {
  alloc(prompt_req(1, run(0, 4))); // before recording: no event
  BOOST_TEST(pool().take_events().empty());
  pool().record_events(true);
  auto p = run(10, 9);
  alloc(prompt_req(2, p)); // 1 2 3
  auto ev = pool().take_events();
  BOOST_REQUIRE(ev.size() == 2u);
  // Hashes are the documented chain from the tenant's namespace seed.
  auto seed = detail::namespace_seed("tenant:default");
  auto h0 = detail::hash_block(seed, p.data(), 4);
  auto h1 = detail::hash_block(h0, p.data() + 4, 4);
  BOOST_TEST(ev[0].stored);
  BOOST_TEST(ev[0].block == 1u);
  BOOST_TEST(ev[0].hash == h0.lo);
  BOOST_TEST(ev[0].parent_hash == 0u);
  BOOST_TEST(ev[1].stored);
  BOOST_TEST(ev[1].block == 2u);
  BOOST_TEST(ev[1].hash == h1.lo);
  BOOST_TEST(ev[1].parent_hash == h0.lo);
  BOOST_TEST(ev[1].tenant == 0u);
  // A hit stores nothing; decoding a block full does.
  alloc(prompt_req(3, p));
  BOOST_TEST(pool().take_events().empty());
  auto more = run(19, 3);
  BOOST_REQUIRE(pool().extend(2, 3, more.data()));
  ev = pool().take_events();
  BOOST_REQUIRE(ev.size() == 1u);
  BOOST_TEST(ev[0].block == 3u);
  BOOST_TEST(ev[0].parent_hash == h1.lo);
  BOOST_TEST(ev[0].hash == detail::hash_block(h1, run(18, 4).data(), 4).lo);
  // Evictions, in LRU order, name the blocks and hashes they removed.
  release(2);
  release(3);
  release(1);
  BOOST_TEST(pool().evict(16) == 4u);
  ev = pool().take_events();
  BOOST_REQUIRE(ev.size() == 4u);
  BOOST_TEST(!ev[0].stored);
  BOOST_TEST(ev[0].block == 3u);
  BOOST_TEST(ev[1].block == 2u);
  BOOST_TEST(ev[1].hash == h1.lo);
  BOOST_TEST(ev[1].parent_hash == h0.lo);
  BOOST_TEST(ev[2].block == 1u);
  BOOST_TEST(ev[3].block == 0u);
  BOOST_TEST(pool().take_events().empty());
  pool().record_events(false);
  alloc(prompt_req(4, p));
  BOOST_TEST(pool().take_events().empty());
}

BOOST_FIXTURE_TEST_CASE(prefix_caching_off_shares_nothing, pool_fixture) {
  cfg.prefix_caching = false;
  make(16);
  auto p = run(10, 9);
  alloc(prompt_req(1, p));
  release(1);
  BOOST_TEST(pool().cached_blocks() == 0u);
  BOOST_TEST(alloc(prompt_req(2, p)) == 0u);
  BOOST_TEST(pool().counters().query_tokens == 0u);
  BOOST_TEST(pool().counters().blocks_cached == 0u);
}

BOOST_AUTO_TEST_SUITE_END()
