// The workload generator: a scenario and a seed always give the same
// requests, another seed others; lengths, token ids, priorities and system
// prompts as configured; arrival counts near the rate (bursts included);
// nothing from `steps` on; ids increasing from 1; looking ahead for the
// next arrival (idle gaps) changes none.
#include <algorithm>
#include <cmath>
#include <map>

#include "sim_support.hpp"
#include "workload.hpp"

using namespace kvactor;
using namespace kvactor::sim;
using namespace kvactor::sim::test;

namespace {

/// Every request of a run of `s`, in arrival order.
std::vector<sim_request> all_requests(const scenario& s) {
  workload_generator gen{s};
  std::vector<sim_request> out;
  for (std::uint64_t step = 0; step < s.steps; ++step)
    for (auto& r : gen.arrivals(step)) {
      BOOST_TEST(r.arrival == step);
      out.push_back(std::move(r));
    }
  BOOST_TEST(gen.generated() == out.size());
  return out;
}

bool same(const sim_request& x, const sim_request& y) {
  return x.id == y.id && x.workload == y.workload && x.arrival == y.arrival
         && x.priority == y.priority && x.system_prompt == y.system_prompt
         && x.prompt == y.prompt && x.output == y.output;
}

bool same(const std::vector<sim_request>& xs, const std::vector<sim_request>& ys) {
  if (xs.size() != ys.size())
    return false;
  for (std::size_t i = 0; i < xs.size(); ++i)
    if (!same(xs[i], ys[i]))
      return false;
  return true;
}

} // namespace

BOOST_AUTO_TEST_SUITE(workload)

BOOST_AUTO_TEST_CASE(same_scenario_and_seed_give_the_same_requests) {
  auto s = parse_json(small_scenario());
  auto xs = all_requests(s);
  BOOST_REQUIRE_GT(xs.size(), 50u);
  BOOST_TEST(same(xs, all_requests(s)));
  // Another seed: other requests.
  for (std::uint64_t seed : {8u, 9u, 1000u}) {
    auto t = s;
    t.seed = seed;
    BOOST_TEST(!same(xs, all_requests(t)), "seed " << seed);
  }
}

BOOST_AUTO_TEST_CASE(ids_increase_from_one_and_nothing_arrives_from_steps_on) {
  auto s = parse_json(small_scenario());
  workload_generator gen{s};
  request_id next = 1;
  for (std::uint64_t step = 0; step < s.steps + 50; ++step) {
    auto rs = gen.arrivals(step);
    if (step >= s.steps)
      BOOST_TEST(rs.empty(), "arrivals at step " << step);
    for (auto& r : rs)
      BOOST_TEST(r.id == next++);
  }
  BOOST_TEST(gen.generated() == next - 1);
}

BOOST_AUTO_TEST_CASE(lengths_tokens_and_priorities_are_as_configured) {
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    auto j = small_scenario();
    j["seed"] = seed;
    j["workloads"]["a"]["vocab_size"] = 7;
    j["workloads"]["b"]["priority"] = "critical";
    auto s = parse_json(j);
    // Per system prompt of tenant a: the prefix all its requests share.
    std::map<int, std::vector<token_id>> common;
    for (auto& r : all_requests(s)) {
      auto& w = s.workloads[r.workload];
      BOOST_TEST((r.priority == w.priority));
      std::uint32_t sys_min = 0;
      std::uint32_t sys_max = 0;
      if (r.system_prompt >= 0) {
        BOOST_REQUIRE_EQUAL(r.workload, 0u); // only a has system prompts
        BOOST_TEST(r.system_prompt < 2);
        sys_min = w.system_prompts.len.min;
        sys_max = w.system_prompts.len.max;
        auto i = common.find(r.system_prompt);
        if (i == common.end()) {
          common.emplace(r.system_prompt, r.prompt);
        } else {
          auto& c = i->second;
          auto m = std::mismatch(c.begin(), c.end(), r.prompt.begin(),
                                 r.prompt.end());
          c.erase(m.first, c.end());
        }
      }
      BOOST_TEST(r.prompt.size() >= w.prompt_len.min + sys_min);
      BOOST_TEST(r.prompt.size() <= w.prompt_len.max + sys_max);
      BOOST_TEST(r.output.size() >= w.output_len.min);
      BOOST_TEST(r.output.size() <= w.output_len.max);
      auto in_vocab = [&](token_id t) {
        return t >= 0 && t < static_cast<token_id>(w.vocab_size);
      };
      BOOST_TEST(std::all_of(r.prompt.begin(), r.prompt.end(), in_vocab));
      BOOST_TEST(std::all_of(r.output.begin(), r.output.end(), in_vocab));
    }
    // Requests naming the same system prompt start with it (at least its
    // shortest length).
    BOOST_TEST(common.size() == 2u);
    for (auto& [k, c] : common)
      BOOST_TEST(c.size() >= s.workloads[0].system_prompts.len.min, "prompt " << k);
  }
}

