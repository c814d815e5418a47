// Conversations in the seeded random model test: random small scenarios
// (model_support.hpp) whose workloads hold multi-turn sessions, under
// preemption by recompute and swap, chunked prefill, drafts and the
// supervisor's preemptions, run against the pool core by core_driver,
// which checks every running request's K/V slots after each step - those
// a follow-up found cached from its previous turn among them. At the end
// every session ran to its last turn and the figures add up.
#include "core_driver.hpp"
#include "model_support.hpp"
#include "sim_support.hpp"

using namespace kvactor;
using namespace kvactor::sim;
using namespace kvactor::sim::test;

namespace {

/// What runs with conversations must have gone through: follow-ups that
/// found history cached, and slots checked. (Not a hit rate above first
/// turns': pools this tight evict most history between turns, and first
/// turns hit hot system prompts - conversation_run_test measures that in
/// a pool with room.)
void check_conversation_sum(const run_summary& sum) {
  auto& c = sum.conv;
  BOOST_TEST_MESSAGE(c.first_turns << " sessions, " << c.follow_ups
                     << " follow-ups, hit rate " << c.follow_up_hit_rate()
                     << " against " << c.first_hit_rate() << " for first turns; "
                     << sum.kv_checked << " K/V slots checked");
  BOOST_TEST(c.follow_ups > c.first_turns / 2);
  BOOST_TEST(c.follow_up_hit_tokens > 0u);
  BOOST_TEST(sum.kv_checked > 0u);
}

} // namespace

BOOST_AUTO_TEST_SUITE(conversation_model)

BOOST_AUTO_TEST_CASE(random_conversations_with_recompute_keep_the_pool_sound) {
  run_summary sum;
  for (std::uint64_t seed = 801; seed <= 812; ++seed) {
    BOOST_TEST_CONTEXT("seed " << seed) {
      auto s = fitting(
        random_scenario(seed, false, seed % 3 == 0, seed % 4 == 0, true));
      run_and_check(s, seed, 0.0, sum);
    }
  }
  check_conversation_sum(sum);
  BOOST_TEST(sum.preempted_in_step > 0u);
  BOOST_TEST(sum.readmitted > 0u);
}

BOOST_AUTO_TEST_CASE(random_conversations_with_swap_keep_the_pool_sound) {
  run_summary sum;
  for (std::uint64_t seed = 901; seed <= 912; ++seed) {
    BOOST_TEST_CONTEXT("seed " << seed) {
      auto s = fitting(
        random_scenario(seed, true, seed % 3 == 0, seed % 4 == 0, true));
      run_and_check(s, seed, 0.0, sum);
    }
  }
  check_conversation_sum(sum);
  BOOST_TEST(sum.swaps > 0u);
  BOOST_TEST(sum.swap_ins > 0u);
}

BOOST_AUTO_TEST_CASE(supervisor_preemptions_between_turns_are_absorbed) {
  run_summary sum;
  for (std::uint64_t seed = 1001; seed <= 1012; ++seed) {
    BOOST_TEST_CONTEXT("seed " << seed) {
      auto s = fitting(random_scenario(seed, seed % 2 == 0, seed % 3 == 0,
                                       seed % 4 == 0, true));
      run_and_check(s, seed * 31, 0.08, sum);
    }
  }
  check_conversation_sum(sum);
  BOOST_TEST(sum.by_cache > 0u);
}

BOOST_AUTO_TEST_SUITE_END()
