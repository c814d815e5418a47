// The batcher as a seeded random model test: random small scenarios
// (tenants with quotas, reservations and priorities, system prompts, both
// preemption modes, pools tight enough to preempt, chunked prefill or
// not, draft tokens or not), run against the pool core by core_driver,
// which checks the pool invariant, every message and every running
// request's K/V slots after each step; at the end every request finished,
// the figures add up (the drafts' with the pool's counters) and the pool
// is empty again.
#include "core_driver.hpp"
#include "model_support.hpp"
#include "sim_support.hpp"

using namespace kvactor;
using namespace kvactor::sim;
using namespace kvactor::sim::test;
using nlohmann::json;


BOOST_AUTO_TEST_SUITE(batcher_model)

BOOST_AUTO_TEST_CASE(random_scenarios_with_recompute_keep_the_pool_sound) {
  run_summary sum;
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    BOOST_TEST_CONTEXT("seed " << seed) {
      auto s = fitting(random_scenario(seed, false));
      run_and_check(s, seed, 0.0, sum);
    }
  }
  // The tight pools made the cache preempt (in the step) and the quotas
  // made tenants give way: both paths ran.
  BOOST_TEST(sum.preempted_in_step > 0u);
  BOOST_TEST(sum.by_quota > 0u);
  BOOST_TEST(sum.readmitted > 0u);
  BOOST_TEST(sum.hits > 0u);
}

BOOST_AUTO_TEST_CASE(random_scenarios_with_swap_keep_the_pool_sound) {
  run_summary sum;
  for (std::uint64_t seed = 101; seed <= 112; ++seed) {
    BOOST_TEST_CONTEXT("seed " << seed) {
      auto s = fitting(random_scenario(seed, true));
      run_and_check(s, seed, 0.0, sum);
    }
  }
  BOOST_TEST(sum.swaps > 0u);
  BOOST_TEST(sum.swap_ins > 0u);
  // A full host tier turned swaps into recomputes.
  BOOST_TEST(sum.swap_out_failures > 0u);
}

BOOST_AUTO_TEST_CASE(supervisor_preemptions_at_any_point_are_absorbed) {
  run_summary sum;
  for (std::uint64_t seed = 201; seed <= 212; ++seed) {
    BOOST_TEST_CONTEXT("seed " << seed) {
      auto s = fitting(random_scenario(seed, seed % 2 == 0));
      run_and_check(s, seed * 31, 0.08, sum);
    }
  }
  BOOST_TEST(sum.by_cache > 0u);
}

BOOST_AUTO_TEST_CASE(random_scenarios_with_chunked_prefill_and_recompute_keep_the_pool_sound) {
  run_summary sum;
  for (std::uint64_t seed = 301; seed <= 316; ++seed) {
    BOOST_TEST_CONTEXT("seed " << seed) {
      auto s = fitting(random_scenario(seed, false, true));
      run_and_check(s, seed, 0.0, sum);
    }
  }
  BOOST_TEST_MESSAGE("chunked, recompute: " << sum.chunk_extends
                     << " chunk extends, " << sum.preempted_mid_prefill
                     << " preempted mid-prefill, " << sum.kv_checked
                     << " K/V slots checked");
  BOOST_TEST(sum.chunk_extends > 0u);
  // Requests preempted with half a prompt in prefilled it again, and the
  // K/V of every running request's tokens were where its table says.
  BOOST_TEST(sum.preempted_mid_prefill > 0u);
  BOOST_TEST(sum.preempted_in_step > 0u);
  BOOST_TEST(sum.by_quota > 0u);
  BOOST_TEST(sum.readmitted > 0u);
  BOOST_TEST(sum.hits > 0u);
  BOOST_TEST(sum.kv_checked > 0u);
}

