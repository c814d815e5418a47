// block_pool_core's two-phase swap to the host tier and back, driven directly:
// what each phase holds and frees, what a failed device copy undoes, what a
// swap-in shares back from the prefix cache, releases deferred while the
// device moves bytes, a full host tier. The bytes themselves:
// swap_bytes_test.cpp.
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/actors/block_pool_core.hpp"
#include "kvactor/device/storage.hpp"
#include "kvactor/messages/error.hpp"
#include "pool_test_support.hpp"

using namespace kvactor;
using namespace kvactor::test;
using kvactor::detail::block_pool_core;
using kvactor::detail::residency;

namespace {

/// block_size 4, a tiny model, 8 host blocks, one default tenant. No
/// supervisor preempts at critical pressure: one request may fill the pool.
cache_config swap_config() {
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
std::string describe(const block_pool_core& pool, bool flow = true) {
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

std::vector<block_id> devices(const std::vector<block_move>& moves) {
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

ids table_of(const detail::sequence& s) {
  return ids(s.blocks.begin(), s.blocks.end());
}

} // namespace

BOOST_AUTO_TEST_SUITE(swap_core_suite)

BOOST_FIXTURE_TEST_CASE(swap_out_frees_device_blocks_and_holds_host_blocks,
                        swap_fixture) {
  auto p = run(100, 13);                              // 3 full blocks + 1
  alloc(prompt_req(1, p));                            // 0 1 2 3
  alloc(prompt_req(2, std::vector<token_id>(p.begin(), p.begin() + 9))); // 0 1 4
  BOOST_TEST((table_of(seq(2)) == ids{0, 1, 4}));
  auto moves = out_begin(1);
  BOOST_TEST((devices(moves) == ids{0, 1, 2, 3}));
  // While the device reads them, the blocks stay held.
  BOOST_TEST(pool().used_blocks() == 5u);
  BOOST_TEST(pool().free_host_blocks() == 4u);
  BOOST_TEST((seq(1).where == residency::swapping_out));
  BOOST_TEST(seq(1).host_blocks.size() == 4u);
  // Block 3 was private and unindexed: freed; block 2 private and indexed:
  // cached; 0 and 1 stay with request 2.
  BOOST_TEST(out_done(1, true) == 2u);
  BOOST_TEST((seq(1).where == residency::swapped));
  BOOST_TEST(seq(1).blocks.empty());
  BOOST_TEST(seq(1).num_tokens == 13u);
  BOOST_TEST(seq(1).host_blocks.size() == 4u);
  BOOST_TEST(pool().used_blocks() == 3u);
  BOOST_TEST(pool().cached_blocks() == 1u);
  BOOST_TEST(pool().free_host_blocks() == 4u);
  BOOST_TEST(pool().counters().swap_outs == 1u);
  BOOST_TEST(pool().tenants()[0].used == 3u);
  BOOST_TEST(pool().tenants()[0].active == 2u);
  // The cached prefix is still findable by others.
  alloc(prompt_req(3, p));
  BOOST_TEST((seq(3).blocks[2] == 2u));
}

BOOST_FIXTURE_TEST_CASE(swapped_request_cannot_grow_or_fork_but_can_be_released,
                        swap_fixture) {
  alloc(tokens_req(1, 10));
  alloc(tokens_req(9, 2));
  out_begin(1);
  // Mid-copy: nothing may touch it but the copy's end (or a release).
  BOOST_TEST(code(pool().extend(1, 1, nullptr)) == "invalid_request");
  BOOST_TEST(code(pool().fork(1, 2)) == "invalid_request");
  BOOST_TEST(code(pool().swap_out_begin(1)) == "invalid_request");
  BOOST_TEST(code(pool().swap_in_begin(1)) == "invalid_request");
  auto cid = seq(1).cache_id;
  BOOST_TEST(code(pool().swap_in_done(1, cid, true)) == "invalid_request");
  BOOST_TEST(code(pool().swap_out_done(1, cid + 100, true)) == "invalid_request");
  out_done(1, true);
  auto before = describe(pool());
  BOOST_TEST(code(pool().extend(1, 1, nullptr)) == "invalid_request");
  BOOST_TEST(code(pool().fork(1, 2)) == "invalid_request");
  BOOST_TEST(code(pool().fork(9, 1)) == "duplicate_request");
  BOOST_TEST(code(pool().swap_out_begin(1)) == "invalid_request");
  BOOST_TEST(code(pool().swap_out_done(1, cid, true)) == "invalid_request");
  BOOST_TEST(code(pool().swap_in_done(1, cid, false)) == "invalid_request");
  BOOST_TEST(code(pool().swap_out_begin(7)) == "unknown_request");
  BOOST_TEST(code(pool().swap_in_begin(7)) == "unknown_request");
  BOOST_TEST(code(pool().swap_in_begin(9)) == "invalid_request"); // resident
  BOOST_TEST(pool().choose_victims(100).size() == 1u); // only request 9
  BOOST_TEST(describe(pool()) == before);
  ok();
  BOOST_TEST(*pool().release(1) == 0u); // no device block to free
  BOOST_TEST(pool().find(1) == nullptr);
  BOOST_TEST(pool().free_host_blocks() == 8u);
  BOOST_TEST(pool().tenants()[0].active == 1u);
}

BOOST_FIXTURE_TEST_CASE(failed_swap_out_restores_everything, swap_fixture) {
  alloc(prompt_req(1, run(0, 10)));
  alloc(prompt_req(2, run(0, 9)));
  alloc(tokens_req(3, 5));
  auto before = describe(pool());
  auto moves = out_begin(1);
  BOOST_TEST(out_done(1, false) == 0u);
  BOOST_TEST(describe(pool()) == before);
  // Even the host blocks it would be handed next are the same.
  auto again = out_begin(1);
  BOOST_TEST((again == moves));
  out_done(1, false);
  BOOST_TEST(describe(pool()) == before);
  // It is resident again: it grows and forks.
  BOOST_TEST(static_cast<bool>(pool().extend(1, 3, nullptr)));
  BOOST_TEST(static_cast<bool>(pool().fork(1, 4)));
  ok();
}

BOOST_FIXTURE_TEST_CASE(swap_in_shares_the_prefix_still_cached_and_copies_the_rest,
                        swap_fixture) {
  auto p = run(50, 10);
  alloc(prompt_req(1, p)); // 0 1 2; 0 and 1 indexed
  auto out = out_begin(1);
  out_done(1, true); // 0 and 1 cached, 2 free
  BOOST_TEST(pool().cached_blocks() == 2u);
  alloc(tokens_req(2, 8)); // takes free blocks, not the cached 0 and 1
  auto in = in_begin(1);
  // Only the unindexed tail block is copied back, into a fresh block.
  BOOST_REQUIRE(in.size() == 1u);
  BOOST_TEST(in[0].host_block == out[2].host_block);
  BOOST_TEST((seq(1).incoming == ids{0, 1, in[0].device_block}));
  BOOST_TEST(pool().cached_blocks() == 0u); // revived and held meanwhile
  BOOST_TEST(in_done(1, true) == 0u);
  BOOST_TEST((table_of(seq(1)) == ids{0, 1, in[0].device_block}));
  BOOST_TEST(pool().counters().swap_in_shared == 2u);
  BOOST_TEST(pool().counters().swap_ins == 1u);
  BOOST_TEST(pool().free_host_blocks() == 8u);
  // Its prefix is shared again: a new request with the same prompt hits it.
  alloc(prompt_req(3, p));
  BOOST_TEST(seq(3).blocks[0] == 0u);
  BOOST_TEST(seq(3).blocks[1] == 1u);
}

BOOST_FIXTURE_TEST_CASE(swap_in_shares_a_prefix_another_request_still_uses,
                        swap_fixture) {
  auto p = run(0, 9);
  alloc(prompt_req(1, p)); // 0 1 2, two indexed
  alloc(prompt_req(2, p)); // shares 0 1, own 3
  out_begin(1);
  BOOST_TEST(out_done(1, true) == 1u); // only its private block 2
  auto used = pool().used_blocks();
  auto in = in_begin(1);
  BOOST_REQUIRE(in.size() == 1u);
  BOOST_TEST(pool().used_blocks() == used + 1); // the shared ones were in use
  in_done(1, true);
  BOOST_TEST(seq(1).blocks[0] == seq(2).blocks[0]);
  BOOST_TEST(seq(1).blocks[1] == seq(2).blocks[1]);
  BOOST_TEST(pool().counters().swap_in_shared == 2u);
  // Both release: the shared blocks are freed once, by the last holder.
  BOOST_TEST(pool().release(1).value() == 1u);
  BOOST_TEST(pool().release(2).value() == 3u);
}

BOOST_FIXTURE_TEST_CASE(swap_in_copies_all_when_the_prefix_was_evicted,
                        swap_fixture) {
  auto p = run(50, 10);
  alloc(prompt_req(1, p)); // 0 1 2; 0 and 1 indexed
  auto out = out_begin(1);
  out_done(1, true);
  // Request 2 takes every block, the two cached ones last (evicted).
  alloc(tokens_req(2, 4 * 16));
  BOOST_TEST(pool().cached_blocks() == 0u);
  BOOST_TEST(code(pool().swap_in_begin(1)) == "out_of_blocks");
  pool().release(2);
  auto in = in_begin(1);
  BOOST_REQUIRE(in.size() == 3u);
  for (std::size_t i = 0; i < in.size(); ++i)
    BOOST_TEST(in[i].host_block == out[i].host_block); // table order kept
  BOOST_TEST((seq(1).incoming == devices(in)));
  BOOST_TEST(in_done(1, true) == 0u);
  BOOST_TEST((seq(1).where == residency::resident));
  BOOST_TEST((table_of(seq(1)) == devices(in)));
  BOOST_TEST(seq(1).num_tokens == 10u);
  BOOST_TEST(seq(1).host_blocks.empty());
  BOOST_TEST(pool().free_host_blocks() == 8u);
  BOOST_TEST(pool().counters().swap_in_shared == 0u);
  // The copies are private and unindexed: the prompt no longer hits...
  alloc(prompt_req(5, p));
  BOOST_TEST(seq(5).blocks[0] != seq(1).blocks[0]);
  // ...but the request's hash chain goes on from where it was.
  auto more = run(60, 2);
  BOOST_REQUIRE(pool().extend(1, 2, more.data()));
  ok();
  auto q = p;
  q.insert(q.end(), more.begin(), more.end());
  q.push_back(7);
  alloc(prompt_req(6, q));
  BOOST_TEST(seq(6).blocks[2] == seq(1).blocks[2]);
}

BOOST_FIXTURE_TEST_CASE(swap_in_leaves_the_admission_watermark_free,
                        swap_fixture) {
  cfg.admission.watermark = 0.25; // 4 of 16 blocks
  make(16);
  alloc(tokens_req(1, 12)); // 3 blocks
  out_begin(1);
  out_done(1, true);
  alloc(tokens_req(2, 40)); // 10 blocks: 6 left, above the watermark
  auto before = describe(pool());
  auto res = pool().swap_in_begin(1);
  BOOST_TEST(code(res) == "out_of_blocks"); // 3 would leave 3 < 4
  BOOST_TEST(render(res.error()).find("headroom") != std::string::npos);
  BOOST_TEST(describe(pool()) == before);
  pool().release(2);
  BOOST_TEST(in_begin(1).size() == 3u);
  in_done(1, true);
}

BOOST_FIXTURE_TEST_CASE(failed_swap_in_puts_revived_blocks_back_in_the_cache,
                        swap_fixture) {
  auto p = run(50, 10);
  alloc(prompt_req(1, p));
  out_begin(1);
  out_done(1, true);
  auto before = describe(pool(), false);
  in_begin(1);
  BOOST_TEST(pool().cached_blocks() == 0u);
  BOOST_TEST(in_done(1, false) == 3u);
  BOOST_TEST(describe(pool(), false) == before);
  BOOST_TEST(pool().cached_blocks() == 2u);
  BOOST_TEST(pool().counters().swap_in_shared == 0u);
  in_begin(1);
  in_done(1, true);
  BOOST_TEST(pool().counters().swap_in_shared == 2u);
}

BOOST_FIXTURE_TEST_CASE(failed_swap_in_keeps_it_swapped_and_returns_the_blocks,
                        swap_fixture) {
  alloc(tokens_req(1, 12));
  alloc(tokens_req(2, 4));
  out_begin(1);
  out_done(1, true);
  // The blocks it took come back in the order they were handed out, so the
  // pool is as it was but for the count of blocks that flowed through it.
  auto before = describe(pool(), false);
  auto in = in_begin(1);
  BOOST_TEST(pool().used_blocks() == 4u);
  BOOST_TEST(in_done(1, false) == 3u);
  BOOST_TEST(describe(pool(), false) == before);
  BOOST_TEST((seq(1).where == residency::swapped));
  // And a second try gets the same blocks.
  BOOST_TEST((in_begin(1) == in));
  in_done(1, true);
  BOOST_TEST(pool().counters().swap_ins == 1u);
}

BOOST_FIXTURE_TEST_CASE(release_during_a_swap_ends_it_and_frees_its_id_at_once,
                        swap_fixture) {
  // Out, ok / out, failed / in, ok / in, failed.
  for (int c = 0; c < 4; ++c) {
    make(16);
    alloc(prompt_req(1, run(0, 9)));  // 0 1 2, two indexed
    alloc(prompt_req(2, run(0, 9)));  // shares 0 1
    bool in = c >= 2;
    bool success = c % 2 == 0;
    if (in) {
      out_begin(1);
      out_done(1, true);
      in_begin(1);
    } else {
      out_begin(1);
    }
    auto used = pool().used_blocks();
    auto cache_id = seq(1).cache_id;
    BOOST_TEST(*pool().release(1) == 0u);
    ok();
    // It has ended: a ghost holding its blocks until the device's move
    // ends (nothing handed out mid-copy), out of the id index and no
    // longer active; a second end fails and counts nothing, GC finds
    // nothing to reclaim.
    BOOST_TEST(pool().find(1) == nullptr);
    BOOST_TEST(pool().num_ghosts() == 1u);
    BOOST_TEST(pool().used_blocks() == used);
    BOOST_TEST(pool().tenants()[0].active == 1u);
    auto preemptions = pool().counters().preemptions;
    BOOST_TEST(code(pool().preempt(1)) == "unknown_request");
    BOOST_TEST(code(pool().release(1)) == "unknown_request");
    BOOST_TEST(pool().counters().preemptions == preemptions);
    BOOST_TEST(pool().find(1, cache_id) == nullptr);
    BOOST_TEST(pool().reclaim(1, cache_id).value() == 0u);
    // The id is free at once: a new incarnation, with fresh blocks.
    alloc(tokens_req(1, 4));
    auto again = seq(1).cache_id;
    BOOST_TEST(again != cache_id);
    auto again_blocks = seq(1).blocks;
    BOOST_TEST(pool().used_blocks() == used + 1);
    // Fresh allocations cannot take the ghost's blocks meanwhile.
    alloc(tokens_req(3, 4 * (16 - used - 1)));
    BOOST_TEST(code(pool().allocate(tokens_req(4, 1))) == "out_of_blocks");
    BOOST_TEST(pool().release(3).value() == 16 - used - 1);
    // A swap end naming the new incarnation is refused (it is resident).
    BOOST_TEST(code(in ? pool().swap_in_done(1, again, success)
                       : pool().swap_out_done(1, again, success))
               == "invalid_request");
    ok();
    // The ghost's end finishes its release: device and host blocks all
    // return, and the new incarnation is untouched.
    auto freed = in ? in_done(1, success, cache_id) : out_done(1, success, cache_id);
    BOOST_TEST(pool().num_ghosts() == 0u);
    // Only its private block: the prefix it shares stays with request 2
    // (a swap-in shares it again rather than copying it).
    BOOST_TEST(freed == 1u, "case " << c);
    BOOST_TEST(pool().free_host_blocks() == 8u);
    BOOST_TEST(pool().used_blocks() == 4u); // request 2's, the new 1's
    BOOST_TEST(pool().tenants()[0].active == 2u);
    BOOST_TEST(seq(1).cache_id == again);
    BOOST_TEST((seq(1).where == residency::resident));
    BOOST_TEST(seq(1).blocks == again_blocks);
    BOOST_TEST(code(pool().swap_out_done(1, cache_id, true)) == "invalid_request");
    BOOST_TEST(code(pool().swap_in_done(1, cache_id, true)) == "invalid_request");
    BOOST_TEST(pool().release(1).value() == 1u);
    ok();
  }
}

BOOST_FIXTURE_TEST_CASE(a_full_host_tier_is_out_of_blocks_and_changes_nothing,
                        swap_fixture) {
  cfg.num_host_blocks = 5;
  make(16);
  alloc(tokens_req(1, 12)); // 3
  alloc(tokens_req(2, 12)); // 3
  out_begin(1);
  auto before = describe(pool());
  BOOST_TEST(code(pool().swap_out_begin(2)) == "out_of_blocks");
  BOOST_TEST(describe(pool()) == before);
  out_done(1, true);
  BOOST_TEST(code(pool().swap_out_begin(2)) == "out_of_blocks");
  // No host tier at all.
  cfg.num_host_blocks = 0;
  make(16);
  alloc(tokens_req(1, 4));
  before = describe(pool());
  BOOST_TEST(code(pool().swap_out_begin(1)) == "out_of_blocks");
  BOOST_TEST(describe(pool()) == before);
}

BOOST_FIXTURE_TEST_CASE(swap_in_obeys_free_blocks_quota_and_reservations,
                        swap_fixture) {
  cfg.tenants = {tenant_config{}, tenant_config{}, tenant_config{}};
  cfg.tenants[1].name = "q";
  cfg.tenants[1].max_blocks = 4;
  cfg.tenants[2].name = "r";
  cfg.tenants[2].reserved_blocks = 4;
  make(16);
  alloc(tokens_req(1, 16, "q")); // 4: q's quota
  out_begin(1);
  out_done(1, true);
  alloc(tokens_req(2, 4, "q"));
  auto before = describe(pool());
  BOOST_TEST(code(pool().swap_in_begin(1)) == "quota_exceeded");
  BOOST_TEST(describe(pool()) == before);
  BOOST_TEST(pool().release(2).value() == 1u);
  // The default tenant fills what r's reservation leaves.
  alloc(tokens_req(3, 4 * 9));
  before = describe(pool());
  BOOST_TEST(code(pool().swap_in_begin(1)) == "out_of_blocks");
  BOOST_TEST(describe(pool()) == before);
  BOOST_TEST(pool().release(3).value() == 9u);
  in_begin(1);
  in_done(1, true);
}

BOOST_AUTO_TEST_SUITE_END()
