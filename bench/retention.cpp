// retention: how much a high-priority tenant's prefix hit rate drops when a
// low-priority tenant bursts, with kvactor's priority retention (cached
// blocks kept by tenant priority, then request priority) against plain LRU,
// in the same run. Drives the block pool core directly with one step per
// scheduler iteration (vLLM's policy); prints one JSON line per variant and
// a summary line. The step preempts only for a pool shortage: an extend
// refused at the batch tenant's quota makes room as the simulator does
// (examples/multi_tenant_sim/batcher_apply.cpp) - the tenant's newest
// request is freed and recomputed later - and a failed extend never counts
// as progress. Failed operations are counted by error code.
//
//   retention [--steps N] [--seed S] [--batch-quota B]
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvactor/actors/block_pool_core.hpp"
#include "kvactor/messages/error.hpp"
#include "bench_options.hpp"

using namespace kvactor;

namespace {

struct workload_request {
  std::uint16_t tenant; // 0 interactive, 1 batch
  std::vector<token_id> prompt;
  std::uint32_t output;
};

struct figures {
  std::uint64_t prompt_tokens[2] = {0, 0};
  std::uint64_t hit_tokens[2] = {0, 0};
  std::uint64_t preemptions = 0;       ///< by the step, for a pool shortage
  std::uint64_t quota_preemptions = 0; ///< by the harness, at a tenant's quota
  std::uint64_t dropped = 0; ///< requests whose extend failed otherwise
  std::uint64_t evictions = 0;
  /// Failed operations of the steps, by kind and error code.
  std::map<std::string, std::uint64_t> failed_extends, failed_admits;
  double hit_rate(int t) const {
    return prompt_tokens[t] == 0 ? 0.0
                                 : double(hit_tokens[t]) / double(prompt_tokens[t]);
  }
};

/// Interactive: one request per step, one of 48 system prompts of 512
/// tokens plus 48 of its own, 24 output tokens - each prompt is idle (only
/// cached) most of the time. Batch: long unique prompts, 3 per step during a
/// burst of 150 steps every 600 steps.
std::vector<std::vector<workload_request>> make_arrivals(std::uint64_t steps,
                                                         bool burst,
                                                         std::uint64_t seed) {
  std::mt19937_64 rng{seed};
  auto tok = [&] { return static_cast<token_id>(rng() % 32000); };
  std::vector<std::vector<token_id>> system(48);
  for (auto& p : system)
    for (int i = 0; i < 512; ++i)
      p.push_back(tok());
  std::vector<std::vector<workload_request>> out(steps);
  for (std::uint64_t s = 0; s < steps; ++s) {
    workload_request r{0, system[rng() % system.size()], 24};
    for (int i = 0; i < 48; ++i)
      r.prompt.push_back(tok());
    out[s].push_back(std::move(r));
    if (burst && s % 600 >= 300 && s % 600 < 450)
      for (int k = 0; k < 3; ++k) {
        workload_request b{1, {}, 16};
        for (int i = 0; i < 1024; ++i)
          b.prompt.push_back(tok());
        out[s].push_back(std::move(b));
      }
  }
  return out;
}

/// The error's code, "out_of_blocks" - not its context, which names the
/// request - or its rendering outside kvactor's category.
std::string code_of(const caf::error& err) {
  if (err && err.category() == error_category)
    return to_string(static_cast<errc>(err.code()));
  return render(err);
}

figures run(const std::vector<std::vector<workload_request>>& arrivals,
            bool priorities, std::uint64_t quota) {
  cache_config cfg;
  cfg.block_size = 16;
  cfg.model = model_config{1, 1, 8, dtype::fp16};
  cfg.num_gpu_blocks = 4096;
  cfg.storage = "none";
  tenant_config interactive;
  interactive.name = "interactive";
  interactive.priority = priorities ? priority::high : priority::normal;
  tenant_config batch;
  batch.name = "batch";
  batch.max_blocks = quota;
  batch.priority = priorities ? priority::low : priority::normal;
  cfg.tenants = {interactive, batch};
  detail::block_pool_core pool{cfg, 4096};
  struct live {
    request_id id;
    std::uint16_t tenant;
    std::vector<token_id> tokens; ///< prompt + generated
    std::uint32_t left;           ///< output tokens still to generate
    std::uint64_t prompt_len;
  };
  std::deque<live> waiting;
  std::vector<live> running; ///< in admission order: the newest last
  std::vector<request_id> to_free;
  // Freed at their tenant's quota: they queue again once the step that
  // frees them ran (a free and its next admission never share a step).
  std::vector<live> freeing, to_requeue;
  figures fig;
  request_id next = 1;
  std::mt19937_64 rng{7};
  for (std::uint64_t s = 0; s < arrivals.size() || !waiting.empty()
                            || !running.empty() || !to_requeue.empty();
       ++s) {
    if (s < arrivals.size())
      for (auto& a : arrivals[s])
        waiting.push_back(live{next++, a.tenant, a.prompt, a.output, a.prompt.size()});
    step_request step;
    step.frees.swap(to_free);
    freeing.swap(to_requeue);
    for (auto& r : running) {
      auto t = static_cast<token_id>(rng() % 32000);
      r.tokens.push_back(t);
      step.extends.push_back(extend_op{r.id, 1});
      step.tokens.push_back(t);
    }
    for (std::size_t i = 0; i < waiting.size() && i < 8; ++i) {
      allocation_request req;
      req.id = waiting[i].id;
      req.max_sequence_length = 1 << 16;
      req.num_layers = 1;
      req.num_heads = 1;
      req.head_dim = 8;
      req.tenant = waiting[i].tenant == 0 ? "interactive" : "batch";
      req.prompt = waiting[i].tokens;
      step.admits.push_back(std::move(req));
    }
    auto res = pool.run_step(step);
    // Failures, by kind: an extend refused leaves its request where it
    // was (the token it drew is dropped: no room was made for it).
    std::unordered_map<request_id, caf::error> failed_extend;
    {
      std::unordered_map<request_id, bool> extended;
      for (auto& e : step.extends)
        extended[e.id] = true;
      for (auto& f : res.failed) {
        auto code = code_of(f.error);
        if (extended.count(f.id) != 0) {
          ++fig.failed_extends[code];
          failed_extend.emplace(f.id, f.error);
        } else {
          ++fig.failed_admits[code];
        }
      }
    }
    // The step's preemptions are in one tenant or the other: a tenant the
    // step preempted in has room already, its refused extend just retries.
    bool made_room[2] = {false, false};
    for (auto id : res.preempted) {
      for (auto i = running.begin(); i != running.end(); ++i)
        if (i->id == id) {
          i->tokens.pop_back(); // the token it did not get room for
          made_room[i->tenant] = true;
          failed_extend.erase(id);
          waiting.push_front(std::move(*i));
          running.erase(i);
          break;
        }
      ++fig.preemptions;
    }
    // Admitted ones leave the queue; those refused at their tenant's quota
    // (they do not stop admission) keep their place.
    std::size_t sent = std::min<std::size_t>(waiting.size(), 8);
    std::deque<live> kept;
    std::size_t k = 0;
    for (std::size_t i = 0; i < sent; ++i) {
      auto& w = waiting[i];
      if (k < res.admitted.size() && res.admitted[k].id == w.id) {
        fig.prompt_tokens[w.tenant] += w.tokens.size();
        fig.hit_tokens[w.tenant] += res.admitted[k].hit_tokens;
        running.push_back(std::move(w));
        ++k;
      } else {
        kept.push_back(std::move(w));
      }
    }
    for (std::size_t i = sent; i < waiting.size(); ++i)
      kept.push_back(std::move(waiting[i]));
    waiting.swap(kept);
    // Requests freed at the last step's quota queue again, at the head.
    for (auto i = freeing.rbegin(); i != freeing.rend(); ++i)
      waiting.push_front(std::move(*i));
    freeing.clear();
    // A request whose extend failed made no progress: its token is dropped
    // and it tries again next step. At its tenant's quota, the tenant's
    // newest request not finishing now makes room (the simulator's rule);
    // any other failure (exceeds_capacity: it can never grow within its
    // tenant's quota) drops the request, counted, rather than retrying it
    // for ever.
    bool at_quota[2] = {false, false};
    std::vector<request_id> drop;
    std::vector<live> still;
    for (auto& r : running) {
      if (auto f = failed_extend.find(r.id); f != failed_extend.end()) {
        r.tokens.pop_back();
        if (has_code(f->second, errc::quota_exceeded))
          at_quota[r.tenant] = true;
        else
          drop.push_back(r.id);
        still.push_back(std::move(r));
      } else if (--r.left == 0) {
        to_free.push_back(r.id);
      } else {
        still.push_back(std::move(r));
      }
    }
    running.swap(still);
    auto free_and_requeue = [&](std::vector<live>::iterator i) {
      to_free.push_back(i->id);
      to_requeue.push_back(std::move(*i));
      running.erase(i);
    };
    for (int t = 0; t < 2; ++t) {
      if (!at_quota[t] || made_room[t])
        continue;
      // `running` holds only requests that go on: the newest of the tenant.
      for (auto i = running.end(); i != running.begin();) {
        if ((--i)->tenant == t) {
          ++fig.quota_preemptions;
          free_and_requeue(i);
          break;
        }
      }
    }
    for (auto id : drop)
      for (auto i = running.begin(); i != running.end(); ++i)
        if (i->id == id) {
          ++fig.dropped;
          to_free.push_back(id);
          running.erase(i);
          break;
        }
  }
  pool.run_step(step_request{to_free, {}, {}, {}, true, false});
  fig.evictions = pool.counters().evictions;
  if (auto err = pool.check_invariant()) {
    // Books that do not add up make every figure of the run meaningless.
    std::cerr << "retention: " << render(err) << '\n';
    std::exit(1);
  }
  return fig;
}

} // namespace

