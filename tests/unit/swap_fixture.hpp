// The fixture of block_pool_core's swap tests (swap_core_test.cpp: swapping
// out, releases during a swap, a full host tier; swap_in_test.cpp: swapping
// back in): a 16-block core with 8 host blocks, the pool as text.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/actors/block_pool_core.hpp"
#include "kvactor/messages/error.hpp"
#include "pool_test_support.hpp"

namespace kvactor::test::swap_core {

using kvactor::detail::block_pool_core;

/// block_size 4, a tiny model, 8 host blocks, one default tenant. No
/// supervisor preempts at critical pressure: one request may fill the pool.
inline cache_config swap_config() {
  cache_config cfg;
  cfg.block_size = 4;
  cfg.model = model_config{2, 2, 8, dtype::fp16};
  cfg.storage = "none";
  cfg.num_host_blocks = 8;
  cfg.pressure.preempt_at_critical = false;
  cfg.tenants = {tenant_config{}};
  return cfg;
}

/// Everything observable about `pool` as text; the counts of blocks taken
/// and freed over its lifetime only if `flow`.
inline std::string describe(const block_pool_core& pool, bool flow = true) {
  std::ostringstream out;
  std::map<request_id, const detail::sequence*> seqs;
  pool.for_each_sequence([&](const detail::sequence& s) { seqs[s.id] = &s; });
  for (auto& [id, s] : seqs) {
    out << "req " << id << " cache " << s->cache_id << " tokens "
        << s->num_tokens << " where " << static_cast<int>(s->where)
        << " pending " << s->release_pending << " blocks";
    for (auto b : s->blocks)
      out << ' ' << b;
    out << " host";
    for (auto b : s->host_blocks)
      out << ' ' << b;
    out << " incoming";
    for (auto b : s->incoming)
      out << ' ' << b;
    out << " hashed " << s->hashable << '/' << s->num_hashed << '/'
        << s->tail.size() << '\n';
  }
  out << "used " << pool.used_blocks() << " cached " << pool.cached_blocks()
      << " free " << pool.free_blocks() << " host free "
      << pool.free_host_blocks() << '\n';
  auto& c = pool.counters();
  out << "counters " << c.allocations << ' ' << c.allocation_failures << ' '
      << c.blocks_cached << ' ' << c.evictions << ' ' << c.swap_outs << ' '
      << c.swap_ins << ' ' << c.swap_in_shared << ' ' << c.preemptions
      << '\n';
  if (flow)
    out << "flow " << c.blocks_allocated << ' ' << c.blocks_freed << '\n';
  for (auto& t : pool.tenants())
    out << "tenant " << t.config.name << ' ' << t.used << ' ' << t.active
        << ' ' << t.failures << '\n';
  std::map<std::uint64_t, block_id> index;
  pool.for_each_indexed([&](std::uint64_t h, block_id b) { index[h] = b; });
  for (auto& [h, b] : index)
    out << "indexed " << h << " -> " << b << '\n';
  return out.str();
}

inline std::vector<block_id> devices(const std::vector<block_move>& moves) {
  std::vector<block_id> out;
  for (auto& m : moves)
    out.push_back(m.device_block);
  return out;
}

struct swap_fixture {
  cache_config cfg = swap_config();
  std::unique_ptr<block_pool_core> pool_;

  swap_fixture() {
    make(16);
  }

  ~swap_fixture() {
    BOOST_TEST(invariant(*pool_) == "ok");
  }

  block_pool_core& make(std::uint32_t num_blocks) {
    pool_ = std::make_unique<block_pool_core>(cfg, num_blocks);
    return *pool_;
  }

  block_pool_core& pool() {
    return *pool_;
  }

  const detail::sequence& seq(request_id id) {
    auto s = pool_->find(id);
    BOOST_REQUIRE(s != nullptr);
    return *s;
  }

  void ok() {
    BOOST_TEST(invariant(pool()) == "ok");
  }

  /// The value of `res`, failing the case if it is an error.
  template <class T>
  T must(caf::expected<T> res, const char* what, request_id id) {
    if (!res)
      BOOST_FAIL(what << ' ' << id << ": " << render(res.error()));
    ok();
    return std::move(*res);
  }

  void alloc(const allocation_request& req) {
    must(pool().allocate(req), "allocate", req.id);
  }
  std::vector<block_move> out_begin(request_id id) {
    return must(pool().swap_out_begin(id), "swap_out_begin", id);
  }
  std::vector<block_move> in_begin(request_id id) {
    return must(pool().swap_in_begin(id), "swap_in_begin", id);
  }
  /// The end of the swap of `id`'s live incarnation, or of `cache_id`'s.
  std::uint32_t out_done(request_id id, bool success,
                         std::uint64_t cache_id = 0) {
    if (cache_id == 0)
      cache_id = seq(id).cache_id;
    return must(pool().swap_out_done(id, cache_id, success), "swap_out_done", id);
  }
  std::uint32_t in_done(request_id id, bool success,
                        std::uint64_t cache_id = 0) {
    if (cache_id == 0)
      cache_id = seq(id).cache_id;
    return must(pool().swap_in_done(id, cache_id, success), "swap_in_done", id);
  }
};

using ids = std::vector<block_id>;

inline ids table_of(const detail::sequence& s) {
  return ids(s.blocks.begin(), s.blocks.end());
}

} // namespace kvactor::test::swap_core
