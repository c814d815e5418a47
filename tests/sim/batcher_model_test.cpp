// The batcher as a seeded random model test: random small scenarios
// (tenants with quotas, reservations and priorities, system prompts, both
// preemption modes, pools tight enough to preempt, chunked prefill or
// not, draft tokens or not), run against the pool core by core_driver,
// which checks the pool invariant, every message and every running
// request's K/V slots after each step; at the end every request finished,
// the figures add up (the drafts' with the pool's counters) and the pool
// is empty again.
#include <algorithm>

#include "core_driver.hpp"
#include "sim_support.hpp"
#include "workload.hpp"

using namespace kvactor;
using namespace kvactor::sim;
using namespace kvactor::sim::test;
using nlohmann::json;

namespace {

const char* priorities[] = {"low", "normal", "high", "critical"};

std::uint32_t uniform(std::mt19937_64& rng, std::uint32_t lo, std::uint32_t hi) {
  return std::uniform_int_distribution<std::uint32_t>{lo, hi}(rng);
}

/// A random scenario of 2-3 tenants on a pool of 32-96 blocks: tight, so
/// that requests preempt each other; every request fits on its own. With
/// `chunked`, a prefill chunk of 1 to 2 blocks and a bit (any size, prompts
/// being up to 9 blocks); with `drafts`, 1 to 6 draft tokens per decode
/// step, accepted with a chance of 0 to 1.
json random_scenario(std::uint64_t seed, bool swap, bool chunked = false,
                     bool drafts = false) {
  std::mt19937_64 rng{seed};
  auto bs = uniform(rng, 0, 1) == 0 ? 4u : 8u;
  auto blocks = uniform(rng, 32, 96);
  auto n_tenants = uniform(rng, 2, 3);
  json tenants = json::array();
  json workloads = json::object();
  std::uint64_t reserved_total = 0;
  for (std::uint32_t t = 0; t < n_tenants; ++t) {
    auto name = std::string(1, static_cast<char>('a' + t));
    json w;
    w["rate"] = uniform(rng, 2, 12) / 10.0;
    auto p_hi = uniform(rng, 2, 12 * bs / 4 * 2);
    w["prompt_len"] = {uniform(rng, 1, p_hi), p_hi};
    auto o_hi = uniform(rng, 1, 24);
    w["output_len"] = {uniform(rng, 1, o_hi), o_hi};
    std::uint32_t sys = 0;
    if (uniform(rng, 0, 2) > 0) {
      sys = uniform(rng, bs, 3 * bs);
      w["system_prompts"] = {{"count", uniform(rng, 1, 3)},
                             {"len", {uniform(rng, 1, sys), sys}},
                             {"share", uniform(rng, 3, 10) / 10.0}};
    }
    if (uniform(rng, 0, 3) == 0)
      w["priority"] = priorities[uniform(rng, 0, 3)];
    w["vocab_size"] = uniform(rng, 0, 1) == 0 ? 4 : 1000; // 4: many shared blocks
    auto longest = (sys + p_hi + o_hi + bs - 1) / bs;
    json tenant{{"name", name}, {"priority", priorities[uniform(rng, 0, 3)]}};
    // A quota between the longest request and 60% of the pool (some tenants).
    if (uniform(rng, 0, 1) == 0)
      tenant["max_blocks"] = std::max<std::uint64_t>(longest, blocks * uniform(rng, 3, 6) / 10);
    if (uniform(rng, 0, 2) == 0 && reserved_total + 8 < blocks / 4) {
      tenant["reserved_blocks"] = 8;
      reserved_total += 8;
    }
    tenants.push_back(tenant);
    workloads[name] = w;
  }
  json cache{{"block_size", bs},
             {"model", {{"num_layers", 1}, {"num_kv_heads", 1}, {"head_dim", 8},
                        {"dtype", "fp16"}}},
             {"storage", "none"},
             {"num_gpu_blocks", blocks},
             {"gc_interval_ms", 0},
             {"prefix_caching", uniform(rng, 0, 3) > 0},
             {"tenants", tenants}};
  if (uniform(rng, 0, 2) == 0)
    cache["admission"] = {{"policy", "reserve_expected"}};
  if (swap)
    cache["num_host_blocks"] = uniform(rng, 0, 1) == 0 ? 6 : 256; // 6: often full
  const char* up_to[] = {"auto", "high", "critical", "full"};
  json out{{"cache", cache},
           {"steps", uniform(rng, 60, 150)},
           {"seed", seed},
           {"preemption", swap ? "swap" : "recompute"},
           {"admit_up_to", up_to[uniform(rng, 0, 3)]},
           {"max_running", uniform(rng, 4, 40)},
           {"max_admits_per_step", uniform(rng, 1, 8)},
           {"workloads", workloads}};
  if (chunked) // drawn last: the scenario is otherwise the unchunked one
    out["prefill_chunk"] = uniform(rng, 1, 2 * bs + 3);
  if (drafts) { // last too
    out["draft_tokens"] = uniform(rng, 1, 6);
    out["draft_acceptance"] = uniform(rng, 0, 10) / 10.0;
  }
  return out;
}

/// Parses `j`; when a request could not fit (a random quota too small after
/// all), grows the pool and the quotas until it does.
scenario fitting(json j) {
  for (int tries = 0; tries < 8; ++tries) {
    auto s = parse_scenario(j.dump(), "random.json");
    if (s)
      return std::move(*s);
    auto msg = message_of(s.error());
    BOOST_REQUIRE_MESSAGE(msg.find("cannot fit") != std::string::npos, msg);
    j["cache"]["num_gpu_blocks"] = j["cache"]["num_gpu_blocks"].get<int>() * 2;
    for (auto& t : j["cache"]["tenants"])
      if (t.contains("max_blocks"))
        t["max_blocks"] = t["max_blocks"].get<int>() * 2;
  }
  BOOST_FAIL("no fitting scenario");
  return {};
}

/// Output and prompt tokens per workload of every request `s` generates.
struct totals {
  std::vector<std::uint64_t> requests, prompt, output;
};

totals expected_totals(const scenario& s) {
  workload_generator gen{s};
  totals t;
  t.requests.assign(s.workloads.size(), 0);
  t.prompt = t.output = t.requests;
  for (std::uint64_t step = 0; step < s.steps; ++step)
    for (auto& r : gen.arrivals(step)) {
      ++t.requests[r.workload];
      t.prompt[r.workload] += r.prompt.size();
      t.output[r.workload] += r.output.size();
    }
  return t;
}

struct run_summary {
  std::uint64_t preempted_in_step = 0, by_quota = 0, by_cache = 0, swaps = 0,
                swap_ins = 0, swap_out_failures = 0, readmitted = 0, hits = 0,
                chunk_extends = 0, preempted_mid_prefill = 0,
                swapped_mid_prefill = 0, kv_checked = 0;
  draft_figures drafts;
};

/// Runs `s` to the end of its drain and checks what must hold then.
void run_and_check(const scenario& s, std::uint64_t chaos_seed,
                   double supervisor_rate, run_summary& sum) {
  core_driver d{s, chaos_seed, supervisor_rate};
  BOOST_REQUIRE_MESSAGE(d.run(s.steps + 5000), "not done after the drain");
  auto& b = d.b();
  auto want = expected_totals(s);
  BOOST_TEST(b.waiting() == 0u);
  BOOST_TEST(b.running() == 0u);
  BOOST_TEST(b.swapped() == 0u);
  // Everything freed: nothing held, nothing charged, no host block taken.
  BOOST_TEST(d.core().num_sequences() == 0u);
  BOOST_TEST(d.core().used_blocks() == 0u);
  for (auto& t : d.core().tenants())
    BOOST_TEST(t.used == 0u, "tenant " << t.config.name);
  BOOST_TEST(d.core().free_host_blocks() == d.core().num_host_blocks());
  BOOST_TEST(b.warnings().empty(), "first warning: "
                                     << (b.warnings().empty() ? "" : b.warnings()[0]));
  std::uint64_t arrived = 0;
  for (std::size_t w = 0; w < b.figures().size(); ++w) {
    auto& f = b.figures()[w];
    BOOST_TEST_CONTEXT("tenant " << f.name) {
      arrived += f.arrived;
      BOOST_TEST(f.arrived == want.requests[w]);
      // Every request fits (the scenario says so): none is refused, all end.
      BOOST_TEST(f.rejected == 0u);
      BOOST_TEST(f.admitted == f.arrived);
      BOOST_TEST(f.finished == f.admitted);
      BOOST_TEST(f.queue_delay.size() == f.admitted);
      BOOST_TEST(f.latency.size() == f.finished);
      // Each output token is generated once, preempted or not; each prompt
      // counted once at its first admission.
      BOOST_TEST(f.generated_tokens == want.output[w]);
      BOOST_TEST(f.prompt_tokens == want.prompt[w]);
      BOOST_TEST(f.prefill_tokens >= f.prompt_tokens);
      BOOST_TEST(f.hit_tokens <= f.prefill_tokens);
      BOOST_TEST(f.swap_ins <= f.swaps);
      // A re-admission follows each recompute-style preemption, at most.
      BOOST_TEST(f.readmitted <= f.preemptions() + f.swaps);
      for (std::size_t i = 0; i < f.latency.size(); ++i)
        BOOST_TEST(f.latency[i] >= 1u);
      BOOST_TEST(f.blocks_peak <= s.cache.num_gpu_blocks);
      auto t = s.cache.find_tenant(f.name);
      if (t->max_blocks != 0)
        BOOST_TEST(f.blocks_peak <= t->max_blocks);
      sum.preempted_in_step += f.preempted_in_step;
      sum.by_quota += f.preempted_by_quota;
      sum.by_cache += f.preempted_by_cache;
      sum.swaps += f.swaps;
      sum.swap_ins += f.swap_ins;
      sum.readmitted += f.readmitted;
      sum.hits += f.hit_tokens;
    }
  }
  BOOST_TEST(arrived == b.arrived());
  BOOST_TEST(b.samples().size() == b.step());
  for (std::size_t i = 0; i < b.samples().size(); ++i) {
    auto& x = b.samples()[i];
    BOOST_TEST(x.step == i);
    BOOST_TEST(x.used_blocks <= x.total_blocks);
    BOOST_TEST(x.running <= s.max_running);
  }
  sum.swap_out_failures += d.swap_out_failures();
  sum.chunk_extends += b.chunk_extends();
  sum.preempted_mid_prefill += d.preempted_mid_prefill();
  sum.swapped_mid_prefill += d.swapped_mid_prefill();
  sum.kv_checked += d.kv_checked();
  BOOST_TEST(d.kv_wrong() == 0u);
  // The batcher's count takes in quota and supervisor preemptions too.
  BOOST_TEST(b.preempted_mid_prefill()
             >= d.preempted_mid_prefill() + d.swapped_mid_prefill());
  if (s.prefill_chunk == 0) {
    BOOST_TEST(b.chunk_extends() == 0u);
    BOOST_TEST(b.preempted_mid_prefill() == 0u);
  }
  // Every draft the pool took was settled by a verdict or dropped with its
  // request, and the pool counted the same drafts and rejections.
  draft_figures drafts;
  for (auto& f : b.figures())
    drafts.add(f.drafts);
  BOOST_TEST(drafts.draft_tokens
             == drafts.accepted + drafts.rejected + drafts.dropped);
  BOOST_TEST(drafts.draft_tokens == d.core().counters().draft_tokens);
  BOOST_TEST(drafts.rejected == d.core().counters().drafts_rejected);
  BOOST_TEST(drafts.decode_tokens <= drafts.decode_steps * (1 + s.draft_tokens));
  if (s.draft_tokens == 0)
    BOOST_TEST(drafts.decode_tokens == drafts.decode_steps);
  if (s.draft_acceptance == 0.0)
    BOOST_TEST(drafts.accepted == 0u);
  if (s.draft_acceptance == 1.0)
    BOOST_TEST(drafts.rejected == 0u);
  sum.drafts.add(drafts);
}

} // namespace

