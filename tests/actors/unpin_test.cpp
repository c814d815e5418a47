// unpin_atom end to end: the manager delegates it to the pool, which lets a
// pinned prefix go before its deadline - its blocks taken by the next
// allocation that runs short, its room under max_pinned_blocks back.
#include "fixture.hpp"

#include <chrono>
#include <thread>

using namespace kvactor;
using namespace kvactor::test;

namespace {

cache_config unpin_config(std::uint64_t max_pinned) {
  auto c = small_config();
  c.max_pinned_blocks = max_pinned;
  return c;
}

struct unpin_fixture : cache_fixture {
  explicit unpin_fixture(std::uint64_t max_pinned = 3)
    : cache_fixture(unpin_config(max_pinned)) {
  }

  caf::expected<std::uint32_t> pin(std::vector<token_id> tokens) {
    return ask<std::uint32_t>(mgr, pin_atom::value, std::string{},
                              std::move(tokens), std::uint64_t{600000},
                              std::uint64_t{0});
  }

  /// A cached prefix of three blocks, pinned for 1 ms, once the pin has
  /// expired (pins expire lazily: nothing has looked since).
  void pin_briefly() {
    auto prompt = make_tokens(12, 40);
    BOOST_REQUIRE(allocate(make_prompt_request(cfg, 1, prompt)));
    BOOST_REQUIRE(free(1));
    BOOST_TEST(value_or(ask<std::uint32_t>(mgr, pin_atom::value, std::string{},
                                           prompt, std::uint64_t{1},
                                           std::uint64_t{0}),
                        0u)
               == 3u);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }

  template <class Dest>
  caf::expected<std::uint32_t> unpin(const Dest& dest, std::string tenant,
                                     std::vector<token_id> tokens) {
    return ask<std::uint32_t>(dest, unpin_atom::value, std::move(tenant),
                              std::move(tokens), std::uint64_t{0});
  }
};

struct disabled_fixture : unpin_fixture {
  disabled_fixture() : unpin_fixture(0) {
  }
};

} // namespace

BOOST_FIXTURE_TEST_SUITE(unpin_messages, unpin_fixture)

BOOST_AUTO_TEST_CASE(an_unpinned_prefix_is_taken_when_the_pool_runs_short) {
  auto prompt = make_tokens(12, 40);
  BOOST_REQUIRE(allocate(make_prompt_request(cfg, 1, prompt)));
  BOOST_REQUIRE(free(1));
  BOOST_TEST(value_or(pin(prompt), 0u) == 3u);
  BOOST_REQUIRE(allocate(2, 4 * 61)); // every block but the pinned three
  BOOST_TEST(outcome(allocate(3, 1)) == "out_of_blocks");
  // Errors first: they let nothing go.
  BOOST_TEST(outcome(unpin(mgr, "nobody", prompt)) == "unknown_tenant");
  BOOST_TEST(outcome(allocate(3, 1)) == "out_of_blocks");
  BOOST_TEST(value_or(unpin(mgr, "", prompt), 99u) == 3u);
  BOOST_REQUIRE(allocate(3, 4 * 3)); // evicts the three
  BOOST_TEST(value_or(unpin(mgr, "", prompt), 99u) == 0u);
}

BOOST_AUTO_TEST_CASE(unpinning_makes_room_under_max_pinned_blocks) {
  auto prompt = make_tokens(12, 40);
  auto other = make_tokens(8, 41);
  BOOST_REQUIRE(allocate(make_prompt_request(cfg, 1, prompt)));
  BOOST_REQUIRE(allocate(make_prompt_request(cfg, 2, other)));
  BOOST_TEST(value_or(pin(prompt), 0u) == 3u);
  BOOST_TEST(outcome(pin(other)) == "quota_exceeded");
  // The pool answers anyone, as for pin_atom.
  BOOST_TEST(value_or(unpin(pool, "", prompt), 99u) == 3u);
  BOOST_TEST(value_or(pin(other), 0u) == 2u);
}

BOOST_AUTO_TEST_CASE(an_expired_pin_is_neither_counted_nor_kept_by_stats_or_evict) {
  // Pins expire lazily, when a message that may need their blocks comes;
  // stats reported them as pins past their deadline and evict could not
  // take their blocks - for as long as the cache stayed idle.
  pin_briefly();
  auto s = ask<pool_stats>(pool, stats_atom::value);
  BOOST_REQUIRE(s);
  BOOST_TEST(s->pinned_blocks == 0u);
  BOOST_TEST(s->cached_blocks == 3u);
  BOOST_TEST(value_or(ask<std::uint32_t>(pool, evict_atom::value,
                                         std::uint32_t{3}),
                      0u)
             == 3u);
}

BOOST_AUTO_TEST_CASE(evict_takes_the_blocks_of_an_expired_pin) {
  // As above, with no stats between: evict alone expires it.
  pin_briefly();
  BOOST_TEST(value_or(ask<std::uint32_t>(pool, evict_atom::value,
                                         std::uint32_t{3}),
                      0u)
             == 3u);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_FIXTURE_TEST_CASE(unpinning_with_pinning_disabled_lets_nothing_go,
                        disabled_fixture) {
  auto prompt = make_tokens(8, 42);
  BOOST_REQUIRE(allocate(make_prompt_request(cfg, 1, prompt)));
  BOOST_TEST(value_or(unpin(mgr, "", prompt), 99u) == 0u);
}
