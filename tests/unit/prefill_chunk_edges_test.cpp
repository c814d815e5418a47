// Chunked prefill's (allocation_request::prefill_chunk) edges, and
// reserve_expected's promise cap: a chunk near 2^64, the hash chain across
// chunk boundaries (equal to a whole-prompt admission's), the memo/retry
// path, fork, swap and steps mid-prefill, prefix caching off, shared
// namespaces, a capped promise beside a watermark or another tenant's
// reservation, and the promise accounting after the cap.
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/actors/block_pool_core.hpp"
#include "kvactor/messages/error.hpp"
#include "pool_fixture.hpp"

using namespace kvactor;
using namespace kvactor::test;

namespace {

/// The index's hashes (hash.lo) as a set.
std::set<std::uint64_t> indexed(const kvactor::detail::block_pool_core& pool) {
  std::set<std::uint64_t> out;
  pool.for_each_indexed([&](std::uint64_t h, block_id) { out.insert(h); });
  return out;
}

/// Appends prompt[from, to) to `id` in pieces of `step` tokens (named).
void feed(kvactor::detail::block_pool_core& pool, request_id id,
          const std::vector<token_id>& prompt, std::size_t from,
          std::size_t to, std::size_t step) {
  while (from < to) {
    auto n = std::min(step, to - from);
    auto res = pool.extend(id, n, prompt.data() + from);
    if (!res)
      BOOST_FAIL("extend " << id << " at " << from << ": " << render(res.error()));
    BOOST_REQUIRE(invariant(pool) == "ok");
    from += n;
  }
}

} // namespace

BOOST_AUTO_TEST_SUITE(prefill_chunk_edges_suite)

// -- a huge chunk -----------------------------------------------------------------

// hits * block_size + prefill_chunk wrapped for a chunk near 2^64 ("no
// limit"): the table then held fewer tokens than the hit blocks, its last
// hit block - full, indexed, shared - became its "partial" tail and the
// next token was written into it in place.
BOOST_FIXTURE_TEST_CASE(a_huge_prefill_chunk_after_a_hit_admits_the_whole_prompt,
                        pool_fixture) {
  auto prompt = run(100, 22); // 5 full blocks of 4 and 2 tokens
  alloc(prompt_req(1, prompt));
  for (auto chunk : {u64_max, u64_max - 1, u64_max - 5}) {
    auto req = chunked(2, prompt, chunk);
    BOOST_TEST(pool().can_allocate(req));
    BOOST_TEST(alloc(req) == 20u);
    BOOST_TEST(tokens(2) == 22u, "chunk " << chunk);
    BOOST_TEST(blocks(2).size() == 6u, "chunk " << chunk);
    release(2);
  }
}

BOOST_FIXTURE_TEST_CASE(a_huge_prefill_chunk_never_writes_into_a_shared_full_block,
                        pool_fixture) {
  auto prompt = run(100, 22);
  alloc(prompt_req(1, prompt));
  alloc(chunked(2, prompt, u64_max));
  // The next token goes to position tokens(2); its block must be private.
  auto pos = tokens(2);
  auto k = pos / 4;
  token_id other = 7777; // not prompt[pos]
  auto ext = pool().extend(2, 1, &other);
  BOOST_REQUIRE(ext);
  BOOST_TEST(invariant(pool()) == "ok");
  auto mine = blocks(2);
  auto theirs = blocks(1);
  BOOST_TEST(!(k < theirs.size() && mine[k] == theirs[k] && ext->copies.empty()),
             "token " << pos << " written in place into block " << mine[k]
                      << ", which request 1 holds full (and the index serves)");
}

// With the hit blocks cached (revived), take = need - hits + revived no
// longer underflows: the request is admitted with more blocks than its
// tokens fill.
BOOST_FIXTURE_TEST_CASE(a_huge_prefill_chunk_after_cached_hits_admits_the_whole_prompt,
                        pool_fixture) {
  auto prompt = run(100, 22);
  alloc(prompt_req(1, prompt));
  release(1); // 5 full blocks cached
  auto res = pool().allocate(chunked(2, prompt, u64_max - 5));
  BOOST_REQUIRE(res);
  BOOST_TEST(invariant(pool()) == "ok");
  BOOST_TEST(tokens(2) == 22u);
  BOOST_TEST(blocks(2).size() == 6u);
}

// -- the hash chain across chunks ---------------------------------------------------

