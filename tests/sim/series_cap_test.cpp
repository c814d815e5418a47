// The bounded time series (step_series): a series capped at a few rows is
// the uncapped one coarsened - each row the steps of its bucket, counts
// summed, the state after its last step, evenly spaced, idle gaps' rows
// cut at the buckets' bounds - and a run capped so prints and reports
// exactly what the uncapped run does.
#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "core_driver.hpp"
#include "figures.hpp"
#include "report.hpp"
#include "scheduler.hpp"
#include "sim_support.hpp"
#include "step_series.hpp"

using namespace kvactor;
using namespace kvactor::sim;
using namespace kvactor::sim::test;
using nlohmann::json;

namespace {

/// `coarse` is `fine` (rows that expand to a row per step, as uncapped
/// series do) in buckets of `width` steps: at most `cap` rows, evenly
/// spaced (each ends on a bucket's bound and stands for one bucket, a
/// skipped one for a whole number of them; the last may be open), each
/// with the counts of its steps summed and the state after its last step.
void check_coarse(const std::vector<step_sample>& fine,
                  const std::vector<step_sample>& coarse, std::uint64_t width,
                  std::size_t cap) {
  auto steps = per_step(fine);
  BOOST_TEST(coarse.size() <= cap);
  BOOST_REQUIRE(!coarse.empty());
  std::size_t at = 0; // index into steps
  for (std::size_t i = 0; i < coarse.size(); ++i) {
    auto& c = coarse[i];
    BOOST_TEST_CONTEXT("row " << i << " (step " << c.step << ", steps " << c.steps
                              << ", width " << width << ")") {
      BOOST_REQUIRE(c.steps >= 1u);
      BOOST_TEST(c.step + 1 - c.steps == at); // contiguous from step 0
      BOOST_TEST((c.step + 1 - c.steps) % width == 0u); // starts on a bound
      if (i + 1 < coarse.size()) {
        if (c.skipped)
          BOOST_TEST(c.steps % width == 0u);
        else
          BOOST_TEST(c.steps == width);
      } else {
        BOOST_TEST(c.steps <= (c.skipped ? c.steps : width));
      }
      BOOST_REQUIRE(at + c.steps <= steps.size());
      std::uint64_t admitted = 0, finished = 0, preempted = 0;
      bool skipped = true;
      for (std::uint64_t k = 0; k < c.steps; ++k) {
        auto& s = steps[at + k];
        admitted += s.admitted;
        finished += s.finished;
        preempted += s.preempted;
        skipped = skipped && s.skipped;
      }
      BOOST_TEST(c.admitted == admitted);
      BOOST_TEST(c.finished == finished);
      BOOST_TEST(c.preempted == preempted);
      BOOST_TEST(c.skipped == skipped);
      auto& last = steps[at + c.steps - 1];
      BOOST_TEST(c.step == last.step);
      BOOST_TEST(c.waiting == last.waiting);
      BOOST_TEST(c.running == last.running);
      BOOST_TEST(c.swapped == last.swapped);
      BOOST_TEST(c.used_blocks == last.used_blocks);
      BOOST_TEST(c.cached_blocks == last.cached_blocks);
      BOOST_TEST((c.pressure == last.pressure));
      BOOST_TEST(c.hit_rate == last.hit_rate);
      BOOST_REQUIRE_EQUAL(c.tenants.size(), last.tenants.size());
      for (std::size_t w = 0; w < c.tenants.size(); ++w) {
        BOOST_TEST(c.tenants[w].waiting == last.tenants[w].waiting);
        BOOST_TEST(c.tenants[w].running == last.tenants[w].running);
        BOOST_TEST(c.tenants[w].blocks == last.tenants[w].blocks);
      }
      at += c.steps;
    }
  }
  BOOST_TEST(at == steps.size()); // every step stood for
}

/// The totals the figures take, counted from rows of one step each.
void check_totals(const std::vector<step_sample>& fine, const series_totals& t) {
  series_totals want;
  for (auto& s : per_step(fine)) {
    ++want.steps;
    want.used_peak = std::max(want.used_peak, s.used_blocks);
    want.used_sum += double(s.used_blocks);
    ++want.steps_at[static_cast<int>(s.pressure) & 3];
  }
  BOOST_TEST(t.steps == want.steps);
  BOOST_TEST(t.used_peak == want.used_peak);
  BOOST_TEST(t.used_sum == want.used_sum);
  for (int i = 0; i < 4; ++i)
    BOOST_TEST(t.steps_at[i] == want.steps_at[i]);
}

/// A busy step's row: its figures vary with `k`, as a run's do.
step_sample busy(std::uint64_t step, std::uint64_t k) {
  step_sample s;
  s.step = step;
  s.waiting = static_cast<std::uint32_t>(k % 7);
  s.running = static_cast<std::uint32_t>(k % 5);
  s.swapped = static_cast<std::uint32_t>(k % 3);
  s.admitted = k % 4;
  s.finished = (k / 2) % 3;
  s.preempted = k % 11 == 0 ? 2 : 0;
  s.used_blocks = (k * 37) % 101;
  s.cached_blocks = (k * 13) % 17;
  s.total_blocks = 128;
  s.pressure = static_cast<memory_pressure>(k % 4);
  s.hit_rate = double(k) / 1000.0;
  s.tenants = {tenant_sample{1, 2, (k * 7) % 50}, tenant_sample{0, 1, k % 9}};
  return s;
}

/// Feeds the same busy steps and idle gaps to a series of each cap:
/// `gaps[i]`, if not 0, is a gap skipped after busy step i (in two calls
/// when odd, as a bounded draw does).
void feed(std::vector<step_series*> series, std::uint64_t busy_steps,
          const std::vector<std::uint64_t>& gaps) {
  std::uint64_t step = 0;
  for (std::uint64_t k = 0; k < busy_steps; ++k) {
    for (auto* s : series)
      s->add(busy(step, k));
    ++step;
    auto gap = k < gaps.size() ? gaps[k] : 0;
    if (gap == 0)
      continue;
    auto first = gap % 2 == 1 && gap > 2 ? gap / 2 : gap;
    for (auto* s : series) {
      s->add_gap(s->back(), step, first, false);
      if (first < gap)
        s->add_gap(s->back(), step + first, gap - first, true);
    }
    step += gap;
  }
}

/// What a core_driver run did, as the reports take it.
sim_outcome outcome_of(const scenario& s, core_driver& d) {
  auto& b = d.b();
  sim_outcome r;
  r.started = true;
  r.effective = s.cache;
  r.storage = "none";
  r.device = "cpu";
  r.steps = b.step();
  r.idle_steps_skipped = b.skipped_steps();
  r.tenants = b.final_figures();
  r.samples = b.samples();
  r.series = b.series().totals();
  r.ended_before_free = b.ended_before_free();
  r.chunk_extends = b.chunk_extends();
  r.preempted_mid_prefill = b.preempted_mid_prefill();
  r.warnings = b.warnings();
  return r;
}

/// The summary table but its "time:" line (wall time varies).
std::string summary_of(const scenario& s, const sim_outcome& r) {
  std::ostringstream out;
  print_summary(out, s, r);
  std::istringstream in{out.str()};
  std::string line, kept;
  while (std::getline(in, line))
    if (line.rfind("time:", 0) != 0)
      kept += line + '\n';
  return kept;
}

/// report.json as written for `r`, and the rows of timeseries.csv.
std::pair<json, std::vector<std::string>> reports_of(scenario s,
                                                     const sim_outcome& r,
                                                     const std::string& tag) {
  auto dir = std::filesystem::temp_directory_path()
             / ("kvactor_series_test_" + std::to_string(getpid()) + "_" + tag);
  s.output_dir = dir.string();
  std::ostringstream log;
  auto written = write_reports(s, r, log);
  BOOST_REQUIRE(written);
  auto report = json::parse(read_file(dir / "report.json"));
  std::istringstream csv{read_file(dir / "timeseries.csv")};
  std::vector<std::string> rows;
  for (std::string line; std::getline(csv, line);)
    rows.push_back(line);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return {std::move(report), std::move(rows)};
}

/// Runs `s` on a core_driver uncapped and capped at `cap` rows, and checks
/// that the capped series is the uncapped one coarsened and that the
/// summary and report.json are the same.
void check_capped_run(const scenario& s, std::size_t cap, std::uint64_t min_gap) {
  core_driver full{s, 1};
  core_driver capped{s, 1, 0, cap};
  if (min_gap > 0) {
    full.skip_idle_gaps(min_gap);
    capped.skip_idle_gaps(min_gap);
  }
  BOOST_REQUIRE(full.run(100000));
  BOOST_REQUIRE(capped.run(100000));
  auto a = outcome_of(s, full);
  auto b = outcome_of(s, capped);
  BOOST_REQUIRE(a.steps == b.steps);
  // Long enough to coarsen several times.
  BOOST_TEST(a.samples.size() > 4 * cap);
  BOOST_TEST(b.series.row_steps >= 4u);
  BOOST_TEST(a.series.row_steps == 1u);
  check_coarse(a.samples, b.samples, b.series.row_steps, cap);
  check_totals(a.samples, b.series);
  check_totals(a.samples, a.series);
  BOOST_TEST(sampled_steps(b) == b.steps);
  std::uint64_t admitted = 0, readmitted = 0, finished = 0;
  for (auto& f : b.tenants) {
    admitted += f.admitted;
    readmitted += f.readmitted;
    finished += f.finished;
  }
  std::uint64_t row_admitted = 0, row_finished = 0;
  for (auto& x : b.samples) {
    row_admitted += x.admitted;
    row_finished += x.finished;
  }
  BOOST_TEST(row_admitted == admitted + readmitted);
  BOOST_TEST(row_finished == finished);
  // What is printed and reported does not depend on the cap.
  BOOST_TEST(summary_of(s, a) == summary_of(s, b));
  auto [ra, ca] = reports_of(s, a, "full");
  auto [rb, cb] = reports_of(s, b, "capped");
  BOOST_TEST(ra.dump(1) == rb.dump(1));
  // The CSV: the coarse rows, the last column the steps each stands for.
  BOOST_REQUIRE_EQUAL(cb.size(), b.samples.size() + 1);
  BOOST_TEST(ca.size() == a.samples.size() + 1);
  std::uint64_t csv_steps = 0;
  for (std::size_t i = 1; i < cb.size(); ++i)
    csv_steps += std::stoull(cb[i].substr(cb[i].rfind(',') + 1));
  BOOST_TEST(csv_steps == b.steps);
}

} // namespace

