// Scenario reading, good input: the embedded default and the shipped
// scenario files parse and validate; defaults and overrides land where the
// format (scenario.hpp) says; a request of exactly the pool's or the quota's
// size is accepted.
#include <fstream>
#include <sstream>

#include "sim_support.hpp"

using namespace kvactor;
using namespace kvactor::sim;
using namespace kvactor::sim::test;

BOOST_AUTO_TEST_SUITE(scenario_reading)

BOOST_AUTO_TEST_CASE(embedded_default_parses_and_names_only_known_tenants) {
  auto s = parse_ok(default_scenario_json(), "default.json (embedded)");
  BOOST_TEST(s.source == "default.json (embedded)");
  BOOST_TEST(s.steps >= 1u);
  BOOST_TEST(!s.workloads.empty());
  for (auto& w : s.workloads) {
    BOOST_TEST(s.cache.find_tenant(w.tenant) != nullptr);
    BOOST_TEST(w.prompt_len.min <= w.prompt_len.max);
    BOOST_TEST(w.output_len.min <= w.output_len.max);
  }
  // Validated: starting the cache with it must not fail on the config.
  BOOST_TEST(!validate(s.cache));
}

BOOST_AUTO_TEST_CASE(embedded_default_is_the_shipped_default_json) {
  std::ifstream in{std::string{KVACTOR_SIM_SCENARIOS} + "/default.json"};
  BOOST_REQUIRE(in);
  std::stringstream text;
  text << in.rdbuf();
  BOOST_TEST(text.str() == std::string{default_scenario_json()});
}

BOOST_AUTO_TEST_CASE(shipped_scenario_files_load) {
  for (auto name : {"default.json", "swap.json", "chunked.json", "speculative.json",
                    "chat.json"}) {
    auto path = std::string{KVACTOR_SIM_SCENARIOS} + "/" + name;
    auto s = load_scenario(path);
    if (!s)
      BOOST_FAIL(path << ": " << message_of(s.error()));
    BOOST_TEST(s->source == path);
  }
  auto swap = load_scenario(std::string{KVACTOR_SIM_SCENARIOS} + "/swap.json");
  BOOST_TEST((swap->preemption == preemption_mode::swap));
  BOOST_TEST(swap->cache.num_host_blocks > 0u);
  auto chunked = load_scenario(std::string{KVACTOR_SIM_SCENARIOS} + "/chunked.json");
  BOOST_TEST(chunked->prefill_chunk == 256u);
  auto spec = load_scenario(std::string{KVACTOR_SIM_SCENARIOS} + "/speculative.json");
  BOOST_TEST(spec->draft_tokens == 4u);
  BOOST_TEST(spec->draft_acceptance == 0.7);
  auto chat = load_scenario(std::string{KVACTOR_SIM_SCENARIOS} + "/chat.json");
  BOOST_TEST(chat->workloads[0].conversation.enabled());
  BOOST_TEST(!chat->workloads[1].conversation.enabled());
  auto base = parse_scenario(default_scenario_json(), "default.json");
  BOOST_TEST(base->prefill_chunk == 0u); // off unless asked for
}

BOOST_AUTO_TEST_CASE(defaults_apply_and_workloads_follow_tenant_order) {
  auto j = small_scenario();
  // Written in the other order than cache.tenants (nlohmann::json would sort
  // the keys, so the text is put together by hand).
  auto text = "{\"cache\": " + j["cache"].dump() + ", \"steps\": 200, "
              + "\"workloads\": {\"b\": " + j["workloads"]["b"].dump()
              + ", \"a\": " + j["workloads"]["a"].dump() + "}}";
  BOOST_REQUIRE_LT(text.find("\"b\": {"), text.find("\"a\": {"));
  auto s = parse_ok(text);
  BOOST_TEST(s.drain);
  BOOST_TEST(s.output_dir == "sim-out");
  BOOST_TEST((s.preemption == preemption_mode::recompute));
  BOOST_TEST(s.admit_up_to == "auto");
  BOOST_TEST(s.max_running == 256u);
  BOOST_TEST(s.max_admits_per_step == 16u);
  BOOST_TEST(s.prefill_chunk == 0u); // off: whole prompts at admission
  BOOST_TEST(s.verify_every == 0u);
  BOOST_REQUIRE_EQUAL(s.workloads.size(), 2u);
  BOOST_TEST(s.workloads[0].tenant == "a");
  BOOST_TEST(s.workloads[1].tenant == "b");
  // Priority defaults to the tenant's; vocab_size to 32000.
  BOOST_TEST((s.workloads[0].priority == priority::high));
  BOOST_TEST((s.workloads[1].priority == priority::low));
  BOOST_TEST(s.workloads[1].vocab_size == 32000u);
  // One number is [n, n].
  auto k = small_scenario();
  k["workloads"]["b"]["prompt_len"] = 5;
  auto t = parse_json(k);
  BOOST_TEST(t.workloads[1].prompt_len.min == 5u);
  BOOST_TEST(t.workloads[1].prompt_len.max == 5u);
}