int main(int argc, char** argv) {
  std::uint64_t steps = 3000;
  std::uint64_t seed = 1;
  std::uint64_t quota = 2048; // the batch tenant's max_blocks: half the pool
  using kvactor::bench::count;
  if (!kvactor::bench::parse_options(
        argc, argv, "usage: retention [--steps N] [--seed S] [--batch-quota B]\n",
        [&](const std::string& arg, const std::string& v) {
          if (arg == "--steps")
            steps = count(v);
          else if (arg == "--seed")
            seed = count(v, UINT64_MAX);
          else if (arg == "--batch-quota")
            quota = count(v);
          else
            return false;
          return true;
        }))
    return 2;
  auto calm = make_arrivals(steps, false, seed);
  auto bursty = make_arrivals(steps, true, seed);
  double rate[2][2]; // [priorities][burst]
  for (int prio = 1; prio >= 0; --prio)
    for (int burst = 0; burst < 2; ++burst) {
      auto f = run(burst ? bursty : calm, prio == 1, quota);
      rate[prio][burst] = f.hit_rate(0);
      std::cout << nlohmann::json{{"bench", "retention"},
                                  {"retention", prio ? "priority" : "lru"},
                                  {"batch_burst", burst == 1},
                                  {"interactive_hit_rate", f.hit_rate(0)},
                                  {"batch_hit_rate", f.hit_rate(1)},
                                  {"preemptions", f.preemptions},
                                  {"quota_preemptions", f.quota_preemptions},
                                  {"dropped", f.dropped},
                                  {"failed_extends", f.failed_extends},
                                  {"failed_admits", f.failed_admits},
                                  {"evictions", f.evictions}}
                     .dump()
                << std::endl;
    }
  auto drop = [&](int prio) {
    return rate[prio][0] == 0 ? 0.0 : (rate[prio][0] - rate[prio][1]) / rate[prio][0];
  };
  std::cout << nlohmann::json{{"bench", "retention"},
                              {"interactive_hit_rate_drop_priority", drop(1)},
                              {"interactive_hit_rate_drop_lru", drop(0)},
                              {"target_drop", 0.05}}
                 .dump()
            << std::endl;
  return 0;
}
