// block_pool_core's tenant policy, driven directly, one promise per case:
// quotas and reservations at their edges and prefix-cache isolation
// (retention, pins, victims and headroom: tenant_retention_test.cpp).
// Every case ends with check_invariant() passing (the fixture checks it).

#include <boost/test/unit_test.hpp>

#include "tenant_policy_fixture.hpp"

using namespace kvactor;
using namespace kvactor::test;
using namespace kvactor::test::tenant_policy;

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

namespace {

/// `p` and one token after it: a prompt that hits all of p's full blocks.
std::vector<token_id> with_one_more(std::vector<token_id> p) {
  p.push_back(300);
  return p;
}

} // namespace

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
  // Nor r its own: its shortfall is what it may take, and pinned blocks
  // cannot be taken. (It used to be allowed, which let a tenant with a
  // reservation pin into another reserved tenant's share.) Its cached
  // blocks are safe anyway: no one else may evict them.
  make(16);
  auto rp = run(200, 24);
  alloc(prompt_req(1, rp, "r"));
  release(1);               // 6 cached
  alloc(tokens_req(2, 40)); // the 10 free ones
  BOOST_TEST(code(pool().pin(1, rp, 100, 0)) == "out_of_blocks");
  BOOST_TEST(try_alloc(tokens_req(3, 1)) == "out_of_blocks");
  BOOST_TEST(alloc(prompt_req(4, with_one_more(run(200, 20)), "r")) == 20u);
}

BOOST_AUTO_TEST_CASE(a_pin_cannot_take_one_reserved_tenants_share_for_another) {
  cfg.tenants = {tenant_config{}, tenant("r", 0, 4), tenant("u", 0, 4)};
  cfg.max_pinned_blocks = 16;
  make(16);
  auto rp = run(200, 32); // 8 full blocks
  alloc(prompt_req(1, rp, "r"));
  release(1);               // 8 cached, 8 free; r and u short of 4 each
  alloc(tokens_req(2, 16)); // 4 of the free ones: 12 left for 8 held
  // Pinning all 8 would leave 4 blocks for both reservations.
  BOOST_TEST(code(pool().pin(1, rp, 100, 0)) == "out_of_blocks");
  BOOST_TEST(pool().pinned_blocks() == 0u);
  // The first 4 fit beside them; then each reservation is still whole.
  BOOST_TEST(pool().pin(1, run(200, 16), 100, 0).value() == 4u);
  alloc(tokens_req(3, 16, "u"));
  alloc(tokens_req(4, 16, "r"));
  BOOST_TEST(pool().pinned_blocks() == 4u);
}

// A tenant may pin what it is using itself; once it lets those blocks go
// while the reservations are short (its own now included), the pins give
// way: the blocks are cached, evictable, and the pool covers every
// reservation. Kept pinned, they left r's shortfall without blocks.
BOOST_AUTO_TEST_CASE(pins_on_blocks_a_reserved_tenant_lets_go_give_way) {
  cfg.tenants = {tenant_config{}, tenant("r", 0, 6)};
  cfg.max_pinned_blocks = 16;
  make(16);
  auto rp = run(200, 24);
  alloc(prompt_req(1, rp, "r")); // its 6, all indexed
  BOOST_TEST(pool().pin(1, rp, 100, 0).value() == 6u);
  alloc(tokens_req(2, 40)); // the other 10
  release(1);
  BOOST_TEST(pool().pinned_blocks() == 0u);
  BOOST_TEST(pool().cached_blocks() == 6u);
  BOOST_TEST(try_alloc(tokens_req(3, 1)) == "out_of_blocks"); // r's
  BOOST_TEST(alloc(prompt_req(4, with_one_more(run(200, 20)), "r")) == 20u);
  // Only as many as the reservations need, deepest first: what stays
  // pinned is still a prefix a lookup reaches. (Given way one block at a
  // time as released, tail first, the head went and the tail stayed
  // pinned, unreachable, once r evicted the block before it.)
  make(16);
  alloc(prompt_req(1, rp, "r")); // 0-5
  BOOST_TEST(pool().pin(1, rp, 100, 0).value() == 6u);
  alloc(tokens_req(2, 32)); // 8 of the other 10: 2 free
  release(1);               // 4 pins give way, blocks 5 4 3 2
  BOOST_TEST(pool().pinned_blocks() == 2u);
  alloc(tokens_req(3, 12, "r")); // the 2 free, then evicts block 5
  BOOST_TEST(alloc(prompt_req(4, with_one_more(run(200, 16)), "r")) == 16u);
  // With room to spare the pins stay.
  make(16);
  alloc(prompt_req(1, rp, "r"));
  BOOST_TEST(pool().pin(1, rp, 100, 0).value() == 6u);
  release(1);
  BOOST_TEST(pool().pinned_blocks() == 6u);
  BOOST_TEST(pool().cached_blocks() == 0u);
}

// A pinned prefix may outlive the table that let its tail go: a pin that
// gives way takes what hangs below it too, deepest first, or the tail
// stays pinned below an evictable block, out of any lookup's reach.
BOOST_AUTO_TEST_CASE(a_pin_that_gives_way_takes_the_pins_below_it) {
  cfg.tenants = {tenant_config{}, tenant("r", 0, 6)};
  cfg.max_pinned_blocks = 16;
  make(16);
  auto p = run(200, 20); // 5 full blocks, A-E = 0-4
  alloc(prompt_req(2, p, "r"));
  BOOST_TEST(pool().pin(1, p, 100, 0).value() == 5u);
  alloc(prompt_req(1, with_one_more(run(200, 12)), "r")); // A B C, and 5
  release(2); // D E cached, still pinned: room to spare
  BOOST_TEST(pool().pinned_blocks() == 5u);
  alloc(tokens_req(3, 32)); // 8 of the 10 free
  release(1);               // A B C let go, r short of 6: pins give way
  BOOST_TEST(pool().pinned_blocks() == 2u);
  pool().evict(16);
  // A B are what stays pinned (it used to be D E, unreachable).
  BOOST_TEST(alloc(prompt_req(4, with_one_more(run(200, 8)), "r")) == 8u);
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

BOOST_AUTO_TEST_SUITE_END()
