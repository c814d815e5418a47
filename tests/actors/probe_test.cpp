// probe_atom end to end: a scheduler asks, for the requests it has waiting,
// how many prompt tokens each would find cached - at the manager, or in one
// hop at the step lane - and nothing in the cache changes.
#include "fixture.hpp"
#include "lane_fixture.hpp"

using namespace kvactor;
using namespace kvactor::test;

namespace {

using counts = std::vector<std::uint64_t>;

struct probe_fixture : lane_fixture {
  /// The probe's reply from `dest` (the manager or the lane).
  template <class Dest>
  caf::expected<counts> probe(const Dest& dest,
                              std::vector<allocation_request> reqs) {
    auto res = ask_from<counts>(self, dest, probe_atom::value, std::move(reqs));
    if (!res)
      return std::move(res.error());
    return std::get<0>(*res);
  }
};

} // namespace

BOOST_FIXTURE_TEST_SUITE(probe_messages, probe_fixture)

BOOST_AUTO_TEST_CASE(the_manager_and_the_lane_answer_each_requests_cached_tokens) {
  auto prompt = make_tokens(14, 7); // 3 full blocks of 4 and 2 tokens
  BOOST_REQUIRE(allocate(make_prompt_request(cfg, 1, prompt)));
  BOOST_REQUIRE(free(1));
  auto other = make_tokens(14, 99);
  std::vector<allocation_request> waiting{
    make_prompt_request(cfg, 2, other), make_prompt_request(cfg, 3, prompt)};
  auto before = stats();
  BOOST_REQUIRE(before);
  for (auto res : {probe(mgr, waiting), probe(lane, waiting)}) {
    BOOST_REQUIRE_MESSAGE(res, outcome(res));
    BOOST_TEST(*res == (counts{0, 12}));
  }
  auto after = stats();
  BOOST_REQUIRE(after);
  BOOST_TEST(after->free_blocks == before->free_blocks);
  BOOST_TEST(after->cached_blocks == before->cached_blocks);
  BOOST_TEST(after->active_caches == 0u);
  // Probes are no admissions: the hit rate's counters stay as they were.
  BOOST_TEST(after->prefix_query_tokens == before->prefix_query_tokens);
  BOOST_TEST(after->prefix_hit_tokens == before->prefix_hit_tokens);
  // What the probe said, the admission hits.
  BOOST_REQUIRE(allocate(waiting[1]));
  auto admitted = stats();
  BOOST_REQUIRE(admitted);
  BOOST_TEST(admitted->prefix_hit_tokens - after->prefix_hit_tokens == 12u);
}

BOOST_AUTO_TEST_CASE(a_bad_request_fails_the_probe_naming_it) {
  auto bad = make_prompt_request(cfg, 5, make_tokens(8, 3));
  bad.tenant = "nobody";
  auto res = probe(lane, {make_prompt_request(cfg, 4, make_tokens(8, 1)), bad});
  BOOST_TEST(outcome(res) == "unknown_tenant");
  BOOST_TEST((!res && render(res.error()).find("request 5") != std::string::npos));
  // A request for another device: allocate refuses it, so does the probe
  // (else a router would rank first a prompt this cache never admits).
  auto cached = make_tokens(8, 1);
  BOOST_REQUIRE(allocate(make_prompt_request(cfg, 6, cached)));
  auto elsewhere = make_prompt_request(cfg, 7, cached);
  elsewhere.device = device{device_kind::cuda, 3};
  for (auto res2 : {probe(mgr, {elsewhere}), probe(lane, {elsewhere})}) {
    BOOST_TEST(outcome(res2) == "invalid_request");
    BOOST_TEST((!res2 && render(res2.error()).find("request 7") != std::string::npos));
    BOOST_TEST((!res2 && render(res2.error()).find("cuda:3") != std::string::npos));
  }
  auto empty = probe(mgr, {});
  BOOST_REQUIRE_MESSAGE(empty, outcome(empty));
  BOOST_TEST(empty->empty());
}

BOOST_AUTO_TEST_SUITE_END()
