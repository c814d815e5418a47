// Admission order "cached_prefix": the ordering decision on its own (most
// cached prompt tokens first, ties in arrival then queue order, the
// starving first), and the scenario keys that choose it, refused with
// "FILE:LINE: FIELD: what" when wrong.
#include "admission_order.hpp"
#include "sim_support.hpp"

#include <vector>

using namespace kvactor;
using namespace kvactor::sim;
using namespace kvactor::sim::test;

namespace {

using order = std::vector<std::size_t>;

/// The candidates of one queue: {cached tokens, steps waited} each.
std::vector<admission_candidate>
queue_of(std::initializer_list<std::pair<std::uint64_t, std::uint64_t>> xs) {
  std::vector<admission_candidate> out;
  for (auto& [cached, waited] : xs)
    out.push_back(admission_candidate{cached, waited});
  return out;
}

// Multi-line, so that each key has a line of its own.
const std::string base = R"({
  "cache": {
    "block_size": 4,
    "model": {"num_layers": 1, "num_kv_heads": 1, "head_dim": 8,
              "dtype": "fp16"},
    "storage": "none",
    "num_gpu_blocks": 64,
    "tenants": [{"name": "a"}]
  },
  "steps": 20,
  "admission_order": "cached_prefix",
  "probe_window": 8,
  "starvation_steps": 30,
  "workloads": {"a": {"rate": 0.5, "prompt_len": 4, "output_len": 2}}
}
)";

} // namespace

BOOST_AUTO_TEST_SUITE(admission_order_decision)

BOOST_AUTO_TEST_CASE(most_cached_tokens_go_first) {
  auto q = queue_of({{0, 9}, {64, 8}, {16, 7}, {128, 6}});
  BOOST_TEST(cached_prefix_order(q, 100) == (order{3, 1, 2, 0}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(ties_go_to_the_longer_wait_then_to_queue_order) {
  // Equal counts: the one that waited longer first, whatever its place
  // (a queue reordered last step is not in arrival order); equal waits
  // too: queue order.
  auto q = queue_of({{32, 3}, {32, 5}, {0, 9}, {32, 5}, {32, 4}});
  BOOST_TEST(cached_prefix_order(q, 100) == (order{1, 3, 4, 0, 2}),
             boost::test_tools::per_element());
  auto none = queue_of({{0, 2}, {0, 2}, {0, 2}});
  BOOST_TEST(cached_prefix_order(none, 100) == (order{0, 1, 2}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_request_that_waited_long_enough_goes_first) {
  // Waits of 10 and 12 reach the bound of 10: first, the longest wait
  // first, their cached counts ignored; the rest by cached tokens.
  auto q = queue_of({{80, 1}, {0, 10}, {40, 9}, {8, 12}, {96, 0}});
  BOOST_TEST(cached_prefix_order(q, 10) == (order{3, 1, 4, 0, 2}),
             boost::test_tools::per_element());
  // With a bound above every wait the cache alone decides.
  BOOST_TEST(cached_prefix_order(q, 13) == (order{4, 0, 2, 3, 1}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(an_empty_or_single_queue_is_its_own_order) {
  BOOST_TEST(cached_prefix_order({}, 1).empty());
  BOOST_TEST(cached_prefix_order(queue_of({{5, 0}}), 1) == (order{0}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(the_orders_have_names) {
  BOOST_TEST(to_string(admission_order::arrival) == std::string{"arrival"});
  BOOST_TEST(to_string(admission_order::cached_prefix)
             == std::string{"cached_prefix"});
  BOOST_TEST((admission_order_from("cached_prefix")
              == admission_order::cached_prefix));
  BOOST_TEST((admission_order_from("arrival") == admission_order::arrival));
  BOOST_TEST(!admission_order_from("Arrival"));
  BOOST_TEST(!admission_order_from(""));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(admission_order_keys)

BOOST_AUTO_TEST_CASE(arrival_order_is_the_default) {
  auto s = parse_json(small_scenario());
  BOOST_TEST((s.admission == admission_order::arrival));
  BOOST_TEST(s.probe_window == 64u);
  BOOST_TEST(s.starvation_steps == 200u);
  auto d = parse_scenario(default_scenario_json(), "default.json");
  BOOST_REQUIRE(d);
  BOOST_TEST((d->admission == admission_order::arrival));
}

BOOST_AUTO_TEST_CASE(the_keys_are_read) {
  auto s = parse_ok(base);
  BOOST_TEST((s.admission == admission_order::cached_prefix));
  BOOST_TEST(s.probe_window == 8u);
  BOOST_TEST(s.starvation_steps == 30u);
  auto a = parse_ok(replace_once(base, "\"cached_prefix\"", "\"arrival\""));
  BOOST_TEST((a.admission == admission_order::arrival));
}

BOOST_AUTO_TEST_CASE(an_unknown_order_is_refused_on_its_line) {
  auto text = replace_once(base, "\"cached_prefix\"", "\"longest_prefix\"");
  check_error(text, "\"admission_order\"", "admission_order",
              "expected \"arrival\" or \"cached_prefix\" (got \"longest_prefix\")");
  check_error(replace_once(base, "\"cached_prefix\"", "3"),
              "\"admission_order\"", "admission_order", "string");
}

BOOST_AUTO_TEST_CASE(the_window_and_the_starvation_bound_are_checked) {
  check_error(replace_once(base, "\"probe_window\": 8", "\"probe_window\": 0"),
              "\"probe_window\"", "probe_window", "must be >= 1");
  check_error(replace_once(base, "\"probe_window\": 8", "\"probe_window\": 4097"),
              "\"probe_window\"", "probe_window", "must be at most 4096");
  check_error(replace_once(base, "\"probe_window\": 8", "\"probe_window\": 1.5"),
              "\"probe_window\"", "probe_window", "non-negative integer");
  check_error(replace_once(base, "\"starvation_steps\": 30",
                           "\"starvation_steps\": 0"),
              "\"starvation_steps\"", "starvation_steps", "must be >= 1");
  check_error(replace_once(base, "\"starvation_steps\": 30",
                           "\"starvation_steps\": -2"),
              "\"starvation_steps\"", "starvation_steps", "non-negative integer");
}

BOOST_AUTO_TEST_SUITE_END()
