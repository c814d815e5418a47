// report: what a run did, for people and for programs - the summary table
// (stdout; summary.cpp), report.json, timeseries.csv and usage.png (drawn by
// gnuplot from usage.gp, which is kept so the plot can be redrawn or edited;
// plot.hpp).
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "scenario.hpp"
#include "scheduler.hpp"

namespace kvactor::sim {

/// The per-tenant table, the overall row and a few lines about the pool.
void print_summary(std::ostream& out, const scenario& s, const sim_outcome& r);

/// What the run's own checks found wrong: K/V read-backs that mismatched,
/// verification on (storage holding bytes) but nothing read back in a run
/// not interrupted, the pool's invariant broken at the end. Empty when all
/// held; otherwise the run failed, whatever else it did.
std::string failed_checks(const sim_outcome& r);

/// Creates s.output_dir and checks that a file can be written there: called
/// before a run, so that a long simulation never ends unable to report.
/// The directories it made are added to `created` (innermost first), for
/// remove_created_dirs should the run not start. Error: invalid_config
/// naming the directory and why.
caf::error prepare_output_dir(const scenario& s,
                              std::vector<std::string>* created = nullptr);

/// Removes the directories prepare_output_dir made, innermost first, each
/// only if it is still empty: a run refused at start leaves nothing behind.
void remove_created_dirs(const std::vector<std::string>& created);

/// Writes report.json, timeseries.csv (a row per step_sample: its
/// `preempted` counts swap-outs too; then each tenant's columns, named
/// after it - a suffix "~N" (N its place among the tenants, or the next
/// number free) where two names would read alike; last `steps`, the steps
/// the row stands for: 1, a skipped gap's, or more once a long run's series
/// coarsened to default_series_cap rows) and usage.gp into s.output_dir, creating it,
/// and draws usage.png when gnuplot is installed (a usage.png of an
/// earlier run is removed first). Returns the paths
/// written; notes (gnuplot missing or failing) go to `log`. Error: a file
/// could not be written (the message names it).
caf::expected<std::vector<std::string>>
write_reports(const scenario& s, const sim_outcome& r, std::ostream& log);

} // namespace kvactor::sim
