// format_table: aligned rows of the manager's figures.
#include "kvactor/metrics/stats_table.hpp"

#include <cstdio>
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
  auto row = [&](const char* name, const std::string& value) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "  %-24s %16s\n", name, value.c_str());
    out << buf;
  };
  auto num = [](std::uint64_t v) { return std::to_string(v); };
  out << "  figure                              value\n"
      << "  ----------------------------------------\n";
  row("blocks total", num(x.total_blocks));
  row("blocks in use", num(x.total_blocks - x.free_blocks));
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
    char buf[160];
    out << "\n  tenant           blocks  quota  reserved  active  hit rate  preempted\n"
        << "  -------------------------------------------------------------------\n";
    for (auto& t : x.tenants) {
      double hr = t.prefix_query_tokens == 0
                    ? 0.0
                    : double(t.prefix_hit_tokens) / double(t.prefix_query_tokens);
      std::snprintf(buf, sizeof(buf), "  %-15s %7llu %6llu %9llu %7llu %9s %10llu\n",
                    t.name.c_str(), (unsigned long long) t.blocks_used,
                    (unsigned long long) t.max_blocks,
                    (unsigned long long) t.reserved_blocks,
                    (unsigned long long) t.active_requests, pct(hr).c_str(),
                    (unsigned long long) t.preemptions);
      out << buf;
    }
  }
  return out.str();
}

} // namespace kvactor
