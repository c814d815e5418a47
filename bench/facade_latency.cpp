// facade_latency: round-trip latency of the blocking facade's allocate,
// extend and deallocate (p50 / p99 / mean), one call at a time from a plain
// thread, on a bookkeeping-only cache. Prints one JSON line.
//
//   facade_latency [--requests N] [--extends K] [--scheduler-threads T]
//                  [--prompt-len P] [--shared-prefix S] [--live L]
//                  [--probe W] [--tables R]
//
// By default a request is 100 unnamed tokens, freed right after its K
// one-token extends: the bare path, no hashing or lookup. --prompt-len
// gives each request a prompt (hashed, looked up, its full blocks entered
// in the prefix index) whose first S tokens all requests share (prefix
// hits); --live keeps the last L requests live, so the pool is populated
// and frees come L requests later. With K >= 16 extends cross block
// boundaries (a block taken every 16 tokens).
//
// --probe W (with --prompt-len): after the run, 2,000 cached_prefixes calls
// of W waiting requests each (fresh prompts after the shared prefix, as a
// cache-aware scheduler would ask before admitting them), "probe" in the
// output; each answer is checked against the shared prefix's whole blocks.
//
// --tables R: after each extend, R calls of the handle's checked_table()
// (an engine on ferrum's contract reads the block table every step, to
// build its attention metadata), "table" in the output; each answer's
// token count is checked.
//
// "floor_before" / "floor_after": the same blocking hand-off (the
// facade's bridge) to a trivial actor that answers at once, 11,000 calls
// before the run and 11,000 after (the first 1,000 of each not counted):
// what any facade call pays before the cache does any work, in the same
// minutes - the VM's speed changes in spells, and the floor shows which
// one a run fell in (floor_after p50 0.9 us in a fast spell, 3.3-5 us in
// a slow one). floor_before also takes the first ~0.4 s of the cache's
// life: a process's new threads start on its CPU, and until Linux moves
// the worker or the caller to the other core, each spins away the CPU
// the other needs - a hand-off then costs the worker's whole poll (p50
// ~23 us). Sleeping 0.5 s first made it ~0.9 us; the calls measured
// after it no longer pay that.
#include <algorithm>
#include <chrono>
#include <deque>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <nlohmann/json.hpp>

#include "kvactor/actors/blocking_bridge.hpp"
#include "kvactor/actors/kv_cache_manager.hpp"
#include "kvactor/messages/error.hpp"
#include "bench_cache.hpp"
#include "bench_options.hpp"
#include "bookkeeping_config.hpp"
#include "latency_summary.hpp"

using namespace kvactor;
using kvactor::bench::latency_summary;
using clock_type = std::chrono::steady_clock;

