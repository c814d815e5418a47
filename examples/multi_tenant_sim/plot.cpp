// plot: the gnuplot script of a run (usage.gp) and its drawing (usage.png).
#include "plot.hpp"

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <system_error>
#include <unordered_set>
#include <vector>

namespace kvactor::sim {

namespace {

/// `x` as one word for /bin/sh.
std::string shell_quote(const std::string& x) {
  std::string out = "'";
  for (auto c : x)
    out += c == '\'' ? std::string{"'\\''"} : std::string(1, c);
  return out + "'";
}

/// The right axis of the pressure panel counts requests: whole-number
/// tics, about eight of them over its range (preempted per step - per row
/// of a coarse series - and requests swapped out when the scenario swaps).
std::uint64_t whole_tic_step(const sim_outcome& r, bool swaps) {
  std::uint64_t top = 1;
  for (auto& s : r.samples)
    top = std::max<std::uint64_t>({top, s.preempted, swaps ? s.swapped : 0});
  return (top + 7) / 8;
}

/// The tenants whose lines the blocks panel draws, in tenant order: all of
/// them up to `plot_tenants`, else that many with the highest peak of
/// blocks (a key of thousands is unreadable, and gnuplot took over a minute
/// to draw 2,000 lines that the CSV holds anyway).
std::vector<std::size_t> drawn_tenants(const sim_outcome& r) {
  std::vector<std::size_t> ws(r.tenants.size());
  for (std::size_t w = 0; w < ws.size(); ++w)
    ws[w] = w;
  if (ws.size() > plot_tenants) {
    std::stable_sort(ws.begin(), ws.end(), [&](std::size_t x, std::size_t y) {
      return r.tenants[x].blocks_peak > r.tenants[y].blocks_peak;
    });
    ws.resize(plot_tenants);
    std::sort(ws.begin(), ws.end());
  }
  return ws;
}

} // namespace

/// Three panels over steps: blocks (in use, cached, per tenant), the
/// pressure level with preemptions, the cumulative prefix hit rate.
std::string gnuplot_script(const scenario& s, const sim_outcome& r) {
  constexpr int tenant_col = 15; // first per-tenant column of the CSV
  std::ostringstream gp;
  gp << "# usage.gp: draws usage.png from timeseries.csv; rerun with\n"
        "#   gnuplot usage.gp\n"
        "# in this directory.\n"
        "set datafile separator \",\"\n"
        "if (strstrt(GPVAL_TERMINALS, \"pngcairo\") > 0) {\n"
        "  set terminal pngcairo size 1280,1100 font \"sans,10\"\n"
        "} else {\n"
        "  set terminal png size 1280,1100\n"
        "}\n"
        "set termoption noenhanced\n"
        "set output \"usage.png\"\n"
        "f = \"timeseries.csv\"\n"
        "set multiplot layout 3,1 title \"kvactor multi_tenant_sim: "
     << safe_name(s.source) << " (" << r.effective.num_gpu_blocks
     << " blocks, storage " << r.storage << ")\"\n"
     << "set grid\n"
        "set autoscale xfixmax\n"
        "set key outside right top\n"
        "set lmargin 12\n"
        // Room for the key and the pressure panel's right axis, the same
        // in every panel so that their steps line up.
        "set rmargin 34\n"
        "set title \"blocks in use and cached";
  auto drawn = drawn_tenants(r);
  if (drawn.size() < r.tenants.size())
    gp << " (tenants: the " << drawn.size() << " of " << r.tenants.size()
       << " with the highest peak; all in timeseries.csv)";
  gp << "\"\n"
        "set ylabel \"blocks\"\n"
        "set yrange [0:*]\n"
        "plot f skip 1 using 1:8 with lines lw 2 title \"in use\", \\\n"
        "     f skip 1 using 1:9 with lines lw 1 title \"cached (free)\", \\\n"
        "     f skip 1 using 1:10 with lines dt 2 lc rgb \"black\" title \"total\"";
  auto names = tenant_column_names(r); // as timeseries.csv's header
  for (auto w : drawn)
    gp << ", \\\n     f skip 1 using 1:" << tenant_col + 3 * w + 2
       << " with lines lw 1.5 dt 2 title \"" << names[w] << "\"";
  gp << "\n"
        "set title \"pressure level (as the scheduler heard it) and preemptions\"\n"
        "set ylabel \"level\"\n"
        "set yrange [-0.3:3.3]\n"
        "set ytics (\"low\" 0, \"medium\" 1, \"high\" 2, \"critical\" 3)\n"
        "set y2label \"requests\"\n"
        "set y2range [0:*]\n"
     << "set y2tics " << whole_tic_step(r, s.preemption == preemption_mode::swap)
     << " format \"%.0f\"\n"
     << "plot f skip 1 using 1:13 with steps lw 2 title \"pressure\", \\\n"
        "     f skip 1 using 1:7 axes x1y2 with impulses title \"preempted "
     << (r.series.row_steps > 1 ? "per row (see steps)" : "this step") << "\"";
  if (s.preemption == preemption_mode::swap)
    gp << ", \\\n     f skip 1 using 1:4 axes x1y2 with lines title \"swapped out\"";
  gp << "\n"
        "unset y2tics\n"
        "unset y2label\n"
        "set title \"cumulative prefix hit rate\"\n"
        "set ylabel \"% of prefilled prompt tokens\"\n"
        "set yrange [0:100]\n"
        "set ytics auto\n"
        "set xlabel \"step\"\n"
        "plot f skip 1 using 1:($14*100) with lines lw 2 title \"hit rate\"\n"
        "unset multiplot\n";
  return gp.str();
}

std::vector<std::string> tenant_column_names(const sim_outcome& r) {
  // Names that differ only where safe_name changes them would make two
  // columns of one name: the later gets its place, and a further number
  // should a tenant be named so already ("x_y~1").
  std::vector<std::string> out;
  std::unordered_set<std::string> taken;
  for (std::size_t w = 0; w < r.tenants.size(); ++w) {
    auto n = safe_name(r.tenants[w].name);
    for (auto k = w; !taken.insert(n).second; ++k)
      n = safe_name(r.tenants[w].name) + "~" + std::to_string(k);
    out.push_back(std::move(n));
  }
  return out;
}

std::string safe_name(const std::string& name) {
  std::string out;
  for (auto c : name) {
    auto u = static_cast<unsigned char>(c);
    // A backquote would be a shell command to gnuplot, even in a string.
    out += (c == ',' || c == '"' || c == '\\' || c == '`' || u < 0x20
            || u == 0x7f)
             ? '_'
             : c;
  }
  return out;
}

bool draw_plot(const std::filesystem::path& dir, std::ostream& log) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    log << "gnuplot is not installed: usage.png not drawn (apt-get install "
           "gnuplot-nox, then run gnuplot usage.gp in "
        << dir.string() << ")\n";
    return false;
  }
  // "--": a directory named "-x" is not an option to cd.
  auto cmd = "cd -- " + shell_quote(dir.string())
             + " && gnuplot usage.gp > gnuplot.log 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    log << "gnuplot failed: usage.png not drawn (see "
        << (dir / "gnuplot.log").string() << ")\n";
    return false;
  }
  std::error_code ec;
  std::filesystem::remove(dir / "gnuplot.log", ec);
  return true;
}

} // namespace kvactor::sim
