// Pins give way to reservations wherever a pinned block comes to be cached
// while they are short: a copy-on-write from the block a request held last,
// the end of a copy's hold on its source, a drain that covers only its own
// tenant; and a prefix pinned again for less keeps its longer pin. (Found
// by mutation testing: each case fails with its line of the pool removed.)
// The fixture checks the invariant after each case.
#include <cstdint>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/actors/block_pool_core.hpp"
#include "kvactor/messages/error.hpp"
#include "pool_fixture.hpp"

using namespace kvactor;
using namespace kvactor::test;

namespace {

using reqs = std::vector<request_id>;

/// A default tenant and "r" (reserved_blocks 8) in a pool of 16; the
/// default tenant's request 9 holds the 8 blocks (0-7) r's reservation
/// leaves it. Then r's request 1 (6 tokens of `p`: blocks 8 full, 9 half)
/// is forked into 2, and 2 grows by a token with its copy of block 9 held
/// (9 -> 10), while 1 fills block 9 (the copy reads only its first 2
/// tokens), which enters the index.
struct reserved_cow_fixture : pool_fixture {
  std::vector<token_id> p = run(10, 8);
  std::vector<token_id> t2{99};
  std::vector<block_copy> held;

  reserved_cow_fixture() {
    cfg.max_pinned_blocks = 8;
    cfg.tenants = {tenant_config{}, tenant("r", 0, 8)};
    make(16);
    alloc(tokens_req(9, 32));
    alloc(prompt_req(1, part(p, 0, 6), "r"));
    BOOST_REQUIRE((blocks(1) == ids{8, 9}));
    BOOST_REQUIRE(pool().fork(1, 2));
    auto res = pool().extend(2, 1, t2.data(), true);
    BOOST_REQUIRE(res);
    BOOST_REQUIRE(str(res->copies) == "(9->10)");
    held = res->copies;
    auto rest = part(p, 6, 8);
    BOOST_REQUIRE(pool().extend(1, 2, rest.data()));
    BOOST_REQUIRE((blocks(1) == ids{8, 9}));
    BOOST_REQUIRE(in_index(pool(), 9));
  }
};

} // namespace

BOOST_AUTO_TEST_SUITE(pin_give_way_suite)

// block_pool_policy.cpp pin: pinned again by the same tokens, a pin lasts
// the longer of the two - also where it ends, which decides how long its
// blocks stay pinned once a longer pin over them is let go.
BOOST_FIXTURE_TEST_CASE(a_prefix_pinned_again_for_less_keeps_its_longer_pin,
                        pool_fixture) {
  cfg.max_pinned_blocks = 8;
  make(16);
  auto q = run(10, 13); // 3 full blocks and one token
  auto p = part(q, 0, 8); // its first 2
  alloc(prompt_req(1, q));
  release(1);
  BOOST_TEST(pool().pin(0, p, 100, 0).value() == 2u);
  BOOST_TEST(pool().pin(0, p, 10, 0).value() == 2u); // p's pin: until 100
  BOOST_TEST(pool().pin(0, q, 20, 0).value() == 3u);
  // q's pin goes: p's 2 blocks stay pinned, as long as p's pin.
  BOOST_TEST(pool().unpin(0, q).value() == 1u);
  BOOST_TEST(pool().expire_pins(50) == 0u);
  BOOST_TEST(pool().pinned_blocks() == 2u);
  BOOST_TEST(pool().expire_pins(100) == 2u);
  BOOST_TEST(pool().pinned_blocks() == 0u);
}

// block_pool_extend.cpp: a copy-on-write whose source was its last
// reference (a failed copy gave 2 back block 9, which 1 filled and let go:
// indexed, so 2 copies before it writes) caches a pinned block - off the
// lists - while r falls short of its reservation: the pin gives way.
BOOST_FIXTURE_TEST_CASE(a_copy_from_a_pinned_block_it_held_last_lets_the_pin_give_way,
                        reserved_cow_fixture) {
  BOOST_TEST((pool().settle_copies(held, false) == reqs{2}));
  BOOST_TEST((blocks(2) == ids{8, 9}));
  release(1);
  BOOST_TEST(pool().pin(1, p, 1000, 0).value() == 2u); // 8 and 9, in use by 2
  BOOST_TEST(invariant(pool()) == "ok");
  auto res = pool().extend(2, 1, t2.data());
  BOOST_REQUIRE(res);
  BOOST_TEST(str(res->copies) == "(9->10)");
  // r holds 8 and 10: 6 short, with 5 free - block 9 joins the LRU.
  BOOST_TEST(pool().pinned_blocks() == 1u);
  BOOST_TEST(pool().cached_blocks() == 1u);
  BOOST_TEST(invariant(pool()) == "ok");
}

