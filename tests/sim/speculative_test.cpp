// Speculative decoding in the simulator (scenario keys draft_tokens and
// draft_acceptance): end to end on host storage, every request finishes
// with the output it would have without drafts, in fewer steps, every
// read-back finds the K/V of what each slot holds (drafts, and the tokens
// written over rejected ones), the cache counts the drafts the simulator
// does and its invariant holds; the measured acceptance is what p implies;
// under pressure requests preempted, freed or swapped out with drafts
// unsettled come back right; and k = 0 runs exactly as without the keys.
#include <atomic>
#include <cmath>

#include "core_driver.hpp"
#include "scheduler.hpp"
#include "sim_support.hpp"

using namespace kvactor;
using namespace kvactor::sim;
using namespace kvactor::sim::test;
using nlohmann::json;

namespace {

/// Two tenants with shared system prompts and long outputs (so that most
/// decode steps carry all k drafts) on host storage, read back every step;
/// a pool with room for all, no supervisor moves (no GC, no eviction or
/// preemption at pressure marks): a deterministic run.
json spec_scenario() {
  return json::parse(R"({
    "cache": {
      "block_size": 16,
      "model": {"num_layers": 2, "num_kv_heads": 1, "head_dim": 8, "dtype": "fp16"},
      "storage": "host", "num_gpu_blocks": 1024, "gc_interval_ms": 0,
      "pressure": {"preempt_at_critical": false, "evict_cached_at_high": false},
      "tenants": [{"name": "chat", "priority": "high"}, {"name": "docs"}]
    },
    "steps": 200, "seed": 5, "verify_every": 1,
    "draft_tokens": 4, "draft_acceptance": 0.7,
    "workloads": {
      "chat": {"rate": 0.3, "prompt_len": [16, 64], "output_len": [100, 200],
               "system_prompts": {"count": 2, "len": [64, 128], "share": 0.8}},
      "docs": {"rate": 0.1, "prompt_len": [100, 300], "output_len": [60, 120],
               "system_prompts": {"count": 1, "len": [128, 128], "share": 0.5}}
    }
  })");
}

/// spec_scenario on a pool of 2-3 requests: chat's long outputs grow into
/// docs' long prompts (low priority), chat's quota makes its own requests
/// give way - freed with the drafts of the step that found the quota
/// unsettled - and with `preemption` "swap" victims go to the host tier
/// (6 host blocks: often full, recomputed instead).
json pressed_scenario(const char* preemption, std::uint64_t host_blocks = 256) {
  auto j = spec_scenario();
  j["cache"]["num_gpu_blocks"] = 128;
  j["cache"]["num_host_blocks"] = host_blocks;
  j["cache"]["tenants"][0]["max_blocks"] = 64;
  j["cache"]["tenants"][1]["priority"] = "low";
  j["steps"] = 100;
  j["preemption"] = preemption;
  j["prefill_chunk"] = 64;
  j["workloads"]["chat"]["rate"] = 0.4;
  j["workloads"]["chat"]["output_len"] = {96, 256};
  j["workloads"]["docs"]["rate"] = 0.25;
  j["workloads"]["docs"]["prompt_len"] = {400, 700};
  j["workloads"]["docs"]["output_len"] = {4, 16};
  return j;
}

sim_outcome run_actors(const json& j) {
  auto s = parse_json(j);
  std::atomic<bool> flag{false};
  progress quiet{false};
  return simulate(s, flag, quiet);
}

draft_figures drafts_of(const std::vector<tenant_figures>& tenants) {
  draft_figures d;
  for (auto& f : tenants)
    d.add(f.drafts);
  return d;
}

/// The accepted drafts a verdict on k drafts has on average: p + ... + p^k.
double mean_accepted(std::uint32_t k, double p) {
  double sum = 0, term = 1;
  for (std::uint32_t j = 0; j < k; ++j)
    sum += term *= p;
  return sum;
}

