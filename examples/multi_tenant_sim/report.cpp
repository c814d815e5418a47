// report: the summary table, report.json and timeseries.csv; the plot's
// script and its drawing are in plot.cpp.
#include "report.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "kvactor/messages/error.hpp"
#include "kvactor/metrics/stats_json.hpp"
#include "plot.hpp"

namespace kvactor::sim {

namespace {

// Keys in the order written (kvactor's own JSON is converted).
using json = nlohmann::ordered_json;

json ordered(const nlohmann::json& x) {
  return json::parse(x.dump());
}

constexpr const char* level_names[] = {"low", "medium", "high", "critical"};

/// Nearest-rank percentile of `xs` (sorted copy); 0 when empty.
template <class T>
double percentile(std::vector<T> xs, double q) {
  if (xs.empty())
    return 0;
  std::sort(xs.begin(), xs.end());
  auto rank = static_cast<std::size_t>(q * xs.size() + 0.999999);
  return static_cast<double>(xs[std::clamp<std::size_t>(rank, 1, xs.size()) - 1]);
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

std::string fmt(const char* format, double x) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, x);
  return buf;
}

std::string pct(double x) {
  return fmt("%.1f %%", 100.0 * x);
}

/// A tenant's name for the summary's text: control characters (a newline
/// would break the table) shown as '?'.
std::string printable(const std::string& name) {
  std::string out = name;
  for (auto& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      c = '?';
  return out;
}

/// printable(name) in a column `width` characters wide (UTF-8 sequences
/// counted as one): padded, or cut to width - 1 and an ellipsis, so a
/// long name neither shifts its row nor overflows it.
std::string name_cell(const std::string& name, std::size_t width) {
  auto text = printable(name);
  auto starts = [&](std::size_t i) {
    return (static_cast<unsigned char>(text[i]) & 0xC0) != 0x80;
  };
  std::size_t chars = 0, cut = text.size();
  for (std::size_t i = 0; i < text.size(); ++i)
    if (starts(i) && ++chars == width)
      cut = i; // where the last column's character begins
  if (chars > width)
    return text.substr(0, cut) + "\xE2\x80\xA6"; // U+2026, an ellipsis
  return text + std::string(width - chars, ' ');
}

/// The figures of all tenants together (queue delays and latencies merged).
tenant_figures overall_of(const sim_outcome& r) {
  tenant_figures all;
  all.name = "overall";
  for (auto& f : r.tenants) {
    all.arrived += f.arrived;
    all.admitted += f.admitted;
    all.readmitted += f.readmitted;
    all.finished += f.finished;
    all.rejected += f.rejected;
    all.turned_away += f.turned_away;
    all.prompt_tokens += f.prompt_tokens;
    all.generated_tokens += f.generated_tokens;
    all.prefill_tokens += f.prefill_tokens;
    all.hit_tokens += f.hit_tokens;
    all.preempted_in_step += f.preempted_in_step;
    all.preempted_by_cache += f.preempted_by_cache;
    all.preempted_by_quota += f.preempted_by_quota;
    all.swaps += f.swaps;
    all.swap_ins += f.swap_ins;
    all.queue_delay.insert(all.queue_delay.end(), f.queue_delay.begin(),
                           f.queue_delay.end());
    all.unadmitted += f.unadmitted;
    all.unadmitted_wait = std::max(all.unadmitted_wait, f.unadmitted_wait);
    all.latency.insert(all.latency.end(), f.latency.begin(), f.latency.end());
  }
  for (auto& s : r.samples) {
    all.blocks_peak = std::max(all.blocks_peak, s.used_blocks);
    all.blocks_sum += double(s.used_blocks);
  }
  return all;
}

double mean_blocks(const tenant_figures& f, const sim_outcome& r) {
  return r.samples.empty() ? 0.0 : f.blocks_sum / double(r.samples.size());
}

json tenant_json(const tenant_figures& f, const sim_outcome& r) {
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
    {"latency_steps", distribution(f.latency)},
    {"blocks_used", {{"mean", mean_blocks(f, r)}, {"peak", f.blocks_peak}}},
  };
}

/// Steps spent at each pressure level.
std::vector<std::uint64_t> steps_at_levels(const sim_outcome& r) {
  std::vector<std::uint64_t> out(4, 0);
  for (auto& s : r.samples)
    ++out[static_cast<int>(s.pressure) & 3];
  return out;
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

caf::error write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream f{path, std::ios::binary | std::ios::trunc};
  if (f)
    f << text;
  if (!f)
    return make_error(errc::invalid_config, path.string() + ": cannot write ("
                                              + std::strerror(errno) + ")");
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
  json tenants = json::array();
  for (auto& f : r.tenants)
    tenants.push_back(tenant_json(f, r));
  auto overall = tenant_json(overall_of(r), r);
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
      {"max_waiting", s.max_waiting},
      {"prefill_chunk", s.prefill_chunk},
      {"verify_every", s.verify_every},
      {"cache", ordered(to_json(r.effective))},
      {"workloads", std::move(workloads)}}},
    {"run",
     {{"completed", r.error.empty() && !r.interrupted},
      {"interrupted", r.interrupted},
      {"error", r.error.empty() ? json(nullptr) : json(r.error)},
      {"steps", r.steps},
      {"wall_seconds", r.wall_s},
      {"storage", r.storage},
      {"device", r.device},
      {"bytes_per_block", r.bytes_per_block},
      {"step_messages", r.step_round_trip_us.size()},
      {"ended_before_free", r.ended_before_free},
      {"chunk_extends", r.chunk_extends},
      {"preempted_mid_prefill", r.preempted_mid_prefill},
      {"step_round_trip_us", distribution(r.step_round_trip_us)}}},
    {"tenants", std::move(tenants)},
    {"overall", std::move(overall)},
    {"pressure", {{"steps_at", pressure_steps}, {"entered", entered}}},
    {"data",
     {{"kv_rows_written", r.tokens_written},
      {"bytes_written", r.bytes_written},
      {"read_back_checks", r.verify_checks},
      {"read_back_mismatches", r.verify_failures}}},
    {"cache_stats",
     r.have_final_stats ? ordered(to_json(r.final_stats)) : json(nullptr)},
    {"warnings", r.warnings},
  };
  return out.dump(2) + "\n";
}

