// Scenario keys of speculative decoding, draft_tokens and draft_acceptance:
// off by default, read when given, and every bad value refused with
// "FILE:LINE: FIELD: what" on the key's own line.
#include "sim_support.hpp"

using namespace kvactor;
using namespace kvactor::sim;
using namespace kvactor::sim::test;

namespace {

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
  "draft_tokens": 4,
  "draft_acceptance": 0.7,
  "workloads": {
    "a": {"rate": 0.5, "prompt_len": [4, 8], "output_len": [2, 6]}
  }
}
)";

/// `base` with the draft_tokens line's value replaced by `value`.
std::string with_k(const std::string& value) {
  return replace_once(base, "\"draft_tokens\": 4,",
                      "\"draft_tokens\": " + value + ",");
}

/// `base` with the draft_acceptance line's value replaced by `value`.
std::string with_p(const std::string& value) {
  return replace_once(base, "\"draft_acceptance\": 0.7,",
                      "\"draft_acceptance\": " + value + ",");
}

} // namespace

BOOST_AUTO_TEST_SUITE(draft_keys)

BOOST_AUTO_TEST_CASE(speculative_decoding_is_off_unless_asked_for) {
  auto s = parse_json(small_scenario());
  BOOST_TEST(s.draft_tokens == 0u);
  BOOST_TEST(s.draft_acceptance == 0.7);
  auto d = parse_scenario(default_scenario_json(), "default.json");
  BOOST_REQUIRE(d);
  BOOST_TEST(d->draft_tokens == 0u);
}

BOOST_AUTO_TEST_CASE(the_keys_are_read) {
  auto s = parse_ok(base);
  BOOST_TEST(s.draft_tokens == 4u);
  BOOST_TEST(s.draft_acceptance == 0.7);
  // The bounds themselves are values.
  BOOST_TEST(parse_ok(with_k("65535")).draft_tokens == max_draft_tokens);
  BOOST_TEST(parse_ok(with_p("0")).draft_acceptance == 0.0);
  BOOST_TEST(parse_ok(with_p("1")).draft_acceptance == 1.0);
  BOOST_TEST(parse_ok(with_p("1.0")).draft_acceptance == 1.0);
  // An acceptance without drafts is harmless: nothing is drafted.
  auto j = small_scenario();
  j["draft_acceptance"] = 0.25;
  auto t = parse_json(j);
  BOOST_TEST(t.draft_tokens == 0u);
  BOOST_TEST(t.draft_acceptance == 0.25);
}

BOOST_AUTO_TEST_CASE(a_bad_draft_count_names_its_line_and_field) {
  auto at = std::string{"\"draft_tokens\""};
  check_error(with_k("-1"), at, "draft_tokens",
              "expected a non-negative integer (got -1)");
  check_error(with_k("2.5"), at, "draft_tokens", "expected a non-negative integer");
  check_error(with_k("\"4\""), at, "draft_tokens", "expected a non-negative integer");
  check_error(with_k("true"), at, "draft_tokens", "expected a non-negative integer");
  check_error(with_k("null"), at, "draft_tokens", "expected a non-negative integer");
  // Past what one extend may carry (kvactor::max_draft_tokens).
  check_error(with_k("65536"), at, "draft_tokens", "must be at most 65535");
  check_error(with_k("18446744073709551616"), at, "draft_tokens",
              "expected a non-negative integer");
}

BOOST_AUTO_TEST_CASE(a_bad_acceptance_names_its_line_and_field) {
  auto at = std::string{"\"draft_acceptance\""};
  check_error(with_p("-0.1"), at, "draft_acceptance", "must be >= 0 (got -0.1)");
  check_error(with_p("1.5"), at, "draft_acceptance", "must be <= 1 (got 1.5)");
  check_error(with_p("\"0.7\""), at, "draft_acceptance", "expected a number");
  check_error(with_p("[0.7]"), at, "draft_acceptance", "expected a number");
  check_error(with_p("null"), at, "draft_acceptance", "expected a number");
}

BOOST_AUTO_TEST_CASE(a_draft_key_given_twice_or_misspelt_is_refused) {
  // JSON would keep the last: named where the first is.
  check_error(replace_once(base, "\"draft_acceptance\": 0.7,",
                           "\"draft_acceptance\": 0.7, \"draft_acceptance\": 1,"),
              "\"draft_acceptance\"", "draft_acceptance", "given twice");
  auto typo = replace_once(base, "\"draft_tokens\": 4,", "\"draft_token\": 4,");
  check_error(typo, "\"draft_token\"", "draft_token", "unknown key 'draft_token'");
}

BOOST_AUTO_TEST_SUITE_END()
