// report: report.json, timeseries.csv and writing them (with the plot's
// script and drawing, plot.cpp); the summary table is summary.cpp's.
#include "report.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "kvactor/messages/error.hpp"
#include "kvactor/metrics/stats_json.hpp"
#include "figures.hpp"
#include "plot.hpp"

namespace kvactor::sim {

namespace {

// Keys in the order written (kvactor's own JSON is converted).
using json = nlohmann::ordered_json;

json ordered(const nlohmann::json& x) {
  return json::parse(x.dump());
}

template <class T>
json distribution(const std::vector<T>& xs) {
  if (xs.empty())
    return json{{"count", 0}, {"p50", nullptr}, {"p99", nullptr},
                {"mean", nullptr}, {"max", nullptr}};
  double sum = 0;
  for (auto x : xs)
    sum += static_cast<double>(x);
  return json{{"count", xs.size()},
              {"p50", percentile(xs, 0.50)},
              {"p99", percentile(xs, 0.99)},
              {"mean", sum / xs.size()},
              {"max", *std::max_element(xs.begin(), xs.end())}};
}

/// Speculative decoding's figures (draft_figures); the rates null when
/// there is nothing to divide by.
json drafts_json(const draft_figures& d) {
  auto settled = d.accepted + d.rejected;
  return json{
    {"decode_steps", d.decode_steps},
    {"output_tokens_per_decode_step",
     d.decode_steps == 0 ? json(nullptr) : json(d.tokens_per_step())},
    {"draft_tokens", d.draft_tokens},
    {"accepted", d.accepted},
    {"rejected", d.rejected},
    {"dropped_unsettled", d.dropped},
    {"acceptance_rate", settled == 0 ? json(nullptr) : json(d.acceptance())},
  };
}

/// Multi-turn sessions' figures (conversation_figures): turns, and the hit
/// rates of first turns and follow-ups apart (first admissions only); null
/// rates where nothing was admitted.
json conversation_json(const conversation_figures& c) {
  auto rate = [](std::uint64_t of, double x) {
    return of == 0 ? json(nullptr) : json(x);
  };
  return json{
    {"first_turns", c.first_turns},
    {"follow_ups", c.follow_ups},
    {"follow_ups_turned_away", c.follow_ups_turned_away},
    {"sessions_completed", c.sessions_completed},
    {"first_turn_prompt_tokens", c.first_prompt_tokens},
    {"first_turn_hit_tokens", c.first_hit_tokens},
    {"first_turn_hit_rate", rate(c.first_prompt_tokens, c.first_hit_rate())},
    {"follow_up_prompt_tokens", c.follow_up_prompt_tokens},
    {"follow_up_history_tokens", c.history_tokens},
    {"follow_up_hit_tokens", c.follow_up_hit_tokens},
    {"follow_up_hit_rate",
     rate(c.follow_up_prompt_tokens, c.follow_up_hit_rate())},
    {"history_kept", rate(c.history_tokens, c.history_kept())},
  };
}

/// `conversing`: the tenant (or for overall, some tenant) sends multi-turn
/// sessions; else its "conversation" is null.
json tenant_json(const tenant_figures& f, const sim_outcome& r,
                 bool conversing) {
  return json{
    {"name", f.name},
    {"priority", to_string(f.priority)},
    {"arrived", f.arrived},
    {"admitted", f.admitted},
    {"readmitted", f.readmitted},
    {"finished", f.finished},
    {"rejected", f.rejected},
    {"turned_away", f.turned_away},
    {"prompt_tokens", f.prompt_tokens},
    {"generated_tokens", f.generated_tokens},
    {"prefill_tokens", f.prefill_tokens},
    {"prefix_hit_tokens", f.hit_tokens},
    // null, not a 0 that reads as measured, when nothing was prefilled.
    {"prefix_hit_rate", f.prefill_tokens == 0 ? json(nullptr) : json(f.hit_rate())},
    {"preemptions", f.preemptions()},
    {"preempted_in_step", f.preempted_in_step},
    {"preempted_by_supervisor", f.preempted_by_cache},
    {"preempted_at_quota", f.preempted_by_quota},
    {"swaps", f.swaps},
    {"swap_ins", f.swap_ins},
    {"queue_delay_steps", distribution(f.queue_delay)},
    {"unadmitted", {{"count", f.unadmitted},
                    {"longest_wait_steps", f.unadmitted_wait}}},
    {"in_progress", f.in_progress},
    {"latency_steps", distribution(f.latency)},
    {"blocks_used", {{"mean", mean_blocks(f, r)}, {"peak", f.blocks_peak}}},
    {"speculative", drafts_json(f.drafts)},
    {"conversation", conversing ? conversation_json(f.conv) : json(nullptr)},
  };
}

/// A workload's system prompts as the run used them: generated (count,
/// len) or given (count and the lengths of the token lists, "given": true).
json system_prompts_json(const system_prompt_config& sp) {
  if (sp.tokens.empty())
    return {{"count", sp.count}, {"len", {sp.len.min, sp.len.max}},
            {"share", sp.share}};
  std::size_t lo = sp.tokens.front().size();
  std::size_t hi = lo;
  for (auto& t : sp.tokens) {
    lo = std::min(lo, t.size());
    hi = std::max(hi, t.size());
  }
  return {{"count", sp.tokens.size()}, {"len", {lo, hi}}, {"given", true},
          {"share", sp.share}};
}

/// Writes `text` to `path` whole or not at all: into a temporary file next
/// to it, closed and checked (a full disk shows at the flush), then renamed
/// over it - a run killed mid-write leaves no half report under the name.
caf::error write_file(const std::filesystem::path& path, const std::string& text) {
  auto tmp = path;
  tmp += ".tmp";
  auto failed = [&](const char* what, const std::string& why) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    return make_error(errc::invalid_config,
                      path.string() + ": cannot " + what + " (" + why + ")");
  };
  errno = 0;
  std::ofstream f{tmp, std::ios::binary | std::ios::trunc};
  if (f)
    f << text;
  f.close(); // flushes: a full disk shows here
  if (f.fail())
    return failed("write", errno != 0 ? std::strerror(errno) : "unknown error");
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec)
    return failed("rename its temporary file", ec.message());
  return caf::none;
}