int main(int argc, char** argv) {
  std::size_t requests = 20000;
  std::size_t extends = 16;
  std::uint32_t threads = 0;
  std::size_t prompt_len = 0;
  std::size_t shared_prefix = 0;
  std::size_t live_target = 0;
  std::size_t probe_window = 0;
  std::size_t tables = 0;
  using kvactor::bench::count;
  if (!kvactor::bench::parse_options(
        argc, argv,
        "usage: facade_latency [--requests N] [--extends K] "
        "[--scheduler-threads T] [--prompt-len P] [--shared-prefix S] "
        "[--live L] [--probe W] [--tables R]\n",
        [&](const std::string& arg, const std::string& v) {
          if (arg == "--requests")
            requests = count(v);
          else if (arg == "--extends")
            extends = count(v);
          else if (arg == "--scheduler-threads")
            threads = static_cast<std::uint32_t>(count(v));
          else if (arg == "--prompt-len")
            prompt_len = count(v);
          else if (arg == "--shared-prefix")
            shared_prefix = count(v);
          else if (arg == "--live")
            live_target = count(v);
          else if (arg == "--probe")
            probe_window = count(v);
          else if (arg == "--tables")
            tables = count(v);
          else
            return false;
          return true;
        }))
    return 2;
  if (shared_prefix > prompt_len) {
    std::cerr << "facade_latency: --shared-prefix " << shared_prefix
              << " is longer than --prompt-len " << prompt_len << '\n';
    return 2;
  }
  if (probe_window > 0 && prompt_len == 0) {
    std::cerr << "facade_latency: --probe needs --prompt-len (what would a "
                 "prompt-less request find cached?)\n";
    return 2;
  }
  auto cfg = kvactor::bench::bookkeeping_config(100000, threads);
  kvactor::bench::bench_cache cache{"facade_latency", cfg};
  if (!cache.mgr)
    return 1;
  auto& sys = cache.sys;
  auto& mgr = cache.mgr;
  allocation_request req;
  req.max_sequence_length = 1 << 20;
  req.num_layers = 1;
  req.num_heads = 1;
  req.head_dim = 8;
  req.initial_tokens = prompt_len == 0 ? 100 : 0; // 0: the prompt's length
  std::mt19937 rng{7};
  std::uniform_int_distribution<token_id> token{0, 31999};
  std::vector<token_id> prefix(shared_prefix);
  for (auto& t : prefix)
    t = token(rng);
  std::deque<request_id> live;
  std::vector<double> alloc_us, extend_us, free_us, table_us;
  auto since = [](clock_type::time_point t0) {
    return std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
  };
  // The floor, before and after the run.
  auto echo = caf::actor_cast<caf::strong_actor_ptr>(
    sys.spawn([]() -> caf::behavior {
      return {[](std::int32_t x) { return x; }};
    }));
  detail::blocking_bridge bridge{sys};
  std::vector<double> floor_us;
  auto measure_floor = [&](std::size_t n) {
    for (std::size_t i = 0; i < n + n / 10; ++i) { // a tenth to warm up
      auto t0 = clock_type::now();
      auto r = bridge.call(echo, caf::make_message(std::int32_t{1}),
                           std::chrono::seconds{10});
      auto dt = since(t0);
      if (!r)
        return false;
      if (i >= n / 10)
        floor_us.push_back(dt);
    }
    return true;
  };
  if (!measure_floor(10000)) {
    std::cerr << "floor: no reply from a trivial actor\n";
    return 1;
  }
  auto floor_before = std::move(floor_us);
  floor_us.clear();
  auto warmup = requests / 10;
  for (std::size_t i = 0; i < requests + warmup; ++i) {
    bool measured = i >= warmup;
    req.id = i + 1;
    if (prompt_len > 0) {
      req.prompt = prefix;
      while (req.prompt.size() < prompt_len)
        req.prompt.push_back(token(rng));
    }
    auto t0 = clock_type::now();
    auto h = mgr->allocate(req);
    auto dt = since(t0);
    if (!h) {
      std::cerr << "allocate: " << render(h.error()) << '\n';
      return 1;
    }
    if (measured)
      alloc_us.push_back(dt);
    for (std::size_t k = 0; k < extends; ++k) {
      t0 = clock_type::now();
      auto err = mgr->extend(**h, 1);
      dt = since(t0);
      if (err) {
        std::cerr << "extend: " << render(err) << '\n';
        return 1;
      }
      if (measured)
        extend_us.push_back(dt);
      for (std::size_t r = 0; r < tables; ++r) {
        t0 = clock_type::now();
        auto t = (*h)->checked_table();
        dt = since(t0);
        if (!t) {
          std::cerr << "table: " << render(t.error()) << '\n';
          return 1;
        }
        auto want = (prompt_len == 0 ? 100 : prompt_len) + k + 1;
        if (t->num_tokens != want) {
          std::cerr << "table: " << t->num_tokens << " tokens, " << want
                    << " expected\n";
          return 1;
        }
        if (measured)
          table_us.push_back(dt);
      }
    }
    live.push_back(req.id);
    if (live.size() <= live_target)
      continue;
    auto oldest = live.front();
    live.pop_front();
    t0 = clock_type::now();
    auto err = mgr->deallocate(oldest);
    dt = since(t0);
    if (err) {
      std::cerr << "deallocate: " << render(err) << '\n';
      return 1;
    }
    if (measured)
      free_us.push_back(dt);
  }
  // Probes, while the live requests still hold the shared prefix.
  std::vector<double> probe_us;
  if (probe_window > 0) {
    auto bs = cfg.block_size;
    auto want = std::min(shared_prefix / bs, (prompt_len - 1) / bs) * bs;
    std::vector<allocation_request> waiting(probe_window, req);
    for (std::size_t round = 0; round < 2200; ++round) {
      for (std::size_t k = 0; k < probe_window; ++k) {
        auto& w = waiting[k];
        w.id = requests + warmup + 1 + k;
        w.prompt = prefix;
        while (w.prompt.size() < prompt_len)
          w.prompt.push_back(token(rng));
      }
      auto t0 = clock_type::now();
      auto got = mgr->cached_prefixes(waiting);
      auto dt = since(t0);
      if (!got) {
        std::cerr << "cached_prefixes: " << render(got.error()) << '\n';
        return 1;
      }
      for (auto n : *got)
        if (n != want) {
          std::cerr << "cached_prefixes: " << n << " tokens cached, "
                    << want << " expected\n";
          return 1;
        }
      if (round >= 200)
        probe_us.push_back(dt);
    }
  }
  for (auto id : live)
    mgr->deallocate(id);
  if (!measure_floor(10000)) {
    std::cerr << "floor: no reply from a trivial actor\n";
    return 1;
  }
  nlohmann::json out{{"bench", "facade_latency"},
                     {"scheduler_threads", threads},
                     {"prompt_len", prompt_len},
                     {"shared_prefix", shared_prefix},
                     {"live", live_target},
                     {"extends_per_request", extends},
                     {"allocate", latency_summary(alloc_us)},
                     {"extend", latency_summary(extend_us)},
                     {"deallocate", latency_summary(free_us)},
                     {"floor_before", latency_summary(floor_before)},
                     {"floor_after", latency_summary(floor_us)}};
  if (tables > 0)
    out["table"] = latency_summary(table_us);
  if (probe_window > 0) {
    out["probe_window"] = probe_window;
    out["probe"] = latency_summary(probe_us);
  }
  std::cout << out.dump() << std::endl;
  return 0;
}