BOOST_AUTO_TEST_CASE(explicit_system_prompts_are_used_as_given) {
  auto j = small_scenario();
  j["workloads"]["a"]["system_prompts"] = {{"tokens", {{5, 6, 7}, {9, 9}}},
                                           {"share", 1}};
  auto s = parse_json(j);
  std::size_t used[2] = {0, 0};
  for (auto& r : all_requests(s)) {
    if (r.workload != 0)
      continue;
    BOOST_REQUIRE(r.system_prompt >= 0);
    auto& sp = s.workloads[0].system_prompts.tokens[r.system_prompt];
    BOOST_REQUIRE_GE(r.prompt.size(), sp.size());
    BOOST_TEST(std::equal(sp.begin(), sp.end(), r.prompt.begin()));
    BOOST_TEST(r.prompt.size() - sp.size() >= s.workloads[0].prompt_len.min);
    BOOST_TEST(r.prompt.size() - sp.size() <= s.workloads[0].prompt_len.max);
    ++used[r.system_prompt];
  }
  // Chosen uniformly: both appear.
  BOOST_TEST(used[0] > 0u);
  BOOST_TEST(used[1] > 0u);
}

// Bernoulli share over ~2000 requests per run: the standard deviation of the
// observed fraction is about 0.01, so +-0.06 is six of them (and the seeds
// are fixed, so the outcome never changes anyway).
BOOST_AUTO_TEST_CASE(system_prompts_are_shared_with_the_configured_share) {
  for (double share : {0.0, 0.25, 0.8, 1.0}) {
    for (std::uint64_t seed : {11u, 12u}) {
      auto j = small_scenario();
      j["steps"] = 4000;
      j["seed"] = seed;
      j["workloads"]["a"]["system_prompts"]["share"] = share;
      auto s = parse_json(j);
      std::size_t n = 0;
      std::size_t with = 0;
      for (auto& r : all_requests(s)) {
        if (r.workload != 0) {
          BOOST_TEST(r.system_prompt == -1); // b has none
          continue;
        }
        ++n;
        with += r.system_prompt >= 0;
      }
      BOOST_REQUIRE_GT(n, 1500u);
      auto got = double(with) / double(n);
      BOOST_TEST(std::abs(got - share) <= 0.06,
                 "share " << share << " seed " << seed << ": got " << got);
      if (share == 0.0 || share == 1.0)
        BOOST_TEST(got == share);
    }
  }
}

