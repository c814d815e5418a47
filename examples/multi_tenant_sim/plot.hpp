// plot: usage.gp, the gnuplot script that draws usage.png from a run's
// timeseries.csv (blocks, pressure and preemptions, hit rate over the
// steps), and drawing it.
#pragma once

#include <cstddef>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "scenario.hpp"
#include "scheduler.hpp"

namespace kvactor::sim {

/// A tenant name fit for a CSV header and a gnuplot string: separators,
/// quotes, backslashes and control characters become '_'.
std::string safe_name(const std::string& name);

/// Each tenant's name in timeseries.csv's header and the plot's key:
/// safe_name, and where two would read alike ("x,y", "x_y") the later one
/// gets a suffix "~N" (N its place among the tenants, or the next number
/// free).
std::vector<std::string> tenant_column_names(const sim_outcome& r);

/// Most tenants whose blocks the plot draws (those with the highest peak).
inline constexpr std::size_t plot_tenants = 12;

/// The script (usage.gp): three panels over the steps of timeseries.csv.
std::string gnuplot_script(const scenario& s, const sim_outcome& r);

/// Runs gnuplot on usage.gp in `dir` (written there before). True when
/// usage.png was drawn; otherwise why not goes to `log` (gnuplot missing,
/// or failing: its log is kept as gnuplot.log).
bool draw_plot(const std::filesystem::path& dir, std::ostream& log);

} // namespace kvactor::sim
