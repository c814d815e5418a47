// metrics: JSON forms of the stats types, usage_fraction, and the Prometheus
// text exposition (values, tenant labels, line syntax).
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "kvactor/metrics/prometheus.hpp"
#include "kvactor/metrics/stats_json.hpp"
#include "kvactor/metrics/stats_table.hpp"

using nlohmann::json;
using namespace kvactor;

namespace {

cache_manager_stats filled_stats() {
  cache_manager_stats s;
  s.total_memory_bytes = 1000 * 65536;
  s.used_memory_bytes = 600 * 65536;
  s.active_caches = 7;
  s.total_blocks = 1000;
  s.free_blocks = 400;
  s.cache_hit_rate = 0.25;
  s.eviction_count = 11;
  s.allocation_count = 12;
  s.allocation_failures = 13;
  s.cached_blocks = 150;
  s.pressure = memory_pressure::medium;
  s.preemption_count = 14;
  s.swap_out_count = 15;
  s.swap_in_count = 16;
  s.swap_in_shared_blocks = 17;
  s.block_size = 16;
  s.prefix_query_tokens = 4000;
  s.prefix_hit_tokens = 1000;
  s.host_total_blocks = 256;
  s.host_free_blocks = 200;
  s.draft_tokens = 40;
  s.draft_tokens_rejected = 12;
  s.draining_blocks = 19;
  s.blocks_allocated = 21;
  s.prefix_hit_blocks = 22;
  s.blocks_freed = 23;
  s.blocks_cached = 24;
  s.cow_copies = 25;
  s.tenants = {{"alpha", 500, 600, 100, 4, 3000, 900, 2, 1},
               {"be\"ta", 100, 0, 0, 3, 1000, 100, 12, 12}};
  return s;
}

/// The samples of a text exposition: "name{labels}" -> value.
std::map<std::string, double> samples(const std::string& text) {
  std::map<std::string, double> result;
  std::istringstream in{text};
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#')
      continue;
    auto space = line.rfind(' ');
    result[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return result;
}

} // namespace

BOOST_AUTO_TEST_SUITE(metrics_suite)

BOOST_AUTO_TEST_CASE(manager_stats_json_has_every_field_by_name) {
  auto j = to_json(filled_stats());
  BOOST_TEST(j.size() == 29u);
  BOOST_TEST(j["draining_blocks"].get<std::uint64_t>() == 19u);
  BOOST_TEST(j["total_memory_bytes"].get<std::uint64_t>() == 1000u * 65536);
  BOOST_TEST(j["used_memory_bytes"].get<std::uint64_t>() == 600u * 65536);
  BOOST_TEST(j["active_caches"].get<std::uint64_t>() == 7u);
  BOOST_TEST(j["draft_tokens"].get<std::uint64_t>() == 40u);
  BOOST_TEST(j["draft_tokens_rejected"].get<std::uint64_t>() == 12u);
  BOOST_TEST(j["total_blocks"].get<std::uint64_t>() == 1000u);
  BOOST_TEST(j["free_blocks"].get<std::uint64_t>() == 400u);
  BOOST_TEST(j["cache_hit_rate"].get<double>() == 0.25);
  BOOST_TEST(j["eviction_count"].get<std::uint64_t>() == 11u);
  BOOST_TEST(j["allocation_count"].get<std::uint64_t>() == 12u);
  BOOST_TEST(j["allocation_failures"].get<std::uint64_t>() == 13u);
  BOOST_TEST(j["cached_blocks"].get<std::uint64_t>() == 150u);
  BOOST_TEST(j["pressure"].get<std::string>() == "medium");
  BOOST_TEST(j["preemption_count"].get<std::uint64_t>() == 14u);
  BOOST_TEST(j["swap_out_count"].get<std::uint64_t>() == 15u);
  BOOST_TEST(j["swap_in_count"].get<std::uint64_t>() == 16u);
  BOOST_TEST(j["swap_in_shared_blocks"].get<std::uint64_t>() == 17u);
  BOOST_TEST(j["block_size"].get<std::uint64_t>() == 16u);
  BOOST_TEST(j["prefix_query_tokens"].get<std::uint64_t>() == 4000u);
  BOOST_TEST(j["prefix_hit_tokens"].get<std::uint64_t>() == 1000u);
  BOOST_TEST(j["host_total_blocks"].get<std::uint64_t>() == 256u);
  BOOST_TEST(j["host_free_blocks"].get<std::uint64_t>() == 200u);
  BOOST_TEST(j["blocks_allocated"].get<std::uint64_t>() == 21u);
  BOOST_TEST(j["prefix_hit_blocks"].get<std::uint64_t>() == 22u);
  BOOST_TEST(j["blocks_freed"].get<std::uint64_t>() == 23u);
  BOOST_TEST(j["blocks_cached"].get<std::uint64_t>() == 24u);
  BOOST_TEST(j["cow_copies"].get<std::uint64_t>() == 25u);
  BOOST_REQUIRE(j["tenants"].is_array());
  BOOST_REQUIRE(j["tenants"].size() == 2u);
  BOOST_TEST(j["tenants"][1]["name"].get<std::string>() == "be\"ta");
}

BOOST_AUTO_TEST_CASE(tenant_usage_json_has_every_field_by_name) {
  auto j = to_json(filled_stats().tenants[0]);
  BOOST_TEST(j.size() == 9u);
  BOOST_TEST(j["name"].get<std::string>() == "alpha");
  BOOST_TEST(j["blocks_used"].get<std::uint64_t>() == 500u);
  BOOST_TEST(j["max_blocks"].get<std::uint64_t>() == 600u);
  BOOST_TEST(j["reserved_blocks"].get<std::uint64_t>() == 100u);
  BOOST_TEST(j["active_requests"].get<std::uint64_t>() == 4u);
  BOOST_TEST(j["prefix_query_tokens"].get<std::uint64_t>() == 3000u);
  BOOST_TEST(j["prefix_hit_tokens"].get<std::uint64_t>() == 900u);
  BOOST_TEST(j["preemptions"].get<std::uint64_t>() == 2u);
  BOOST_TEST(j["allocation_failures"].get<std::uint64_t>() == 1u);
}

BOOST_AUTO_TEST_CASE(gc_and_handle_stats_json_have_every_field_by_name) {
  auto gc = to_json(cache_gc_stats{4096, 2, 8, 1.5});
  BOOST_TEST(gc.size() == 4u);
  BOOST_TEST(gc["memory_freed"].get<std::uint64_t>() == 4096u);
  BOOST_TEST(gc["caches_freed"].get<std::uint64_t>() == 2u);
  BOOST_TEST(gc["blocks_reclaimed"].get<std::uint64_t>() == 8u);
  BOOST_TEST(gc["gc_time_ms"].get<double>() == 1.5);
  auto h = to_json(cache_handle_stats{2048, 2, 20, 0.625, 123456789, 16});
  BOOST_TEST(h.size() == 6u);
  BOOST_TEST(h["memory_bytes"].get<std::uint64_t>() == 2048u);
  BOOST_TEST(h["blocks_allocated"].get<std::uint64_t>() == 2u);
  BOOST_TEST(h["tokens_stored"].get<std::uint64_t>() == 20u);
  BOOST_TEST(h["utilization"].get<double>() == 0.625);
  BOOST_TEST(h["last_access"].get<std::uint64_t>() == 123456789u);
  BOOST_TEST(h["prefix_hit_tokens"].get<std::uint64_t>() == 16u);
}

BOOST_AUTO_TEST_CASE(usage_fraction_counts_blocks_in_use) {
  BOOST_TEST(usage_fraction(filled_stats()) == 0.6);
  BOOST_TEST(usage_fraction(cache_manager_stats{}) == 0.0);
  cache_manager_stats full;
  full.total_blocks = 8;
  BOOST_TEST(usage_fraction(full) == 1.0);
}

BOOST_AUTO_TEST_CASE(the_table_shows_draining_blocks_apart_from_those_in_use) {
  // 1000 blocks, 400 free, 50 of the other 600 draining: 550 in use, as
  // the memory used says (550 blocks' bytes), not 600.
  auto s = filled_stats();
  s.draining_blocks = 50;
  s.used_memory_bytes = 550 * 65536;
  auto text = format_table(s);
  std::istringstream in{text};
  std::string line;
  int rows = 0;
  while (std::getline(in, line))
    if (line.find("blocks in use (draining)") != std::string::npos) {
      ++rows;
      BOOST_TEST(line.find(" 550 (50)") != std::string::npos, line);
    }
  BOOST_TEST(rows == 1);
}

BOOST_AUTO_TEST_CASE(prometheus_text_has_every_pool_metric_with_its_value) {
  auto text = to_prometheus(filled_stats());
  BOOST_TEST_MESSAGE(text);
  auto s = samples(text);
  const std::map<std::string, double> expected = {
    {"kvactor:kv_cache_usage_perc", 0.6},
    {"kvactor:num_blocks", 1000},
    {"kvactor:num_free_blocks", 400},
    {"kvactor:num_cached_blocks", 150},
    {"kvactor:num_draining_blocks", 19},
    {"kvactor:num_host_blocks", 256},
    {"kvactor:num_free_host_blocks", 200},
    {"kvactor:memory_bytes", 1000.0 * 65536},
    {"kvactor:used_memory_bytes", 600.0 * 65536},
    {"kvactor:num_active_caches", 7},
    {"kvactor:memory_pressure", 1},
    {"kvactor:prefix_cache_queries_total", 4000},
    {"kvactor:prefix_cache_hits_total", 1000},
    {"kvactor:num_preemptions_total", 14},
    {"kvactor:evictions_total", 11},
    {"kvactor:allocations_total", 12},
    {"kvactor:allocation_failures_total", 13},
    {"kvactor:swap_outs_total", 15},
    {"kvactor:swap_ins_total", 16},
    {"kvactor:swap_in_shared_blocks_total", 17},
    {"kvactor:blocks_allocated_total", 21},
    {"kvactor:prefix_hit_blocks_total", 22},
    {"kvactor:blocks_freed_total", 23},
    {"kvactor:blocks_cached_total", 24},
    {"kvactor:cow_copies_total", 25},
    {"kvactor:draft_tokens_total", 40},
    {"kvactor:draft_tokens_rejected_total", 12},
  };
  // Every pool-wide sample is one of these (the tenants' carry labels): a
  // metric added without a check here fails.
  std::size_t pool_wide = 0;
  for (auto& [name, value] : s)
    pool_wide += name.find('{') == std::string::npos;
  BOOST_TEST(pool_wide == expected.size());
  for (auto& [name, value] : expected) {
    BOOST_TEST_CONTEXT(name) {
      BOOST_REQUIRE(s.count(name) == 1u);
      BOOST_TEST(s[name] == value);
    }
  }
}

BOOST_AUTO_TEST_CASE(prometheus_text_labels_tenant_metrics) {
  auto s = samples(to_prometheus(filled_stats()));
  const std::map<std::string, double> expected = {
    {R"(kvactor:tenant_blocks_used{tenant="alpha"})", 500},
    {R"(kvactor:tenant_max_blocks{tenant="alpha"})", 600},
    {R"(kvactor:tenant_reserved_blocks{tenant="alpha"})", 100},
    {R"(kvactor:tenant_active_requests{tenant="alpha"})", 4},
    {R"(kvactor:tenant_prefix_cache_queries_total{tenant="alpha"})", 3000},
    {R"(kvactor:tenant_prefix_cache_hits_total{tenant="alpha"})", 900},
    {R"(kvactor:tenant_num_preemptions_total{tenant="alpha"})", 2},
    {R"(kvactor:tenant_allocation_failures_total{tenant="alpha"})", 1},
    // A quote in a tenant's name is escaped.
    {R"(kvactor:tenant_blocks_used{tenant="be\"ta"})", 100},
    {R"(kvactor:tenant_num_preemptions_total{tenant="be\"ta"})", 12},
  };
  for (auto& [name, value] : expected) {
    BOOST_TEST_CONTEXT(name) {
      BOOST_REQUIRE(s.count(name) == 1u);
      BOOST_TEST(s[name] == value);
    }
  }
}