BOOST_AUTO_TEST_CASE(overrides_are_read) {
  auto j = small_scenario();
  j["drain"] = false;
  j["seed"] = 99;
  j["output_dir"] = "elsewhere";
  j["cache"]["num_host_blocks"] = 16;
  j["preemption"] = "swap";
  j["admit_up_to"] = "critical";
  j["max_running"] = 3;
  j["max_admits_per_step"] = 2;
  j["prefill_chunk"] = 16;
  j["verify_every"] = 5;
  j["workloads"]["b"]["priority"] = "critical";
  j["workloads"]["b"]["vocab_size"] = 50;
  j["workloads"]["b"]["burst"] = {{"period", 10}, {"duration", 10}, {"rate", 2.5}};
  j["workloads"]["b"]["system_prompts"] = {{"tokens", {{1, 2, 3}, {49}}},
                                           {"share", 1}};
  auto s = parse_json(j);
  BOOST_TEST(!s.drain);
  BOOST_TEST(s.seed == 99u);
  BOOST_TEST(s.output_dir == "elsewhere");
  BOOST_TEST((s.preemption == preemption_mode::swap));
  BOOST_TEST(s.admit_up_to == "critical");
  BOOST_TEST(admission_limit(s) == s.cache.pressure.critical);
  BOOST_TEST(s.max_running == 3u);
  BOOST_TEST(s.max_admits_per_step == 2u);
  BOOST_TEST(s.prefill_chunk == 16u);
  BOOST_TEST(s.verify_every == 5u);
  auto& b = s.workloads[1];
  BOOST_TEST((b.priority == priority::critical));
  BOOST_TEST(b.vocab_size == 50u);
  BOOST_TEST(b.burst.period == 10u);
  BOOST_TEST(b.burst.duration == 10u);
  BOOST_TEST(b.burst.rate == 2.5);
  BOOST_REQUIRE_EQUAL(b.system_prompts.tokens.size(), 2u);
  BOOST_TEST(b.system_prompts.count == 2u);
  BOOST_TEST((b.system_prompts.tokens[1] == std::vector<token_id>{49}));
}

BOOST_AUTO_TEST_CASE(admission_limit_follows_admit_up_to) {
  auto j = small_scenario();
  j["cache"]["pressure"] = {{"medium", 0.5}, {"high", 0.7}, {"critical", 0.9}};
  auto limit = [&](const char* mode, bool preempt) {
    j["admit_up_to"] = mode;
    j["cache"]["pressure"]["preempt_at_critical"] = preempt;
    return admission_limit(parse_json(j));
  };
  BOOST_TEST(limit("medium", true) == 0.5);
  BOOST_TEST(limit("high", false) == 0.7);
  BOOST_TEST(limit("critical", true) == 0.9);
  BOOST_TEST(limit("full", true) == 1.0);
  BOOST_TEST(limit("auto", true) == 0.7);
  BOOST_TEST(limit("auto", false) == 1.0);
}

// Pool 64 blocks of 4 tokens, tenant a's quota 40 blocks: a request of
// exactly 40 (a) or 64 (b) blocks fits, one token more does not.
BOOST_AUTO_TEST_CASE(a_request_of_exactly_the_limit_fits) {
  auto j = small_scenario();
  // The whole pool: no supervisor preempting at critical pressure.
  j["cache"]["pressure"]["preempt_at_critical"] = false;
  j["workloads"]["a"].erase("system_prompts");
  j["workloads"]["a"]["prompt_len"] = {1, 150};
  j["workloads"]["a"]["output_len"] = {1, 10}; // 160 tokens = 40 blocks
  j["workloads"]["b"]["prompt_len"] = {1, 246};
  j["workloads"]["b"]["output_len"] = {1, 10}; // 256 tokens = 64 blocks
  auto s = parse_json(j);
  BOOST_TEST(s.workloads[0].max_sequence_tokens() == 160u);
  BOOST_TEST(s.workloads[1].max_sequence_tokens() == 256u);
  j["workloads"]["a"]["output_len"] = {1, 11};
  BOOST_TEST(!parse_scenario(j.dump(), "x.json"));
  j["workloads"]["a"]["output_len"] = {1, 10};
  j["workloads"]["b"]["output_len"] = {1, 11};
  BOOST_TEST(!parse_scenario(j.dump(), "x.json"));
}

BOOST_AUTO_TEST_CASE(longest_request_counts_the_longest_system_prompt) {
  auto j = small_scenario();
  // a: system prompts of up to 16 tokens + prompt 12 + output 8.
  BOOST_TEST(parse_json(j).workloads[0].max_sequence_tokens() == 36u);
  j["workloads"]["a"]["system_prompts"] = {{"tokens", {{1}, {1, 2, 3, 4, 5}}},
                                           {"share", 0.1}};
  BOOST_TEST(parse_json(j).workloads[0].max_sequence_tokens() == 25u);
  // Never chosen (share 0): not counted.
  j["workloads"]["a"]["system_prompts"]["share"] = 0;
  BOOST_TEST(parse_json(j).workloads[0].max_sequence_tokens() == 20u);
}

BOOST_AUTO_TEST_SUITE_END()
