// block_pool_core's tenant policy under heavy pressure: seeded random runs of
// every operation (allocations with expected growth, extends, appends, forks,
// releases, preemptions, swaps whose device copy succeeds or fails and which
// stay in flight while other operations run, pins, their early release and
// their expiry, victims chosen and preempted, scheduler steps) with three
// tenants, against pool_reference_model. After every operation: the core's
// invariant, the whole state against the model, no reservation broken, and
// the KV events replayed into an index equal to the core's.
#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "policy_model.hpp"
#include "soak.hpp"

using namespace kvactor;
using namespace kvactor::test; // the model and model_checks.hpp
using namespace kvactor::test::policy_model;

namespace {

/// Runs `p` (the harness fails the test at the first difference from the
/// model) and prints what it covered.
std::map<std::string, std::size_t> run_and_report(const run_params& p) {
  auto start = std::chrono::steady_clock::now();
  harness h(p);
  h.run();
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
              std::chrono::steady_clock::now() - start)
              .count();
  std::string report;
  for (auto& [k, v] : h.cov)
    report += k + "=" + std::to_string(v) + " ";
  BOOST_TEST_MESSAGE("seed " << p.seed << ", " << p.ops << " ops, " << ms
                             << " ms: " << report);
  return h.cov;
}

/// `not_here`: keys of the common list this case's settings reach too
/// rarely to require (another case requires them).
void run_and_check_coverage(const run_params& p,
                            std::vector<std::string> must_reach,
                            const std::vector<std::string>& not_here = {}) {
  auto cov = run_and_report(p);
  for (auto k : {"allocate:ok", "allocate:out_of_blocks", "allocate:quota_exceeded",
                 "allocate:unknown_tenant", "extend:ok", "extend:invalid_request",
                 "append:ok", "fork:ok", "fork:invalid_request", "release:ok",
                 "settle:ok", "settle:invalid_request", "discard:ok",
                 "release during swap", "preempt:ok",
                 "preempt while not resident", "swap_out_begin:ok",
                 "swap_out_begin:out_of_blocks", "swap_out_begin:invalid_request",
                 "swap_in_begin:ok", "swap_in_begin:quota_exceeded",
                 "swap_out_done:ok:ok", "swap_out_done:failed:ok",
                 "swap_in_done:ok:ok", "swap_in_done:failed:ok",
                 "swap_in shared its prefix", "ghost's swap ends",
                 "ghost's swap ends, id live again", "pin:ok",
                 "pinned some", "pin:quota_exceeded", "pin:invalid_request",
                 "unpin:ok", "unpinned some", "unpin:unknown_tenant",
                 "unpin kept an extended prefix",
                 "expired", "victims", "victim preempted:ok", "step admitted",
                 "victim preempted, draining:ok", "victim drains",
                 "drain ended by time", "drain ended by its stepper",
                 "event:stored", "event:removed"})
    if (std::find(not_here.begin(), not_here.end(), k) == not_here.end())
      must_reach.push_back(k);
  for (auto& k : must_reach)
    BOOST_TEST(cov.count(k) > 0, "seed " << p.seed << " never reached " << k);
}

} // namespace

BOOST_AUTO_TEST_SUITE(policy_model_suite)

BOOST_AUTO_TEST_CASE(three_tenants_under_pressure_keep_every_promise) {
  // Headroom for expected growth: admissions wait, so extends rarely
  // preempt.
  run_and_check_coverage({11, 48, 100000, "reserve_expected", 0.0},
                         {"headroom refused", "swap_in headroom refused"});
}

BOOST_AUTO_TEST_CASE(three_tenants_under_pressure_with_a_watermark) {
  // The watermark keeps room for extends: a step almost never runs short
  // here (once in 100,000 operations before revived prefixes kept their
  // level, none since), so step preemption is the next case's to reach.
  // Its victims leave the prefix index, their pins with them (and since
  // a hit on a block in use no longer counts as written, more of them):
  // the pin quota fills in few seeds - 0 to 3 times in 100,000 operations
  // - so the other cases require that. (Seed 12 until victims first left
  // the index.)
  run_and_check_coverage({22, 64, 100000, "immediate", 0.05},
                         {"headroom refused", "swap_in headroom refused",
                          "reservation binding"},
                         {"pin:quota_exceeded"});
}

BOOST_AUTO_TEST_CASE(three_tenants_under_pressure_admitted_immediately) {
  run_and_check_coverage({13, 32, 100000, "immediate", 0.0},
                         {"step preempted", "reservation binding",
                          "swap_in_begin:out_of_blocks", "pin gave way"});
  // KVACTOR_SOAK: more seeds, with the three cases' settings in turn.
  static const run_params settings[] = {{0, 48, 100000, "reserve_expected", 0.0},
                                        {0, 64, 100000, "immediate", 0.05},
                                        {0, 32, 100000, "immediate", 0.0}};
  for (auto seed : test::soak_seeds()) {
    auto p = settings[seed % 3];
    p.seed = seed;
    run_and_report(p);
  }
}

BOOST_AUTO_TEST_SUITE_END()