BOOST_AUTO_TEST_SUITE(batcher_model)

BOOST_AUTO_TEST_CASE(random_scenarios_with_recompute_keep_the_pool_sound) {
  run_summary sum;
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    BOOST_TEST_CONTEXT("seed " << seed) {
      auto s = fitting(random_scenario(seed, false));
      run_and_check(s, seed, 0.0, sum);
    }
  }
  // The tight pools made the cache preempt (in the step) and the quotas
  // made tenants give way: both paths ran.
  BOOST_TEST(sum.preempted_in_step > 0u);
  BOOST_TEST(sum.by_quota > 0u);
  BOOST_TEST(sum.readmitted > 0u);
  BOOST_TEST(sum.hits > 0u);
}

BOOST_AUTO_TEST_CASE(random_scenarios_with_swap_keep_the_pool_sound) {
  run_summary sum;
  for (std::uint64_t seed = 101; seed <= 112; ++seed) {
    BOOST_TEST_CONTEXT("seed " << seed) {
      auto s = fitting(random_scenario(seed, true));
      run_and_check(s, seed, 0.0, sum);
    }
  }
  BOOST_TEST(sum.swaps > 0u);
  BOOST_TEST(sum.swap_ins > 0u);
  // A full host tier turned swaps into recomputes.
  BOOST_TEST(sum.swap_out_failures > 0u);
}