// Poisson arrivals: over 4000 steps the mean per step is within 10% of the
// rate (the relative standard deviation is about 2% at rate 0.5), and burst
// windows run at the burst's rate.
BOOST_AUTO_TEST_CASE(arrivals_follow_the_rate_and_the_bursts) {
  auto j = small_scenario();
  j["steps"] = 4000;
  j["workloads"]["b"]["rate"] = 0.0;
  j["workloads"]["b"]["burst"] = {{"period", 100}, {"duration", 20}, {"rate", 2.0}};
  auto s = parse_json(j);
  std::uint64_t a = 0;
  std::uint64_t b_in = 0;
  std::uint64_t b_out = 0;
  for (auto& r : all_requests(s)) {
    if (r.workload == 0)
      ++a;
    else if (r.arrival % 100 < 20)
      ++b_in;
    else
      ++b_out;
  }
  BOOST_TEST(std::abs(double(a) / 4000 - 0.5) <= 0.05, "a: " << a);
  BOOST_TEST(b_out == 0u); // rate 0 outside the bursts
  // 40 bursts of 20 steps at 2 per step: 1600 expected.
  BOOST_TEST(std::abs(double(b_in) / 800 - 2.0) <= 0.2, "b: " << b_in);
}

// Each tenant's stream is seeded by its name: a tenant added after the
// others - or before them, shifting their workload indexes - changes
// nothing of theirs.
BOOST_AUTO_TEST_CASE(a_workload_added_before_or_after_the_others_leaves_them_unchanged) {
  for (auto name : {"c", "0"}) {
    BOOST_TEST_CONTEXT("added " << name) {
      auto j = small_scenario();
      auto& tenants = j["cache"]["tenants"];
      if (std::string{name} == "0") // first: a's and b's indexes shift
        tenants.insert(tenants.begin(), nlohmann::json{{"name", name}});
      else
        tenants.push_back({{"name", name}});
      auto without = parse_json(j);
      j["workloads"][name] = {{"rate", 0.7}, {"prompt_len", 3}, {"output_len", 3}};
      auto with = parse_json(j);
      // a's and b's requests, their workload index made the tenant's rank
      // in {a, b} (indexes shift when a tenant comes first); ids are
      // shared by all tenants.
      auto strip = [](const scenario& s, std::vector<sim_request> rs) {
        std::vector<sim_request> out;
        for (auto& r : rs) {
          auto& tenant = s.workloads[r.workload].tenant;
          if (tenant != "a" && tenant != "b")
            continue;
          r.workload = tenant == "a" ? 0 : 1;
          r.id = 0;
          out.push_back(std::move(r));
        }
        return out;
      };
      auto xs = strip(without, all_requests(without));
      auto ys = all_requests(with);
      BOOST_TEST(ys.size() > xs.size());
      BOOST_TEST(same(xs, strip(with, ys)));
    }
  }
}

BOOST_AUTO_TEST_CASE(looking_ahead_for_the_next_arrival_changes_no_request) {
  // Rare arrivals, with bursts: next_arrival draws ahead (what an idle run
  // skips), and arrivals() of the steps it looked at must draw nothing
  // twice - every request as without the looks.
  auto j = small_scenario();
  j["steps"] = 3000;
  j["workloads"]["a"]["rate"] = 0.01;
  j["workloads"]["b"]["rate"] = 0.003;
  j["workloads"]["b"]["burst"] = {{"period", 700}, {"duration", 5}, {"rate", 2}};
  auto s = parse_json(j);
  auto want = all_requests(s);
  BOOST_REQUIRE_GT(want.size(), 40u);
  for (std::uint64_t span : {1u, 7u, 100u, 5000u}) {
    workload_generator gen{s};
    std::vector<sim_request> got;
    std::uint64_t looked_to = 0;
    for (std::uint64_t step = 0; step < s.steps; ++step) {
      if (step % 3 == 0) {
        // The next arrival: none before it (arrivals() below checks), and
        // none at or after the limit is named.
        auto next = gen.next_arrival(step, step + span);
        BOOST_TEST(next >= step);
        BOOST_TEST(next <= step + span);
        looked_to = std::max(looked_to, next);
      }
      auto rs = gen.arrivals(step);
      if (step < looked_to)
        BOOST_TEST(rs.empty(), "span " << span << ", step " << step);
      for (auto& r : rs)
        got.push_back(std::move(r));
    }
    BOOST_TEST(same(want, got), "span " << span);
  }
}

BOOST_AUTO_TEST_SUITE_END()