// Every chunk size and every size of the later extends: once the whole
// prompt is in, the index holds exactly what a whole-prompt admission
// indexes, and a later prompt hits all of it.
BOOST_FIXTURE_TEST_CASE(chunks_and_appends_of_any_size_index_what_a_whole_admission_does,
                        pool_fixture) {
  auto prompt = run(100, 22) + run(5, 3); // 25 tokens: 6 full blocks
  make(32);
  alloc(prompt_req(1, prompt));
  auto want = indexed(pool());
  BOOST_REQUIRE(want.size() == 6u);
  for (std::uint64_t chunk = 1; chunk <= 26; ++chunk)
    for (std::size_t step = 1; step <= 9; ++step) {
      make(32);
      alloc(chunked(1, prompt, chunk));
      auto have = tokens(1);
      feed(pool(), 1, prompt, have, prompt.size(), step);
      BOOST_TEST(tokens(1) == prompt.size());
      BOOST_TEST((indexed(pool()) == want), "chunk " << chunk << " step " << step);
      BOOST_TEST(alloc(prompt_req(2, prompt)) == 24u);
    }
}

// The same with a cached prefix first (hits, then a chunk ending mid-block).
BOOST_FIXTURE_TEST_CASE(chunks_after_hits_continue_the_hit_chain, pool_fixture) {
  auto prompt = run(100, 22) + run(5, 3);
  make(32);
  alloc(prompt_req(1, prompt));
  auto want = indexed(pool());
  for (std::size_t cached = 1; cached <= 24; ++cached)
    for (std::uint64_t chunk : {1u, 2u, 3u, 5u, 7u}) {
      make(32);
      alloc(prompt_req(9, part(prompt, 0, cached)));
      release(9); // its full blocks stay cached
      auto hits = alloc(chunked(1, prompt, chunk));
      BOOST_TEST(hits == (cached / 4) * 4);
      feed(pool(), 1, prompt, tokens(1), prompt.size(), 3);
      BOOST_TEST((indexed(pool()) == want), "cached " << cached << " chunk " << chunk);
    }
}

// -- the memo and retries -----------------------------------------------------------

BOOST_FIXTURE_TEST_CASE(a_chunked_retry_after_out_of_blocks_indexes_the_same_chain,
                        pool_fixture) {
  auto prompt = run(100, 22) + run(5, 3);
  make(32);
  alloc(prompt_req(1, prompt));
  auto want = indexed(pool());
  for (std::uint64_t first : {1u, 6u, 9u})
    for (std::uint64_t second : {1u, 3u, 6u, 30u}) {
      make(8);
      alloc(prompt_req(5, part(prompt, 0, 9))); // 2 blocks cached later
      release(5);
      alloc(tokens_req(7, 24)); // the 6 free blocks: 2 cached ones left
      auto res = pool().allocate(chunked(1, prompt, first));
      BOOST_REQUIRE(!res);
      BOOST_TEST(code(res.error()) == "out_of_blocks");
      BOOST_TEST(!pool().can_allocate(chunked(1, prompt, second)));
      release(7);
      BOOST_TEST(pool().can_allocate(chunked(1, prompt, second)));
      alloc(chunked(1, prompt, second));
      feed(pool(), 1, prompt, tokens(1), prompt.size(), 4);
      BOOST_TEST((indexed(pool()) == want), "first " << first << " second " << second);
    }
}

// The memo holds the prompt's hashes for one tenant; a retry by another
// tenant sharing the namespace, or not, must hash its own seed.
BOOST_FIXTURE_TEST_CASE(a_memo_of_one_tenant_serves_no_other, pool_fixture) {
  cfg.tenants = {tenant_config{}, tenant("a", 0, 0, "ns"), tenant("b", 0, 0, "ns"),
                 tenant("c")};
  make(16);
  auto prompt = run(100, 22);
  alloc(tokens_req(7, 64));
  BOOST_REQUIRE(!pool().allocate(chunked(1, prompt, 5, "a")));
  release(7);
  alloc(chunked(1, prompt, 5, "c"));
  feed(pool(), 1, prompt, 5, 22, 5);
  alloc(chunked(2, prompt, 5, "a"));
  feed(pool(), 2, prompt, tokens(2), 22, 5);
  BOOST_TEST(alloc(chunked(3, prompt, 1, "b")) == 20u);
  BOOST_TEST(alloc(chunked(4, prompt, 1, "c")) == 20u);
  BOOST_TEST(alloc(chunked(5, prompt, 1, "")) == 0u);
}

// -- fork, swap, steps mid-prefill --------------------------------------------------

