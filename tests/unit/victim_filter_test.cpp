// Which requests choose_victims may name: a copy's hold in flight does not
// make a block look shared, and a tenant exactly at its reservation offers
// none (may_name_victims, which decides whether the supervisor is woken
// at critical pressure, agrees).
#include <cstdint>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/actors/block_pool_core.hpp"
#include "kvactor/messages/error.hpp"
#include "pool_fixture.hpp"

using namespace kvactor;
using namespace kvactor::test;

namespace {

using reqs = std::vector<request_id>;

} // namespace

BOOST_AUTO_TEST_SUITE(victim_filter_suite)

// block_pool_policy.cpp exclusive_in: "A copy's hold does not make a block
// look shared" - while a copy-on-write copy is in flight, its source stays
// the other holder's own and its destination the copier's.
BOOST_FIXTURE_TEST_CASE(a_copys_hold_does_not_make_a_block_look_shared_to_victims,
                        pool_fixture) {
  alloc(prompt_req(1, run(10, 6))); // 0 full, 1 half
  BOOST_REQUIRE(pool().fork(1, 2));
  std::vector<token_id> toks{20};
  auto res = pool().extend(2, 1, toks.data(), true);
  BOOST_REQUIRE(res);
  BOOST_TEST(str(res->copies) == "(1->2)");
  BOOST_TEST(pool().copies_in_flight() == 1u);
  // Block 0 both hold; block 1 only 1's table (and the copy's hold); block
  // 2 only 2's table (and the copy's hold).
  BOOST_TEST(pool().exclusive_blocks(*pool().find(1)) == 1u);
  BOOST_TEST(pool().exclusive_blocks(*pool().find(2)) == 1u);
  BOOST_TEST((pool().choose_victims(2) == reqs{2, 1}));
  pool().settle_copies(res->copies, true);
  BOOST_TEST(pool().exclusive_blocks(*pool().find(1)) == 1u);
  BOOST_TEST(pool().exclusive_blocks(*pool().find(2)) == 1u);
  BOOST_TEST((pool().choose_victims(2) == reqs{2, 1}));
}

// block_pool_policy.cpp may_name_victims: choose_victims' filter - a tenant
// exactly at its reservation offers no victim.
BOOST_FIXTURE_TEST_CASE(a_tenant_exactly_at_its_reservation_names_no_victims,
                        pool_fixture) {
  cfg.tenants = {tenant_config{}, tenant("r", 0, 2)};
  make(16);
  BOOST_TEST(!pool().may_name_victims()); // nobody live
  alloc(tokens_req(1, 8, "r"));            // exactly its 2
  BOOST_TEST(pool().choose_victims(100).empty());
  BOOST_TEST(!pool().may_name_victims());
  alloc(tokens_req(2, 1, "r")); // 3: one over
  BOOST_TEST((pool().choose_victims(100) == reqs{2}));
  BOOST_TEST(pool().may_name_victims());
  release(2);
  BOOST_TEST(!pool().may_name_victims());
  alloc(tokens_req(3, 4)); // the default tenant has no reservation
  BOOST_TEST(pool().may_name_victims());
}

BOOST_AUTO_TEST_SUITE_END()
