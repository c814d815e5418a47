// Conversations in runs (a workload's "conversation"): sessions drain to
// their end (or end with the steps, without drain), a full queue cuts them
// short, the same seed gives the same run, and the cache finds each
// follow-up's history - its hit rate far above first turns' - with the
// pool's books and every K/V read-back holding on the actors.
#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "core_driver.hpp"
#include "report.hpp"
#include "scheduler.hpp"
#include "sim_support.hpp"

using namespace kvactor;
using namespace kvactor::sim;
using namespace kvactor::sim::test;
using nlohmann::json;

namespace {

/// The chat tenant's figures (workload 0).
const tenant_figures& chat_of(const std::vector<tenant_figures>& fs) {
  BOOST_REQUIRE(!fs.empty());
  BOOST_REQUIRE_EQUAL(fs[0].name, "chat");
  return fs[0];
}

/// What every drained run of conv_scenario-like scenarios shows: each
/// session either completed or was cut by a follow-up turned away (the
/// cache refuses none), the batch tenant has no session figures, and
/// follow-ups found nearly all their history: all but the last partial
/// block of what the previous turn held (its prompt and output less the
/// last token).
void check_sessions(const scenario& s, const std::vector<tenant_figures>& fs) {
  auto& c = chat_of(fs).conv;
  auto& f = chat_of(fs);
  BOOST_TEST(f.rejected == 0u);
  BOOST_TEST(c.first_turns + c.follow_ups == f.arrived);
  auto first_away = f.turned_away - c.follow_ups_turned_away;
  BOOST_TEST(c.first_turns - first_away
             == c.sessions_completed + c.follow_ups_turned_away);
  BOOST_TEST(c.follow_ups > 0u);
  BOOST_TEST(c.first_prompt_tokens + c.follow_up_prompt_tokens == f.prompt_tokens);
  BOOST_TEST(c.history_tokens < c.follow_up_prompt_tokens);
  BOOST_TEST(c.follow_up_hit_tokens <= c.history_tokens);
  auto admitted = c.follow_ups - c.follow_ups_turned_away;
  BOOST_TEST(c.follow_up_hit_tokens
             >= c.history_tokens - admitted * s.cache.block_size);
  auto& b = fs[1].conv;
  BOOST_TEST(b.first_turns + b.follow_ups + b.sessions_completed == 0u);
}

sim_outcome run_actors(const scenario& s) {
  std::atomic<bool> flag{false};
  progress quiet{false};
  return simulate(s, flag, quiet);
}

} // namespace

BOOST_AUTO_TEST_SUITE(conversation_runs)

BOOST_AUTO_TEST_CASE(sessions_drain_and_follow_ups_find_their_history) {
  auto s = parse_json(conv_scenario());
  core_driver d{s, 1};
  BOOST_REQUIRE_MESSAGE(d.run(20000), "not done after the drain");
  BOOST_TEST(d.b().warnings().empty());
  BOOST_TEST(d.b().step() > s.steps); // follow-ups came during the drain
  auto& fs = d.b().figures();
  check_sessions(s, fs);
  auto& c = chat_of(fs).conv;
  BOOST_TEST(c.follow_ups_turned_away == 0u);
  BOOST_TEST(c.sessions_completed == c.first_turns);
  BOOST_TEST(c.follow_ups >= c.first_turns); // two turns at least
  BOOST_TEST(c.follow_up_hit_rate() > c.first_hit_rate() + 0.3,
             "follow-ups " << c.follow_up_hit_rate() << ", first turns "
                           << c.first_hit_rate());
  BOOST_TEST(c.history_kept() > 0.9, "history kept " << c.history_kept());
}

BOOST_AUTO_TEST_CASE(a_full_queue_cuts_sessions_short) {
  auto j = conv_scenario();
  j["max_waiting"] = 1;
  j["max_running"] = 2;
  j["workloads"]["chat"]["rate"] = 0.6;
  j["workloads"]["chat"]["conversation"]["think_steps"] = 0;
  auto s = parse_json(j);
  core_driver d{s, 1};
  BOOST_REQUIRE_MESSAGE(d.run(20000), "not done after the drain");
  auto& fs = d.b().figures();
  check_sessions(s, fs);
  auto& c = chat_of(fs).conv;
  BOOST_TEST(c.follow_ups_turned_away > 0u);
  BOOST_TEST(c.sessions_completed < c.first_turns);
}

