// format_table: aligned rows of the manager's figures.
#include "kvactor/metrics/stats_table.hpp"

#include <algorithm>
#include <cstdio>
#include <iomanip>
#include <sstream>

#include "kvactor/metrics/stats_json.hpp"

namespace kvactor {

namespace {

std::string mib(std::uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f MiB", bytes / (1024.0 * 1024.0));
  return buf;
}

std::string pct(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f %%", 100.0 * x);
  return buf;
}

} // namespace

std::string format_table(const cache_manager_stats& x) {
  std::ostringstream out;
  // Streams, not fixed buffers: a long value or tenant name widens its row
  // instead of losing the line's end.
  auto row = [&](const char* name, const std::string& value) {
    out << "  " << std::left << std::setw(24) << name << ' ' << std::right
        << std::setw(16) << value << '\n';
  };
  auto num = [](std::uint64_t v) { return std::to_string(v); };
  out << "  figure                              value\n"
      << "  ----------------------------------------\n";
  row("blocks total", num(x.total_blocks));
  // Draining blocks (a preempted victim's, until its writer is surely
  // done) are neither used nor free: shown apart, so that the blocks in
  // use agree with the memory used below.
  auto taken = x.total_blocks > x.free_blocks ? x.total_blocks - x.free_blocks
                                              : 0;
  auto draining = std::min(taken, x.draining_blocks);
  row("blocks in use (draining)",
      num(taken - draining) + " (" + num(draining) + ")");
  row("blocks free (cached)", num(x.free_blocks) + " (" + num(x.cached_blocks) + ")");
  row("usage", pct(usage_fraction(x)));
  row("pressure", to_string(x.pressure));
  row("memory used / total", mib(x.used_memory_bytes) + " / " + mib(x.total_memory_bytes));
  row("active requests", num(x.active_caches));
  row("allocations (failed)", num(x.allocation_count) + " (" + num(x.allocation_failures) + ")");
  row("prefix hit rate", pct(x.cache_hit_rate));
  row("prefix hit / query tok", num(x.prefix_hit_tokens) + " / " + num(x.prefix_query_tokens));
  row("evictions", num(x.eviction_count));
  row("preemptions", num(x.preemption_count));
  row("swaps out / in", num(x.swap_out_count) + " / " + num(x.swap_in_count)
                          + " (" + num(x.swap_in_shared_blocks)
                          + " blocks shared back in)");
  if (!x.tenants.empty()) {
    out << "\n  tenant           blocks  quota  reserved  active  hit rate  preempted\n"
        << "  -------------------------------------------------------------------\n";
    for (auto& t : x.tenants) {
      double hr = t.prefix_query_tokens == 0
                    ? 0.0
                    : double(t.prefix_hit_tokens) / double(t.prefix_query_tokens);
      out << "  " << std::left << std::setw(15) << t.name << std::right << ' '
          << std::setw(7) << t.blocks_used << ' ' << std::setw(6)
          << t.max_blocks << ' ' << std::setw(9) << t.reserved_blocks << ' '
          << std::setw(7) << t.active_requests << ' ' << std::setw(9)
          << pct(hr) << ' ' << std::setw(10) << t.preemptions << '\n';
    }
  }
  return out.str();
}

} // namespace kvactor