BOOST_AUTO_TEST_CASE(random_scenarios_with_chunked_prefill_and_swap_keep_the_pool_sound) {
  run_summary sum;
  for (std::uint64_t seed = 401; seed <= 416; ++seed) {
    BOOST_TEST_CONTEXT("seed " << seed) {
      auto s = fitting(random_scenario(seed, true, true));
      run_and_check(s, seed, seed % 3 == 0 ? 0.08 : 0.0, sum);
    }
  }
  BOOST_TEST_MESSAGE("chunked, swap: " << sum.chunk_extends
                     << " chunk extends, " << sum.swapped_mid_prefill
                     << " swapped out mid-prefill, " << sum.swap_ins
                     << " swap-ins, " << sum.kv_checked << " K/V slots checked");
  BOOST_TEST(sum.chunk_extends > 0u);
  // Swapped out with half a prompt in, and back in to carry on.
  BOOST_TEST(sum.swapped_mid_prefill > 0u);
  BOOST_TEST(sum.swap_ins > 0u);
  BOOST_TEST(sum.swap_out_failures > 0u);
  BOOST_TEST(sum.by_cache > 0u);
  BOOST_TEST(sum.kv_checked > 0u);
}

/// What the random runs with drafts must have gone through: drafts
/// settled both ways, and some dropped with their requests (preempted or
/// swapped out and recomputed with drafts unsettled).
void check_draft_sum(const run_summary& sum) {
  auto& d = sum.drafts;
  BOOST_TEST_MESSAGE(d.draft_tokens << " drafts: " << d.accepted << " accepted, "
                     << d.rejected << " rejected, " << d.dropped << " dropped; "
                     << sum.kv_checked << " K/V slots checked");
  BOOST_TEST(d.accepted > 0u);
  BOOST_TEST(d.rejected > 0u);
  BOOST_TEST(d.dropped > 0u);
  BOOST_TEST(d.decode_tokens > d.decode_steps); // drafts made steps count more
  BOOST_TEST(sum.kv_checked > 0u);
}

BOOST_AUTO_TEST_CASE(random_scenarios_with_drafts_and_recompute_keep_the_pool_sound) {
  run_summary sum;
  for (std::uint64_t seed = 501; seed <= 512; ++seed) {
    BOOST_TEST_CONTEXT("seed " << seed) {
      auto s = fitting(random_scenario(seed, false, seed % 3 == 0, true));
      run_and_check(s, seed, 0.0, sum);
    }
  }
  check_draft_sum(sum);
  BOOST_TEST(sum.preempted_in_step > 0u);
  BOOST_TEST(sum.by_quota > 0u);
}

BOOST_AUTO_TEST_CASE(random_scenarios_with_drafts_and_swap_keep_the_pool_sound) {
  run_summary sum;
  for (std::uint64_t seed = 601; seed <= 612; ++seed) {
    BOOST_TEST_CONTEXT("seed " << seed) {
      auto s = fitting(random_scenario(seed, true, seed % 3 == 0, true));
      run_and_check(s, seed, 0.0, sum);
    }
  }
  check_draft_sum(sum);
  BOOST_TEST(sum.swaps > 0u);
  BOOST_TEST(sum.swap_ins > 0u);
  BOOST_TEST(sum.swap_out_failures > 0u);
}

BOOST_AUTO_TEST_CASE(supervisor_preemptions_with_drafts_unsettled_are_absorbed) {
  run_summary sum;
  for (std::uint64_t seed = 701; seed <= 712; ++seed) {
    BOOST_TEST_CONTEXT("seed " << seed) {
      auto s = fitting(random_scenario(seed, seed % 2 == 0, seed % 3 == 0, true));
      run_and_check(s, seed * 31, 0.08, sum);
    }
  }
  check_draft_sum(sum);
  BOOST_TEST(sum.by_cache > 0u);
}

BOOST_AUTO_TEST_CASE(without_drain_the_run_stops_at_steps) {
  auto j = random_scenario(7, false);
  j["drain"] = false;
  auto s = fitting(j);
  core_driver d{s, 7};
  BOOST_TEST(d.run(s.steps + 100));
  BOOST_TEST(d.b().step() == s.steps);
}

BOOST_AUTO_TEST_SUITE_END()
