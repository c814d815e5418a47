// block_pool_core::unpin: a pinned prefix let go before its deadline - the
// chain pin walks, deepest first, never below another pinned prefix nor at
// or above where another pin's prefix ends (which then sets how long what
// stays is pinned) - its cached blocks evictable again and its room under
// max_pinned_blocks back.
#include <cstdint>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "pool_fixture.hpp"

using namespace kvactor;
using namespace kvactor::test;

namespace {

/// A pool of `n` blocks allowing `max_pinned` pins, with `p` (and `q`, if
/// given) allocated and released: their full blocks cached.
struct unpin_fixture : pool_fixture {
  void cached(std::uint32_t n, std::uint64_t max_pinned,
              const std::vector<std::vector<token_id>>& prompts) {
    cfg.max_pinned_blocks = max_pinned;
    make(n);
    request_id id = 100;
    for (auto& p : prompts) {
      alloc(prompt_req(id, p));
      release(id++);
    }
  }

  /// What a failed call must leave as it was: describe() with failures,
  /// the pins and the cache.
  std::string state() {
    return describe(pool(), true) + "pinned "
           + std::to_string(pool().pinned_blocks()) + " cached "
           + std::to_string(pool().cached_blocks());
  }
};

} // namespace

BOOST_FIXTURE_TEST_SUITE(unpin_suite, unpin_fixture)

BOOST_AUTO_TEST_CASE(unpinning_a_whole_pinned_prefix_makes_it_evictable_tail_first) {
  auto p = run(10, 13); // 3 full blocks and a partial one
  cached(16, 8, {p});
  BOOST_TEST(pool().pin(0, p, 1000, 0).value() == 3u);
  BOOST_TEST(pool().cached_blocks() == 0u);
  BOOST_TEST(pool().unpin(0, p).value() == 3u);
  BOOST_TEST(pool().pinned_blocks() == 0u);
  BOOST_TEST(pool().cached_blocks() == 3u);
  BOOST_TEST(invariant(pool()) == "ok");
  // Deepest first onto the LRU, so eviction takes the chain's tail first
  // and what stays cached is still a prefix a lookup reaches.
  BOOST_TEST(pool().evict(1) == 1u);
  BOOST_TEST(alloc(prompt_req(1, p)) == 8u);
  // Unpinning again finds nothing pinned: 0, not an error.
  BOOST_TEST(pool().unpin(0, p).value() == 0u);
}

BOOST_AUTO_TEST_CASE(expired_pins_go_deepest_first_as_unpinned_ones_do) {
  // The pool keeps its pins in no chain order (one that goes moves the
  // last into its place): taken in that order, p's root and q's tail would
  // reach the LRU first, and the first eviction cut p off at its root.
  auto p = run(10, 13);
  auto q = run(50, 13);
  cached(16, 8, {p, q});
  BOOST_TEST(pool().pin(0, p, 1000, 0).value() == 3u);
  BOOST_TEST(pool().pin(0, q, 1000, 0).value() == 3u);
  BOOST_TEST(pool().expire_pins(999) == 0u);
  BOOST_TEST(pool().expire_pins(1000) == 6u);
  BOOST_TEST(pool().pinned_blocks() == 0u);
  BOOST_TEST(invariant(pool()) == "ok");
  // Both tails first: each chain keeps a prefix a lookup reaches.
  BOOST_TEST(pool().evict(2) == 2u);
  BOOST_TEST(alloc(prompt_req(1, p)) == 8u);
  BOOST_TEST(alloc(prompt_req(2, q)) == 8u);
}