BOOST_FIXTURE_TEST_CASE(a_fork_mid_prefill_copies_the_partial_chunk_and_both_index_once,
                        pool_fixture) {
  auto prompt = run(100, 22);
  alloc(prompt_req(9, prompt));
  auto want = indexed(pool());
  make(16);
  alloc(chunked(1, prompt, 6)); // block 1 holds 2 of its 4
  BOOST_REQUIRE(pool().fork(1, 2));
  auto ext = pool().extend(1, 3, prompt.data() + 6);
  BOOST_REQUIRE(ext);
  BOOST_TEST(ext->copies.size() == 1u); // shared partial block: copy on write
  BOOST_TEST(invariant(pool()) == "ok");
  feed(pool(), 2, prompt, 6, 22, 7);
  feed(pool(), 1, prompt, 9, 22, 2);
  BOOST_TEST((indexed(pool()) == want));
  BOOST_TEST(alloc(prompt_req(3, prompt)) == 20u);
}

BOOST_FIXTURE_TEST_CASE(a_swap_mid_prefill_keeps_the_chain, pool_fixture) {
  cfg.num_host_blocks = 8;
  make(16);
  auto prompt = run(100, 22);
  alloc(chunked(1, prompt, 6));
  auto out = pool().swap_out_begin(1);
  BOOST_REQUIRE(out);
  BOOST_REQUIRE(pool().swap_out_done(1, pool().find(1)->cache_id, true));
  BOOST_TEST(invariant(pool()) == "ok");
  BOOST_REQUIRE(pool().swap_in_begin(1));
  BOOST_REQUIRE(pool().swap_in_done(1, pool().find(1)->cache_id, true));
  BOOST_TEST(invariant(pool()) == "ok");
  feed(pool(), 1, prompt, 6, 22, 5);
  BOOST_TEST(alloc(prompt_req(2, prompt)) == 20u);
}

BOOST_FIXTURE_TEST_CASE(a_chunked_admit_blocked_by_a_preemption_is_admitted_next_step,
                        pool_fixture) {
  make(6);
  auto prompt = run(100, 22);
  alloc(tokens_req(1, 12)); // 3 blocks
  alloc(tokens_req(2, 8));  // 2 blocks
  step_request s;
  s.extends.push_back(extend_op{1, 8}); // needs 2 more: preempts 2
  s.extends.push_back(extend_op{2, 1});
  s.admits.push_back(chunked(3, prompt, 5));
  auto r = pool().run_step(s);
  BOOST_TEST(r.preempted.size() == 1u);
  BOOST_TEST(r.admission_blocked);
  BOOST_TEST(invariant(pool()) == "ok");
  step_request t;
  t.frees.push_back(1);
  t.admits.push_back(chunked(3, prompt, 5));
  r = pool().run_step(t);
  BOOST_REQUIRE(r.admitted.size() == 1u);
  BOOST_TEST(r.admitted[0].table.num_tokens == 5u);
  step_request u;
  u.extends.push_back(extend_op{3, 17});
  u.tokens = part(prompt, 5, 22);
  r = pool().run_step(u);
  BOOST_TEST(r.failed.empty());
  BOOST_TEST(invariant(pool()) == "ok");
  BOOST_TEST(indexed(pool()).size() == 5u);
}

// -- prefix caching off, namespaces, counters ---------------------------------------

BOOST_FIXTURE_TEST_CASE(without_prefix_caching_a_chunk_admits_the_chunk_only,
                        pool_fixture) {
  cfg.prefix_caching = false;
  make(24);
  auto prompt = run(100, 22);
  alloc(prompt_req(1, prompt));
  BOOST_TEST(alloc(chunked(2, prompt, 5)) == 0u);
  BOOST_TEST(tokens(2) == 5u);
  BOOST_TEST(blocks(2).size() == 2u);
  BOOST_TEST(alloc(chunked(3, prompt, u64_max)) == 0u);
  BOOST_TEST(tokens(3) == 22u);
  feed(pool(), 2, prompt, 5, 22, 4);
  BOOST_TEST(pool().index_size() == 0u);
  BOOST_TEST(pool().counters().query_tokens == 0u);
}

BOOST_FIXTURE_TEST_CASE(a_shared_namespace_sees_a_chunked_prompt_once_computed,
                        pool_fixture) {
  cfg.tenants = {tenant_config{}, tenant("a", 0, 0, "ns"), tenant("b", 0, 0, "ns")};
  make(32);
  auto prompt = run(100, 22);
  alloc(chunked(1, prompt, 5, "a"));
  BOOST_TEST(alloc(chunked(2, prompt, 5, "b")) == 4u); // block 0 only
  feed(pool(), 1, prompt, 5, 22, 6);
  BOOST_TEST(alloc(prompt_req(3, prompt, "b")) == 20u);
  BOOST_TEST(alloc(prompt_req(4, prompt, "")) == 0u);
  auto& a = pool().tenants()[1];
  auto& b = pool().tenants()[2];
  BOOST_TEST(a.query_tokens == 22u);
  BOOST_TEST(a.hit_tokens == 0u);
  BOOST_TEST(b.query_tokens == 44u);
  BOOST_TEST(b.hit_tokens == 24u);
}

