// multi_tenant_sim: several tenants, each with its own traffic, share one
// kvactor cache; a scheduler actor batches their requests continuously
// against the manager in simulated time, preempting under pressure. Prints a
// summary table and writes a JSON report, a CSV time series and a PNG plot.
//
//   multi_tenant_sim [--config FILE] [--storage none|host|cuda|auto]
//                    [--out DIR] [--steps N] [--seed N] [--no-progress]
//                    [--print-default]
//
// Without --config it runs the embedded default scenario
// (examples/scenarios/default.json). Exit status: 0 done, 1 the run failed
// (the cache failed, a K/V read-back mismatched or the pool's invariant
// broke), 2 bad input (arguments or scenario), 130 interrupted by Ctrl-C,
// 143 by SIGTERM (the report of what ran is still written).
#include <csignal>
#include <iostream>
#include <string>
#include <vector>

#include "cli/interrupt.hpp"
#include "kvactor/config/cache_config.hpp"
#include "report.hpp"
#include "scenario.hpp"
#include "scheduler.hpp"

using namespace kvactor;
using namespace kvactor::sim;

namespace {

constexpr int exit_ok = 0;
constexpr int exit_failure = 1;
constexpr int exit_bad_input = 2;

constexpr const char* usage_text =
  "usage: multi_tenant_sim [--config FILE] [--storage none|host|cuda|auto]\n"
  "                        [--out DIR] [--steps N] [--seed N] [--no-progress]\n"
  "                        [--print-default] [--help]\n";

int usage(const std::string& why) {
  if (!why.empty())
    std::cerr << "multi_tenant_sim: " << why << '\n';
  std::cerr << usage_text;
  return exit_bad_input;
}

int help() {
  std::cout
    << usage_text
    << "\n"
       "Simulates a multi-tenant serving system driving kvactor through\n"
       "messages; without --config it runs the embedded default scenario.\n"
       "\n"
       "  --config FILE     scenario file (format: README, \"Scenarios\n"
       "                    (multi_tenant_sim)\"; --print-default shows one)\n"
       "  --storage KIND    override the scenario's cache.storage: none\n"
       "                    (bookkeeping only), host, cuda (moves real bytes\n"
       "                    on a GPU) or auto (cuda when a device answers)\n"
       "  --out DIR         where report.json, timeseries.csv and usage.png go\n"
       "  --steps N         override the scenario's number of steps\n"
       "  --seed N          override the scenario's random seed\n"
       "  --no-progress     no progress bar on stderr\n"
       "  --print-default   print the embedded default scenario and exit\n"
       "\n"
       "Ctrl-C stops the run early; the reports of what ran are still written.\n";
  return exit_ok;
}

struct options {
  bool help = false;
  std::string config;
  std::string storage;
  std::string out;
  std::uint64_t steps = 0;
  bool have_seed = false;
  std::uint64_t seed = 0;
  bool progress = true;
  bool print_default = false;
};

bool parse_count(const std::string& text, std::uint64_t& out) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos)
    return false;
  try {
    out = std::stoull(text);
    return true;
  } catch (...) {
    return false;
  }
}

/// Parses argv into `opt`; an error message, or "" on success.
std::string parse_args(int argc, char** argv, options& opt) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](std::string& out) -> bool {
      // "--config --no-progress" lacks a file; it does not name one.
      if (i + 1 >= argc || std::string{argv[i + 1]}.rfind("--", 0) == 0)
        return false;
      out = argv[++i];
      return true;
    };
    std::string v;
    if (arg == "--config") {
      if (!value(opt.config))
        return "--config needs a file";
    } else if (arg == "--storage") {
      if (!value(opt.storage))
        return "--storage needs a value";
      if (opt.storage != "none" && opt.storage != "host" && opt.storage != "cuda"
          && opt.storage != "auto")
        return "--storage: expected none, host, cuda or auto (got " + opt.storage
               + ")";
    } else if (arg == "--out") {
      if (!value(opt.out) || opt.out.empty())
        return "--out needs a directory";
    } else if (arg == "--steps") {
      if (!value(v) || !parse_count(v, opt.steps) || opt.steps == 0)
        return "--steps needs a positive integer";
    } else if (arg == "--seed") {
      if (!value(v) || !parse_count(v, opt.seed))
        return "--seed needs a non-negative integer";
      opt.have_seed = true;
    } else if (arg == "--no-progress") {
      opt.progress = false;
    } else if (arg == "--print-default") {
      opt.print_default = true;
    } else if (arg == "--help" || arg == "-h") {
      opt.help = true;
    } else {
      return "unknown argument " + arg;
    }
  }
  return "";
}

} // namespace