BOOST_AUTO_TEST_CASE(pins_expire_at_their_own_deadlines_whatever_came_before) {
  // Every hot message asks for expiry, which scans the pins only once the
  // earliest deadline came. Pins made after a scan with earlier deadlines
  // than the ones left, a pin renewed, and a pin unpinned before its time
  // must each still expire exactly at its own deadline.
  auto p = run(10, 13);
  auto q = run(50, 13);
  auto r = run(90, 13);
  cached(16, 12, {p, q, r});
  BOOST_TEST(pool().pin(0, p, 1000, 0).value() == 3u); // until 1000
  BOOST_TEST(pool().expire_pins(10) == 0u);            // before 1000: no scan
  BOOST_TEST(pool().pin(0, q, 90, 10).value() == 3u);  // until 100
  BOOST_TEST(pool().expire_pins(99) == 0u);
  BOOST_TEST(pool().expire_pins(100) == 3u); // q's, before p's bound
  BOOST_TEST(invariant(pool()) == "ok");
  BOOST_TEST(pool().pin(0, r, 400, 100).value() == 3u); // until 500
  BOOST_TEST(pool().unpin(0, r).value() == 3u);          // gone early
  BOOST_TEST(pool().expire_pins(500) == 0u);
  BOOST_TEST(pool().pin(0, p, 1500, 500).value() == 3u); // renewed: 2000
  BOOST_TEST(pool().expire_pins(1999) == 0u);
  BOOST_TEST(pool().pinned_blocks() == 3u);
  BOOST_TEST(invariant(pool()) == "ok");
  BOOST_TEST(pool().expire_pins(2000) == 3u);
  BOOST_TEST(pool().pinned_blocks() == 0u);
  BOOST_TEST(invariant(pool()) == "ok");
}

BOOST_AUTO_TEST_CASE(unpinned_blocks_rejoin_the_lru_at_its_recent_end_as_expiry_does) {
  auto p = run(10, 13);
  auto q = run(50, 9);
  cached(16, 8, {p});
  BOOST_TEST(pool().pin(0, p, 1000, 0).value() == 3u);
  alloc(prompt_req(1, q));
  release(1); // q's 2 blocks cached before p's pins go
  BOOST_TEST(pool().unpin(0, p).value() == 3u);
  // q's blocks are the least recently used: they go first.
  BOOST_TEST(pool().evict(2) == 2u);
  BOOST_TEST(alloc(prompt_req(2, p)) == 12u);
  BOOST_TEST(alloc(prompt_req(3, q)) == 0u);
}

BOOST_AUTO_TEST_CASE(a_longer_token_list_unpins_the_chain_it_finds) {
  auto p = run(10, 13);
  cached(16, 8, {p});
  BOOST_TEST(pool().pin(0, p, 1000, 0).value() == 3u);
  // Past the pinned chain: blocks not in the index end the walk.
  BOOST_TEST(pool().unpin(0, p + run(500, 11)).value() == 3u);
  BOOST_TEST(pool().pinned_blocks() == 0u);
  // A pin shorter than the list: only its blocks were pinned.
  BOOST_TEST(pool().pin(0, part(p, 0, 8), 1000, 0).value() == 2u);
  BOOST_TEST(pool().unpin(0, p).value() == 2u);
  BOOST_TEST(pool().pinned_blocks() == 0u);
  BOOST_TEST(pool().cached_blocks() == 3u);
}

BOOST_AUTO_TEST_CASE(a_shorter_token_list_keeps_what_the_longer_pin_holds) {
  auto p = run(10, 13);
  cached(16, 8, {p});
  BOOST_TEST(pool().pin(0, p, 1000, 0).value() == 3u);
  // p's third block hangs below the list's chain, still pinned: its
  // ancestors stay pinned with it, or a lookup could not reach it.
  BOOST_TEST(pool().unpin(0, part(p, 0, 8)).value() == 0u);
  BOOST_TEST(pool().pinned_blocks() == 3u);
  // Fewer tokens than a block: no chain at all.
  BOOST_TEST(pool().unpin(0, part(p, 0, 3)).value() == 0u);
  BOOST_TEST(pool().unpin(0, {}).value() == 0u);
  BOOST_TEST(pool().pinned_blocks() == 3u);
}