// -- reserve_expected: the cap clamp ------------------------------------------------

// A promise cut to the lone-request cap alone still left an empty pool
// short past a watermark (or another tenant's reservation): refused as
// out_of_blocks for ever. It is cut to what an empty pool leaves too.
BOOST_FIXTURE_TEST_CASE(a_capped_promise_is_admitted_on_an_empty_pool_with_a_watermark,
                        pool_fixture) {
  cfg.admission.policy = "reserve_expected";
  cfg.admission.watermark = 0.1; // 2 of 16 blocks
  make(16);
  auto big = tokens_req(1, 8);
  big.expected_output_tokens = 400; // cut to 64 tokens: 16 blocks
  // Without the promise the watermark alone admits it (2 + 2 <= 16).
  BOOST_TEST(pool().used_blocks() == 0u);
  auto res = pool().allocate(big);
  BOOST_TEST(code(res) == "ok", "an empty pool refuses it: "
                                  << (res ? std::string{} : render(res.error())));
}

BOOST_FIXTURE_TEST_CASE(a_capped_promise_is_admitted_beside_another_tenants_empty_reservation,
                        pool_fixture) {
  cfg.admission.policy = "reserve_expected";
  cfg.tenants = {tenant_config{}, tenant("r", 0, 8)};
  make(16);
  auto big = tokens_req(1, 8);
  big.expected_output_tokens = 400;
  auto res = pool().allocate(big);
  BOOST_TEST(code(res) == "ok", "an empty pool refuses it: "
                                  << (res ? std::string{} : render(res.error())));
}

// The promise stays consistent (the invariant recounts it) through a chunked
// admission with a clamped promise, extends past the promise, a fork, a
// swap and frees.
BOOST_FIXTURE_TEST_CASE(a_clamped_promise_stays_counted_through_everything,
                        pool_fixture) {
  cfg.admission.policy = "reserve_expected";
  cfg.pressure.preempt_at_critical = true;
  cfg.pressure.medium = 0.3;
  cfg.pressure.high = 0.4;
  cfg.pressure.critical = 0.5; // 40 blocks: lone cap 19 (76 tokens)
  cfg.num_host_blocks = 40;
  make(40);
  auto prompt = run(100, 22);
  auto req = chunked(1, prompt, 5);
  req.expected_output_tokens = 1000;
  alloc(req);
  auto& ts = pool().tenants()[0];
  BOOST_TEST(pool().find(1)->expected_tokens == 76u);
  BOOST_TEST(ts.promised == 17u);
  feed(pool(), 1, prompt, 5, 22, 6);
  BOOST_TEST(ts.promised == 13u);
  BOOST_REQUIRE(pool().fork(1, 2));
  BOOST_TEST(invariant(pool()) == "ok");
  BOOST_TEST(ts.promised == 26u);
  std::vector<token_id> more = run(7, 60);
  feed(pool(), 1, more, 0, 40, 7); // 62 tokens: 16 blocks
  BOOST_TEST(ts.promised == 16u);
  BOOST_REQUIRE(pool().swap_out_begin(2));
  BOOST_TEST(ts.promised == 16u); // until the copy succeeded
  BOOST_REQUIRE(pool().swap_out_done(2, pool().find(2)->cache_id, true));
  BOOST_TEST(ts.promised == 3u);
  BOOST_TEST(invariant(pool()) == "ok");
  feed(pool(), 1, more, 40, 54, 14); // 76 tokens: the cap
  BOOST_TEST(ts.promised == 0u);
  BOOST_TEST(code(pool().extend(1, 1, more.data())) == "exceeds_capacity");
  BOOST_REQUIRE(pool().fork(1, 3));
  BOOST_TEST(ts.promised == 0u);
  release(1);
  BOOST_REQUIRE(pool().swap_in_begin(2));
  BOOST_REQUIRE(pool().swap_in_done(2, pool().find(2)->cache_id, true));
  BOOST_TEST(ts.promised == 13u);
  release(2);
  release(3);
  BOOST_TEST(ts.promised == 0u);
}

BOOST_AUTO_TEST_SUITE_END()

