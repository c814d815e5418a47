// The block pool core's fixture: a small pool whose invariant is checked
// when each case ends, plus the helpers its case files share (tenants,
// token concatenation, everything observable about a pool as text).
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/actors/block_pool_core.hpp"
#include "kvactor/messages/error.hpp"
#include "pool_test_support.hpp"

namespace kvactor::test {

using detail::block_pool_core;


inline constexpr std::uint64_t u64_max = std::numeric_limits<std::uint64_t>::max();

/// block_size 4, a tiny model, one default tenant. No supervisor preempts
/// at critical pressure here, so one request may fill the pool.
inline cache_config small_config() {
  cache_config cfg;
  cfg.block_size = 4;
  cfg.model = model_config{2, 2, 8, dtype::fp16};
  cfg.storage = "none";
  cfg.pressure.preempt_at_critical = false;
  cfg.tenants = {tenant_config{}};
  return cfg;
}

inline tenant_config tenant(std::string name, std::uint64_t max_blocks = 0,
                     std::uint64_t reserved = 0, std::string ns = "") {
  tenant_config t;
  t.name = std::move(name);
  t.max_blocks = max_blocks;
  t.reserved_blocks = reserved;
  t.prefix_namespace = std::move(ns);
  return t;
}

inline std::vector<token_id> operator+(std::vector<token_id> x,
                                const std::vector<token_id>& y) {
  x.insert(x.end(), y.begin(), y.end());
  return x;
}

inline std::string str(const std::vector<block_copy>& xs) {
  std::ostringstream out;
  for (auto& c : xs)
    out << '(' << c.src << "->" << c.dst << ')';
  return out.str();
}

/// Everything observable about `pool` as text; allocation failures (which a
/// failed operation does count) only if `with_failures`.
inline std::string describe(const block_pool_core& pool, bool with_failures) {
  std::ostringstream out;
  std::map<request_id, const detail::sequence*> seqs;
  pool.for_each_sequence([&](const detail::sequence& s) { seqs[s.id] = &s; });
  for (auto& [id, s] : seqs) {
    out << "req " << id << " cache " << s->cache_id << " tenant " << s->tenant
        << " tokens " << s->num_tokens << " blocks";
    for (auto b : s->blocks)
      out << ' ' << b;
    out << " hashed " << s->hashable << '/' << s->num_hashed << " drafts "
        << s->drafts << '\n';
  }
  out << "used " << pool.used_blocks() << " cached " << pool.cached_blocks()
      << " free " << pool.free_blocks() << '\n';
  auto& c = pool.counters();
  out << "counters " << c.allocations << ' ' << c.blocks_allocated << ' '
      << c.prefix_hit_blocks << ' ' << c.blocks_freed << ' ' << c.blocks_cached
      << ' ' << c.evictions << ' ' << c.cow_copies << ' ' << c.preemptions << ' '
      << c.query_tokens << ' ' << c.hit_tokens << ' ' << c.draft_tokens << ' '
      << c.drafts_rejected;
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
    return s ? std::vector<block_id>(s->blocks.begin(), s->blocks.end())
             : std::vector<block_id>{};
  }

  std::uint64_t tokens(request_id id) const {
    auto s = pool_->find(id);
    return s ? s->num_tokens : 0;
  }

  /// Request 1: prompt 100..105 (block 0 full and indexed, block 1 half),
  /// then grown by 106 (settled) and 107..111 (drafts): 12 tokens, 3 blocks.
  void prompt_then_drafts() {
    alloc(prompt_req(1, run(100, 6)));
    auto toks = run(106, 6);
    auto res = pool().extend(1, 6, toks.data(), false, 5);
    if (!res)
      BOOST_FAIL("extend 1 with drafts: " << render(res.error()));
    BOOST_TEST(invariant(pool()) == "ok");
  }

  /// Its unsettled draft tokens. REQUIRES: `id` is live.
  std::uint32_t drafts(request_id id) const {
    return pool_->find(id)->drafts;
  }

  /// Its incarnation. REQUIRES: `id` is live.
  std::uint64_t cache_id(request_id id) const {
    return pool_->find(id)->cache_id;
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

} // namespace kvactor::test
