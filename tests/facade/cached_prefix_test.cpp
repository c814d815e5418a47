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
  auto before = f.m().stats();
  std::vector<allocation_request> waiting{
    f.req(2, 0, 256, iota_tokens(500, 20)),                     // none
    f.req(3, 0, 256, cat(iota_tokens(1, 8), iota_tokens(700, 5))), // 2 blocks
    f.req(4, 0, 256, cat(system, iota_tokens(900, 4)))};           // all 4
  auto got = f.m().cached_prefixes(waiting);
  if (!got)
    BOOST_FAIL(render(got.error()));
  BOOST_TEST(*got == (std::vector<std::uint64_t>{0, 8, 16}));
  BOOST_TEST(f.m().cached_prefix(waiting[2]).value() == 16u);
  auto after = f.m().stats();
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

BOOST_AUTO_TEST_SUITE_END()