std::string report_json(const scenario& s, const sim_outcome& r) {
  auto at = steps_at_levels(r);
  json pressure_steps = json::object();
  json entered = json::object();
  for (int i = 0; i < 4; ++i) {
    pressure_steps[level_names[i]] = at[i];
    entered[level_names[i]] = r.pressure_entered[i];
  }
  // r.tenants are in s.workloads' order (one per workload).
  json tenants = json::array();
  bool any_conversation = false;
  for (std::size_t i = 0; i < r.tenants.size(); ++i) {
    auto conversing = i < s.workloads.size()
                      && s.workloads[i].conversation.enabled();
    any_conversation = any_conversation || conversing;
    tenants.push_back(tenant_json(r.tenants[i], r, conversing));
  }
  auto overall = tenant_json(overall_of(r), r, any_conversation);
  overall.erase("priority");
  json workloads = json::array();
  for (auto& w : s.workloads)
    workloads.push_back(json{
      {"tenant", w.tenant},
      {"rate", w.rate},
      {"burst", {{"period", w.burst.period}, {"duration", w.burst.duration},
                 {"rate", w.burst.rate}}},
      {"prompt_len", {w.prompt_len.min, w.prompt_len.max}},
      {"output_len", {w.output_len.min, w.output_len.max}},
      {"system_prompts", system_prompts_json(w.system_prompts)},
      {"conversation",
       w.conversation.enabled()
         ? json{{"turns", {w.conversation.turns.min, w.conversation.turns.max}},
                {"user_len",
                 {w.conversation.user_len.min, w.conversation.user_len.max}},
                {"think_steps", {w.conversation.think_steps.min,
                                 w.conversation.think_steps.max}}}
         : json(nullptr)},
      {"priority", to_string(w.priority)},
      {"vocab_size", w.vocab_size}});
  json out{
    {"scenario",
     {{"source", s.source},
      {"steps", s.steps},
      {"drain", s.drain},
      {"seed", s.seed},
      {"preemption", to_string(s.preemption)},
      {"admit_up_to", s.admit_up_to},
      {"max_running", s.max_running},
      {"max_admits_per_step", s.max_admits_per_step},
      {"admission_order", to_string(s.admission)},
      {"probe_window", s.probe_window},
      {"starvation_steps", s.starvation_steps},
      {"max_waiting", s.max_waiting},
      {"prefill_chunk", s.prefill_chunk},
      {"draft_tokens", s.draft_tokens},
      {"draft_acceptance", s.draft_acceptance},
      {"verify_every", s.verify_every},
      {"cache", ordered(to_json(r.effective))},
      {"workloads", std::move(workloads)}}},
    {"run",
     {{"completed", r.error.empty() && !r.interrupted},
      {"interrupted", r.interrupted},
      {"error", r.error.empty() ? json(nullptr) : json(r.error)},
      {"steps", r.steps},
      // Of those, idle steps skipped: no step message, and in
      // timeseries.csv two rows per gap (at its first and last step) while
      // the series is fine enough (step_series).
      {"idle_steps_skipped", r.idle_steps_skipped},
      {"wall_seconds", r.wall_s},
      {"storage", r.storage},
      {"device", r.device},
      {"bytes_per_block", r.bytes_per_block},
      {"step_messages", r.step_round_trip_us.size()},
      {"probes", r.probes},
      {"probe_failures", r.probe_failures},
      {"ended_before_free", r.ended_before_free},
      {"preempted_mid_swap", r.preempted_mid_swap},
      {"chunk_extends", r.chunk_extends},
      {"preempted_mid_prefill", r.preempted_mid_prefill},
      // Replies that disagreed with what was asked (each a warning too).
      {"inconsistent_replies", r.inconsistencies},
      {"invariant", {{"checked", r.invariant_checked},
                     {"error", r.invariant_error.empty()
                                 ? json(nullptr)
                                 : json(r.invariant_error)}}},
      {"step_round_trip_us", distribution(r.step_round_trip_us)}}},
    {"tenants", std::move(tenants)},
    {"overall", std::move(overall)},
    {"pressure", {{"steps_at", pressure_steps}, {"entered", entered}}},
    {"data",
     {{"kv_rows_written", r.tokens_written},
      {"bytes_written", r.bytes_written},
      {"read_back_checks", r.verify_checks},
      {"read_back_mismatches", r.verify_failures},
      // Verifies due that read nothing back, by why (sim_outcome).
      {"read_backs_skipped",
       {{"nothing_running", r.verify_skipped.nothing_running},
        {"no_tokens", r.verify_skipped.no_tokens},
        {"ended", r.verify_skipped.ended},
        {"table_disagreed", r.verify_skipped.table_disagreed}}}}},
    {"cache_stats",
     r.have_final_stats ? ordered(to_json(r.final_stats)) : json(nullptr)},
    {"warnings", r.warnings},
  };
  // A config path need not be UTF-8 (a Latin-1 file name): its bad bytes
  // become U+FFFD rather than a throw after the old reports went.
  return out.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

/// A row per step run; a skipped idle gap (batcher::skip_idle) has a row at
/// its first and its last step only, both with the state of every step
/// between them: where the step column jumps, the steps it passes over
/// were skipped (a plot draws them flat). A long run's series is coarse
/// (step_series): a row then stands for the `steps` steps up to its
/// `step`, admitted/finished/preempted summed over them, the rest the
/// state after its step. The last column, steps, says how many steps a row
/// stands for (last: the plot's columns stay where they were).
std::string timeseries_csv(const sim_outcome& r) {
  std::ostringstream out;
  out << "step,waiting,running,swapped,admitted,finished,preempted,blocks_used,"
         "blocks_cached,blocks_total,usage,pressure,pressure_level,hit_rate";
  for (auto& n : tenant_column_names(r))
    out << ',' << n << "_waiting," << n << "_running," << n << "_blocks";
  out << ",steps\n";
  char buf[64];
  for (auto& s : r.samples) {
    auto usage = s.total_blocks == 0 ? 0.0 : double(s.used_blocks) / s.total_blocks;
    out << s.step << ',' << s.waiting << ',' << s.running << ',' << s.swapped
        << ',' << s.admitted
        << ',' << s.finished << ',' << s.preempted << ',' << s.used_blocks << ','
        << s.cached_blocks << ',' << s.total_blocks << ',';
    std::snprintf(buf, sizeof(buf), "%.4f", usage);
    out << buf << ',' << to_string(s.pressure) << ','
        << static_cast<int>(s.pressure) << ',';
    std::snprintf(buf, sizeof(buf), "%.4f", s.hit_rate);
    out << buf;
    for (auto& t : s.tenants)
      out << ',' << t.waiting << ',' << t.running << ',' << t.blocks;
    out << ',' << s.steps << '\n';
  }
  return out.str();
}

} // namespace

