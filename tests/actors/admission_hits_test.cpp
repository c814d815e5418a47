// What an admission found cached stays with the request: its handle's stats
// report prefix_hit_tokens - whether it came in by allocate or by a step -
// so a model knows which prompt tokens it need not compute without taking
// a probe's hint for a promise. A fork hit nothing: its blocks are its
// parent's, written.
#include "fixture.hpp"

using namespace kvactor;
using namespace kvactor::test;

namespace {

std::uint64_t hits_of(cache_fixture& f, const request_handle_actor& h) {
  auto s = f.handle_stats(h);
  BOOST_REQUIRE_MESSAGE(s, outcome(s));
  return s->prefix_hit_tokens;
}

} // namespace

BOOST_FIXTURE_TEST_SUITE(admission_hits, cache_fixture)

BOOST_AUTO_TEST_CASE(a_handle_reports_what_its_allocate_found_cached) {
  auto prompt = make_tokens(14, 7); // 3 full blocks of 4 and 2 tokens
  auto first = allocate(make_prompt_request(cfg, 1, prompt));
  BOOST_REQUIRE(first);
  BOOST_TEST(hits_of(*this, first->handle) == 0u);
  // Sharing the blocks of a live request counts as much as cached ones.
  auto second = allocate(make_prompt_request(cfg, 2, prompt));
  BOOST_REQUIRE(second);
  BOOST_TEST(hits_of(*this, second->handle) == 12u);
  // The last prompt token is always computed: a 12-token prompt, all of it
  // in the index, hits 8.
  auto whole = prompt;
  whole.resize(12);
  auto third = allocate(make_prompt_request(cfg, 3, whole));
  BOOST_REQUIRE(third);
  BOOST_TEST(hits_of(*this, third->handle) == 8u);
  // Growth does not change what the admission did.
  BOOST_REQUIRE(extend(2, 9));
  BOOST_TEST(hits_of(*this, second->handle) == 12u);
  // Neither does a request without a prompt hit anything.
  auto unnamed = allocate(4, 14);
  BOOST_REQUIRE(unnamed);
  BOOST_TEST(hits_of(*this, unnamed->handle) == 0u);
}

BOOST_AUTO_TEST_CASE(a_fork_reports_no_hits) {
  auto prompt = make_tokens(14, 3);
  BOOST_REQUIRE(allocate(make_prompt_request(cfg, 1, prompt)));
  auto second = allocate(make_prompt_request(cfg, 2, prompt));
  BOOST_REQUIRE(second);
  auto child = fork(2, 3);
  BOOST_REQUIRE_MESSAGE(child, outcome(child));
  BOOST_TEST(hits_of(*this, child->handle) == 0u);
  BOOST_TEST(hits_of(*this, second->handle) == 12u);
}

BOOST_AUTO_TEST_CASE(a_step_admitted_handle_reports_its_admissions_hits) {
  auto prompt = make_tokens(10, 5); // 2 full blocks of 4 and 2 tokens
  BOOST_REQUIRE(allocate(make_prompt_request(cfg, 1, prompt)));
  BOOST_REQUIRE(free(1));
  step_request s;
  s.admits.push_back(make_prompt_request(cfg, 2, prompt));
  s.admits.push_back(make_prompt_request(cfg, 3, make_tokens(10, 6)));
  auto r = step(s);
  BOOST_REQUIRE_MESSAGE(r, outcome(r));
  BOOST_REQUIRE(r->admitted.size() == 2u);
  for (auto& a : r->admitted) {
    auto found = lookup(a.id);
    BOOST_REQUIRE_MESSAGE(found, outcome(found));
    BOOST_TEST(hits_of(*this, found->first) == a.hit_tokens);
  }
  BOOST_TEST(r->admitted[0].hit_tokens == 8u);
  BOOST_TEST(r->admitted[1].hit_tokens == 0u);
}

BOOST_AUTO_TEST_SUITE_END()