/// What every speculative run on the actors must show: done, clean, each
/// read-back matching, every draft settled or dropped, and the cache's
/// counts the simulator's.
void check_spec_run(const sim_outcome& r) {
  BOOST_TEST(r.error.empty(), r.error);
  BOOST_TEST(r.warnings.empty(), (r.warnings.empty() ? "" : r.warnings[0]));
  BOOST_TEST(r.invariant_checked);
  BOOST_TEST(r.invariant_error.empty(), r.invariant_error);
  BOOST_TEST(r.verify_checks > 0u);
  BOOST_TEST(r.verify_failures == 0u);
  BOOST_REQUIRE(r.have_final_stats);
  BOOST_TEST(r.final_stats.free_blocks == r.final_stats.total_blocks);
  for (auto& f : r.tenants)
    BOOST_TEST(f.finished == f.arrived, "tenant " << f.name);
  auto d = drafts_of(r.tenants);
  BOOST_TEST(d.draft_tokens > 0u);
  BOOST_TEST(d.draft_tokens == d.accepted + d.rejected + d.dropped);
  BOOST_TEST(r.final_stats.draft_tokens == d.draft_tokens);
  BOOST_TEST(r.final_stats.draft_tokens_rejected == d.rejected);
}

/// Runs `j` against the pool core (its invariant, every message and every
/// running request's K/V slots checked each step) to the end of its drain.
void run_core(core_driver& d) {
  BOOST_REQUIRE_MESSAGE(d.run(50000), "not done after the drain");
  BOOST_TEST(d.b().warnings().empty(),
             (d.b().warnings().empty() ? "" : d.b().warnings()[0]));
  BOOST_TEST(d.kv_checked() > 0u);
  BOOST_TEST(d.kv_wrong() == 0u);
  auto drafts = drafts_of(d.b().figures());
  BOOST_TEST(drafts.draft_tokens == d.core().counters().draft_tokens);
  BOOST_TEST(drafts.rejected == d.core().counters().drafts_rejected);
  BOOST_TEST(drafts.draft_tokens
             == drafts.accepted + drafts.rejected + drafts.dropped);
}

/// Runs `j` on the pool core (storage none: bookkeeping only; run_core's
/// checks) and hands the driver to `check`.
template <class F>
void on_core(json j, F check) {
  j["cache"]["storage"] = "none";
  auto s = parse_json(j);
  core_driver d{s, 1};
  run_core(d);
  check(d);
}

} // namespace

BOOST_AUTO_TEST_SUITE(speculative)

BOOST_AUTO_TEST_CASE(the_verifier_is_seeded_bounded_and_names_rejects_apart) {
  // Drafts stop one short of the output's end, and never exceed k.
  draft_verifier v{9, 4, 0.5};
  BOOST_TEST(v.drafts_for(1) == 0u);
  BOOST_TEST(v.drafts_for(3) == 2u);
  BOOST_TEST(v.drafts_for(100) == 4u);
  BOOST_TEST(draft_verifier(9, 0, 0.5).drafts_for(100) == 0u);
  // The same seed draws the same verdicts; another seed others.
  draft_verifier w{9, 4, 0.5}, x{10, 4, 0.5};
  std::vector<std::uint32_t> a, b, c;
  for (int i = 0; i < 64; ++i) {
    a.push_back(v.accept(4));
    b.push_back(w.accept(4));
    c.push_back(x.accept(4));
  }
  BOOST_TEST(a == b);
  BOOST_TEST(a != c);
  for (auto n : a)
    BOOST_TEST(n <= 4u);
  BOOST_TEST(draft_verifier(1, 4, 0.0).accept(4) == 0u);
  BOOST_TEST(draft_verifier(1, 4, 1.0).accept(4) == 4u);
  // A rejected draft's id is never the real token, whatever the vocabulary.
  for (std::uint32_t vocab : {2u, 3u, 32000u})
    for (token_id real : {0, 1, static_cast<token_id>(vocab - 1)}) {
      auto id = draft_verifier::rejected_id(real, vocab);
      BOOST_TEST(id != real);
      BOOST_TEST((id >= 0 && static_cast<std::uint32_t>(id) < vocab));
    }
}

