// Chunked prefill in the simulator (scenario key prefill_chunk): a prompt
// takes ceil((P - H) / chunk) steps before its first output token; the
// whole prompt is looked up at admission, so hit figures match a run
// without chunks where nothing else differs; and end to end on host
// storage, under enough pressure to preempt (recompute) or swap, every
// request finishes and every read-back finds the K/V it wrote.
#include <atomic>

#include "core_driver.hpp"
#include "scheduler.hpp"
#include "sim_support.hpp"
#include "workload.hpp"

using namespace kvactor;
using namespace kvactor::sim;
using namespace kvactor::sim::test;
using nlohmann::json;

namespace {

/// Two tenants of prompts of a few hundred tokens, most of them starting
/// with a shared system prompt, on a pool of 16-token blocks large enough
/// that nothing is preempted or evicted; storage none, no supervisor.
json roomy_scenario() {
  return json::parse(R"({
    "cache": {
      "block_size": 16,
      "model": {"num_layers": 1, "num_kv_heads": 1, "head_dim": 8, "dtype": "fp16"},
      "storage": "none", "num_gpu_blocks": 4096, "gc_interval_ms": 0,
      "pressure": {"preempt_at_critical": false, "evict_cached_at_high": false},
      "tenants": [{"name": "chat", "priority": "high"}, {"name": "docs"}]
    },
    "steps": 300, "seed": 11, "admit_up_to": "full",
    "workloads": {
      "chat": {"rate": 0.2, "prompt_len": [32, 160], "output_len": [4, 24],
               "system_prompts": {"count": 2, "len": [200, 320], "share": 0.9}},
      "docs": {"rate": 0.1, "prompt_len": [200, 400], "output_len": [8, 32],
               "system_prompts": {"count": 1, "len": [128, 128], "share": 0.5}}
    }
  })");
}

/// Runs `j` against the pool core to the end of its drain.
std::vector<tenant_figures> run_core(const json& j, std::uint64_t& chunk_extends) {
  auto s = parse_json(j);
  core_driver d{s, 1};
  BOOST_REQUIRE_MESSAGE(d.run(s.steps + 5000), "not done after the drain");
  BOOST_TEST(d.b().warnings().empty());
  BOOST_TEST(d.kv_wrong() == 0u);
  chunk_extends = d.b().chunk_extends();
  return d.b().figures();
}

/// A run on host storage that preempts, and reads a request back every
/// step: on a pool of 2-3 requests, chat's long outputs grow into docs'
/// long prompts (low priority, prefilling for 25-45 steps of 16 tokens),
/// which are preempted or swapped out, some of them mid-prefill. As
/// deterministic as the core runs (no GC, no supervisor moves).
json pressed_scenario(const char* preemption, std::uint64_t chunk) {
  auto j = roomy_scenario();
  j["cache"]["storage"] = "host";
  j["cache"]["num_gpu_blocks"] = 128;
  j["cache"]["num_host_blocks"] = 256;
  j["cache"]["tenants"][1]["priority"] = "low";
  j["steps"] = 100;
  j["preemption"] = preemption;
  j["verify_every"] = 1;
  j["prefill_chunk"] = chunk;
  j["workloads"]["chat"]["rate"] = 0.4;
  j["workloads"]["chat"]["output_len"] = {96, 256};
  j["workloads"]["docs"]["rate"] = 0.25;
  j["workloads"]["docs"]["prompt_len"] = {400, 700};
  j["workloads"]["docs"]["output_len"] = {4, 16};
  return j;
}

sim_outcome run_actors(const scenario& s) {
  std::atomic<bool> flag{false};
  progress quiet{false};
  return simulate(s, flag, quiet);
}

} // namespace

BOOST_AUTO_TEST_SUITE(chunked_prefill)

BOOST_AUTO_TEST_CASE(a_prompt_takes_one_step_per_chunk_before_its_first_token) {
  // One request at a time, so each is admitted alone: a 100-token own
  // prompt behind a 64-token system prompt (4 blocks) takes ceil(164 / 32)
  // = 6 steps the first time, ceil((164 - 64) / 32) = 4 once the system
  // prompt is cached; then 5 more steps for its 6 output tokens.
  auto j = roomy_scenario();
  j["max_running"] = 1;
  j["prefill_chunk"] = 32;
  j["workloads"].erase("docs");
  std::vector<token_id> sys(64);
  for (std::size_t i = 0; i < sys.size(); ++i)
    sys[i] = static_cast<token_id>(1000 + i);
  j["workloads"]["chat"] = {{"rate", 0.05},
                            {"prompt_len", 100},
                            {"output_len", 6},
                            {"system_prompts", {{"tokens", {sys}}, {"share", 1}}}};
  std::uint64_t chunks = 0;
  auto figures = run_core(j, chunks);
  auto& f = figures.at(0);
  BOOST_REQUIRE(f.finished >= 3u);
  BOOST_REQUIRE_EQUAL(f.latency.size(), f.queue_delay.size());
  for (std::size_t i = 0; i < f.latency.size(); ++i) {
    BOOST_TEST_CONTEXT("request " << i) {
      // Admission to last token, one at a time and in order.
      auto prefill_steps = i == 0 ? 6u : 4u;
      BOOST_TEST(f.latency[i] - f.queue_delay[i] == prefill_steps + 6 - 1);
    }
  }
  BOOST_TEST(chunks == 5 + 3 * (f.finished - 1)); // chunks after the first
  BOOST_TEST(f.hit_tokens == 64 * (f.finished - 1));
  BOOST_TEST(f.prefill_tokens == 164 * f.finished);
  BOOST_TEST(f.preemptions() == 0u);
}

