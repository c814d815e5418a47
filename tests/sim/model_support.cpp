// model_support: the seeded random model test's scenarios and its run to
// the end of the drain, with what must hold then (model_support.hpp).
#include "model_support.hpp"

#include <algorithm>
#include <random>

#include <boost/test/unit_test.hpp>

#include "core_driver.hpp"
#include "workload.hpp"

namespace kvactor::sim::test {

using nlohmann::json;

namespace {

const char* priorities[] = {"low", "normal", "high", "critical"};

std::uint32_t uniform(std::mt19937_64& rng, std::uint32_t lo, std::uint32_t hi) {
  return std::uniform_int_distribution<std::uint32_t>{lo, hi}(rng);
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



/// A workload with conversations: its first turns are the generator's
/// requests, every session ran to its last turn (nothing is turned away
/// or refused: max_waiting is the default, every request fits), and its
/// follow-ups' figures add up.
void check_sessions(const tenant_figures& f, const totals& want, std::size_t w) {
  auto& c = f.conv;
  BOOST_TEST(c.first_turns == want.requests[w]);
  BOOST_TEST(c.first_turns + c.follow_ups == f.arrived);
  BOOST_TEST(c.follow_ups_turned_away == 0u);
  BOOST_TEST(c.sessions_completed == c.first_turns);
  BOOST_TEST(c.first_prompt_tokens == want.prompt[w]);
  BOOST_TEST(c.first_prompt_tokens + c.follow_up_prompt_tokens == f.prompt_tokens);
  BOOST_TEST(c.history_tokens < c.follow_up_prompt_tokens + (c.follow_ups == 0));
  BOOST_TEST(c.follow_up_hit_tokens <= c.follow_up_prompt_tokens);
  BOOST_TEST(f.generated_tokens >= want.output[w]);
}

} // namespace

json random_scenario(std::uint64_t seed, bool swap, bool chunked, bool drafts,
                     bool conversation) {
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
  if (conversation) // last too: sessions on 2 of 3 workloads, on average
    for (auto& w : out["workloads"])
      if (uniform(rng, 0, 2) > 0)
        w["conversation"] = {{"turns", {1, uniform(rng, 2, 4)}},
                             {"user_len", {1, uniform(rng, 1, 2 * bs)}},
                             {"think_steps", {0, uniform(rng, 0, 8)}}};
  return out;
}


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
      if (s.workloads[w].conversation.enabled()) {
        check_sessions(f, want, w);
        sum.conv.add(f.conv);
      } else {
        BOOST_TEST(f.arrived == want.requests[w]);
        // Each output token is generated once, preempted or not; each
        // prompt counted once at its first admission.
        BOOST_TEST(f.generated_tokens == want.output[w]);
        BOOST_TEST(f.prompt_tokens == want.prompt[w]);
      }
      // Every request fits (the scenario says so): none is refused, all end.
      BOOST_TEST(f.rejected == 0u);
      BOOST_TEST(f.admitted == f.arrived);
      BOOST_TEST(f.finished == f.admitted);
      BOOST_TEST(f.queue_delay.size() == f.admitted);
      BOOST_TEST(f.latency.size() == f.finished);
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
  // Counted preempted, and apart, for the summary to set beside the cache's.
  BOOST_TEST(b.preempted_mid_swap() == d.swap_outs_of_preempted());
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

} // namespace kvactor::sim::test