BOOST_AUTO_TEST_CASE(every_request_finishes_and_every_draft_reads_back) {
  auto j = spec_scenario();
  auto r = run_actors(j);
  check_spec_run(r);
  auto d = drafts_of(r.tenants);
  // Each draft accepted with p = 0.7 until the first rejection: of k = 4,
  // p + p^2 + p^3 + p^4 = 1.77 on average (44 %), a step yielding 2.77
  // tokens. Fewer drafts near a request's end pull both a little away.
  auto want = mean_accepted(4, 0.7);
  BOOST_TEST_MESSAGE("acceptance " << d.acceptance() << " (p implies " << want / 4
                     << "), " << d.tokens_per_step() << " tokens per decode step ("
                     << 1 + want << "), " << d.dropped << " dropped");
  BOOST_TEST(std::abs(d.acceptance() - want / 4) < 0.02);
  BOOST_TEST(std::abs(d.tokens_per_step() - (1 + want)) < 0.08);
  BOOST_TEST(d.dropped == 0u); // nothing was preempted
  std::uint64_t hits = 0;
  for (auto& f : r.tenants)
    hits += f.hit_tokens;
  BOOST_TEST(hits > 0u); // the system prompts were found
  // The same requests give the same output without drafts, token for
  // token, only in more steps.
  j["draft_tokens"] = 0;
  auto plain = run_actors(j);
  BOOST_TEST(plain.error.empty(), plain.error);
  BOOST_REQUIRE_EQUAL(plain.tenants.size(), r.tenants.size());
  for (std::size_t w = 0; w < r.tenants.size(); ++w) {
    BOOST_TEST(plain.tenants[w].finished == r.tenants[w].finished);
    BOOST_TEST(plain.tenants[w].generated_tokens == r.tenants[w].generated_tokens);
  }
  BOOST_TEST(drafts_of(plain.tenants).draft_tokens == 0u);
  BOOST_TEST(drafts_of(plain.tenants).tokens_per_step() == 1.0);
  BOOST_TEST(plain.final_stats.draft_tokens == 0u);
  BOOST_TEST(plain.steps > r.steps);
}

BOOST_AUTO_TEST_CASE(acceptance_0_rejects_every_draft_and_1_keeps_every_one) {
  // p = 0: each step's drafts are all cut, and the next step's token lands
  // in the slot of the first; p = 1: a step yields k + 1 tokens but near
  // a request's end.
  for (double p : {0.0, 1.0}) {
    BOOST_TEST_CONTEXT("p " << p) {
      auto j = spec_scenario();
      j["draft_acceptance"] = p;
      on_core(j, [p](core_driver& d) {
        auto drafts = drafts_of(d.b().figures());
        BOOST_TEST(drafts.draft_tokens > 0u);
        if (p == 0.0) {
          BOOST_TEST(drafts.accepted == 0u);
          BOOST_TEST(drafts.rejected == drafts.draft_tokens);
          BOOST_TEST(drafts.tokens_per_step() == 1.0);
        } else {
          BOOST_TEST(drafts.rejected == 0u);
          BOOST_TEST(drafts.accepted == drafts.draft_tokens);
          BOOST_TEST(drafts.tokens_per_step() > 4.8);
        }
      });
    }
  }
}