BOOST_AUTO_TEST_CASE(chunks_find_the_hits_the_whole_prompt_finds) {
  // One request at a time and no pressure: chunked or not, each admission
  // finds the cache in the same state, so the whole-prompt lookup finds
  // the same hits - far more than a lookup of the first chunk could (at
  // most a chunk per admission).
  auto j = roomy_scenario();
  j["max_running"] = 1;
  std::uint64_t chunks = 0;
  auto whole = run_core(j, chunks);
  BOOST_TEST(chunks == 0u);
  for (std::uint64_t chunk : {16, 32}) {
    BOOST_TEST_CONTEXT("prefill_chunk " << chunk) {
      j["prefill_chunk"] = chunk;
      auto chunked = run_core(j, chunks);
      BOOST_TEST(chunks > 0u);
      BOOST_REQUIRE_EQUAL(chunked.size(), whole.size());
      for (std::size_t w = 0; w < whole.size(); ++w) {
        BOOST_TEST_CONTEXT("tenant " << whole[w].name) {
          BOOST_TEST(chunked[w].finished == whole[w].finished);
          BOOST_TEST(chunked[w].prefill_tokens == whole[w].prefill_tokens);
          BOOST_TEST(chunked[w].hit_tokens == whole[w].hit_tokens);
          BOOST_TEST(chunked[w].hit_tokens > chunk * chunked[w].admitted);
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(with_requests_overlapping_chunks_find_no_more_than_whole_prompts) {
  // Many at once: a prompt admitted while another with its system prompt
  // is still prefilling finds only the chunks computed so far (vLLM v1's
  // behaviour: no block is found before the step that writes it), so the
  // hit rate may only drop - here by little, the system prompts being
  // cached early on.
  auto j = roomy_scenario();
  std::uint64_t chunks = 0;
  auto whole = run_core(j, chunks);
  j["prefill_chunk"] = 32;
  auto chunked = run_core(j, chunks);
  std::uint64_t hits_whole = 0, hits_chunked = 0, prefill = 0;
  for (std::size_t w = 0; w < whole.size(); ++w) {
    BOOST_TEST(chunked[w].finished == whole[w].finished);
    BOOST_TEST(chunked[w].prefill_tokens == whole[w].prefill_tokens);
    BOOST_TEST(chunked[w].hit_tokens <= whole[w].hit_tokens);
    hits_whole += whole[w].hit_tokens;
    hits_chunked += chunked[w].hit_tokens;
    prefill += whole[w].prefill_tokens;
  }
  BOOST_TEST_MESSAGE("hit rate: whole prompts " << double(hits_whole) / double(prefill)
                                                << ", chunks of 32 "
                                                << double(hits_chunked) / double(prefill));
  BOOST_TEST(double(hits_chunked) >= 0.9 * double(hits_whole));
}

namespace {

/// A chunked run under pressure went clean: no error or warning, chunks
/// computed, every read-back matching, the pool given back.
void check_chunked_run(const sim_outcome& r) {
  BOOST_TEST(r.error.empty(), r.error);
  BOOST_TEST(r.warnings.empty(), (r.warnings.empty() ? "" : r.warnings[0]));
  BOOST_TEST(r.chunk_extends > 0u);
  BOOST_TEST(r.verify_checks > 0u);
  BOOST_TEST(r.verify_failures == 0u);
  BOOST_REQUIRE(r.have_final_stats);
  BOOST_TEST(r.final_stats.free_blocks == r.final_stats.total_blocks);
}

} // namespace

BOOST_AUTO_TEST_CASE(chunks_land_in_their_slots_when_requests_are_recomputed) {
  auto s = parse_json(pressed_scenario("recompute", 16));
  auto r = run_actors(s);
  check_chunked_run(r);
  std::uint64_t preempted = 0;
  for (auto& f : r.tenants) {
    BOOST_TEST(f.finished == f.arrived);
    BOOST_TEST(f.hit_tokens > 0u);
    preempted += f.preempted_in_step + f.preempted_by_quota;
  }
  BOOST_TEST(preempted > 0u); // what the case is about
  BOOST_TEST(r.preempted_mid_prefill > 0u);
}

BOOST_AUTO_TEST_CASE(chunks_land_in_their_slots_when_requests_are_swapped) {
  auto s = parse_json(pressed_scenario("swap", 16));
  auto r = run_actors(s);
  check_chunked_run(r);
  std::uint64_t swaps = 0, swap_ins = 0;
  for (auto& f : r.tenants) {
    BOOST_TEST(f.finished == f.arrived);
    swaps += f.swaps;
    swap_ins += f.swap_ins;
  }
  BOOST_TEST(swaps > 0u); // what the case is about
  BOOST_TEST(swap_ins > 0u);
  BOOST_TEST(r.preempted_mid_prefill > 0u); // swapped out, back, carried on
}

BOOST_AUTO_TEST_SUITE_END()
