// cache_config: defaults, the embedded default, JSON round trip, loading from
// a file (bad fields, one case per class: config_validation_test.cpp).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "kvactor/config/cache_config.hpp"
#include "kvactor/config/json_helpers.hpp"
#include "kvactor/messages/error.hpp"
#include "config_test_support.hpp"

using nlohmann::json;
using namespace kvactor;
using namespace kvactor::test::config_tests;

namespace {

/// Writes `text` to a fresh file under /tmp and returns its path.
std::string temp_file(const std::string& text) {
  char path[] = "/tmp/kvactor_config_XXXXXX";
  int fd = mkstemp(path);
  BOOST_REQUIRE(fd >= 0);
  close(fd);
  std::ofstream{path} << text;
  return path;
}

} // namespace

BOOST_AUTO_TEST_SUITE(config_suite)

BOOST_AUTO_TEST_CASE(defaults_follow_the_design) {
  cache_config cfg;
  BOOST_TEST(cfg.block_size == 16u);
  BOOST_TEST(cfg.model.num_layers == 32u);
  BOOST_TEST(cfg.model.num_kv_heads == 8u);
  BOOST_TEST(cfg.model.head_dim == 128u);
  BOOST_TEST((cfg.model.dtype == dtype::fp16));
  BOOST_TEST(cfg.layout == "paged");
  BOOST_TEST(cfg.storage == "auto");
  BOOST_TEST(cfg.num_gpu_blocks == 0u);
  BOOST_TEST(cfg.gpu_memory_utilization == 0.9);
  BOOST_TEST(cfg.prefix_caching);
  BOOST_TEST(cfg.pressure.medium == 0.6);
  BOOST_TEST(cfg.pressure.high == 0.8);
  BOOST_TEST(cfg.pressure.critical == 0.95);
  BOOST_TEST(cfg.gc_interval_ms == 1000u);
  BOOST_TEST(cfg.gc_check_interval_ms == 60000u);
  BOOST_TEST(cfg.device_timeout_ms == 30000u);
  BOOST_REQUIRE(cfg.tenants.size() == 1u);
  BOOST_TEST(cfg.tenants[0].name == "default");
  BOOST_TEST(render(validate(cfg)) == "none");
}

BOOST_AUTO_TEST_CASE(empty_object_gives_the_struct_defaults) {
  auto cfg = parse_config(json::object());
  BOOST_REQUIRE(cfg);
  BOOST_TEST((*cfg == cache_config{}));
}

BOOST_AUTO_TEST_CASE(embedded_default_parses_to_a_small_host_config) {
  auto cfg = parse_config(base());
  BOOST_REQUIRE(cfg);
  BOOST_TEST(cfg->storage == "host");
  BOOST_TEST(cfg->num_gpu_blocks == 256u);
  BOOST_TEST(cfg->num_host_blocks == 64u);
  BOOST_TEST(cfg->model.num_layers == 4u);
  BOOST_TEST(cfg->model.num_kv_heads == 4u);
  BOOST_TEST(cfg->model.head_dim == 64u);
  BOOST_TEST((cfg->model.dtype == dtype::fp16));
  BOOST_REQUIRE(cfg->tenants.size() == 1u);
  BOOST_TEST(cfg->tenants[0].name == "default");
}

BOOST_AUTO_TEST_CASE(to_json_round_trips_every_field) {
  cache_config cfg;
  cfg.block_size = 32;
  cfg.model = {12, 2, 96, dtype::bf16};
  cfg.storage = "none";
  cfg.num_gpu_blocks = 1000;
  cfg.gpu_memory_utilization = 0.85;
  cfg.num_host_blocks = 77;
  cfg.prefix_caching = false;
  cfg.pressure = {0.5, 0.7, 0.9, 0.1};
  cfg.gc_interval_ms = 0;
  cfg.gc_check_interval_ms = 5000;
  cfg.tenants = {{"a", 500, 100, priority::high, "shared"},
                 {"b", 0, 0, priority::low, "shared"}};
  cfg.scheduler_threads = 3;
  cfg.device_index = 2;
  cfg.device_timeout_ms = 2500;
  auto direct = parse_config(to_json(cfg));
  BOOST_REQUIRE(direct);
  BOOST_TEST((*direct == cfg));
  auto via_text = parse_config(json::parse(to_json(cfg).dump()));
  BOOST_REQUIRE(via_text);
  BOOST_TEST((*via_text == cfg));
  BOOST_TEST(to_json(cfg).size() == 17u);
  cfg.tenants[1].prefix_namespace = "other";
  BOOST_TEST((*direct != cfg));
}