int main(int argc, char** argv) {
  options opt;
  if (auto why = parse_args(argc, argv, opt); !why.empty())
    return usage(why);
  if (opt.help)
    return help();
  if (opt.print_default) {
    std::cout << default_scenario_json() << std::flush;
    if (!std::cout) {
      std::cerr << "multi_tenant_sim: standard output: the default scenario "
                   "could not be written\n";
      return exit_failure;
    }
    return exit_ok;
  }
  auto loaded = opt.config.empty()
                  ? parse_scenario(default_scenario_json(), "default.json (embedded)")
                  : load_scenario(opt.config);
  if (!loaded) {
    std::cerr << "multi_tenant_sim: " << message_of(loaded.error()) << '\n';
    return exit_bad_input;
  }
  auto& s = *loaded;
  if (!opt.storage.empty()) {
    s.cache.storage = opt.storage;
    if (auto err = validate(s.cache)) {
      std::cerr << "multi_tenant_sim: --storage " << opt.storage << ": "
                << s.source << ": cache." << message_of(err) << '\n';
      return exit_bad_input;
    }
  }
  if (!opt.out.empty()) {
    s.output_dir = opt.out;
    s.output_dir_origin = "--out";
  }
  if (opt.steps != 0)
    s.steps = opt.steps;
  if (opt.have_seed)
    s.seed = opt.seed;

  // Before the run: a long simulation must not end unable to report.
  std::vector<std::string> created_dirs;
  if (auto err = prepare_output_dir(s, &created_dirs)) {
    remove_created_dirs(created_dirs); // made, then found unwritable
    std::cerr << "multi_tenant_sim: " << s.output_dir_origin << ": "
              << message_of(err) << '\n';
    return exit_bad_input;
  }
  kvactor::cli::install_interrupt_handler();
  // A reader that went (`multi_tenant_sim | head`) must not kill the run
  // before its reports are written: the summary's write fails instead.
  std::signal(SIGPIPE, SIG_IGN);
  progress bar{opt.progress};
  auto result = simulate(s, kvactor::cli::interrupt_flag(), bar);
  bar.finish(result.interrupted ? "interrupted: stopping, writing the report of "
                                  "what ran"
                                : "");
  if (result.bad_scenario || !result.started) { // nothing ran: no report
    remove_created_dirs(created_dirs);
    std::cerr << "multi_tenant_sim: " << result.error << '\n';
    // A scenario found wrong once the pool's size was known is bad input.
    return result.bad_scenario ? exit_bad_input : exit_failure;
  }
  print_summary(std::cout, s, result);
  auto files = write_reports(s, result, std::cerr);
  if (!files) {
    std::cerr << "multi_tenant_sim: " << message_of(files.error()) << '\n';
    return exit_failure;
  }
  std::cout << "\nwrote:";
  for (auto& f : *files)
    std::cout << ' ' << f;
  std::cout << std::endl;
  if (!std::cout) {
    // The files are written; the summary did not reach its reader.
    std::cerr << "multi_tenant_sim: standard output: the summary could not "
                 "be written\n";
    return exit_failure;
  }
  if (!result.error.empty()) {
    std::cerr << "multi_tenant_sim: " << result.error << '\n';
    return exit_failure;
  }
  // A run whose bytes or books came out wrong failed, however far it got.
  if (auto why = failed_checks(result); !why.empty()) {
    std::cerr << "multi_tenant_sim: " << why << '\n';
    return exit_failure;
  }
  return result.interrupted ? cli::interrupted_exit_status() : exit_ok;
}
