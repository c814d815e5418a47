// Skipping idle gaps (batcher::skip_idle): a run that skips them is the run
// that steps through them - the same figures, and time series rows that
// expand to the same row per step - with far fewer messages and rows; a
// run whose conversations think for 2^24 steps ends at once on the actors,
// its reports accounting for every step; an interrupt stops a long idle
// stretch.
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <unistd.h>

#include "core_driver.hpp"
#include "figures.hpp"
#include "report.hpp"
#include "scheduler.hpp"
#include "sim_support.hpp"

using namespace kvactor;
using namespace kvactor::sim;
using namespace kvactor::sim::test;
using nlohmann::json;

namespace {

/// A chat tenant whose sessions pause for hundreds of steps and a batch
/// tenant that comes in rare bursts: long idle gaps while arrivals are
/// still drawn and while the drain waits for follow-ups. No supervisor
/// moves, so the actors' run is deterministic too.
json idle_scenario() {
  return json::parse(R"({
    "cache": {
      "block_size": 4,
      "model": {"num_layers": 1, "num_kv_heads": 1, "head_dim": 8, "dtype": "fp16"},
      "storage": "none", "num_gpu_blocks": 512, "gc_interval_ms": 0,
      "pressure": {"preempt_at_critical": false, "evict_cached_at_high": false},
      "tenants": [{"name": "chat", "priority": "high"},
                  {"name": "batch", "priority": "low"}]
    },
    "steps": 4000, "seed": 5,
    "workloads": {
      "chat": {"rate": 0.004, "prompt_len": [8, 24], "output_len": [4, 16],
               "system_prompts": {"count": 2, "len": [8, 16], "share": 0.5},
               "conversation": {"turns": [2, 4], "user_len": [2, 8],
                                "think_steps": [300, 3000]}},
      "batch": {"rate": 0.001, "burst": {"period": 1000, "duration": 10, "rate": 0.5},
                "prompt_len": [16, 64], "output_len": [4, 16]}
    }
  })");
}

void check_same_samples(const std::vector<step_sample>& want,
                        const std::vector<step_sample>& skipped_rows) {
  auto got = per_step(skipped_rows);
  BOOST_REQUIRE_EQUAL(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    auto& x = want[i];
    auto& y = got[i];
    BOOST_TEST_CONTEXT("step " << i) {
      BOOST_TEST(y.step == x.step);
      BOOST_TEST(y.waiting == x.waiting);
      BOOST_TEST(y.running == x.running);
      BOOST_TEST(y.admitted == x.admitted);
      BOOST_TEST(y.finished == x.finished);
      BOOST_TEST(y.preempted == x.preempted);
      BOOST_TEST(y.used_blocks == x.used_blocks);
      BOOST_TEST(y.cached_blocks == x.cached_blocks);
      BOOST_TEST((y.pressure == x.pressure));
      BOOST_TEST(y.hit_rate == x.hit_rate);
      BOOST_REQUIRE_EQUAL(y.tenants.size(), x.tenants.size());
      for (std::size_t w = 0; w < x.tenants.size(); ++w)
        BOOST_TEST(y.tenants[w].blocks == x.tenants[w].blocks);
    }
  }
}

/// What the tenants got: the same requests, served the same way. With
/// `blocks`, the per-step block figures too (a run that samples every step).
void check_same_figures(const std::vector<tenant_figures>& xs,
                        const std::vector<tenant_figures>& ys, bool blocks) {
  BOOST_REQUIRE_EQUAL(xs.size(), ys.size());
  for (std::size_t w = 0; w < xs.size(); ++w) {
    auto& x = xs[w];
    auto& y = ys[w];
    BOOST_TEST_CONTEXT("tenant " << x.name) {
      BOOST_TEST(y.arrived == x.arrived);
      BOOST_TEST(y.admitted == x.admitted);
      BOOST_TEST(y.finished == x.finished);
      BOOST_TEST(y.rejected == x.rejected);
      BOOST_TEST(y.prompt_tokens == x.prompt_tokens);
      BOOST_TEST(y.generated_tokens == x.generated_tokens);
      BOOST_TEST(y.prefill_tokens == x.prefill_tokens);
      BOOST_TEST(y.hit_tokens == x.hit_tokens);
      BOOST_TEST(y.preemptions() == x.preemptions());
      BOOST_TEST(y.queue_delay == x.queue_delay, boost::test_tools::per_element());
      BOOST_TEST(y.latency == x.latency, boost::test_tools::per_element());
      BOOST_TEST(y.conv.follow_ups == x.conv.follow_ups);
      BOOST_TEST(y.conv.follow_up_hit_tokens == x.conv.follow_up_hit_tokens);
      BOOST_TEST(y.conv.sessions_completed == x.conv.sessions_completed);
      if (blocks) {
        BOOST_TEST(y.blocks_peak == x.blocks_peak);
        BOOST_TEST(y.blocks_sum == x.blocks_sum); // whole numbers: exact
      }
    }
  }
}

} // namespace

