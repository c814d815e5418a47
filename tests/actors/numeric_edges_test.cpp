// The manager's and the step lane's messages at numeric extremes: request
// ids at both ends of their range, counts whose sums pass 32 bits, draft
// counts and verdicts past anything held - each refused with its request
// named, and nothing changed. (The pool core's own extremes: the unit
// tests' block_pool_lifetime_test.cpp and prefill_chunk_edges_test.cpp.)
#include "fixture.hpp"
#include "step_ops.hpp"

#include <limits>

#include <caf/all.hpp>

using namespace kvactor;
using namespace kvactor::test;

namespace {

constexpr auto u64_max = std::numeric_limits<std::uint64_t>::max();
constexpr auto u32_max = std::numeric_limits<std::uint32_t>::max();

/// True if `err` has code `code` and its rendering contains `part`.
bool says(const caf::error& err, errc code, const std::string& part) {
  return has_code(err, code) && render(err).find(part) != std::string::npos;
}

} // namespace

BOOST_FIXTURE_TEST_SUITE(numeric_edges, cache_fixture)

BOOST_AUTO_TEST_CASE(request_ids_0_and_max_are_ids_like_any_other) {
  for (request_id id : {request_id{0}, u64_max, u64_max - 1}) {
    BOOST_TEST_CONTEXT("request " << id) {
      BOOST_REQUIRE(allocate(id, 5));
      BOOST_TEST(value_or(extend(id, 3), block_table{}).num_tokens == 8u);
      BOOST_TEST(outcome(lookup(id)) == "ok");
    }
  }
  BOOST_TEST(outcome(fork(0, u64_max - 2)) == "ok");
  auto dup = fork(u64_max, 0);
  BOOST_REQUIRE(!dup);
  BOOST_TEST(says(dup.error(), errc::duplicate_request, "request 0"),
             render(dup.error()));
  // A step ends 0 and admits it again; a growth past its limit fails
  // naming the largest id.
  step_request s;
  s.frees = {0};
  s.extends = {grow(u64_max, 1), grow(u64_max - 1, u32_max)};
  s.admits = {make_request(cfg, 0, 4)};
  auto r = step(s);
  BOOST_REQUIRE_MESSAGE(r, outcome(r));
  BOOST_TEST(r->freed == std::vector<request_id>{0});
  BOOST_REQUIRE_EQUAL(r->failed.size(), 1u);
  BOOST_TEST(r->failed[0].id == u64_max - 1);
  BOOST_TEST(says(r->failed[0].error, errc::exceeds_max_sequence_length,
                  "request 18446744073709551614: 8 + 4294967295 tokens"),
             render(r->failed[0].error));
  BOOST_REQUIRE_EQUAL(r->admitted.size(), 1u);
  BOOST_TEST(r->admitted[0].id == 0u);
  auto live = list();
  BOOST_REQUIRE(live);
  std::vector<request_id> ids;
  for (auto& e : *live)
    ids.push_back(e.id);
  BOOST_TEST((ids == std::vector<request_id>{0, u64_max - 2, u64_max - 1,
                                             u64_max}));
  for (request_id id : {request_id{0}, u64_max})
    BOOST_TEST(outcome(free(id)) == "ok");
}

