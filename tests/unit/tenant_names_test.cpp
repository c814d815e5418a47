// Tenant names: "" is the tenant named "default" (else the first), in the
// config and in the pool; validate() refuses names that are not UTF-8
// (JSON, KV events and Prometheus labels all need it), Prometheus labels
// escape backslash, quote and newline, and the stats table keeps one row
// per tenant however long its name.
#include <sstream>
#include <string>

#include <boost/test/unit_test.hpp>

#include "kvactor/actors/block_pool_core.hpp"
#include "kvactor/config/cache_config.hpp"
#include "kvactor/messages/error.hpp"
#include "kvactor/metrics/prometheus.hpp"
#include "kvactor/metrics/stats_table.hpp"

using namespace kvactor;

namespace {

/// render() of validate()'s error for a config with tenant `name`, or "ok".
std::string with_tenant(const std::string& name, const std::string& ns = "") {
  cache_config cfg;
  cfg.num_gpu_blocks = 64;
  cfg.tenants = {tenant_config{}};
  cfg.tenants[0].name = name;
  cfg.tenants[0].prefix_namespace = ns;
  auto err = validate(cfg);
  return err ? render(err) : "ok";
}

} // namespace

BOOST_AUTO_TEST_SUITE(tenant_names)

BOOST_AUTO_TEST_CASE(the_empty_name_is_the_tenant_called_default) {
  cache_config cfg;
  cfg.num_gpu_blocks = 16;
  cfg.block_size = 4;
  cfg.tenants = {tenant_config{}, tenant_config{}};
  cfg.tenants[0].name = "a";
  cfg.tenants[1].name = "default";
  BOOST_REQUIRE(!validate(cfg));
  BOOST_TEST(cfg.find_tenant("")->name == "default");
  detail::block_pool_core pool{cfg, 16};
  allocation_request req;
  req.id = 1;
  req.initial_tokens = 8;
  req.max_sequence_length = 64;
  req.num_layers = cfg.model.num_layers;
  req.num_heads = cfg.model.num_kv_heads;
  req.head_dim = cfg.model.head_dim;
  req.dtype = cfg.model.dtype;
  BOOST_REQUIRE(pool.allocate(req));
  auto st = pool.stats();
  BOOST_REQUIRE(st.tenants.size() == 2u);
  BOOST_TEST(st.tenants[0].blocks_used == 0u);
  BOOST_TEST(st.tenants[1].blocks_used == 2u);
  // Without a tenant called "default", the first is.
  cfg.tenants[1].name = "b";
  BOOST_TEST(cfg.find_tenant("")->name == "a");
}

BOOST_AUTO_TEST_CASE(names_must_be_utf8) {
  BOOST_TEST(with_tenant("caf\xc3\xa9") == "ok");         // é
  BOOST_TEST(with_tenant("\xe6\x97\xa5\xe6\x9c\xac") == "ok"); // two CJK
  BOOST_TEST(with_tenant("\xf0\x9f\x99\x82") == "ok");    // U+1F642
  for (auto bad : {"caf\xe9", "\xc3", "\xc0\xaf", "\xed\xa0\x80",
                   "\xf4\x90\x80\x80", "\xff", "ok\x80"}) {
    BOOST_TEST_CONTEXT("name bytes: " << bad) {
      auto msg = with_tenant(bad);
      BOOST_TEST(msg.find("tenants[0].name: must be valid UTF-8")
                   != std::string::npos,
                 msg);
    }
  }
  auto msg = with_tenant("a", "ns\xe9");
  BOOST_TEST(msg.find("tenants[0].prefix_namespace: must be valid UTF-8")
               != std::string::npos,
             msg);
}

BOOST_AUTO_TEST_CASE(prometheus_labels_escape_backslash_quote_and_newline) {
  cache_manager_stats s;
  s.total_blocks = 10;
  s.tenants = {{"a\\b\"c\nd", 3, 0, 0, 1, 0, 0, 0, 0}};
  auto text = to_prometheus(s);
  BOOST_TEST(text.find(R"(kvactor:tenant_blocks_used{tenant="a\\b\"c\nd"} 3)")
               != std::string::npos,
             text);
}

BOOST_AUTO_TEST_CASE(the_table_keeps_one_row_per_tenant) {
  cache_manager_stats s;
  s.total_blocks = 10;
  s.free_blocks = 12; // inconsistent, as hand-built stats can be
  std::string long_name(300, 'x');
  s.tenants = {{long_name, 1, 2, 3, 4, 10, 5, 6, 0}, {"b", 7, 0, 0, 1, 0, 0, 0, 0}};
  s.swap_out_count = 18446744073709551615ull; // the widest value
  auto text = format_table(s);
  std::istringstream in{text};
  std::string line;
  int long_rows = 0;
  int b_rows = 0;
  while (std::getline(in, line)) {
    if (line.find(long_name) != std::string::npos) {
      ++long_rows;
      BOOST_TEST(line.find(" b ") == std::string::npos, line);
      BOOST_TEST(line.find("50.0 %") != std::string::npos, line);
    }
    if (line.rfind("  b ", 0) == 0)
      ++b_rows;
    if (line.find("blocks in use") != std::string::npos)
      BOOST_TEST(line.find(" 0") != std::string::npos, line);
    if (line.find("swaps out / in") != std::string::npos)
      BOOST_TEST(line.find("18446744073709551615 / 0") != std::string::npos,
                 line);
  }
  BOOST_TEST(long_rows == 1);
  BOOST_TEST(b_rows == 1);
}

BOOST_AUTO_TEST_SUITE_END()