BOOST_AUTO_TEST_CASE(prometheus_counters_carry_the_snapshot_each_call) {
  auto stats = filled_stats();
  to_prometheus(stats);
  auto s = samples(to_prometheus(stats));
  BOOST_TEST(s["kvactor:evictions_total"] == 11.0);
  stats.tenants.clear();
  auto text = to_prometheus(stats);
  BOOST_TEST(text.find("tenant") == std::string::npos);
}

BOOST_AUTO_TEST_CASE(prometheus_text_lines_are_well_formed) {
  auto text = to_prometheus(filled_stats());
  const std::string name = "[a-zA-Z_:][a-zA-Z0-9_:]*";
  // name="value", the value escaping only backslash, quote and newline.
  const std::string label =
    R"([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*")";
  const std::regex sample{"^(" + name + ")(\\{" + label + "(," + label
                          + ")*\\})? (-?[0-9.eE+-]+|NaN|[+-]Inf)$"};
  const std::regex help{"^# HELP (" + name + ") [^\\\\]+$"};
  const std::regex type{"^# TYPE (" + name + ") (counter|gauge)$"};
  std::set<std::string> helped;
  std::map<std::string, std::string> types;
  std::istringstream in{text};
  std::string line;
  std::size_t num_samples = 0;
  while (std::getline(in, line)) {
    BOOST_TEST_CONTEXT(line) {
      std::smatch m;
      if (std::regex_match(line, m, help)) {
        helped.insert(m[1]);
      } else if (std::regex_match(line, m, type)) {
        BOOST_TEST(helped.count(m[1]) == 1u); // HELP precedes TYPE
        types[m[1]] = m[2];
      } else {
        BOOST_REQUIRE(std::regex_match(line, m, sample));
        BOOST_TEST(types.count(m[1]) == 1u); // TYPE precedes samples
        ++num_samples;
      }
    }
  }
  BOOST_TEST(num_samples == 27u + 8u * 2u);
  // Counter families end in _total (vLLM's scraped names); gauges never do.
  for (auto& [family, kind] : types) {
    bool suffixed = family.size() > 6
                    && family.compare(family.size() - 6, 6, "_total") == 0;
    BOOST_TEST_CONTEXT(family) {
      BOOST_TEST(suffixed == (kind == "counter"));
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