BOOST_AUTO_TEST_CASE(a_chain_another_pin_extends_keeps_the_shared_part_pinned) {
  auto shared = run(10, 8); // A B
  auto p = shared + run(100, 5); // A B C + partial
  auto q = shared + run(200, 5); // A B D + partial
  cached(16, 8, {p, q});
  BOOST_TEST(pool().pin(0, p, 1000, 0).value() == 3u);
  BOOST_TEST(pool().pin(0, q, 1000, 0).value() == 3u);
  BOOST_TEST(pool().pinned_blocks() == 4u);
  // C goes; B has D below it, off p's chain: A and B stay.
  BOOST_TEST(pool().unpin(0, p).value() == 1u);
  BOOST_TEST(pool().pinned_blocks() == 3u);
  BOOST_TEST(pool().cached_blocks() == 1u);
  BOOST_TEST(invariant(pool()) == "ok");
  BOOST_TEST(pool().evict(16) == 1u); // C only
  BOOST_TEST(alloc(prompt_req(1, q)) == 12u);
  release(1);
  // Now nothing else hangs below: q's chain goes whole.
  BOOST_TEST(pool().unpin(0, q).value() == 3u);
  BOOST_TEST(pool().pinned_blocks() == 0u);
}

BOOST_AUTO_TEST_CASE(an_ended_sessions_unpin_keeps_the_system_prompts_own_pin) {
  // The operator pins its system prompt for an hour; a session pins its
  // conversation on top for five minutes. The session ends: its pin goes,
  // the system prompt's stays - with its own deadline.
  auto sys = run(10, 8);                // A B
  auto session = sys + run(100, 5);     // A B C + partial
  cached(16, 8, {session});
  BOOST_TEST(pool().pin(0, sys, 3'600'000, 0).value() == 2u);
  BOOST_TEST(pool().pin(0, session, 300'000, 0).value() == 3u);
  BOOST_TEST(pool().unpin(0, session).value() == 1u); // C
  BOOST_TEST(pool().pinned_blocks() == 2u);
  BOOST_TEST(invariant(pool()) == "ok");
  BOOST_TEST(pool().evict(16) == 1u); // C only
  BOOST_TEST(pool().expire_pins(300'000) == 0u);
  BOOST_TEST(pool().expire_pins(3'600'000) == 2u);
  BOOST_TEST(invariant(pool()) == "ok");
}

BOOST_AUTO_TEST_CASE(what_stays_pinned_ends_with_the_pins_left_over_it) {
  // A later deadline of the pin that went does not outlive it: A and B
  // were pinned until the session's hour; after its unpin, until the
  // system prompt's five minutes.
  auto sys = run(10, 8);
  auto session = sys + run(100, 5);
  cached(16, 8, {session});
  BOOST_TEST(pool().pin(0, sys, 300'000, 0).value() == 2u);
  BOOST_TEST(pool().pin(0, session, 3'600'000, 0).value() == 3u);
  BOOST_TEST(pool().unpin(0, session).value() == 1u);
  BOOST_TEST(pool().expire_pins(299'999) == 0u);
  BOOST_TEST(pool().expire_pins(300'000) == 2u);
  BOOST_TEST(pool().pinned_blocks() == 0u);
  BOOST_TEST(invariant(pool()) == "ok");
}

BOOST_AUTO_TEST_CASE(unpinning_the_shorter_prefix_leaves_the_longer_pin_alone) {
  // The system prompt's pin goes; the session's, which covers A and B too,
  // keeps all three - until its own deadline, not the one that went.
  auto sys = run(10, 8);
  auto session = sys + run(100, 5);
  cached(16, 8, {session});
  BOOST_TEST(pool().pin(0, sys, 3'600'000, 0).value() == 2u);
  BOOST_TEST(pool().pin(0, session, 300'000, 0).value() == 3u);
  BOOST_TEST(pool().unpin(0, sys).value() == 0u);
  BOOST_TEST(pool().pinned_blocks() == 3u);
  BOOST_TEST(pool().expire_pins(300'000) == 3u);
  BOOST_TEST(invariant(pool()) == "ok");
  // Pinned twice at one end: one unpin lets that pin go whole.
  BOOST_TEST(pool().pin(0, sys, 1'000, 0).value() == 2u);
  BOOST_TEST(pool().pin(0, sys, 2'000, 0).value() == 2u);
  BOOST_TEST(pool().unpin(0, sys).value() == 2u);
  BOOST_TEST(pool().pinned_blocks() == 0u);
}

BOOST_AUTO_TEST_CASE(two_pins_ending_at_one_block_go_one_at_a_time) {
  // The session's prompt is the system prompt and a turn shorter than a
  // block: both pins end at B, told apart by their token counts.
  auto sys = run(10, 8);             // A B
  auto session = sys + run(100, 3);  // A B + partial
  cached(16, 8, {sys});
  BOOST_TEST(pool().pin(0, sys, 3'600'000, 0).value() == 2u);
  BOOST_TEST(pool().pin(0, session, 300'000, 0).value() == 2u);
  BOOST_TEST(pool().unpin(0, session).value() == 0u); // the system's stays
  BOOST_TEST(pool().pinned_blocks() == 2u);
  BOOST_TEST(pool().expire_pins(300'000) == 0u);
  BOOST_TEST(pool().expire_pins(3'600'000) == 2u);
  // A list of another length than any pin ending there lets all go.
  BOOST_TEST(pool().pin(0, sys, 1'000, 0).value() == 2u);
  BOOST_TEST(pool().pin(0, session, 1'000, 0).value() == 2u);
  BOOST_TEST(pool().unpin(0, sys + run(100, 2)).value() == 2u);
  BOOST_TEST(pool().pinned_blocks() == 0u);
  BOOST_TEST(invariant(pool()) == "ok");
}

BOOST_AUTO_TEST_CASE(a_pin_that_ended_at_the_chains_end_keeps_nothing_after_an_unpin) {
  // The session's five minutes are over, but the system prompt's hour at
  // the same block kept B pinned, so no block expired. Its unpin then lets
  // the whole chain go: the session's ended pin is not one still over it.
  auto sys = run(10, 8);             // A B
  auto session = sys + run(100, 3);  // A B + partial
  cached(16, 8, {sys});
  BOOST_TEST(pool().pin(0, session, 300'000, 0).value() == 2u);
  BOOST_TEST(pool().pin(0, sys, 3'600'000, 0).value() == 2u);
  BOOST_TEST(pool().expire_pins(300'000) == 0u); // no block's pin ended
  BOOST_TEST(invariant(pool()) == "ok");
  BOOST_TEST(pool().unpin(0, sys).value() == 2u);
  BOOST_TEST(pool().pinned_blocks() == 0u);
  BOOST_TEST(pool().cached_blocks() == 2u);
  BOOST_TEST(invariant(pool()) == "ok");
}

BOOST_AUTO_TEST_CASE(unpinning_a_pin_that_ran_out_keeps_a_live_one_at_its_end) {
  // The session's cleanup names its own pin, whose five minutes are over:
  // that one goes, not the system prompt's hour ending at the same block
  // (with the ended pin forgotten, no pin of its length was there, and
  // every pin there went).
  auto sys = run(10, 8);             // A B
  auto session = sys + run(100, 3);  // A B + partial
  cached(16, 8, {sys});
  BOOST_TEST(pool().pin(0, session, 300'000, 0).value() == 2u);
  BOOST_TEST(pool().pin(0, sys, 3'600'000, 0).value() == 2u);
  BOOST_TEST(pool().expire_pins(300'000) == 0u);
  BOOST_TEST(pool().unpin(0, session).value() == 0u);
  BOOST_TEST(pool().pinned_blocks() == 2u);
  BOOST_TEST(pool().expire_pins(3'599'999) == 0u);
  BOOST_TEST(pool().expire_pins(3'600'000) == 2u);
  BOOST_TEST(invariant(pool()) == "ok");
}

BOOST_AUTO_TEST_CASE(blocks_in_use_stay_in_use_and_only_lose_the_pin) {
  auto p = run(10, 13);
  cfg.max_pinned_blocks = 8;
  make(16);
  alloc(prompt_req(1, p));
  BOOST_TEST(pool().pin(0, p, 1000, 0).value() == 3u);
  auto before = describe(pool(), true);
  BOOST_TEST(pool().unpin(0, p).value() == 3u);
  BOOST_TEST(describe(pool(), true) == before); // same tables, no block moved
  BOOST_TEST(pool().pinned_blocks() == 0u);
  BOOST_TEST(pool().cached_blocks() == 0u);
  release(1); // cached like any released prefix, not pinned
  BOOST_TEST(pool().cached_blocks() == 3u);
  BOOST_TEST(pool().pinned_blocks() == 0u);
}

BOOST_AUTO_TEST_CASE(unpinning_gives_back_room_under_the_cap_and_to_allocations) {
  auto p = run(10, 13); // 3 full blocks
  auto q = run(50, 9);  // 2 full blocks
  cached(8, 3, {p, q}); // p: 3 cached, q: 2 cached, 3 free
  BOOST_TEST(pool().pin(0, p, 1000, 0).value() == 3u);
  BOOST_TEST(code(pool().pin(0, q, 1000, 0)) == "quota_exceeded");
  BOOST_TEST(pool().unpin(0, p).value() == 3u);
  BOOST_TEST(pool().pin(0, q, 1000, 0).value() == 2u);
  // p's blocks may be taken now: 3 free and p's 3, not q's pinned 2.
  BOOST_TEST(code(pool().allocate(tokens_req(1, 4 * 7))) == "out_of_blocks");
  alloc(tokens_req(2, 4 * 6));
  BOOST_TEST(pool().counters().evictions == 3u);
}

BOOST_AUTO_TEST_CASE(another_salt_or_namespace_unpins_nothing) {
  cfg.tenants = {tenant_config{}, tenant("own"), tenant("a", 0, 0, "team"),
                 tenant("b", 0, 0, "team")};
  auto p = run(10, 13);
  cfg.max_pinned_blocks = 8;
  make(16);
  auto salted = prompt_req(1, p);
  salted.cache_salt = 7;
  alloc(salted);
  release(1);
  alloc(prompt_req(2, p, "a"));
  release(2);
  BOOST_TEST(pool().pin(0, p, 1000, 0, 7).value() == 3u);
  BOOST_TEST(pool().pin(2, p, 1000, 0).value() == 3u);
  BOOST_TEST(pool().unpin(0, p).value() == 0u);     // unsalted: no chain
  BOOST_TEST(pool().unpin(0, p, 8).value() == 0u);  // another salt
  BOOST_TEST(pool().unpin(1, p, 7).value() == 0u);  // own namespace
  BOOST_TEST(pool().pinned_blocks() == 6u);
  BOOST_TEST(pool().unpin(0, p, 7).value() == 3u);
  // Pins go by namespace: b shares a's, so b may let a's pin go.
  BOOST_TEST(pool().unpin(3, p).value() == 3u);
  BOOST_TEST(pool().pinned_blocks() == 0u);
}

BOOST_AUTO_TEST_CASE(errors_and_misses_change_nothing) {
  auto p = run(10, 13);
  cached(16, 8, {p});
  BOOST_TEST(pool().pin(0, p, 1000, 0).value() == 3u);
  auto before = state();
  auto err = pool().unpin(7, p);
  BOOST_TEST(code(err) == "unknown_tenant");
  BOOST_TEST(render(err.error()).find("7") != std::string::npos);
  BOOST_TEST(state() == before);
  BOOST_TEST(pool().unpin(0, run(900, 12)).value() == 0u);
  // A negative id is a caller's bug: named, for unpin as for pin.
  auto bad = p;
  bad[5] = -3;
  auto neg = pool().unpin(0, bad);
  BOOST_TEST(code(neg) == "invalid_request");
  BOOST_TEST(render(neg.error()).find("unpin: tokens[5] = -3") != std::string::npos);
  auto neg_pin = pool().pin(0, bad, 1000, 0);
  BOOST_TEST(code(neg_pin) == "invalid_request");
  BOOST_TEST(render(neg_pin.error()).find("pin: tokens[5] = -3") != std::string::npos);
  BOOST_TEST(state() == before);
}

BOOST_AUTO_TEST_CASE(with_pinning_disabled_there_is_nothing_to_unpin) {
  auto p = run(10, 13);
  cached(16, 0, {p});
  auto before = state();
  BOOST_TEST(pool().unpin(0, p).value() == 0u);
  BOOST_TEST(code(pool().unpin(7, p)) == "unknown_tenant");
  BOOST_TEST(state() == before);
}

BOOST_AUTO_TEST_SUITE_END()