BOOST_AUTO_TEST_SUITE(idle_gaps)

BOOST_AUTO_TEST_CASE(a_run_that_skips_idle_gaps_is_the_run_that_steps_through) {
  auto s = parse_json(idle_scenario());
  core_driver stepped{s, 1};
  BOOST_REQUIRE(stepped.run(100000));
  BOOST_TEST(stepped.b().skipped_steps() == 0u);
  BOOST_TEST(stepped.b().step() > s.steps); // follow-ups came in the drain
  // Every gap skipped, and only those of 64 steps or more (the scheduler's).
  for (std::uint64_t min_gap : {1u, 64u}) {
    BOOST_TEST_CONTEXT("min_gap " << min_gap) {
      core_driver skipping{s, 1};
      skipping.skip_idle_gaps(min_gap);
      BOOST_REQUIRE(skipping.run(100000));
      auto& a = stepped.b();
      auto& b = skipping.b();
      BOOST_TEST(b.step() == a.step());
      BOOST_TEST(b.arrived() == a.arrived());
      // Most of the run was idle, and skipped: no message, two rows a gap.
      BOOST_TEST(b.skipped_steps() > b.step() / 2);
      BOOST_TEST(skipping.step_messages() + b.skipped_steps()
                 <= stepped.step_messages());
      BOOST_TEST(b.samples().size() < a.samples().size() / 2);
      check_same_figures(a.figures(), b.figures(), true);
      check_same_samples(a.samples(), b.samples());
    }
  }
}

BOOST_AUTO_TEST_CASE(on_the_actors_the_tenants_get_what_a_stepped_run_gives) {
  auto s = parse_json(idle_scenario());
  core_driver stepped{s, 1};
  BOOST_REQUIRE(stepped.run(100000));
  std::atomic<bool> flag{false};
  progress quiet{false};
  auto r = simulate(s, flag, quiet);
  BOOST_TEST(r.error.empty(), r.error);
  BOOST_TEST(r.steps == stepped.b().step());
  BOOST_TEST(r.idle_steps_skipped > r.steps / 2);
  BOOST_TEST(sampled_steps(r) == r.steps);
  BOOST_TEST(r.step_round_trip_us.size() + r.idle_steps_skipped
             <= stepped.step_messages());
  check_same_figures(stepped.b().figures(), r.tenants, true);
}

