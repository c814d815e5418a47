// The fixture and helpers of the tenant-policy unit tests
// (tenant_policy_test.cpp: quotas, reservations, isolation;
// tenant_retention_test.cpp: retention, pins, victims, admission headroom):
// a 16-block core of block size 4 whose invariant is checked after every
// operation and at the end of every case, tenants and requests made short.
#pragma once

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

namespace kvactor::test::tenant_policy {

using kvactor::detail::block_pool_core;
using kvactor::test::prompt_req;
using kvactor::test::tokens_req;

inline tenant_config tenant(std::string name, std::uint64_t max_blocks = 0,
                            std::uint64_t reserved = 0,
                            priority prio = priority::normal,
                            std::string ns = "") {
  tenant_config t;
  t.name = std::move(name);
  t.max_blocks = max_blocks;
  t.reserved_blocks = reserved;
  t.priority = prio;
  t.prefix_namespace = std::move(ns);
  return t;
}


/// The shared helpers, for a request of priority `prio`.
inline allocation_request tokens_req(request_id id, std::uint64_t n,
                                     std::string tenant_name, priority prio) {
  auto req = tokens_req(id, n, std::move(tenant_name));
  req.priority = prio;
  return req;
}

inline allocation_request prompt_req(request_id id,
                                     std::vector<token_id> prompt,
                                     std::string tenant_name, priority prio) {
  auto req = prompt_req(id, std::move(prompt), std::move(tenant_name));
  req.priority = prio;
  return req;
}

/// Requests, block counts, counters and tenants as text; allocation
/// failures only if `with_failures`, index hashes only if `with_hashes`.
inline std::string describe(const block_pool_core& pool,
                            bool with_failures = true,
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
    cfg.pressure.preempt_at_critical = false; // a request may fill the pool
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
    return s ? std::vector<block_id>(s->blocks.begin(), s->blocks.end())
             : std::vector<block_id>{};
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

} // namespace kvactor::test::tenant_policy
