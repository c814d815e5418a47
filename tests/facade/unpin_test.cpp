// kv_cache_manager::unpin_prefix: a pinned prefix let go before its
// deadline, by the tenant, tokens and cache_salt it was pinned under.
#include "fixture.hpp"

using namespace kvtest;

BOOST_FIXTURE_TEST_SUITE(facade_unpin, watchdog)

BOOST_AUTO_TEST_CASE(unpin_prefix_lets_a_pin_go_under_its_salt_only) {
  auto cfg = small_config();
  cfg.max_pinned_blocks = 2;
  cache_fixture f{cfg};
  auto prompt = iota_tokens(1, 10); // 2 full blocks of 4
  auto other = iota_tokens(50, 10);
  auto req = f.req(1, 0, 256, prompt);
  req.cache_salt = 11;
  f.alloc(req);
  f.alloc(f.req(2, 0, 256, other));
  auto ttl = std::chrono::milliseconds{600000};
  BOOST_TEST(f.m().pin_prefix("", prompt, ttl, 11).value() == 2u);
  KV_CHECK_ERROR(error_of(f.m().pin_prefix("", other, ttl)),
                 errc::quota_exceeded, "max_pinned_blocks");
  BOOST_TEST(f.m().unpin_prefix("", prompt).value() == 0u); // unsalted
  KV_CHECK_ERROR(error_of(f.m().unpin_prefix("nobody", prompt, 11)),
                 errc::unknown_tenant, "nobody");
  auto bad = prompt;
  bad[6] = -1;
  KV_CHECK_ERROR(error_of(f.m().unpin_prefix("", bad, 11)),
                 errc::invalid_request, "tokens[6] = -1");
  KV_CHECK_ERROR(error_of(f.m().pin_prefix("", bad, ttl, 11)),
                 errc::invalid_request, "tokens[6] = -1");
  BOOST_TEST(f.m().unpin_prefix("", prompt, 11).value() == 2u);
  // The cap has room again.
  BOOST_TEST(f.m().pin_prefix("", other, ttl).value() == 2u);
}

BOOST_AUTO_TEST_SUITE_END()
