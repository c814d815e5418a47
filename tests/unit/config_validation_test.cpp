// cache_config's validation: one case per class of bad field, each checking
// the field is named, whether parsed from JSON or built in code.
#include <string>

#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "kvactor/config/cache_config.hpp"
#include "kvactor/config/json_helpers.hpp"
#include "kvactor/device/storage.hpp"
#include "kvactor/messages/error.hpp"
#include "config_test_support.hpp"

using nlohmann::json;
using namespace kvactor;
using namespace kvactor::test::config_tests;

BOOST_AUTO_TEST_SUITE(config_suite)

BOOST_AUTO_TEST_CASE(unknown_key_is_reported_by_path) {
  auto j = base();
  j["foo"] = 1;
  BOOST_TEST(fails_naming(j, "foo", "unknown key 'foo'"));
  j = base();
  j["model"]["num_layer"] = 4;
  BOOST_TEST(fails_naming(j, "model.num_layer", "unknown key 'num_layer'"));
  j = base();
  j["pressure"]["low"] = 0.1;
  BOOST_TEST(fails_naming(j, "pressure.low", "unknown key 'low'"));
  j = base();
  j["tenants"] = json::array({{{"name", "a"}}, {{"name", "b"}, {"quota", 1}}});
  BOOST_TEST(fails_naming(j, "tenants[1].quota", "unknown key 'quota'"));
}

BOOST_AUTO_TEST_CASE(an_unknown_key_that_is_not_a_plain_name_is_quoted) {
  // As parse_json names a key given twice (join_path): the field read ":"
  // for an empty key, and "model.a.b" - a path two levels down - for the
  // key "a.b" of model.
  auto j = base();
  j[""] = 1;
  BOOST_TEST(fails_naming(j, R"([""])", "unknown key ''"));
  j = base();
  j["model"]["a.b"] = 1;
  BOOST_TEST(fails_naming(j, R"(model["a.b"])", "unknown key 'a.b'"));
  j = base();
  j["tenants"][0]["x]"] = 1;
  BOOST_TEST(fails_naming(j, R"(tenants[0]["x]"])", "unknown key 'x]'"));
  j = base(); // a colon: "FIELD: what" must split one way
  j["model"]["a: b"] = 1;
  BOOST_TEST(fails_naming(j, R"(model["a: b"])", "unknown key 'a: b'"));
}