BOOST_AUTO_TEST_CASE(step_counts_past_32_bits_fail_naming_their_requests) {
  BOOST_REQUIRE(allocate(1, 5, u64_max));
  BOOST_REQUIRE(allocate(2, 5, u64_max));
  auto before = used_blocks();
  auto t1 = value_or(table(1), block_table{});
  auto t2 = value_or(table(2), block_table{});
  auto unchanged = [&] {
    return used_blocks() == before && value_or(table(1), block_table{}) == t1
           && value_or(table(2), block_table{}) == t2;
  };
  // 2^32 - 1 tokens each: more blocks than the pool, not a wrapped few.
  step_request s;
  s.extends = {grow(1, u32_max), grow(2, u32_max), grow(1, u32_max),
               grow(99, u32_max)};
  auto r = step(s);
  BOOST_REQUIRE_MESSAGE(r, outcome(r));
  BOOST_REQUIRE_EQUAL(r->failed.size(), 4u);
  BOOST_TEST(r->preempted.empty());
  BOOST_TEST(says(r->failed[0].error, errc::exceeds_capacity,
                  "extend of request 1: request 1 needs 1073741825 blocks"));
  BOOST_TEST(says(r->failed[1].error, errc::exceeds_capacity, "request 2"));
  BOOST_TEST(says(r->failed[2].error, errc::invalid_request,
                  "request 1 appears twice"));
  BOOST_TEST(says(r->failed[3].error, errc::unknown_request, "request 99"));
  BOOST_TEST(unchanged());
  // Token ids counted against extends whose sum passes 2^32: all fail.
  step_request named;
  named.extends = {grow(1, u32_max), grow(2, 2)};
  named.tokens = {1};
  r = step(named);
  BOOST_REQUIRE_MESSAGE(r, outcome(r));
  BOOST_REQUIRE_EQUAL(r->failed.size(), 2u);
  for (auto& f : r->failed) {
    BOOST_TEST(says(f.error, errc::invalid_request,
                    "1 token ids for 4294967297 extended tokens"),
               render(f.error));
    BOOST_TEST(says(f.error, errc::invalid_request,
                    "extend of request " + std::to_string(f.id) + ": "),
               render(f.error));
  }
  BOOST_TEST(unchanged());
  // Draft counts and verdicts past anything held.
  step_request drafts;
  drafts.extends = {extend_op{1, 2, u32_max}, extend_op{2, u32_max, u32_max}};
  drafts.verdicts = {draft_verdict{1, u32_max}, draft_verdict{77, 0}};
  r = step(drafts);
  BOOST_REQUIRE_MESSAGE(r, outcome(r));
  BOOST_REQUIRE_EQUAL(r->failed.size(), 4u);
  BOOST_TEST(says(r->failed[0].error, errc::invalid_request,
                  "verdict of request 1: request 1: accepts 4294967295"));
  BOOST_TEST(says(r->failed[1].error, errc::unknown_request, "request 77"));
  BOOST_TEST(says(r->failed[2].error, errc::invalid_request,
                  "request 1: 4294967295 draft tokens in an extend of 2"));
  BOOST_TEST(says(r->failed[3].error, errc::invalid_request,
                  "request 2: 4294967295 draft tokens"));
  BOOST_TEST(unchanged());
  // Through the manager, by id: the same.
  auto d = ask<block_table>(mgr, draft_atom::value, request_id{1}, u64_max,
                            std::vector<token_id>{}, u32_max);
  BOOST_TEST(outcome(d) == "invalid_request");
  auto e = extend(1, u64_max - 4);
  BOOST_REQUIRE(!e);
  BOOST_TEST(says(e.error(), errc::exceeds_max_sequence_length,
                  "request 1: 5 + 18446744073709551611 tokens"),
             render(e.error()));
  BOOST_TEST(unchanged());
}

BOOST_AUTO_TEST_SUITE_END()

// A tenant's quota and the pool's shortage are found by checks that know
// no request: the allocate and swap-in that meet them say whose they
// refused (a step's failures and an extend's do).
BOOST_AUTO_TEST_CASE(shortages_name_the_request_they_refuse) {
  auto cfg = host_tier_config();
  tenant_config q;
  q.name = "q";
  q.max_blocks = 4;
  cfg.tenants.push_back(q);
  cache_fixture f{cfg};
  auto in_q = [&](request_id id, std::uint64_t tokens) {
    auto r = make_request(f.cfg, id, tokens);
    r.tenant = "q";
    return r;
  };
  BOOST_REQUIRE(f.allocate(in_q(10, 12))); // 3 of q's 4 blocks
  auto over = f.allocate(in_q(11, 8));
  BOOST_REQUIRE(!over);
  BOOST_TEST(says(over.error(), errc::quota_exceeded,
                  "allocation of request 11: tenant 'q'"),
             render(over.error()));
  BOOST_REQUIRE(f.allocate(1, 8)); // 2 blocks
  BOOST_TEST(outcome(f.ask<std::uint32_t>(f.mgr, swap_out_atom::value,
                                          request_id{1}))
             == "ok");
  BOOST_REQUIRE(f.allocate(2, 58 * 4, 1000)); // all but 3 blocks
  auto short_of = f.allocate(3, 4 * 4);
  BOOST_REQUIRE(!short_of);
  BOOST_TEST(says(short_of.error(), errc::out_of_blocks,
                  "allocation of request 3: need 4 blocks, 3 available"),
             render(short_of.error()));
  BOOST_REQUIRE(f.allocate(3, 2 * 4)); // 1 left
  auto back = f.ask<block_table>(f.mgr, swap_in_atom::value, request_id{1});
  BOOST_REQUIRE(!back);
  BOOST_TEST(says(back.error(), errc::out_of_blocks,
                  "swap-in of request 1: need 2 blocks"),
             render(back.error()));
  // Refused, request 1 is still swapped out.
  auto found = f.lookup(1);
  BOOST_REQUIRE(found);
  BOOST_TEST(found->second.swapped);
}