BOOST_AUTO_TEST_SUITE(series_cap)

BOOST_AUTO_TEST_CASE(a_full_series_merges_pairs_and_stays_evenly_spaced) {
  for (std::size_t cap : {2u, 3u, 8u, 16u}) {
    for (std::uint64_t n : {1u, 7u, 16u, 17u, 100u, 1000u}) {
      BOOST_TEST_CONTEXT("cap " << cap << ", " << n << " steps") {
        step_series fine{1u << 20};
        step_series coarse{cap};
        feed({&fine, &coarse}, n, {});
        BOOST_TEST(fine.totals().row_steps == 1u);
        check_coarse(fine.rows(), coarse.rows(), coarse.totals().row_steps, cap);
        check_totals(fine.rows(), coarse.totals());
        // Not coarser than it must be: at half the width it would not fit.
        auto w = coarse.totals().row_steps;
        if (w > 1)
          BOOST_TEST((n + w / 2 - 1) / (w / 2) > cap);
        else
          BOOST_TEST(n <= cap);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(idle_gaps_fill_the_buckets_they_span) {
  // Gaps of every size against the bucket: shorter, equal, spanning many,
  // one skipped in two calls, back to back with busy steps between.
  std::vector<std::uint64_t> gaps(300, 0);
  gaps[0] = 1;
  gaps[3] = 5;
  gaps[10] = 1000;
  gaps[11] = 64;
  gaps[40] = 333;
  gaps[41] = 2;
  gaps[150] = 1u << 14;
  gaps[151] = 7;
  gaps[299] = 12345; // the run ends in a gap
  for (std::size_t cap : {2u, 5u, 16u, 64u}) {
    BOOST_TEST_CONTEXT("cap " << cap) {
      step_series fine{1u << 20};
      step_series coarse{cap};
      feed({&fine, &coarse}, 300, gaps);
      // Uncapped, a gap keeps a row at its first step and one for the rest.
      BOOST_TEST(fine.rows().size() < 300u + 2 * 9);
      check_coarse(fine.rows(), coarse.rows(), coarse.totals().row_steps, cap);
      check_totals(fine.rows(), coarse.totals());
    }
  }
}

BOOST_AUTO_TEST_CASE(a_capped_run_prints_and_reports_what_the_uncapped_one_does) {
  auto j = small_scenario();
  j["steps"] = 400;
  check_capped_run(parse_json(j), 16, 0);
}

BOOST_AUTO_TEST_CASE(a_capped_run_with_idle_gaps_does_too) {
  // Sessions that think for hundreds of steps: gaps skipped (as the
  // scheduler skips them, 64 steps or more) among busy stretches.
  auto j = conv_scenario();
  j["steps"] = 3000;
  j["workloads"]["chat"]["rate"] = 0.01;
  j["workloads"]["chat"]["conversation"]["think_steps"] = {100, 1500};
  j["workloads"]["batch"]["rate"] = 0.002;
  auto s = parse_json(j);
  check_capped_run(s, 8, 64);
  core_driver d{s, 1, 0, 8};
  d.skip_idle_gaps(64);
  BOOST_REQUIRE(d.run(100000));
  BOOST_TEST(d.b().skipped_steps() > 0u);
}

BOOST_AUTO_TEST_CASE(on_the_actors_the_series_keeps_to_its_cap) {
  auto j = small_scenario();
  j["steps"] = 300;
  auto s = parse_json(j);
  std::atomic<bool> flag{false};
  progress quiet{false};
  auto r = simulate(s, flag, quiet, 16);
  BOOST_TEST(r.error.empty(), r.error);
  BOOST_TEST(r.samples.size() <= 16u);
  BOOST_TEST(r.series.row_steps >= 16u);
  BOOST_TEST(sampled_steps(r) == r.steps);
  std::uint64_t steps = 0, finished = 0, done = 0;
  for (auto& x : r.samples) {
    steps += x.steps;
    finished += x.finished;
  }
  for (auto& f : r.tenants)
    done += f.finished;
  BOOST_TEST(steps == r.steps);
  BOOST_TEST(finished == done);
  BOOST_TEST(r.samples.back().step == r.steps - 1);
}

BOOST_AUTO_TEST_SUITE_END()