caf::error prepare_output_dir(const scenario& s,
                              std::vector<std::string>* created) {
  namespace fs = std::filesystem;
  fs::path dir{s.output_dir};
  std::error_code ec;
  if (created != nullptr) // the ones missing now, innermost first
    for (auto p = fs::absolute(dir, ec).lexically_normal();
         !ec && !p.empty() && !fs::exists(p, ec) && p != p.parent_path();
         p = p.parent_path())
      created->push_back(p.string());
  fs::create_directories(dir, ec);
  if (ec)
    return make_error(errc::invalid_config,
                      s.output_dir + ": cannot create (" + ec.message() + ")");
  auto probe = dir / ".multi_tenant_sim_probe";
  {
    std::ofstream out{probe};
    if (!out)
      return make_error(errc::invalid_config,
                        s.output_dir + ": cannot write there ("
                          + std::strerror(errno) + ")");
  }
  fs::remove(probe, ec);
  return caf::none;
}

void remove_created_dirs(const std::vector<std::string>& created) {
  std::error_code ec;
  for (auto& dir : created)
    std::filesystem::remove(dir, ec); // only removes an empty directory
}

caf::expected<std::vector<std::string>>
write_reports(const scenario& s, const sim_outcome& r, std::ostream& log) {
  namespace fs = std::filesystem;
  fs::path dir{s.output_dir};
  // Again: the directory may have gone while the simulation ran.
  if (auto err = prepare_output_dir(s))
    return err;
  // An earlier run's files must not pass for this one's, whichever of
  // this run's fails to be written.
  for (auto name : {"report.json", "timeseries.csv", "usage.gp", "usage.png"}) {
    std::error_code ec;
    fs::remove(dir / name, ec);
  }
  std::vector<std::string> written;
  auto put = [&](const char* name, const std::string& text) -> caf::error {
    auto path = dir / name;
    if (auto err = write_file(path, text))
      return err;
    written.push_back(path.string());
    return caf::none;
  };
  if (auto err = put("report.json", report_json(s, r)))
    return err;
  if (auto err = put("timeseries.csv", timeseries_csv(r)))
    return err;
  if (auto err = put("usage.gp", gnuplot_script(s, r)))
    return err;
  if (r.samples.empty()) {
    log << "no step completed: no plot drawn\n";
    return written;
  }
  if (draw_plot(dir, log))
    written.push_back((dir / "usage.png").string());
  return written;
}

} // namespace kvactor::sim