BOOST_AUTO_TEST_CASE(supervisor_preemptions_at_any_point_are_absorbed) {
  run_summary sum;
  for (std::uint64_t seed = 201; seed <= 212; ++seed) {
    BOOST_TEST_CONTEXT("seed " << seed) {
      auto s = fitting(random_scenario(seed, seed % 2 == 0));
      run_and_check(s, seed * 31, 0.08, sum);
    }
  }
  BOOST_TEST(sum.by_cache > 0u);
}

BOOST_AUTO_TEST_CASE(random_scenarios_with_chunked_prefill_and_recompute_keep_the_pool_sound) {
  run_summary sum;
  for (std::uint64_t seed = 301; seed <= 316; ++seed) {
    BOOST_TEST_CONTEXT("seed " << seed) {
      auto s = fitting(random_scenario(seed, false, true));
      run_and_check(s, seed, 0.0, sum);
    }
  }
  BOOST_TEST_MESSAGE("chunked, recompute: " << sum.chunk_extends
                     << " chunk extends, " << sum.preempted_mid_prefill
                     << " preempted mid-prefill, " << sum.kv_checked
                     << " K/V slots checked");
  BOOST_TEST(sum.chunk_extends > 0u);
  // Requests preempted with half a prompt in prefilled it again, and the
  // K/V of every running request's tokens were where its table says.
  BOOST_TEST(sum.preempted_mid_prefill > 0u);
  BOOST_TEST(sum.preempted_in_step > 0u);
  BOOST_TEST(sum.by_quota > 0u);
  BOOST_TEST(sum.readmitted > 0u);
  BOOST_TEST(sum.hits > 0u);
  BOOST_TEST(sum.kv_checked > 0u);
}