BOOST_AUTO_TEST_CASE(sessions_that_think_for_2_pow_24_steps_end_at_once) {
  // Stepping through, this run took millions of messages and samples (a
  // minute and gigabytes): the suite's timeout would stop it.
  auto j = idle_scenario();
  j["steps"] = 60;
  j["workloads"]["chat"]["rate"] = 0.1;
  j["workloads"]["chat"]["conversation"]["turns"] = {3, 3};
  j["workloads"]["chat"]["conversation"]["think_steps"] = {1 << 24, 1 << 24};
  auto dir = std::filesystem::temp_directory_path()
             / ("kvactor_idle_test_" + std::to_string(getpid()));
  j["output_dir"] = dir.string();
  auto s = parse_json(j);
  std::atomic<bool> flag{false};
  progress quiet{false};
  auto r = simulate(s, flag, quiet);
  BOOST_TEST(r.error.empty(), r.error);
  BOOST_TEST(!r.interrupted);
  BOOST_REQUIRE_EQUAL(r.tenants.size(), 2u);
  auto& chat = r.tenants[0].conv;
  BOOST_TEST(chat.first_turns > 0u);
  BOOST_TEST(chat.sessions_completed == chat.first_turns);
  BOOST_TEST(chat.follow_ups == 2 * chat.first_turns);
  BOOST_TEST(r.steps > 2u * (1u << 24));
  BOOST_TEST(r.idle_steps_skipped > r.steps - 5000);
  BOOST_TEST(r.step_round_trip_us.size() < 5000u);
  BOOST_TEST(r.samples.size() < 5000u);
  BOOST_TEST(sampled_steps(r) == r.steps);
  std::uint64_t at_levels = 0;
  for (auto n : steps_at_levels(r))
    at_levels += n;
  BOOST_TEST(at_levels == r.steps);

  std::ostringstream log;
  auto written = write_reports(s, r, log);
  BOOST_REQUIRE(written);
  auto report = json::parse(read_file(dir / "report.json"));
  BOOST_TEST(report["run"]["steps"].get<std::uint64_t>() == r.steps);
  BOOST_TEST(report["run"]["idle_steps_skipped"].get<std::uint64_t>()
             == r.idle_steps_skipped);
  BOOST_TEST(report["run"]["step_messages"].get<std::uint64_t>()
             == r.step_round_trip_us.size());
  std::uint64_t reported_levels = 0;
  for (auto& [level, n] : report["pressure"]["steps_at"].items())
    reported_levels += n.get<std::uint64_t>();
  BOOST_TEST(reported_levels == r.steps);

  // timeseries.csv: a row per step run, and one at each end of a skipped
  // gap, the same but for the step and the steps it stands for (the last
  // column): where the step column jumps, the steps passed over held the
  // state of the rows around them.
  std::istringstream csv{read_file(dir / "timeseries.csv")};
  std::string line;
  BOOST_REQUIRE(std::getline(csv, line)); // the header
  std::vector<std::string> rows;
  while (std::getline(csv, line))
    rows.push_back(line);
  BOOST_REQUIRE_EQUAL(rows.size(), r.samples.size());
  auto step_of = [](const std::string& row) {
    return std::stoull(row.substr(0, row.find(',')));
  };
  auto rest_of = [](const std::string& row) {
    auto from = row.find(',');
    return row.substr(from, row.rfind(',') - from);
  };
  std::uint64_t jumps = 0;
  for (std::size_t i = 1; i < rows.size(); ++i) {
    auto a = step_of(rows[i - 1]);
    auto b = step_of(rows[i]);
    BOOST_REQUIRE(b > a);
    if (b > a + 1) {
      ++jumps;
      BOOST_TEST(rest_of(rows[i]) == rest_of(rows[i - 1]), "rows " << a << ", " << b);
    }
  }
  BOOST_TEST(jumps >= 2u); // each think
  BOOST_TEST(step_of(rows.front()) == 0u);
  BOOST_TEST(step_of(rows.back()) == r.steps - 1);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

BOOST_AUTO_TEST_CASE(an_interrupt_stops_a_long_idle_stretch) {
  // Arrivals so rare that nothing comes for ages, each step's still drawn:
  // the skips draw a bounded stretch at a time and look at the flag between.
  auto j = idle_scenario();
  j["steps"] = 1000000000000ull;
  j["workloads"]["chat"]["rate"] = 1e-15;
  j["workloads"]["batch"]["rate"] = 1e-15;
  j["workloads"]["batch"].erase("burst");
  auto s = parse_json(j);
  std::atomic<bool> flag{false};
  progress quiet{false};
  std::thread stopper{[&] {
    // Long enough for the actor system to start and the skips to begin on
    // a loaded CI machine (a flag seen before the first skip would fail the
    // count below); the skips then run at millions of steps a second.
    std::this_thread::sleep_for(std::chrono::milliseconds{1000});
    flag.store(true);
  }};
  auto r = simulate(s, flag, quiet);
  stopper.join();
  BOOST_TEST(r.error.empty(), r.error);
  BOOST_TEST(r.interrupted);
  BOOST_TEST(r.steps < s.steps);
  BOOST_TEST(r.idle_steps_skipped >= (1u << 16));
  BOOST_TEST(r.step_round_trip_us.size() <= 2u); // the step that found it idle
  BOOST_TEST(sampled_steps(r) == r.steps);
}

BOOST_AUTO_TEST_SUITE_END()
