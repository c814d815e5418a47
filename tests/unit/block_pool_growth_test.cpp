// block_pool_core with tens of thousands of live requests: the request
// table grows through several chunks (chunked_vector) and the id index
// through several growths, each retiring its old table over the operations
// that follow (flat_index), while requests are admitted, extended, forked
// and released among them. Every live request keeps the token count and
// table length a plain map expects, a fork's parent keeps its blocks, and
// the invariant holds throughout.
#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/actors/block_pool_core.hpp"
#include "kvactor/messages/error.hpp"
#include "pool_fixture.hpp"

using namespace kvactor;
using namespace kvactor::test;

namespace {

template <class T>
void require(const caf::expected<T>& res) {
  if (!res)
    BOOST_FAIL(render(res.error()));
}

} // namespace

BOOST_AUTO_TEST_SUITE(block_pool_growth_suite)

BOOST_FIXTURE_TEST_CASE(tens_of_thousands_of_requests_survive_the_tables_growth,
                        pool_fixture) {
  auto& p = make(120000); // blocks of 4 tokens
  std::mt19937_64 rng{2024};
  std::map<request_id, std::uint64_t> expect; // live id -> tokens
  std::vector<request_id> live;               // for picking one at random
  std::map<request_id, std::vector<block_id>> parents; // forked: table then
  request_id next = 1;
  auto pick = [&]() -> std::size_t { return rng() % live.size(); };
  auto table = [&](request_id id) {
    auto s = p.find(id);
    return std::vector<block_id>(s->blocks.begin(), s->blocks.end());
  };
  for (int op = 0; op < 80000; ++op) {
    auto r = rng() % 20;
    if (r < 12 || live.empty()) {
      auto n = 1 + rng() % 6;
      auto res = p.allocate(tokens_req(next, n, "", 1u << 20));
      require(res);
      expect[next] = n;
      live.push_back(next++);
    } else if (r < 16) {
      auto id = live[pick()];
      auto n = 1 + rng() % 5;
      auto res = p.extend(id, n, nullptr);
      require(res);
      expect[id] += n;
    } else if (r < 18) {
      auto k = pick();
      auto id = live[k];
      BOOST_REQUIRE(p.release(id));
      expect.erase(id);
      parents.erase(id);
      live[k] = live.back();
      live.pop_back();
    } else {
      auto parent = live[pick()];
      auto before = table(parent);
      auto res = p.fork(parent, next);
      require(res);
      BOOST_REQUIRE(table(parent) == before); // fork copies nothing yet
      BOOST_REQUIRE(table(next) == before);
      parents[parent] = before;
      expect[next] = expect[parent];
      live.push_back(next++);
    }
    if (op % 8000 == 0)
      BOOST_REQUIRE_EQUAL(invariant(p), "ok");
  }
  BOOST_TEST(live.size() > 30000u); // past several of both tables' growths
  std::size_t seen = 0;
  p.for_each_sequence([&](const detail::sequence& s) {
    ++seen;
    auto i = expect.find(s.id);
    BOOST_REQUIRE(i != expect.end());
    BOOST_REQUIRE_EQUAL(s.num_tokens, i->second);
    BOOST_REQUIRE_EQUAL(s.blocks.size(), (i->second + 3) / 4);
  });
  BOOST_TEST(seen == expect.size());
  for (auto& [id, tokens] : expect)
    BOOST_REQUIRE_EQUAL(p.find(id)->num_tokens, tokens);
  // A parent's full blocks are still the ones it had when forked (only a
  // shared partial tail is replaced by a copy on its first extend).
  for (auto& [id, at_fork] : parents) {
    auto now = table(id);
    auto full = static_cast<std::size_t>(expect[id] / 4);
    for (std::size_t b = 0; b + 1 < at_fork.size() && b < full; ++b)
      BOOST_REQUIRE_EQUAL(now[b], at_fork[b]);
  }
}

BOOST_AUTO_TEST_SUITE_END()