BOOST_AUTO_TEST_CASE(random_scenarios_with_chunked_prefill_and_swap_keep_the_pool_sound) {
  run_summary sum;
  for (std::uint64_t seed = 401; seed <= 416; ++seed) {
    BOOST_TEST_CONTEXT("seed " << seed) {
      auto s = fitting(random_scenario(seed, true, true));
      run_and_check(s, seed, seed % 3 == 0 ? 0.08 : 0.0, sum);
    }
  }
  BOOST_TEST_MESSAGE("chunked, swap: " << sum.chunk_extends
                     << " chunk extends, " << sum.swapped_mid_prefill
                     << " swapped out mid-prefill, " << sum.swap_ins
                     << " swap-ins, " << sum.kv_checked << " K/V slots checked");
  BOOST_TEST(sum.chunk_extends > 0u);
  // Swapped out with half a prompt in, and back in to carry on.
  BOOST_TEST(sum.swapped_mid_prefill > 0u);
  BOOST_TEST(sum.swap_ins > 0u);
  BOOST_TEST(sum.swap_out_failures > 0u);
  BOOST_TEST(sum.by_cache > 0u);
  BOOST_TEST(sum.kv_checked > 0u);
}

/// What the random runs with drafts must have gone through: drafts
/// settled both ways, and some dropped with their requests (preempted or
/// swapped out and recomputed with drafts unsettled).
void check_draft_sum(const run_summary& sum) {
  auto& d = sum.drafts;
  BOOST_TEST_MESSAGE(d.draft_tokens << " drafts: " << d.accepted << " accepted, "
                     << d.rejected << " rejected, " << d.dropped << " dropped; "
                     << sum.kv_checked << " K/V slots checked");
  BOOST_TEST(d.accepted > 0u);
  BOOST_TEST(d.rejected > 0u);
  BOOST_TEST(d.dropped > 0u);
  BOOST_TEST(d.decode_tokens > d.decode_steps); // drafts made steps count more
  BOOST_TEST(sum.kv_checked > 0u);
}

