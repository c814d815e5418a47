// The read-back check counts the verifies it could not make and fails a run
// that was to verify its bytes but read none back: "0 mismatched" of 0
// read-backs must not pass for a checked run.
#include <atomic>
#include <sstream>

#include "report.hpp"
#include "scheduler.hpp"
#include "sim_support.hpp"

using namespace kvactor;
using namespace kvactor::sim;
using namespace kvactor::sim::test;

BOOST_AUTO_TEST_SUITE(verify_skips)

BOOST_AUTO_TEST_CASE(a_verifying_run_that_can_read_nothing_back_fails) {
  // Host storage holds bytes and every step is due a read-back, but no
  // request arrives in the run's 20 steps (a rate of 0 everywhere is
  // refused; at this one seed 7 draws none): nothing runs at any verify.
  // A gap this short is stepped through, not skipped: each step verifies.
  auto j = small_scenario();
  j["steps"] = 20;
  j["cache"]["storage"] = "host";
  j["verify_every"] = 1;
  j["workloads"]["a"]["rate"] = 0.0;
  j["workloads"]["b"]["rate"] = 0.0001;
  auto s = parse_json(j);
  std::atomic<bool> flag{false};
  progress quiet{false};
  auto r = simulate(s, flag, quiet);
  BOOST_TEST(r.error.empty(), r.error);
  std::uint64_t arrived = 0;
  for (auto& f : r.tenants)
    arrived += f.arrived;
  BOOST_REQUIRE_EQUAL(arrived, 0u); // the case's premise
  BOOST_TEST(r.storage == "host");
  BOOST_TEST(r.verify_checks == 0u);
  BOOST_TEST(r.verify_every == 1u);
  BOOST_TEST(r.verify_skipped.nothing_running > 0u);
  BOOST_TEST(r.verify_skipped.total() == r.verify_skipped.nothing_running);
  auto why = failed_checks(r);
  BOOST_TEST(why.find("verify_every is 1 but no K/V was read back") == 0u, why);
  std::ostringstream summary;
  print_summary(summary, s, r);
  auto skipped = "0 read-backs, 0 mismatched, "
                 + std::to_string(r.verify_skipped.total())
                 + " skipped (nothing running: ";
  BOOST_TEST(summary.str().find(skipped) != std::string::npos, summary.str());
}

BOOST_AUTO_TEST_CASE(skipped_verifies_are_named_and_fail_only_an_unchecked_run) {
  sim_outcome r;
  r.invariant_checked = true;
  r.storage = "host";
  r.verify_every = 4;
  r.verify_skipped.nothing_running = 3;
  r.verify_skipped.ended = 2;
  BOOST_TEST(failed_checks(r)
             == "verify_every is 4 but no K/V was read back, 5 skipped "
                "(nothing running: 3, ended meanwhile: 2)");
  // One read-back made: the skips are figures, not a failure.
  r.verify_checks = 1;
  BOOST_TEST(failed_checks(r) == "");
  r.verify_checks = 0;
  // Storage without bytes reads nothing back by design; an interrupted run
  // may have stopped before its first verify.
  r.storage = "none";
  BOOST_TEST(failed_checks(r) == "");
  r.storage = "host";
  r.interrupted = true;
  BOOST_TEST(failed_checks(r) == "");
  r.interrupted = false;
  r.verify_every = 0;
  BOOST_TEST(failed_checks(r) == "");
}

BOOST_AUTO_TEST_SUITE_END()
