// A pool core in every kind of state check_invariant looks at - hashed and
// forked requests, a shared partial tail, a copy in flight, cached blocks
// on the LRU and pinned, a tenant with a quota and a reservation, a swapped
// request, a ghost and a drain - for the cases that corrupt one thing in it and
// expect the check to name that thing.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/actors/block_pool_core.hpp"
#include "pool_test_access.hpp"
#include "pool_test_support.hpp"

namespace kvactor::test {

/// "block B", as the check's messages name a block.
inline std::string blk(block_id b) {
  return "block " + std::to_string(b);
}

struct corrupt_pool_fixture {
  using access = detail::block_pool_test_access;

  cache_config cfg;
  std::unique_ptr<detail::block_pool_core> pool;
  std::uint16_t quota_tenant = 1;  ///< "q": max_blocks 6, reserved 2
  std::vector<block_id> lru;       ///< cached, on the LRU (request 3's)
  std::vector<block_id> pinned;    ///< cached and pinned, root first (4's)
  block_copy copy;                 ///< in flight, for request 2
  block_id drained = 0;            ///< draining (request 8's)

  corrupt_pool_fixture() {
    cfg.block_size = 4;
    cfg.model = model_config{2, 2, 8, dtype::fp16};
    cfg.storage = "none";
    cfg.num_host_blocks = 8;
    cfg.max_pinned_blocks = 4;
    tenant_config q;
    q.name = "q";
    q.max_blocks = 6;
    q.reserved_blocks = 2;
    cfg.tenants = {tenant_config{}, q};
    pool = std::make_unique<detail::block_pool_core>(cfg, 24);
    auto& p = *pool;
    // 1: two full hashed blocks and one token; 2 its fork, whose append
    // copies the shared tail (the copy stays in flight).
    require(p.allocate(prompt_req(1, run(0, 9))));
    require(p.fork(1, 2));
    token_id next = 50;
    auto ext = p.extend(2, 1, &next, true);
    require(ext);
    BOOST_REQUIRE(ext->copies.size() == 1u);
    copy = ext->copies[0];
    // 3 and 4 end with their full blocks cached; 4's prefix is pinned.
    require(p.allocate(prompt_req(3, run(100, 8))));
    require(p.allocate(prompt_req(4, run(200, 8))));
    lru.assign(p.find(3)->blocks.begin(), p.find(3)->blocks.end());
    pinned.assign(p.find(4)->blocks.begin(), p.find(4)->blocks.end());
    require(p.release(3));
    require(p.release(4));
    require(p.pin(0, run(200, 8), 1000, 0));
    // 5: the quota tenant at its reservation.
    require(p.allocate(tokens_req(5, 8, "q")));
    // 6 swapped out; 7 released during its swap out: a ghost.
    require(p.allocate(tokens_req(6, 4)));
    require(p.swap_out_begin(6));
    require(p.swap_out_done(6, p.find(6)->cache_id, true));
    require(p.allocate(tokens_req(7, 4)));
    require(p.swap_out_begin(7));
    require(p.release(7));
    // 9 and its fork 10 share a partly filled last block, both flagged.
    require(p.allocate(prompt_req(9, run(300, 6))));
    require(p.fork(9, 10));
    // 8, a supervisor's victim: its block drains.
    require(p.allocate(tokens_req(8, 4)));
    drained = p.find(8)->blocks[0];
    require(p.preempt_draining(8, 1));
    BOOST_REQUIRE(p.draining_blocks() == 1u);
    BOOST_REQUIRE(invariant(p) == "ok");
  }

  template <class T>
  static void require(const caf::expected<T>& x) {
    if (!x)
      BOOST_FAIL("setting up: " << render(x.error()));
  }

  detail::sequence& seq(request_id id) {
    return access::seq(*pool, id);
  }
  detail::sequence& ghost() {
    return access::seqs(*pool)[access::ghosts(*pool).at(0)];
  }
  auto& meta(block_id b) {
    return access::meta(*pool, b);
  }

  /// check_invariant fails with invariant_violation naming `what`.
  void expect_broken(const std::string& what) {
    auto err = pool->check_invariant();
    BOOST_TEST(code(err) == "invariant_violation");
    auto msg = render(err);
    BOOST_TEST(msg.find(what) != std::string::npos,
               "'" << what << "' not in: " << msg);
  }
};

} // namespace kvactor::test