BOOST_AUTO_TEST_CASE(an_error_splits_at_the_end_of_its_field) {
  using kvactor::detail::split_field;
  using parts = std::pair<std::string, std::string>;
  BOOST_TEST((split_field("model.head_dim: must be > 0")
              == parts{"model.head_dim", "must be > 0"}));
  BOOST_TEST((split_field(R"(model["a: b"]: unknown key 'a: b')")
              == parts{R"(model["a: b"])", "unknown key 'a: b'"}));
  BOOST_TEST((split_field(R"(a["x\": y"]: what: more)")
              == parts{R"(a["x\": y"])", "what: more"}));
  BOOST_TEST((split_field("no field here") == parts{"", "no field here"}));
  BOOST_TEST((split_field(R"(a["open: ended)") == parts{"", R"(a["open: ended)"}));
}

BOOST_AUTO_TEST_CASE(wrong_json_type_is_reported_by_path) {
  auto with = [](const char* key, json value) {
    auto j = base();
    j[key] = std::move(value);
    return j;
  };
  BOOST_TEST(fails_naming(with("block_size", "16"), "block_size",
                          "expected a positive integer"));
  BOOST_TEST(fails_naming(with("layout", 1), "layout", "expected a string"));
  BOOST_TEST(fails_naming(with("prefix_caching", "yes"), "prefix_caching",
                          "expected true or false"));
  BOOST_TEST(fails_naming(with("gpu_memory_utilization", "0.5"),
                          "gpu_memory_utilization", "expected a number"));
  BOOST_TEST(fails_naming(with("model", json::array()), "model",
                          "expected an object"));
  BOOST_TEST(fails_naming(with("pressure", 0.5), "pressure",
                          "expected an object"));
  BOOST_TEST(fails_naming(with("tenants", json::object()), "tenants",
                          "expected an array"));
  BOOST_TEST(fails_naming(with("num_gpu_blocks", nullptr), "num_gpu_blocks",
                          "expected a non-negative integer"));
  auto j = base();
  j["model"]["head_dim"] = json::array({64});
  BOOST_TEST(fails_naming(j, "model.head_dim", "expected a positive integer"));
  j = base();
  j["tenants"] = json::array({{{"name", "a"}}, 5});
  BOOST_TEST(fails_naming(j, "tenants[1]", "expected an object"));
  j = base();
  j["tenants"][0]["name"] = 3;
  BOOST_TEST(fails_naming(j, "tenants[0].name", "expected a string"));
  BOOST_TEST(fails_naming(json::array(), "config", "expected a JSON object"));
}

BOOST_AUTO_TEST_CASE(negative_or_fractional_counts_are_errors_not_wrapped) {
  auto j = base();
  j["num_gpu_blocks"] = -1;
  BOOST_TEST(fails_naming(j, "num_gpu_blocks", "non-negative integer"));
  j = base();
  j["block_size"] = 1.5;
  BOOST_TEST(fails_naming(j, "block_size", "positive integer"));
  j = base();
  j["model"]["num_layers"] = -4;
  BOOST_TEST(fails_naming(j, "model.num_layers", "positive integer"));
  j = base();
  j["tenants"][0]["max_blocks"] = 2.0;
  BOOST_TEST(fails_naming(j, "tenants[0].max_blocks", "integer"));
  j = base();
  j["device_index"] = -1;
  BOOST_TEST(fails_naming(j, "device_index", "non-negative integer"));
  j = base();
  j["scheduler_threads"] = std::uint64_t{1} << 40; // would wrap in uint32
  BOOST_TEST(fails_naming(j, "scheduler_threads",
                          "at most 4294967295 (got 1099511627776)"));
  j = base();
  j["block_size"] = std::uint64_t{5} << 30; // not clamped to 2^32 - 1 first
  BOOST_TEST(fails_naming(j, "block_size", "(got 5368709120)"));
  j = base();
  j["gpu_memory_utilization"] = 1; // an integer is a fine fraction
  BOOST_TEST(parse_error(j) == "ok");
}

BOOST_AUTO_TEST_CASE(block_size_must_be_a_power_of_two_up_to_1024) {
  for (int bad : {0, 3, 24, 2048}) {
    auto j = base();
    j["block_size"] = bad;
    BOOST_TEST(fails_naming(j, "block_size", "power of two in [1, 1024] (got "
                                               + std::to_string(bad) + ")"));
  }
  for (int good : {1, 2, 64, 1024}) {
    auto j = base();
    j["block_size"] = good;
    BOOST_TEST(parse_error(j) == "ok");
  }
}

BOOST_AUTO_TEST_CASE(model_dimensions_out_of_range_name_the_field) {
  for (auto key : {"num_layers", "num_kv_heads", "head_dim"}) {
    auto j = base();
    j["model"][key] = 0;
    BOOST_TEST(fails_naming(j, std::string{"model."} + key, "[1, 1024]"));
    j["model"][key] = 1025;
    BOOST_TEST(fails_naming(j, std::string{"model."} + key, "[1, 1024] (got 1025)"));
  }
}

BOOST_AUTO_TEST_CASE(unknown_enum_names_are_rejected) {
  auto j = base();
  j["model"]["dtype"] = "fp64";
  BOOST_TEST(fails_naming(j, "model.dtype", "must be one of fp32"));
  j = base();
  j["layout"] = "ring";
  BOOST_TEST(fails_naming(j, "layout", "'paged' or 'contiguous'"));
  j = base();
  j["storage"] = "disk";
  BOOST_TEST(fails_naming(j, "storage", "'auto', 'cuda', 'host' or 'none'"));
  j = base();
  j["tenants"][0]["priority"] = "urgent";
  BOOST_TEST(fails_naming(j, "tenants[0].priority", "must be one of low"));
  for (auto name : {"fp32", "fp16", "bf16", "fp8_e4m3", "int8"}) {
    j = base();
    j["model"]["dtype"] = name;
    BOOST_TEST(parse_error(j) == "ok");
  }
}

BOOST_AUTO_TEST_CASE(num_gpu_blocks_zero_needs_storage_cuda_or_auto) {
  for (auto storage : {"host", "none"}) {
    auto j = base();
    j["storage"] = storage;
    j["num_gpu_blocks"] = 0;
    BOOST_TEST(fails_naming(j, "num_gpu_blocks", "explicit count"));
  }
  for (auto storage : {"cuda", "auto"}) {
    auto j = base();
    j["storage"] = storage;
    j["num_gpu_blocks"] = 0;
    BOOST_TEST(parse_error(j) == "ok");
  }
  auto j = base();
  j["num_gpu_blocks"] = std::uint64_t{1} << 31;
  BOOST_TEST(fails_naming(j, "num_gpu_blocks", "at most 2147483647"));
  j = base();
  j["num_host_blocks"] = std::uint64_t{1} << 31;
  BOOST_TEST(fails_naming(j, "num_host_blocks", "at most 2147483647"));
}

BOOST_AUTO_TEST_CASE(fractions_must_lie_in_zero_one) {
  for (double bad : {0.0, -0.1, 1.01}) {
    auto j = base();
    j["gpu_memory_utilization"] = bad;
    BOOST_TEST(fails_naming(j, "gpu_memory_utilization", "must be in (0, 1]"));
    j = base();
    j["pressure"]["high"] = bad;
    BOOST_TEST(fails_naming(j, "pressure.high", "must be in (0, 1]"));
  }
}

BOOST_AUTO_TEST_CASE(pressure_thresholds_must_increase_strictly) {
  auto j = base();
  j["pressure"] = {{"medium", 0.8}, {"high", 0.8}, {"critical", 0.9}};
  BOOST_TEST(fails_naming(j, "pressure.high", "greater than pressure.medium"));
  j["pressure"] = {{"medium", 0.5}, {"high", 0.9}, {"critical", 0.7}};
  BOOST_TEST(
    fails_naming(j, "pressure.critical", "greater than pressure.high"));
  j["pressure"] = {{"medium", 0.5}, {"high", 0.9}, {"critical", 1}};
  BOOST_TEST(parse_error(j) == "ok");
}

BOOST_AUTO_TEST_CASE(hysteresis_must_be_below_half_and_below_medium) {
  auto j = base();
  j["pressure"]["hysteresis"] = 0.5;
  BOOST_TEST(fails_naming(j, "pressure.hysteresis", "[0, 0.5)"));
  j["pressure"]["hysteresis"] = -0.01;
  BOOST_TEST(fails_naming(j, "pressure.hysteresis", "[0, 0.5)"));
  j["pressure"] = {{"medium", 0.2}, {"hysteresis", 0.3}};
  BOOST_TEST(
    fails_naming(j, "pressure.hysteresis", "smaller than pressure.medium"));
  j["pressure"] = {{"hysteresis", 0}};
  BOOST_TEST(parse_error(j) == "ok");
}

BOOST_AUTO_TEST_CASE(pressure_marks_must_be_whole_blocks) {
  // Marks are whole blocks: one of 0 would hold the pool at medium while
  // empty, or never let it back to low.
  auto j = base();
  j["num_gpu_blocks"] = 1000;
  j["pressure"] = {{"medium", 1e-12}, {"high", 0.5}, {"hysteresis", 0}};
  BOOST_TEST(fails_naming(j, "pressure.medium", "1e-12 of 1000 blocks"));
  BOOST_TEST(fails_naming(j, "pressure.medium", "at least 0.001, one block"));
  j["pressure"] = {{"medium", 0.001}, {"high", 0.5}, {"hysteresis", 0}};
  BOOST_TEST(parse_error(j) == "ok");
  j["pressure"] = {{"medium", 0.1}, {"hysteresis", 0.1 - 1e-13}};
  BOOST_TEST(fails_naming(j, "pressure.hysteresis", "never go back to low"));
  j["pressure"] = {{"medium", 0.1}, {"hysteresis", 0.099}};
  BOOST_TEST(parse_error(j) == "ok");
}

BOOST_AUTO_TEST_CASE(preempt_grace_is_at_most_a_minute_and_a_count) {
  auto j = base();
  j["pressure"]["preempt_grace_ms"] = 60001;
  BOOST_TEST(fails_naming(j, "pressure.preempt_grace_ms", "at most 60000"));
  j["pressure"]["preempt_grace_ms"] = -1;
  BOOST_TEST(fails_naming(j, "pressure.preempt_grace_ms"));
  j["pressure"]["preempt_grace_ms"] = 60000;
  BOOST_TEST(parse_error(j) == "ok");
  j["pressure"]["preempt_grace_ms"] = 0;
  BOOST_TEST(parse_error(j) == "ok");
}

BOOST_AUTO_TEST_CASE(gc_interval_is_at_most_a_day) {
  auto j = base();
  j["gc_interval_ms"] = 86400001;
  BOOST_TEST(fails_naming(j, "gc_interval_ms", "one day"));
  BOOST_TEST(fails_naming(j, "gc_interval_ms", "(got 86400001)"));
  j["gc_interval_ms"] = 0;
  BOOST_TEST(parse_error(j) == "ok");
  j["gc_check_interval_ms"] = 86400001;
  BOOST_TEST(fails_naming(j, "gc_check_interval_ms", "one day"));
  j["gc_check_interval_ms"] = 0;
  BOOST_TEST(parse_error(j) == "ok");
  j["gc_check_interval_ms"] = -1;
  BOOST_TEST(fails_naming(j, "gc_check_interval_ms", ""));
}

BOOST_AUTO_TEST_CASE(device_timeout_is_at_most_a_day) {
  auto j = base();
  j["device_timeout_ms"] = 86400001;
  BOOST_TEST(fails_naming(j, "device_timeout_ms", "one day"));
  j["device_timeout_ms"] = -1;
  BOOST_TEST(fails_naming(j, "device_timeout_ms"));
  j["device_timeout_ms"] = 0; // waits for ever
  BOOST_TEST(parse_error(j) == "ok");
}

BOOST_AUTO_TEST_CASE(tenants_need_unique_nonempty_names) {
  auto j = base();
  j["tenants"] = json::array();
  BOOST_TEST(fails_naming(j, "tenants", "at least one tenant"));
  j["tenants"] = json::array({{{"name", "a"}}, {{"name", ""}}});
  BOOST_TEST(fails_naming(j, "tenants[1].name", "must not be empty"));
  j["tenants"] =
    json::array({{{"name", "a"}}, {{"name", "b"}}, {{"name", "a"}}});
  BOOST_TEST(fails_naming(j, "tenants[2].name", "duplicate tenant 'a'"));
}

BOOST_AUTO_TEST_CASE(tenant_quota_must_cover_its_reservation) {
  auto j = base();
  j["tenants"] = json::array(
    {{{"name", "a"}},
     {{"name", "b"}, {"max_blocks", 10}, {"reserved_blocks", 20}}});
  BOOST_TEST(
    fails_naming(j, "tenants[1].max_blocks", "at least reserved_blocks"));
  j["tenants"][1]["max_blocks"] = 0; // no quota: fine
  BOOST_TEST(parse_error(j) == "ok");
}

BOOST_AUTO_TEST_CASE(tenant_reservations_must_fit_the_pool) {
  auto j = base(); // 256 blocks
  j["tenants"] = json::array({{{"name", "a"}, {"reserved_blocks", 200}},
                              {{"name", "b"}, {"reserved_blocks", 57}}});
  BOOST_TEST(fails_naming(j, "tenants[1].reserved_blocks", "257"));
  j["tenants"][1]["reserved_blocks"] = 56;
  BOOST_TEST(parse_error(j) == "ok");
  j["storage"] = "cuda"; // pool size unknown until the device answers
  j["num_gpu_blocks"] = 0;
  j["tenants"][1]["reserved_blocks"] = 100000;
  BOOST_TEST(parse_error(j) == "ok");
}

BOOST_AUTO_TEST_CASE(a_watermark_may_not_hold_back_the_whole_pool) {
  auto j = base(); // 256 blocks: 0.996 holds back ceil(254.98) = 255
  j["admission"]["watermark"] = 0.997;
  BOOST_TEST(fails_naming(j, "admission.watermark", "all 256 blocks"));
  j["admission"]["watermark"] = 0.996;
  BOOST_TEST(parse_error(j) == "ok");
}

BOOST_AUTO_TEST_CASE(a_critical_mark_of_one_block_is_refused_where_it_preempts) {
  // One block at critical: a request without a reservation could hold none
  // and stay live - every allocation exceeds_capacity.
  auto j = base();
  j["num_gpu_blocks"] = 1;
  BOOST_TEST(fails_naming(j, "pressure.critical",
                          "a mark of 1 block: one request of tenant"));
  j["num_gpu_blocks"] = 2;
  BOOST_TEST(parse_error(j) == "ok");
  j["num_gpu_blocks"] = 1;
  j["pressure"]["preempt_at_critical"] = false;
  BOOST_TEST(parse_error(j) == "ok");
}

BOOST_AUTO_TEST_CASE(a_watermark_may_not_leave_an_unreserved_tenant_no_block) {
  // 256 blocks, 0.5 holds back 128, a's reservation 128 more: b, without
  // one, would find every admission out_of_blocks for good.
  auto j = base();
  j["admission"]["watermark"] = 0.5;
  j["tenants"] = json::array({{{"name", "a"}, {"reserved_blocks", 128}},
                              {{"name", "b"}}});
  BOOST_TEST(fails_naming(j, "admission.watermark",
                          "reserved_blocks 128: of the 256 blocks, none is "
                          "left for tenant 'b'"));
  j["tenants"][0]["reserved_blocks"] = 127; // b may take one
  BOOST_TEST(parse_error(j) == "ok");
  // Every tenant reserved: each admits from its own reservation.
  j["tenants"] = json::array({{{"name", "a"}, {"reserved_blocks", 128}},
                              {{"name", "b"}, {"reserved_blocks", 128}}});
  BOOST_TEST(parse_error(j) == "ok");
  // Without a watermark, reservations that take the whole pool are the
  // field at fault, not the watermark of 0.
  j["admission"]["watermark"] = 0.0;
  j["tenants"] = json::array({{{"name", "a"}, {"reserved_blocks", 200}},
                              {{"name", "b"}, {"reserved_blocks", 56}},
                              {{"name", "c"}}});
  BOOST_TEST(fails_naming(j, "tenants[1].reserved_blocks",
                          "reservations add up to 256: of the 256 blocks, "
                          "none is left for tenant 'c'"));
  j["tenants"][1]["reserved_blocks"] = 55;
  BOOST_TEST(parse_error(j) == "ok");
}

BOOST_AUTO_TEST_CASE(pools_past_the_storages_byte_range_are_refused_by_name) {
  // The largest model: 2 x 1024 layers x 1024 tokens x 1024 heads x 1024
  // dims x 4 bytes = 2^43 bytes per block, so 2^20 blocks are 2^63 bytes,
  // past the storages' int64 offsets. validate() took that config, and
  // start refused it with "storage layout: layout too large for 64-bit
  // offsets", naming no config field.
  auto j = base();
  j["storage"] = "none";
  j["block_size"] = 1024;
  j["model"] = {{"num_layers", 1024}, {"num_kv_heads", 1024},
                {"head_dim", 1024}, {"dtype", "fp32"}};
  j["num_host_blocks"] = 0;
  j["max_pinned_blocks"] = 0;
  auto storage_takes = [](const json& j) {
    storage_options opts;
    opts.kind = "none";
    opts.layout.num_layers = j["model"]["num_layers"];
    opts.layout.num_heads = j["model"]["num_kv_heads"];
    opts.layout.head_dim = j["model"]["head_dim"];
    opts.layout.dtype = dtype::fp32;
    opts.layout.block_size = j["block_size"];
    opts.layout.num_blocks = j["num_gpu_blocks"];
    opts.layout.num_host_blocks = j["num_host_blocks"];
    return static_cast<bool>(make_storage(opts));
  };
  j["num_gpu_blocks"] = std::uint64_t{1} << 20;
  BOOST_TEST(fails_naming(j, "num_gpu_blocks", "at most 1048575"));
  BOOST_TEST(!storage_takes(j));
  j["num_gpu_blocks"] = (std::uint64_t{1} << 20) - 1;
  BOOST_TEST(parse_error(j) == "ok");
  BOOST_TEST(storage_takes(j)); // what validate() takes, start takes
  j["num_host_blocks"] = std::uint64_t{1} << 20;
  BOOST_TEST(fails_naming(j, "num_host_blocks", "at most 1048575"));
  BOOST_TEST(!storage_takes(j));
  j["num_host_blocks"] = (std::uint64_t{1} << 20) - 1;
  BOOST_TEST(parse_error(j) == "ok");
  BOOST_TEST(storage_takes(j));
}

BOOST_AUTO_TEST_CASE(tenants_fit_a_16_bit_index) {
  cache_config cfg;
  cfg.tenants.resize(65536);
  for (std::size_t i = 0; i < cfg.tenants.size(); ++i)
    cfg.tenants[i].name = "t" + std::to_string(i);
  BOOST_TEST(render(validate(cfg)).find("tenants: must be at most 65535")
             != std::string::npos);
  cfg.tenants.pop_back();
  BOOST_TEST(!validate(cfg));
}

BOOST_AUTO_TEST_CASE(too_many_tenants_are_refused_before_any_is_read) {
  // An array longer than validate() allows is refused by its length, not
  // first turned into a tenant per element (20 million elements in a file
  // took over a gigabyte) and then refused by its first one.
  auto j = base();
  j["tenants"] = json::array();
  for (int i = 0; i < 65536; ++i)
    j["tenants"].push_back(0);
  BOOST_TEST(fails_naming(j, "tenants", "must be at most 65535 (got 65536)"));
}

BOOST_AUTO_TEST_CASE(scheduler_threads_are_capped) {
  auto j = base();
  j["scheduler_threads"] = 257;
  BOOST_TEST(fails_naming(j, "scheduler_threads", "at most 256"));
  j["scheduler_threads"] = 256;
  BOOST_TEST(parse_error(j) == "ok");
}

BOOST_AUTO_TEST_CASE(contiguous_layout_rejects_prefix_caching) {
  auto j = base();
  j["layout"] = "contiguous";
  BOOST_TEST(fails_naming(j, "prefix_caching", "requires layout paged"));
  j["prefix_caching"] = false;
  BOOST_TEST(parse_error(j) == "ok");
  // Not mentioned: off for the contiguous layout, on for the paged one.
  j.erase("prefix_caching");
  auto cfg = parse_config(j);
  BOOST_REQUIRE(cfg);
  BOOST_TEST(!cfg->prefix_caching);
  j["layout"] = "paged";
  BOOST_TEST(parse_config(j)->prefix_caching);
}

BOOST_AUTO_TEST_CASE(validate_checks_configs_built_in_code) {
  cache_config cfg;
  cfg.device_index = -1;
  BOOST_TEST(render(validate(cfg)).find("device_index: must be >= 0 (got -1)")
             != std::string::npos);
  cfg = cache_config{};
  cfg.pressure.high = 0.5;
  BOOST_TEST(render(validate(cfg))
             == "kvactor: invalid_config (pressure.high: must be greater than "
                "pressure.medium (0.6) (got 0.5))");
  cfg = cache_config{};
  cfg.model.dtype = static_cast<dtype>(42);
  BOOST_TEST(render(validate(cfg)).find("model.dtype") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
