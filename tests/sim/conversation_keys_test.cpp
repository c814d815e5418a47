// The scenario key "conversation" (multi-turn sessions): off by default,
// read when given, every bad value refused with "FILE:LINE: FIELD: what" on
// the key's own line, and a workload whose longest session's last turn
// could never be admitted refused where the workload starts.
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
    "num_gpu_blocks": 256,
    "tenants": [{"name": "chat", "max_blocks": 200}, {"name": "b"}]
  },
  "steps": 20,
  "workloads": {
    "chat": {
      "rate": 0.5,
      "prompt_len": [4, 8],
      "output_len": [2, 6],
      "conversation": {
        "turns": [1, 4],
        "user_len": [2, 8],
        "think_steps": [0, 5]
      }
    },
    "b": {"rate": 0.2, "prompt_len": 4, "output_len": 2}
  }
}
)";

/// `base` with the line of `key` in the conversation object given `value`.
std::string with(const std::string& key, const std::string& value) {
  auto lines = std::map<std::string, std::string>{
    {"turns", "\"turns\": [1, 4],"},
    {"user_len", "\"user_len\": [2, 8],"},
    {"think_steps", "\"think_steps\": [0, 5]"}};
  auto& line = lines.at(key);
  auto comma = line.back() == ',' ? "," : "";
  return replace_once(base, line, "\"" + key + "\": " + value + comma);
}

/// `base` without the conversation key `key` (the rest kept valid JSON).
std::string without(const std::string& key) {
  if (key == "think_steps")
    return replace_once(replace_once(base, "\"user_len\": [2, 8],",
                                     "\"user_len\": [2, 8]"),
                        "\"think_steps\": [0, 5]", "");
  return replace_once(base, "\"" + key + "\": "
                              + (key == "turns" ? "[1, 4]," : "[2, 8],"),
                      "");
}

const std::string conv_path = "workloads.chat.conversation";

} // namespace

BOOST_AUTO_TEST_SUITE(conversation_keys)

BOOST_AUTO_TEST_CASE(conversations_are_off_unless_asked_for) {
  auto s = parse_json(small_scenario());
  for (auto& w : s.workloads)
    BOOST_TEST(!w.conversation.enabled(), w.tenant);
  auto d = parse_scenario(default_scenario_json(), "default.json");
  BOOST_REQUIRE(d);
  for (auto& w : d->workloads)
    BOOST_TEST(!w.conversation.enabled(), w.tenant);
}

BOOST_AUTO_TEST_CASE(the_keys_are_read) {
  auto s = parse_ok(base);
  BOOST_REQUIRE_EQUAL(s.workloads.size(), 2u);
  auto& c = s.workloads[0].conversation;
  BOOST_TEST(c.enabled());
  BOOST_TEST(c.turns.min == 1u);
  BOOST_TEST(c.turns.max == 4u);
  BOOST_TEST(c.user_len.min == 2u);
  BOOST_TEST(c.user_len.max == 8u);
  BOOST_TEST(c.think_steps.min == 0u);
  BOOST_TEST(c.think_steps.max == 5u);
  BOOST_TEST(!s.workloads[1].conversation.enabled());
  // One number for both ends; think_steps optional (0: the next step).
  auto t = parse_ok(with("turns", "3"));
  BOOST_TEST(t.workloads[0].conversation.turns.min == 3u);
  BOOST_TEST(t.workloads[0].conversation.turns.max == 3u);
  auto u = parse_ok(without("think_steps"));
  BOOST_TEST(u.workloads[0].conversation.think_steps.max == 0u);
  // The bound on turns is a value.
  auto j = nlohmann::json::parse(base);
  j["workloads"]["chat"]["conversation"]["turns"] = {1, 65536};
  j["workloads"]["chat"]["output_len"] = 1;
  j["workloads"]["chat"]["conversation"]["user_len"] = 1;
  j["cache"]["num_gpu_blocks"] = 40000;
  j["cache"]["tenants"][0].erase("max_blocks");
  // Sessions of 131079 tokens: 65536 of them waiting would pass 2^32.
  j["max_waiting"] = 1024;
  BOOST_TEST(parse_json(j).workloads[0].conversation.turns.max == 65536u);
}

BOOST_AUTO_TEST_CASE(the_longest_request_is_a_sessions_last_turn) {
  auto s = parse_ok(base);
  // 8 + 4 x 6 + 3 x 8: the first prompt, four outputs, three user turns.
  BOOST_TEST(s.workloads[0].max_sequence_tokens() == 56u);
  BOOST_TEST(s.workloads[1].max_sequence_tokens() == 6u);
}