BOOST_AUTO_TEST_CASE(random_scenarios_with_drafts_and_recompute_keep_the_pool_sound) {
  run_summary sum;
  for (std::uint64_t seed = 501; seed <= 512; ++seed) {
    BOOST_TEST_CONTEXT("seed " << seed) {
      auto s = fitting(random_scenario(seed, false, seed % 3 == 0, true));
      run_and_check(s, seed, 0.0, sum);
    }
  }
  check_draft_sum(sum);
  BOOST_TEST(sum.preempted_in_step > 0u);
  BOOST_TEST(sum.by_quota > 0u);
}

BOOST_AUTO_TEST_CASE(random_scenarios_with_drafts_and_swap_keep_the_pool_sound) {
  run_summary sum;
  for (std::uint64_t seed = 601; seed <= 612; ++seed) {
    BOOST_TEST_CONTEXT("seed " << seed) {
      auto s = fitting(random_scenario(seed, true, seed % 3 == 0, true));
      run_and_check(s, seed, 0.0, sum);
    }
  }
  check_draft_sum(sum);
  BOOST_TEST(sum.swaps > 0u);
  BOOST_TEST(sum.swap_ins > 0u);
  BOOST_TEST(sum.swap_out_failures > 0u);
}

BOOST_AUTO_TEST_CASE(supervisor_preemptions_with_drafts_unsettled_are_absorbed) {
  run_summary sum;
  for (std::uint64_t seed = 701; seed <= 712; ++seed) {
    BOOST_TEST_CONTEXT("seed " << seed) {
      auto s = fitting(random_scenario(seed, seed % 2 == 0, seed % 3 == 0, true));
      run_and_check(s, seed * 31, 0.08, sum);
    }
  }
  check_draft_sum(sum);
  BOOST_TEST(sum.by_cache > 0u);
}

BOOST_AUTO_TEST_CASE(without_drain_the_run_stops_at_steps) {
  auto j = random_scenario(7, false);
  j["drain"] = false;
  auto s = fitting(j);
  core_driver d{s, 7};
  BOOST_TEST(d.run(s.steps + 100));
  BOOST_TEST(d.b().step() == s.steps);
}

BOOST_AUTO_TEST_SUITE_END()
