// simulate() end to end, on a real actor system: runs with storage none and
// host (K/V written and read back, with recompute and with swap) finish
// with consistent figures; write_reports writes report.json (agreeing with
// the outcome), timeseries.csv (a row per step) and usage.gp; a run
// interrupted before its first step still reports.
#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "kvactor/device/storage.hpp"
#include "report.hpp"
#include "scheduler.hpp"
#include "sim_support.hpp"

using namespace kvactor;
using namespace kvactor::sim;
using namespace kvactor::sim::test;
namespace fs = std::filesystem;

namespace {

/// A directory of its own, removed at the end.
struct temp_dir {
  fs::path path;
  temp_dir() {
    static int n = 0;
    path = fs::temp_directory_path()
           / ("kvactor_sim_test_" + std::to_string(getpid()) + "_" + std::to_string(n++));
    fs::remove_all(path);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

sim_outcome run(const scenario& s, bool interrupt = false) {
  std::atomic<bool> flag{interrupt};
  progress quiet{false};
  return simulate(s, flag, quiet);
}

/// What every run that went to the end of its drain must show.
void check_completed(const scenario& s, const sim_outcome& r) {
  BOOST_TEST(r.started);
  BOOST_TEST(!r.interrupted);
  BOOST_TEST(r.error.empty(), r.error);
  BOOST_TEST(r.steps >= s.steps);
  BOOST_TEST(r.samples.size() == r.steps);
  BOOST_REQUIRE(r.have_final_stats);
  // Drained: every request finished and freed its blocks.
  BOOST_TEST(r.final_stats.free_blocks == r.final_stats.total_blocks);
  BOOST_TEST(r.final_stats.active_caches == 0u);
  // The pool's books held at the end.
  BOOST_TEST(r.invariant_checked);
  BOOST_TEST(r.invariant_error.empty(), r.invariant_error);
  BOOST_REQUIRE_EQUAL(r.tenants.size(), s.workloads.size());
  std::uint64_t arrived = 0;
  for (auto& f : r.tenants) {
    BOOST_TEST_CONTEXT("tenant " << f.name) {
      BOOST_TEST(f.arrived > 0u);
      BOOST_TEST(f.rejected == 0u);
      BOOST_TEST(f.admitted == f.arrived);
      BOOST_TEST(f.finished == f.arrived);
      BOOST_TEST(f.hit_tokens <= f.prefill_tokens);
      BOOST_TEST(f.prompt_tokens <= f.prefill_tokens);
    }
    arrived += f.arrived;
  }
  BOOST_TEST(r.final_stats.allocation_count >= arrived);
  BOOST_TEST(r.step_round_trip_us.size() >= r.steps);
}

scenario small(const char* storage, std::uint64_t verify_every) {
  auto j = small_scenario();
  j["steps"] = 80;
  j["cache"]["storage"] = storage;
  j["verify_every"] = verify_every;
  return parse_json(j);
}

/// The summary table of a short run of two tenants named `a` and `b`.
std::string summary_of_two(const std::string& a, const std::string& b) {
  auto j = small_scenario();
  j["steps"] = 5;
  j["cache"]["tenants"][0]["name"] = a;
  j["cache"]["tenants"][1]["name"] = b;
  j["workloads"] = {{a, j["workloads"]["a"]}, {b, j["workloads"]["b"]}};
  auto s = parse_json(j);
  auto r = run(s);
  BOOST_TEST(r.error.empty(), r.error);
  std::ostringstream table;
  print_summary(table, s, r);
  return table.str();
}

} // namespace

BOOST_AUTO_TEST_SUITE(simulate_end_to_end)

BOOST_AUTO_TEST_CASE(a_run_without_storage_completes) {
  auto s = small("none", 5);
  auto r = run(s);
  check_completed(s, r);
  BOOST_TEST(r.storage == "none");
  // Nothing holds bytes: nothing written or read back.
  BOOST_TEST(r.tokens_written == 0u);
  BOOST_TEST(r.verify_checks == 0u);
}

BOOST_AUTO_TEST_CASE(a_run_on_host_storage_reads_back_what_it_wrote) {
  auto s = small("host", 2);
  auto r = run(s);
  check_completed(s, r);
  BOOST_TEST(r.storage == "host");
  BOOST_TEST(r.verify_checks > 0u);
  BOOST_TEST(r.verify_failures == 0u);
  BOOST_TEST(r.warnings.empty());
  // K and V rows of head_dim fp16 values per token and layer.
  auto& m = s.cache.model;
  BOOST_TEST(r.tokens_written > 0u);
  BOOST_TEST(r.bytes_written == 2 * r.tokens_written * m.num_kv_heads * m.head_dim * 2);
  BOOST_TEST(failed_checks(r) == "");
}

BOOST_AUTO_TEST_CASE(a_mismatched_read_back_or_a_broken_invariant_fails_the_run) {
  // main exits 1 on what failed_checks names, after writing the reports.
  sim_outcome r;
  BOOST_TEST(failed_checks(r) == "the pool's invariant was not checked");
  r.invariant_unchecked = "system_error(request_timeout)";
  BOOST_TEST(failed_checks(r) == "the pool's invariant was not checked: "
                                 "system_error(request_timeout)");
  r.invariant_checked = true;
  r.verify_checks = 40;
  BOOST_TEST(failed_checks(r) == "");
  r.verify_failures = 3;
  BOOST_TEST(failed_checks(r) == "3 of 40 K/V read-backs mismatched");
  r.invariant_error = "block 7 is free and owned";
  BOOST_TEST(failed_checks(r)
             == "3 of 40 K/V read-backs mismatched; the pool's invariant "
                "broke: block 7 is free and owned");
  r.verify_failures = 0;
  BOOST_TEST(failed_checks(r)
             == "the pool's invariant broke: block 7 is free and owned");
  r.invariant_error.clear();
  r.inconsistencies = 2;
  BOOST_TEST(failed_checks(r)
             == "2 replies disagreed with what was asked (see the warnings)");
}

BOOST_AUTO_TEST_CASE(swapped_requests_come_back_with_their_bytes) {
  auto j = small_scenario();
  j["steps"] = 120;
  j["cache"]["storage"] = "host";
  j["cache"]["num_gpu_blocks"] = 48;
  j["cache"]["num_host_blocks"] = 64;
  j["cache"]["tenants"][0]["max_blocks"] = 24;
  j["preemption"] = "swap";
  j["admit_up_to"] = "full";
  // The scheduler alone preempts, and only when it must: the supervisor's
  // own moves at critical and high pressure run on its own schedule and
  // made the swaps this test is about anywhere from 30 to none (2 runs in
  // 200 under load).
  j["cache"]["pressure"]["preempt_at_critical"] = false;
  j["cache"]["pressure"]["evict_cached_at_high"] = false;
  j["verify_every"] = 1;
  j["workloads"]["a"]["rate"] = 0.8;
  j["workloads"]["b"]["rate"] = 0.6;
  j["workloads"]["b"]["output_len"] = {8, 24};
  auto s = parse_json(j);
  auto r = run(s);
  check_completed(s, r);
  std::uint64_t swaps = 0;
  std::uint64_t swap_ins = 0;
  for (auto& f : r.tenants) {
    swaps += f.swaps;
    swap_ins += f.swap_ins;
  }
  BOOST_TEST(swaps > 0u);
  BOOST_TEST(swap_ins > 0u);
  BOOST_TEST(r.final_stats.swap_out_count == swaps);
  BOOST_TEST(r.verify_checks > 0u);
  BOOST_TEST(r.verify_failures == 0u);
}

// A request swapped out holding more than the admission mark allows came
// back only below that mark - never, with nothing running - and the run
// stalled. The first swap-in, like the first admission, now always tries.
BOOST_AUTO_TEST_CASE(a_swapped_request_larger_than_the_admission_mark_comes_back) {
  auto s = parse_ok(R"({
    "cache": {
      "block_size": 16,
      "model": {"num_layers": 2, "num_kv_heads": 2, "head_dim": 32, "dtype": "fp16"},
      "storage": "none", "num_gpu_blocks": 256, "num_host_blocks": 1024,
      "pressure": {"preempt_at_critical": false},
      "tenants": [{"name": "short"}, {"name": "long"}]
    },
    "steps": 20, "seed": 4, "preemption": "swap", "admit_up_to": "medium",
    "workloads": {
      "short": {"rate": 0, "burst": {"period": 1000, "duration": 1, "rate": 1},
                "prompt_len": 16, "output_len": 1000},
      "long": {"rate": 0, "burst": {"period": 1000, "duration": 2, "rate": 0.7},
               "prompt_len": 2300, "output_len": 1500}
    }
  })");
  auto r = run(s);
  check_completed(s, r);
  std::uint64_t swaps = 0;
  for (auto& f : r.tenants)
    swaps += f.swaps;
  BOOST_TEST(swaps > 0u); // what the case is about
}

// A run that stops with requests never admitted: queue delays cover the
// admitted only, so the waiting ones are counted and shown beside them.
BOOST_AUTO_TEST_CASE(requests_never_admitted_are_counted_not_dropped) {
  auto j = small_scenario();
  j["steps"] = 60;
  j["drain"] = false;
  j["max_running"] = 2;
  j["workloads"]["a"]["rate"] = 2.0;
  auto s = parse_json(j);
  auto r = run(s);
  BOOST_TEST(r.error.empty(), r.error);
  std::uint64_t waiting = 0, in_progress = 0;
  for (auto& f : r.tenants) {
    BOOST_TEST_CONTEXT("tenant " << f.name) {
      BOOST_TEST(f.unadmitted == f.arrived - f.admitted - f.rejected - f.turned_away);
      // Every arrival is in one place: done, refused, waiting or under way.
      BOOST_TEST(f.arrived
                 == f.finished + f.rejected + f.turned_away + f.unadmitted
                      + f.in_progress);
      if (f.unadmitted > 0)
        BOOST_TEST(f.unadmitted_wait > 0u);
      BOOST_TEST(f.unadmitted_wait < r.steps);
    }
    waiting += f.unadmitted;
    in_progress += f.in_progress;
  }
  BOOST_REQUIRE(waiting > 0u); // what the case is about
  BOOST_REQUIRE(in_progress > 0u);
  std::ostringstream table;
  print_summary(table, s, r);
  BOOST_TEST(table.str().find("not admitted by the end: a ") != std::string::npos,
             table.str());
  BOOST_TEST(table.str().find("in progress at the end (admitted, not finished): a ")
               != std::string::npos,
             table.str());
}

BOOST_AUTO_TEST_CASE(a_full_queue_turns_arrivals_away_per_tenant) {
  // a floods (10^6 a step, a rate the cache could never serve) a queue of
  // at most 50; b's arrivals still all get in.
  auto j = small_scenario();
  j["steps"] = 20;
  j["drain"] = false;
  j["max_waiting"] = 50;
  j["workloads"]["a"]["rate"] = 1e6;
  auto s = parse_json(j);
  auto r = run(s);
  BOOST_TEST(r.error.empty(), r.error);
  BOOST_REQUIRE_EQUAL(r.tenants.size(), 2u);
  auto& a = r.tenants[0];
  auto& b = r.tenants[1];
  BOOST_TEST(a.arrived > 19000000u); // counted, never generated
  BOOST_TEST(a.turned_away > a.arrived - 2000);
  BOOST_TEST(a.unadmitted <= 50u);
  BOOST_TEST(a.unadmitted == a.arrived - a.admitted - a.rejected - a.turned_away);
  BOOST_TEST(b.turned_away == 0u);
  std::ostringstream table;
  print_summary(table, s, r);
  BOOST_TEST(table.str().find("turned away, the queue full (max_waiting 50; "
                              "counted in rej): a ")
               != std::string::npos,
             table.str());
}

BOOST_AUTO_TEST_CASE(odd_tenant_names_keep_the_summary_table_in_shape) {
  // A newline would start a new row; a long name shifted its row (and one
  // past the row buffer cut off the row's end, newline included).
  std::string longer(300, 'x');
  longer += "\xC3\xA9"; // and a UTF-8 character at the end
  auto text = summary_of_two("a\nb", longer);
  // The header, its rule, two tenants, a rule, overall: all as wide.
  auto at = text.find("tenant ");
  BOOST_REQUIRE(at != std::string::npos);
  std::vector<std::size_t> widths; // in characters, UTF-8 sequences as one
  std::istringstream in{text.substr(at)};
  std::string line;
  for (int i = 0; i < 6 && std::getline(in, line); ++i)
    widths.push_back(static_cast<std::size_t>(
      std::count_if(line.begin(), line.end(), [](char c) {
        return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
      })));
  BOOST_REQUIRE_EQUAL(widths.size(), 6u);
  for (auto w : widths)
    BOOST_TEST(w == widths[0], text);
  BOOST_TEST(text.find("a?b           ") != std::string::npos, text);
  BOOST_TEST(text.find(std::string(13, 'x') + "\xE2\x80\xA6 ") != std::string::npos,
             text);
}

BOOST_AUTO_TEST_CASE(wide_characters_take_two_columns_of_the_summary_table) {
  std::string wide = "\u65E5\u672C\u8A9E\u65E5\u672C\u8A9E\u65E5\u672C\u8A9E"; // 18 columns
  std::string narrow = "\u65E5\u672C";                                             // 4 columns
  auto text = summary_of_two(wide, narrow);
  // 14 columns each, then the row's separator: cut to 6 characters (12
  // columns), an ellipsis and a space; padded with 10 spaces.
  auto cut = "\u65E5\u672C\u8A9E\u65E5\u672C\u8A9E\u2026  ";
  BOOST_TEST(text.find(cut) != std::string::npos, text);
  BOOST_TEST(text.find(narrow + std::string(11, ' ')) != std::string::npos, text);
  BOOST_TEST(text.find(narrow + std::string(12, ' ')) == std::string::npos, text);
}

BOOST_AUTO_TEST_CASE(reports_are_written_and_agree_with_the_outcome) {
  temp_dir dir;
  auto s = small("host", 4);
  s.output_dir = (dir.path / "nested" / "out").string(); // created if missing
  s.workloads[1].system_prompts.tokens = {{1, 2, 3}, {4}}; // given, not made
  s.workloads[1].system_prompts.share = 0.5;
  auto r = run(s);
  check_completed(s, r);
  std::ostringstream log;
  auto files = write_reports(s, r, log);
  if (!files)
    BOOST_FAIL(message_of(files.error()));
  auto out = fs::path{s.output_dir};
  for (auto name : {"report.json", "timeseries.csv", "usage.gp"}) {
    BOOST_TEST(fs::exists(out / name), name);
    BOOST_TEST((std::find(files->begin(), files->end(), (out / name).string())
                != files->end()), name);
  }

  auto rep = nlohmann::json::parse(read_file(out / "report.json"));
  BOOST_TEST(rep["run"]["completed"].get<bool>());
  BOOST_TEST(!rep["run"]["interrupted"].get<bool>());
  BOOST_TEST(rep["run"]["error"].is_null());
  BOOST_TEST(rep["run"]["steps"].get<std::uint64_t>() == r.steps);
  BOOST_TEST(rep["run"]["storage"].get<std::string>() == "host");
  BOOST_TEST(rep["run"]["invariant"].dump() == R"({"checked":true,"error":null})");
  BOOST_TEST(rep["scenario"]["seed"].get<std::uint64_t>() == s.seed);
  BOOST_TEST(rep["scenario"]["steps"].get<std::uint64_t>() == s.steps);
  // System prompts as the run used them: made (count, len), or given.
  auto& made = rep["scenario"]["workloads"][0]["system_prompts"];
  BOOST_TEST(made.dump() == R"({"count":2,"len":[8,16],"share":0.5})");
  auto& given = rep["scenario"]["workloads"][1]["system_prompts"];
  BOOST_TEST(given.dump() == R"({"count":2,"given":true,"len":[1,3],"share":0.5})");
  BOOST_REQUIRE_EQUAL(rep["tenants"].size(), r.tenants.size());
  std::uint64_t arrived = 0;
  for (std::size_t i = 0; i < r.tenants.size(); ++i) {
    auto& t = rep["tenants"][i];
    auto& f = r.tenants[i];
    BOOST_TEST(t["name"].get<std::string>() == f.name);
    BOOST_TEST(t["arrived"].get<std::uint64_t>() == f.arrived);
    BOOST_TEST(t["finished"].get<std::uint64_t>() == f.finished);
    BOOST_TEST(t["generated_tokens"].get<std::uint64_t>() == f.generated_tokens);
    BOOST_TEST(t["latency_steps"]["count"].get<std::uint64_t>() == f.finished);
    BOOST_TEST(t["unadmitted"]["count"].get<std::uint64_t>() == 0u); // drained
    arrived += f.arrived;
  }
  BOOST_TEST(rep["overall"]["arrived"].get<std::uint64_t>() == arrived);
  BOOST_TEST(rep["data"]["read_back_checks"].get<std::uint64_t>() == r.verify_checks);
  BOOST_TEST(rep["data"]["read_back_mismatches"].get<std::uint64_t>() == 0u);
  BOOST_TEST(rep["run"]["inconsistent_replies"].get<std::uint64_t>() == 0u);
  BOOST_TEST(rep["cache_stats"].is_object());
  std::uint64_t at_levels = 0;
  for (auto& [level, n] : rep["pressure"]["steps_at"].items())
    at_levels += n.get<std::uint64_t>();
  BOOST_TEST(at_levels == r.steps);

  // timeseries.csv: a header, then one row per step, all as wide.
  std::istringstream csv{read_file(out / "timeseries.csv")};
  std::string line;
  BOOST_REQUIRE(std::getline(csv, line));
  BOOST_TEST(line.rfind("step,waiting,running,", 0) == 0);
  auto columns = std::count(line.begin(), line.end(), ',');
  // Commas: 13 between the run's 14 columns, 3 per tenant, and one before
  // the last, the steps a row stands for.
  BOOST_TEST(columns == 14 + 3 * static_cast<long>(r.tenants.size()));
  BOOST_TEST(line.substr(line.rfind(',')) == ",steps");
  BOOST_TEST(line.find("a_blocks") != std::string::npos);
  std::uint64_t rows = 0;
  while (std::getline(csv, line)) {
    BOOST_TEST(std::count(line.begin(), line.end(), ',') == columns);
    BOOST_TEST(line.substr(0, line.find(',')) == std::to_string(rows));
    ++rows;
  }
  BOOST_TEST(rows == r.steps);
  auto gp = read_file(out / "usage.gp");
  BOOST_TEST(gp.find("timeseries.csv") != std::string::npos);
  // The pressure panel's right axis counts requests in whole steps, about
  // eight over the most preempted in one step.
  auto at = gp.find("set y2tics ");
  BOOST_REQUIRE(at != std::string::npos);
  auto tic = std::stoull(gp.substr(at + 11));
  std::uint64_t most = 1;
  for (auto& s : r.samples)
    most = std::max<std::uint64_t>(most, s.preempted);
  BOOST_TEST(tic == (most + 7) / 8);
}

BOOST_AUTO_TEST_CASE(an_interrupted_run_stops_and_still_reports) {
  temp_dir dir;
  auto s = small("none", 0);
  s.output_dir = dir.path.string();
  auto r = run(s, true);
  BOOST_TEST(r.started);
  BOOST_TEST(r.interrupted);
  BOOST_TEST(r.error.empty());
  BOOST_TEST(r.steps == 0u); // the flag is read before each step
  BOOST_TEST(r.samples.empty());
  // An earlier run's drawing, which must not pass for this one's.
  fs::create_directories(dir.path);
  std::ofstream{dir.path / "usage.png"} << "an earlier run";
  std::ostringstream log;
  auto files = write_reports(s, r, log);
  if (!files)
    BOOST_FAIL(message_of(files.error()));
  BOOST_TEST(!fs::exists(dir.path / "usage.png"));
  auto rep = nlohmann::json::parse(read_file(dir.path / "report.json"));
  BOOST_TEST(rep["run"]["interrupted"].get<bool>());
  BOOST_TEST(!rep["run"]["completed"].get<bool>());
  BOOST_TEST(rep["run"]["steps"].get<std::uint64_t>() == 0u);
  // A header and no rows; no plot of nothing.
  auto csv = read_file(dir.path / "timeseries.csv");
  BOOST_TEST(std::count(csv.begin(), csv.end(), '\n') == 1);
  BOOST_TEST(log.str().find("no step completed") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(tenant_columns_are_named_apart_when_names_read_alike) {
  auto j = small_scenario();
  j["steps"] = 5;
  j["cache"]["tenants"][0]["name"] = "x,y";
  j["cache"]["tenants"][1]["name"] = "x_y";
  j["workloads"] = {{"x,y", j["workloads"]["a"]}, {"x_y", j["workloads"]["b"]}};
  temp_dir dir;
  auto s = parse_json(j);
  s.output_dir = dir.path.string();
  auto r = run(s);
  std::ostringstream log;
  auto files = write_reports(s, r, log);
  if (!files)
    BOOST_FAIL(message_of(files.error()));
  auto csv = read_file(dir.path / "timeseries.csv");
  auto header = csv.substr(0, csv.find('\n'));
  BOOST_TEST(header.find(",x_y_waiting,x_y_running,x_y_blocks,x_y~1_waiting,"
                         "x_y~1_running,x_y~1_blocks")
               != std::string::npos,
             header);
  // The plot's key names them as the header does.
  auto gp = read_file(dir.path / "usage.gp");
  BOOST_TEST(gp.find("title \"x_y\"") != std::string::npos, gp);
  BOOST_TEST(gp.find("title \"x_y~1\"") != std::string::npos, gp);
  // A tenant already named like a renamed column pushes it one further.
  j["cache"]["tenants"][0]["name"] = "x_y";
  j["cache"]["tenants"][1]["name"] = "x_y~2";
  j["cache"]["tenants"].push_back({{"name", "x,y"}});
  j["workloads"] = {{"x_y", j["workloads"]["x,y"]},
                    {"x_y~2", j["workloads"]["x_y"]},
                    {"x,y", j["workloads"]["x,y"]}};
  s = parse_json(j);
  s.output_dir = dir.path.string();
  r = run(s);
  files = write_reports(s, r, log);
  if (!files)
    BOOST_FAIL(message_of(files.error()));
  csv = read_file(dir.path / "timeseries.csv");
  header = csv.substr(0, csv.find('\n'));
  BOOST_TEST(header.find(",x_y_waiting,x_y_running,x_y_blocks,x_y~2_waiting,"
                         "x_y~2_running,x_y~2_blocks,x_y~3_waiting,")
               != std::string::npos,
             header);
}

BOOST_AUTO_TEST_CASE(an_unwritable_output_dir_is_named) {
  temp_dir dir;
  fs::create_directories(dir.path);
  std::ofstream{dir.path / "file"} << "x";
  auto s = small("none", 0);
  s.output_dir = (dir.path / "file" / "out").string();
  sim_outcome r;
  std::ostringstream log;
  auto files = write_reports(s, r, log);
  BOOST_REQUIRE(!files);
  BOOST_TEST(message_of(files.error()).find(s.output_dir) != std::string::npos,
             message_of(files.error()));
  // Checked before a run too (main does), and a good one is made.
  auto err = prepare_output_dir(s);
  BOOST_REQUIRE(err);
  BOOST_TEST(message_of(err).find(s.output_dir + ": cannot create")
               != std::string::npos,
             message_of(err));
  s.output_dir = (dir.path / "made" / "here").string();
  BOOST_TEST(!prepare_output_dir(s));
  BOOST_TEST(fs::is_directory(s.output_dir));
  BOOST_TEST(fs::is_empty(s.output_dir)); // the probe is gone
}

BOOST_AUTO_TEST_CASE(a_cache_config_the_storage_refuses_at_start_is_bad_input) {
  // storage auto without a block count is valid, and sizes the pool from
  // GPU memory - where there is a GPU. Without one, the cache refuses to
  // start: the scenario's fault (exit 2), named by its file and the line
  // of num_gpu_blocks (scenario_errors has the lines' own cases).
  auto s = small("auto", 0);
  s.cache.num_gpu_blocks = 0;
  if (cuda_device_available()) {
    BOOST_TEST_MESSAGE("a CUDA device answers: storage auto starts here");
    return;
  }
  auto r = run(s);
  BOOST_TEST(!r.started);
  BOOST_TEST(r.bad_scenario);
  auto want = s.source + ":" + std::to_string(s.cache_lines.at("num_gpu_blocks"))
              + ": cache.num_gpu_blocks: storage 'auto' found no CUDA device";
  BOOST_TEST(r.error.rfind(want, 0) == 0, r.error);
}

BOOST_AUTO_TEST_SUITE_END()