BOOST_AUTO_TEST_CASE(k_0_runs_exactly_as_without_the_keys) {
  // Against the pool core (deterministic to the step), under pressure, by
  // recompute and by swap: every figure and every step's sample the same.
  for (auto preemption : {"recompute", "swap"}) {
    BOOST_TEST_CONTEXT("preemption " << preemption) {
      auto with = pressed_scenario(preemption);
      with["cache"]["storage"] = "none";
      with["draft_tokens"] = 0;
      with["draft_acceptance"] = 0.3;
      auto without = with;
      without.erase("draft_tokens");
      without.erase("draft_acceptance");
      auto s1 = parse_json(with);
      auto s2 = parse_json(without);
      core_driver a{s1, 1}, b{s2, 1};
      run_core(a);
      run_core(b);
      BOOST_TEST(a.b().step() == b.b().step());
      BOOST_TEST(a.step_messages() == b.step_messages());
      BOOST_TEST(a.kv_checked() == b.kv_checked());
      auto& fa = a.b().figures();
      auto& fb = b.b().figures();
      BOOST_REQUIRE_EQUAL(fa.size(), fb.size());
      std::uint64_t preempted = 0;
      for (std::size_t w = 0; w < fa.size(); ++w) {
        BOOST_TEST(fa[w].generated_tokens == fb[w].generated_tokens);
        BOOST_TEST(fa[w].hit_tokens == fb[w].hit_tokens);
        BOOST_TEST(fa[w].preemptions() == fb[w].preemptions());
        BOOST_TEST(fa[w].swaps == fb[w].swaps);
        BOOST_TEST(fa[w].latency == fb[w].latency);
        BOOST_TEST(fa[w].queue_delay == fb[w].queue_delay);
        BOOST_TEST(fa[w].drafts.draft_tokens == 0u);
        BOOST_TEST(fa[w].drafts.decode_tokens == fa[w].drafts.decode_steps);
        preempted += fa[w].preemptions() + fa[w].swaps;
      }
      BOOST_TEST(preempted > 0u); // the pressure the case is about
      auto& sa = a.b().samples();
      auto& sb = b.b().samples();
      BOOST_REQUIRE_EQUAL(sa.size(), sb.size());
      for (std::size_t i = 0; i < sa.size(); ++i) {
        BOOST_TEST_CONTEXT("step " << i) {
          BOOST_TEST(sa[i].used_blocks == sb[i].used_blocks);
          BOOST_TEST(sa[i].running == sb[i].running);
          BOOST_TEST(sa[i].waiting == sb[i].waiting);
          BOOST_TEST(sa[i].preempted == sb[i].preempted);
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(requests_preempted_with_drafts_unsettled_prefill_again) {
  // Recompute: requests freed at chat's quota with their step's drafts
  // unsettled drop them and prefill what they sampled (chunked, 64 tokens
  // a step), on the pool core and end to end.
  auto j = pressed_scenario("recompute");
  on_core(j, [](core_driver& d) {
    BOOST_TEST(d.left_with_drafts() > 0u); // what the case is about
  });
  auto r = run_actors(j);
  check_spec_run(r);
  auto d = drafts_of(r.tenants);
  std::uint64_t preempted = 0, readmitted = 0;
  for (auto& f : r.tenants) {
    preempted += f.preemptions();
    readmitted += f.readmitted;
  }
  BOOST_TEST_MESSAGE(preempted << " preemptions, " << d.dropped << " drafts dropped, "
                     << r.chunk_extends << " chunk extends");
  BOOST_TEST(preempted > 0u);
  BOOST_TEST(readmitted > 0u);
  BOOST_TEST(d.dropped > 0u);
  BOOST_TEST(d.rejected > 0u);
  BOOST_TEST(r.chunk_extends > 0u);
}

BOOST_AUTO_TEST_CASE(requests_swapped_with_drafts_unsettled_settle_them_when_back) {
  // Swap: a victim swapped out after computing its drafts takes them to
  // the host tier and back, and its verdict goes with its first extend
  // after; with a full host tier it is recomputed and drops them.
  for (std::uint64_t host_blocks : {256, 6}) {
    BOOST_TEST_CONTEXT("host blocks " << host_blocks) {
      auto j = pressed_scenario("swap", host_blocks);
      on_core(j, [host_blocks](core_driver& d) {
        BOOST_TEST(d.swapped_with_drafts() > 0u); // what the case is about
        if (host_blocks < 100)
          BOOST_TEST(d.swap_out_failures() > 0u);
      });
      auto r = run_actors(j);
      check_spec_run(r);
      std::uint64_t swaps = 0, swap_ins = 0;
      for (auto& f : r.tenants) {
        swaps += f.swaps;
        swap_ins += f.swap_ins;
      }
      BOOST_TEST(swaps > 0u);
      BOOST_TEST(swap_ins > 0u);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