// block_pool_cow.cpp settle_copies: the hold of a made copy was the last
// reference to its source (1, which filled it, ended meanwhile): cached and
// pinned while r falls short, the pin gives way.
BOOST_FIXTURE_TEST_CASE(a_copys_hold_ending_last_on_a_pinned_source_lets_the_pin_give_way,
                        reserved_cow_fixture) {
  BOOST_TEST(pool().pin(1, p, 1000, 0).value() == 2u); // 8 and 9, in use
  release(1); // block 9: the copy's hold only
  BOOST_TEST(pool().pinned_blocks() == 2u);
  BOOST_TEST(invariant(pool()) == "ok");
  BOOST_TEST(pool().settle_copies(held, true).empty());
  BOOST_TEST((blocks(2) == ids{8, 10}));
  // r holds 8 and 10: 6 short, with 5 free - block 9 joins the LRU.
  BOOST_TEST(pool().pinned_blocks() == 1u);
  BOOST_TEST(pool().cached_blocks() == 1u);
  BOOST_TEST(invariant(pool()) == "ok");
}

// block_pool_drain.cpp: a drain covers only its own tenant's reservation.
// The victim's release counted its blocks free, so its pinned hits kept
// their pins; one of the drained blocks is charged to the default tenant
// (a hit on a block the default tenant's request held then), so once they
// drain r falls short - and a pinned hit gives way.
BOOST_FIXTURE_TEST_CASE(a_drain_that_leaves_a_reservation_short_lets_pins_give_way,
                        pool_fixture) {
  cfg.max_pinned_blocks = 8;
  cfg.tenants = {tenant("default", 0, 0, "ns"), tenant("r", 0, 6, "ns")};
  make(16);
  auto q = run(10, 13); // 3 full blocks and one token
  // W (default): its first token only, for now.
  alloc(chunked(5, q, 1));
  BOOST_REQUIRE((blocks(5) == ids{0}));
  // r's request 1 computes q's first 2 blocks (1, 2), pinned and cached.
  alloc(prompt_req(1, part(q, 0, 9), "r"));
  BOOST_REQUIRE((blocks(1) == ids{1, 2, 3}));
  BOOST_TEST(pool().pin(1, part(q, 0, 8), 1000, 0).value() == 2u);
  release(1);
  // W computes the rest: its first 2 blocks are second copies of 1 and 2
  // (pinned first copies stay), its third (block 4) enters the index.
  auto rest = part(q, 1, 13);
  BOOST_REQUIRE(pool().extend(5, 12, rest.data()));
  BOOST_REQUIRE((blocks(5) == ids{0, 3, 4, 5}));
  BOOST_REQUIRE(in_index(pool(), 4));
  BOOST_REQUIRE(!in_index(pool(), 0));
  // The victim (r): hits 1 and 2 cached (pinned), 4 in use by W (charged
  // to the default tenant).
  BOOST_TEST(alloc(prompt_req(2, q, "r")) == 12u);
  BOOST_REQUIRE((blocks(2) == ids{1, 2, 4, 6}));
  release(5);
  alloc(tokens_req(9, 32)); // the default tenant: 8 blocks; 4 stay free
  BOOST_TEST(pool().free_blocks() == 4u);
  BOOST_TEST(pool().pinned_blocks() == 2u);
  auto res = pool().preempt_draining(2, 7);
  BOOST_REQUIRE(res);
  BOOST_TEST(pool().draining_blocks() == 2u); // 4 and 6
  // r: 6 short, 1 of them draining; 4 free - block 2 gives way.
  BOOST_TEST(pool().pinned_blocks() == 1u);
  BOOST_TEST(pool().cached_blocks() == 1u);
  BOOST_TEST(invariant(pool()) == "ok");
  BOOST_TEST(pool().end_drains(7) == 2u);
}

BOOST_AUTO_TEST_SUITE_END()
