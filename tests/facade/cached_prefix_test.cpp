// kv_cache_manager::cached_prefix(es): a serving loop asks, before it
// admits, how much of each waiting prompt the cache already holds - one
// round trip for the lot, nothing changed by asking.
#include "fixture.hpp"

using namespace kvtest;

namespace {

std::vector<token_id> cat(std::vector<token_id> a, const std::vector<token_id>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

} // namespace

BOOST_FIXTURE_TEST_SUITE(facade_cached_prefix, watchdog)

BOOST_AUTO_TEST_CASE(cached_prefixes_rank_waiting_prompts_by_what_they_would_hit) {
  cache_fixture f;
  auto system = iota_tokens(1, 16); // 4 full blocks of 4
  auto h = f.alloc(f.req(1, 0, 256, cat(system, iota_tokens(100, 3))));
  auto before = f.checked_stats();
  std::vector<allocation_request> waiting{
    f.req(2, 0, 256, iota_tokens(500, 20)),                     // none
    f.req(3, 0, 256, cat(iota_tokens(1, 8), iota_tokens(700, 5))), // 2 blocks
    f.req(4, 0, 256, cat(system, iota_tokens(900, 4)))};           // all 4
  auto got = f.m().cached_prefixes(waiting);
  if (!got)
    BOOST_FAIL(render(got.error()));
  BOOST_TEST(*got == (std::vector<std::uint64_t>{0, 8, 16}));
  BOOST_TEST(f.m().cached_prefix(waiting[2]).value() == 16u);
  auto after = f.checked_stats();
  BOOST_TEST(after.free_blocks == before.free_blocks);
  BOOST_TEST(after.allocation_count == before.allocation_count);
  BOOST_TEST(after.prefix_hit_tokens == before.prefix_hit_tokens);
  BOOST_TEST(!f.m().get_handle(4));
  auto bad = waiting[1];
  bad.prompt[2] = -1;
  KV_CHECK_ERROR(error_of(f.m().cached_prefixes({waiting[0], bad})),
                 errc::invalid_request, "prompt[2] = -1");
  auto stranger = waiting[0];
  stranger.tenant = "nobody";
  KV_CHECK_ERROR(error_of(f.m().cached_prefix(stranger)), errc::unknown_tenant,
                 "nobody");
}

// The probe is a hint; the handle's stats say what the admission did. Here
// the cached prefix goes between the probe and the allocate (a request that
// needs the whole pool evicts it), and the handle says to compute it all.
BOOST_AUTO_TEST_CASE(a_handle_says_what_its_allocate_really_hit) {
  auto cfg = small_config(16);
  cfg.pressure.preempt_at_critical = false; // the big request must stay
  cache_fixture f{cfg};
  auto system = iota_tokens(1, 16); // 4 full blocks of 4
  auto waiting = f.req(2, 0, 256, cat(system, iota_tokens(900, 4)));
  {
    auto h = f.alloc(f.req(1, 0, 256, cat(system, iota_tokens(100, 3))));
    BOOST_TEST(stats_of(*h).prefix_hit_tokens == 0u);
  }
  BOOST_REQUIRE(!f.m().deallocate(1));
  BOOST_TEST(f.m().cached_prefix(waiting).value() == 16u);
  f.alloc(f.req(3, 64)); // every block of the pool: the prefix is evicted
  BOOST_REQUIRE(!f.m().deallocate(3));
  auto missed = f.alloc(waiting);
  BOOST_TEST(stats_of(*missed).prefix_hit_tokens == 0u);
  // Its prompt's blocks are findable now: the next one hits them.
  auto hit = f.alloc(f.req(4, 0, 256, waiting.prompt));
  BOOST_TEST(hit->stats().prefix_hit_tokens == 16u);
  BOOST_TEST(hit->stats().tokens_stored == 20u);
}

BOOST_AUTO_TEST_SUITE_END()