BOOST_AUTO_TEST_CASE(json_built_in_code_with_signed_ints_parses) {
  json j = base();
  j["block_size"] = int{8};
  j["device_index"] = int{1};
  auto cfg = parse_config(j);
  BOOST_REQUIRE(cfg);
  BOOST_TEST(cfg->block_size == 8u);
  BOOST_TEST(cfg->device_index == 1);
}

BOOST_AUTO_TEST_CASE(find_tenant_maps_empty_name_to_the_first_tenant) {
  cache_config cfg;
  cfg.tenants.resize(2);
  cfg.tenants[0].name = "a";
  cfg.tenants[1].name = "b";
  BOOST_REQUIRE(cfg.find_tenant(""));
  BOOST_TEST(cfg.find_tenant("")->name == "a");
  BOOST_REQUIRE(cfg.find_tenant("b"));
  BOOST_TEST(cfg.find_tenant("b")->name == "b");
  BOOST_TEST(!cfg.find_tenant("c"));
  cfg.tenants.clear();
  BOOST_TEST(!cfg.find_tenant(""));
}

BOOST_AUTO_TEST_CASE(load_config_reads_a_file) {
  auto path = temp_file(default_config_json());
  auto cfg = load_config(path);
  std::remove(path.c_str());
  BOOST_REQUIRE(cfg);
  BOOST_TEST((*cfg == *parse_config(base())));
}

BOOST_AUTO_TEST_CASE(load_config_of_a_missing_file_names_it) {
  auto cfg = load_config("/tmp/kvactor_no_such_config.json");
  BOOST_REQUIRE(!cfg);
  BOOST_TEST(has_code(cfg.error(), errc::invalid_config));
  auto msg = render(cfg.error());
  BOOST_TEST(msg.find("/tmp/kvactor_no_such_config.json: cannot open")
             != std::string::npos);
  BOOST_TEST_MESSAGE(msg);
}

BOOST_AUTO_TEST_CASE(load_config_of_malformed_json_gives_the_position) {
  auto path = temp_file("{\"block_size\": 16,\n \"layout\": }");
  auto cfg = load_config(path);
  std::remove(path.c_str());
  BOOST_REQUIRE(!cfg);
  BOOST_TEST(has_code(cfg.error(), errc::invalid_config));
  auto msg = render(cfg.error());
  // nlohmann counts bytes read, the offending one included: the 31st, "}".
  BOOST_TEST(msg.find(path + ": malformed JSON at byte 31: ")
             != std::string::npos);
  BOOST_TEST(msg.find("parse error") != std::string::npos);
  BOOST_TEST_MESSAGE(msg);
}

BOOST_AUTO_TEST_CASE(load_config_of_a_number_past_a_double_is_an_error) {
  auto path = temp_file("{\"block_size\": 16,\n \"gpu_memory_utilization\": 1e400}");
  auto cfg = load_config(path);
  std::remove(path.c_str());
  BOOST_REQUIRE(!cfg);
  BOOST_TEST(has_code(cfg.error(), errc::invalid_config));
  auto msg = render(cfg.error());
  BOOST_TEST(msg.find(path + ": malformed JSON: ") != std::string::npos, msg);
  BOOST_TEST(msg.find("1e400") != std::string::npos, msg);
}

BOOST_AUTO_TEST_CASE(load_config_prefixes_field_errors_with_the_path) {
  auto j = base();
  j["pressure"]["high"] = 2;
  auto path = temp_file(j.dump());
  auto cfg = load_config(path);
  std::remove(path.c_str());
  BOOST_REQUIRE(!cfg);
  BOOST_TEST(render(cfg.error())
             == "kvactor: invalid_config (" + path
                  + ": pressure.high: must be in (0, 1] (got 2))");
}

BOOST_AUTO_TEST_SUITE_END()