std::string timeseries_csv(const sim_outcome& r) {
  std::ostringstream out;
  out << "step,waiting,running,swapped,admitted,finished,preempted,blocks_used,"
         "blocks_cached,blocks_total,usage,pressure,pressure_level,hit_rate";
  // Names that differ only where safe_name changes them ("x,y", "x_y")
  // would make two columns of one name: the later gets its place, and a
  // further number should a tenant be named so already ("x_y~1").
  std::unordered_set<std::string> taken;
  for (std::size_t w = 0; w < r.tenants.size(); ++w) {
    auto n = safe_name(r.tenants[w].name);
    for (auto k = w; !taken.insert(n).second; ++k)
      n = safe_name(r.tenants[w].name) + "~" + std::to_string(k);
    out << ',' << n << "_waiting," << n << "_running," << n << "_blocks";
  }
  out << '\n';
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
    out << '\n';
  }
  return out.str();
}

} // namespace

void print_summary(std::ostream& out, const scenario& s, const sim_outcome& r) {
  auto& c = r.effective;
  out << "kvactor multi_tenant_sim: " << s.source << ", " << r.tenants.size()
      << " tenants, seed " << s.seed << "\n"
      << "cache: " << c.num_gpu_blocks << " blocks x " << c.block_size
      << " tokens, storage " << r.storage << " (" << r.device << "), model "
      << c.model.num_layers << " layers x " << c.model.num_kv_heads
      << " kv heads x " << c.model.head_dim << " dims " << to_string(c.model.dtype)
      << "\n";
  auto drained = r.steps > s.steps ? r.steps - s.steps : 0;
  out << "ran " << r.steps << " steps";
  if (drained > 0)
    out << " (" << s.steps << " with arrivals, " << drained << " draining)";
  if (r.interrupted)
    out << " - INTERRUPTED, figures cover what ran";
  if (!r.error.empty())
    out << " - FAILED: " << r.error;
  out << "\n\n";
  char buf[256];
  auto header = "tenant         prio      arrived   done  rej  prompt tok  output "
                "tok  hit rate  preempt  swaps  queue p50  queue p99  blocks avg  "
                "blocks peak\n";
  std::string rule(std::strlen(header) - 1, '-');
  out << header << rule << '\n';
  // "-" where there is nothing to measure (no admission yet), not a 0
  // that reads as a measured one.
  auto delay = [](const tenant_figures& f, double q) {
    return f.queue_delay.empty() ? std::string{"-"}
                                 : fmt("%.0f", percentile(f.queue_delay, q));
  };
  auto row = [&](const tenant_figures& f, const char* prio, double blocks_avg) {
    auto hit = f.prefill_tokens == 0 ? std::string{"-"} : pct(f.hit_rate());
    std::snprintf(buf, sizeof(buf),
                  "%s %-8s %8llu %6llu %4llu %11llu %11llu %9s %8llu %6llu "
                  "%10s %10s %11.1f %12llu\n",
                  name_cell(f.name, 14).c_str(), prio, (unsigned long long) f.arrived,
                  (unsigned long long) f.finished,
                  (unsigned long long) (f.rejected + f.turned_away),
                  (unsigned long long) f.prompt_tokens,
                  (unsigned long long) f.generated_tokens, hit.c_str(),
                  (unsigned long long) f.preemptions(), (unsigned long long) f.swaps,
                  delay(f, 0.5).c_str(), delay(f, 0.99).c_str(), blocks_avg,
                  (unsigned long long) f.blocks_peak);
    out << buf;
  };
  for (auto& f : r.tenants)
    row(f, to_string(f.priority), mean_blocks(f, r));
  out << rule << '\n';
  auto all = overall_of(r);
  row(all, "", mean_blocks(all, r));
  out << "(rej: refused by the cache, or turned away at a full queue; "
         "preempt: recomputed; swaps: swapped out.\n Hit rate: of every "
         "admission's tokens, re-admissions after a preemption included, as the "
         "cache counts.\n Queue delays in steps from arrival to first admission.\n"
         " Blocks: charged to the tenant, per step; overall: the pool's blocks in "
         "use)\n";
  if (all.unadmitted > 0) {
    // The delays above count admitted requests only; these waited longer.
    out << "not admitted by the end:";
    const char* sep = " ";
    for (auto& f : r.tenants)
      if (f.unadmitted > 0) {
        out << sep << printable(f.name) << ' ' << f.unadmitted << " (waiting up to "
            << f.unadmitted_wait << " steps)";
        sep = ", ";
      }
    out << '\n';
  }
  if (all.turned_away > 0) {
    out << "turned away, the queue full (max_waiting " << s.max_waiting
        << "; counted in rej):";
    const char* sep = " ";
    for (auto& f : r.tenants)
      if (f.turned_away > 0) {
        out << sep << printable(f.name) << ' ' << f.turned_away;
        sep = ", ";
      }
    out << '\n';
  }
  out << '\n';

  auto at = steps_at_levels(r);
  double n = r.samples.empty() ? 1.0 : double(r.samples.size());
  out << "pressure: steps at low " << pct(at[0] / n) << ", medium "
      << pct(at[1] / n) << ", high " << pct(at[2] / n) << ", critical "
      << pct(at[3] / n) << "; entered medium " << r.pressure_entered[1]
      << "x, high " << r.pressure_entered[2] << "x, critical "
      << r.pressure_entered[3] << "x\n";
  out << "preemptions (" << to_string(s.preemption) << "): "
      << all.preempted_in_step << " recomputed (newest, lowest priority first), "
      << all.preempted_by_cache << " by the supervisor, " << all.preempted_by_quota
      << " at a tenant quota, " << all.swaps << " swapped out, " << all.swap_ins
      << " swapped in; " << all.readmitted << " re-admissions\n";
  if (s.prefill_chunk > 0)
    out << "chunked prefill: " << s.prefill_chunk << " tokens past the cached "
        << "prefix at admission and per step after; " << r.chunk_extends
        << " extends computed a later chunk of a prompt; "
        << r.preempted_mid_prefill
        << " requests preempted or swapped out mid-prefill\n";
  if (r.have_final_stats) {
    auto& st = r.final_stats;
    out << "cache: " << st.allocation_count << " allocations ("
        << st.allocation_failures << " failed), " << st.eviction_count
        << " evictions, " << st.cow_copies << " copy-on-write copies, "
        << st.preemption_count << " preemptions";
    if (r.ended_before_free > 0)
      out << " (" << r.ended_before_free
          << " after a request's last token, before its free: counted finished "
             "above)";
    out << ", " << st.swap_out_count << " swaps";
    if (st.swap_in_count > 0)
      out << " (" << st.swap_in_shared_blocks
          << " blocks shared back in from the prefix cache)";
    out << "; prefix hit rate " << pct(st.cache_hit_rate) << "\n";
  }
  auto rtt = r.step_round_trip_us;
  out << "time: " << fmt("%.2f", r.wall_s) << " s wall";
  if (r.steps > 0)
    out << " (" << fmt("%.0f", r.wall_s * 1e6 / double(r.steps)) << " us/step)";
  out << "; " << rtt.size() << " step messages, round trip p50 "
      << fmt("%.0f", percentile(rtt, 0.5)) << " us, p99 "
      << fmt("%.0f", percentile(rtt, 0.99)) << " us\n";
  if (r.storage != "none" && !r.storage.empty())
    out << "data: " << r.tokens_written << " K/V rows written ("
        << fmt("%.1f", r.bytes_written / (1024.0 * 1024.0)) << " MiB) through "
        << "the device actor; " << r.verify_checks << " read-backs, "
        << r.verify_failures << " mismatched\n";
  for (auto& w : r.warnings)
    out << "warning: " << w << '\n';
}

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
  // An earlier run's drawing must not pass for this one's.
  std::error_code ec;
  std::filesystem::remove(dir / "usage.png", ec);
  if (r.samples.empty()) {
    log << "no step completed: no plot drawn\n";
    return written;
  }
  if (draw_plot(dir, log))
    written.push_back((dir / "usage.png").string());
  return written;
}

} // namespace kvactor::sim