BOOST_AUTO_TEST_CASE(without_drain_sessions_end_with_the_steps) {
  auto j = conv_scenario();
  j["drain"] = false;
  auto s = parse_json(j);
  core_driver d{s, 1};
  BOOST_REQUIRE(d.run(20000));
  BOOST_TEST(d.b().step() == s.steps);
}

BOOST_AUTO_TEST_CASE(the_same_seed_gives_the_same_run) {
  auto s = parse_json(conv_scenario());
  core_driver a{s, 1};
  core_driver b{s, 1};
  BOOST_REQUIRE(a.run(20000));
  BOOST_REQUIRE(b.run(20000));
  BOOST_TEST(a.b().step() == b.b().step());
  auto& fa = a.b().figures();
  auto& fb = b.b().figures();
  BOOST_REQUIRE_EQUAL(fa.size(), fb.size());
  for (std::size_t w = 0; w < fa.size(); ++w) {
    BOOST_TEST(fa[w].arrived == fb[w].arrived);
    BOOST_TEST(fa[w].generated_tokens == fb[w].generated_tokens);
    BOOST_TEST(fa[w].hit_tokens == fb[w].hit_tokens);
    BOOST_TEST(fa[w].latency == fb[w].latency, boost::test_tools::per_element());
    BOOST_TEST(fa[w].conv.follow_ups == fb[w].conv.follow_ups);
    BOOST_TEST(fa[w].conv.follow_up_hit_tokens == fb[w].conv.follow_up_hit_tokens);
    BOOST_TEST(fa[w].conv.history_tokens == fb[w].conv.history_tokens);
  }
  // Another seed, other sessions.
  auto t = s;
  t.seed = 4;
  core_driver c{t, 1};
  BOOST_REQUIRE(c.run(20000));
  BOOST_TEST(c.b().figures()[0].conv.history_tokens != fa[0].conv.history_tokens);
}

BOOST_AUTO_TEST_CASE(end_to_end_on_host_storage_follow_ups_hit_and_the_books_hold) {
  auto j = conv_scenario();
  j["cache"]["storage"] = "host";
  j["verify_every"] = 1;
  auto dir = std::filesystem::temp_directory_path()
             / ("kvactor_conv_test_" + std::to_string(getpid()));
  j["output_dir"] = dir.string();
  auto s = parse_json(j);
  auto r = run_actors(s);
  BOOST_TEST(r.error.empty(), r.error);
  BOOST_TEST(r.warnings.empty(), (r.warnings.empty() ? "" : r.warnings[0]));
  BOOST_TEST(r.invariant_checked);
  BOOST_TEST(r.invariant_error.empty(), r.invariant_error);
  BOOST_TEST(r.verify_checks > 0u);
  BOOST_TEST(r.verify_failures == 0u);
  BOOST_REQUIRE(r.have_final_stats);
  BOOST_TEST(r.final_stats.free_blocks == r.final_stats.total_blocks);
  check_sessions(s, r.tenants);
  auto& c = chat_of(r.tenants).conv;
  BOOST_TEST(c.sessions_completed == c.first_turns);
  BOOST_TEST(c.follow_up_hit_rate() > c.first_hit_rate() + 0.3);
  BOOST_TEST(c.history_kept() > 0.9);
  // The report carries them, per tenant and overall.
  std::ostringstream log;
  auto written = write_reports(s, r, log);
  BOOST_REQUIRE(written);
  std::ifstream in{dir / "report.json"};
  auto report = json::parse(in);
  auto& rc = report["tenants"][0]["conversation"];
  BOOST_TEST(rc["follow_ups"].get<std::uint64_t>() == c.follow_ups);
  BOOST_TEST(rc["follow_up_hit_rate"].get<double>() == c.follow_up_hit_rate());
  BOOST_TEST(rc["history_kept"].get<double>() == c.history_kept());
  BOOST_TEST(report["tenants"][1]["conversation"].is_null());
  BOOST_TEST(report["overall"]["conversation"]["first_turns"].get<std::uint64_t>()
             == c.first_turns);
  BOOST_TEST(report["scenario"]["workloads"][0]["conversation"]["turns"][1] == 5);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

BOOST_AUTO_TEST_SUITE_END()