BOOST_AUTO_TEST_CASE(bad_turns_name_their_line_and_field) {
  auto at = std::string{"\"turns\""};
  auto field = conv_path + ".turns";
  check_error(with("turns", "0"), at, field, "min must be >= 1 (got 0)");
  check_error(with("turns", "[0, 3]"), at, field, "min must be >= 1 (got 0)");
  check_error(with("turns", "[3, 2]"), at, field, "min 3 > max 2");
  check_error(with("turns", "-1"), at, field, "expected [min, max]");
  check_error(with("turns", "\"4\""), at, field, "expected [min, max]");
  check_error(with("turns", "[1, 2, 3]"), at, field, "expected [min, max]");
  check_error(with("turns", "[1, 65537]"), at, field,
              "max must be at most 65536 (got 65537)");
  check_error(without("turns"), "\"conversation\"", field,
              "missing (expected [min, max])");
}

BOOST_AUTO_TEST_CASE(bad_user_lengths_name_their_line_and_field) {
  auto at = std::string{"\"user_len\""};
  auto field = conv_path + ".user_len";
  check_error(with("user_len", "0"), at, field, "min must be >= 1 (got 0)");
  check_error(with("user_len", "[9, 8]"), at, field, "min 9 > max 8");
  check_error(with("user_len", "2.5"), at, field, "expected [min, max]");
  check_error(with("user_len", "[1, 16777217]"), at, field,
              "max must be at most 16777216");
  check_error(without("user_len"), "\"conversation\"", field,
              "missing (expected [min, max])");
}

BOOST_AUTO_TEST_CASE(bad_think_steps_name_their_line_and_field) {
  auto at = std::string{"\"think_steps\""};
  auto field = conv_path + ".think_steps";
  check_error(with("think_steps", "[5, 1]"), at, field, "min 5 > max 1");
  check_error(with("think_steps", "-3"), at, field, "expected [min, max]");
  check_error(with("think_steps", "null"), at, field, "expected [min, max]");
  check_error(with("think_steps", "[0, 16777217]"), at, field,
              "max must be at most 16777216");
}

BOOST_AUTO_TEST_CASE(a_bad_conversation_object_is_refused) {
  auto typo = replace_once(base, "\"think_steps\": [0, 5]", "\"think\": [0, 5]");
  check_error(typo, "\"think\"", conv_path + ".think",
              "unknown key 'think' (known: turns, user_len, think_steps)");
  auto twice = replace_once(base, "\"turns\": [1, 4],",
                            "\"turns\": [1, 4], \"turns\": 2,");
  check_error(twice, "\"turns\"", conv_path + ".turns", "given twice");
  auto not_object = nlohmann::json::parse(base);
  not_object["workloads"]["chat"]["conversation"] = 3;
  auto text = not_object.dump(2);
  check_error(text, "\"conversation\"", conv_path, "expected an object (got 3)");
  auto empty = nlohmann::json::parse(base);
  empty["workloads"]["chat"]["conversation"] = nlohmann::json::object();
  text = empty.dump(2);
  check_error(text, "\"conversation\"", conv_path + ".turns", "missing");
}

BOOST_AUTO_TEST_CASE(a_session_that_could_never_fit_is_refused_where_its_workload_starts) {
  // 8 + 40 x 6 + 39 x 8 = 560 tokens, 140 blocks: past the quota of 200?
  // No - fits; 60 turns: 8 + 360 + 472 = 840 tokens, 210 blocks > 200.
  BOOST_TEST(parse_ok(with("turns", "[1, 40]")).workloads[0].max_sequence_tokens()
             == 560u);
  check_error(with("turns", "[1, 60]"), "\"chat\": {", "workloads.chat",
              "its longest request (a session's last turn, 840 tokens, 210 "
              "blocks of 4) cannot fit the tenant's max_blocks (200)");
  // Without the quota, the pool of 256 blocks: 80 turns, 1120 tokens.
  auto j = nlohmann::json::parse(base);
  j["cache"]["tenants"][0].erase("max_blocks");
  j["workloads"]["chat"]["conversation"]["turns"] = {1, 80};
  auto text = j.dump(2);
  check_error(text, "\"chat\": {", "workloads.chat",
              "its longest request (a session's last turn, 1120 tokens, 280 "
              "blocks of 4) cannot fit the pool (256 blocks");
  // Token positions are 32-bit: past 2^31 tokens, whatever the pool.
  j["workloads"]["chat"]["conversation"]["turns"] = {1, 65536};
  j["workloads"]["chat"]["output_len"] = {2, 1 << 24};
  text = j.dump(2);
  check_error(text, "\"conversation\"", conv_path,
              "exceeds 2147483648 tokens");
}

BOOST_AUTO_TEST_SUITE_END()
