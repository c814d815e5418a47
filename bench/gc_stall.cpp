// gc_stall: facade extend latency on a large pool while the supervisor's
// periodic GC runs, three ways on the same workload in one run - GC off;
// GC on with gc_check_interval_ms as given (the config's 60 s by default);
// GC on with every pass checking (gc_check_interval_ms = gc_interval_ms) -
// and what one explicit gc() takes (it always checks). A pass that checks
// the accounting invariant holds the pool for a scan of every block and
// table (~0.1 s at 1M blocks and 100k requests); until gc_check_interval_ms
// (2391be2) every timer pass checked, so once a second an extend waited
// that long. The third phase is that build's behaviour, the second what a
// pass that does not check still costs.
//
//   gc_stall [--requests N] [--blocks B] [--seconds S] [--gc-interval-ms I]
//            [--gc-check-interval-ms C] [--scheduler-threads T]
//
// N requests (default 100,000) of 96 unnamed tokens (6 blocks of 16) on a
// pool of B blocks (default 1,000,000; at least 10 x N, so usage stays at
// most 70 %, below the high mark where eviction starts); then for S
// seconds (default 3) per phase, one-token extends of a random request from
// one thread, timed. A request grown by 16 tokens is freed and a new one
// allocated in its place, untimed, so usage stays put however long the
// phase. Each phase has a cache of its own and starts its extends no
// sooner than I + 0.5 s after its cache started: the first timer pass
// checks (C counts from it), so with C longer than the setup and S
// together the second phase sees only passes that do not check, as a cache
// does between its checks. I defaults to 1000 (the config's), T to 0
// (CAF's default workers).
//
// Prints JSON lines: the workload; one per phase ("extend": calls, mean,
// p50, p90, p99, p99.9 and max in us, and over_50ms, the extends that took
// longer); the explicit gc() calls, on the GC-off cache after its phase.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvactor/actors/kv_cache_manager.hpp"
#include "kvactor/messages/error.hpp"
#include "bench_cache.hpp"
#include "bench_options.hpp"
#include "bookkeeping_config.hpp"
#include "latency_summary.hpp"

using namespace kvactor;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr std::uint64_t block_tokens = 16;
constexpr std::uint64_t prompt_tokens = 6 * block_tokens;
constexpr int explicit_gcs = 3;

struct options {
  std::uint64_t requests = 100000;
  std::uint64_t blocks = 1000000;
  std::uint64_t seconds = 3;
  std::uint64_t gc_interval_ms = 1000;
  std::uint64_t gc_check_interval_ms = 60000;
  std::uint32_t threads = 0;
};

double us_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - t0)
    .count();
}

/// One phase on a cache of its own: the extends' latencies and, if
/// `explicit_gc`, the explicit gc() calls after them. Empty on a failure
/// (reported on stderr).
std::optional<nlohmann::json> run(const options& o, const char* phase,
                                  std::uint64_t gc_interval_ms,
                                  std::uint64_t gc_check_interval_ms,
                                  nlohmann::json* explicit_gc = nullptr) {
  auto cfg = kvactor::bench::bookkeeping_config(
    static_cast<std::uint32_t>(o.blocks), o.threads);
  cfg.block_size = block_tokens;
  cfg.gc_interval_ms = gc_interval_ms;
  cfg.gc_check_interval_ms = gc_check_interval_ms;
  auto started = clock_type::now();
  kvactor::bench::bench_cache cache{"gc_stall", cfg};
  if (!cache.mgr)
    return std::nullopt;
  auto& mgr = *cache.mgr;
  request_id next_id = 1;
  auto admit = [&]() -> std::shared_ptr<kv_cache_handle> {
    allocation_request req;
    req.id = next_id++;
    req.initial_tokens = prompt_tokens;
    req.max_sequence_length = 1 << 20;
    req.num_layers = 1;
    req.num_heads = 1;
    req.head_dim = 8;
    auto h = mgr.allocate(req);
    if (!h) {
      std::cerr << "gc_stall: allocate: " << render(h.error()) << '\n';
      return nullptr;
    }
    return *h;
  };
  std::vector<std::shared_ptr<kv_cache_handle>> handles(o.requests);
  std::vector<std::uint8_t> grown(o.requests, 0);
  for (auto& h : handles)
    if (!(h = admit()))
      return std::nullopt;
  // Every phase waits as long, so that the GC phases' first (checking)
  // pass is behind them; the handle actors start meanwhile.
  std::this_thread::sleep_until(started
                                + std::chrono::milliseconds{o.gc_interval_ms}
                                + std::chrono::milliseconds{500});
  std::vector<double> us;
  std::mt19937_64 rng{1};
  std::uniform_int_distribution<std::size_t> pick{0, o.requests - 1};
  auto end = clock_type::now() + std::chrono::seconds{o.seconds};
  while (clock_type::now() < end) {
    auto i = pick(rng);
    if (grown[i] == block_tokens) { // its 7th block full: a fresh one
      if (auto err = mgr.deallocate(handles[i]->id())) {
        std::cerr << "gc_stall: deallocate: " << render(err) << '\n';
        return std::nullopt;
      }
      if (!(handles[i] = admit()))
        return std::nullopt;
      grown[i] = 0;
    }
    auto t0 = clock_type::now();
    auto err = mgr.extend(*handles[i], 1);
    auto dt = us_since(t0);
    if (err) {
      std::cerr << "gc_stall: extend: " << render(err) << '\n';
      return std::nullopt;
    }
    ++grown[i];
    us.push_back(dt);
  }
  auto extend = kvactor::bench::latency_summary(us);
  extend["p999_us"] = kvactor::bench::percentile(us, 0.999);
  extend["over_50ms"] = std::count_if(us.begin(), us.end(),
                                      [](double x) { return x > 50000; });
  nlohmann::json out{{"phase", phase},
                     {"gc_interval_ms", gc_interval_ms},
                     {"gc_check_interval_ms", gc_check_interval_ms},
                     {"extend", extend}};
  if (explicit_gc) {
    std::vector<double> ms, gc_time_ms;
    for (int k = 0; k < explicit_gcs; ++k) {
      auto t0 = clock_type::now();
      auto res = mgr.gc();
      ms.push_back(us_since(t0) / 1000);
      if (!res) {
        std::cerr << "gc_stall: gc: " << render(res.error()) << '\n';
        return std::nullopt;
      }
      gc_time_ms.push_back(res->gc_time_ms);
    }
    *explicit_gc = {{"phase", "explicit_gc"},
                    {"ms", ms},
                    {"gc_time_ms", gc_time_ms}};
  }
  return out;
}

} // namespace

int main(int argc, char** argv) {
  options o;
  using kvactor::bench::count;
  constexpr std::uint64_t day_ms = 24ull * 60 * 60 * 1000; // the config's cap
  if (!kvactor::bench::parse_options(
        argc, argv,
        "usage: gc_stall [--requests N] [--blocks B] [--seconds S] "
        "[--gc-interval-ms I] [--gc-check-interval-ms C] "
        "[--scheduler-threads T]\n"
        "  defaults: N 100000, B 1000000 (at least 10 x N), S 3, I 1000 "
        "(at least 1), C 60000 (0: only gc() checks), T 0\n",
        [&](const std::string& arg, const std::string& v) {
          if (arg == "--requests")
            o.requests = count(v, UINT32_MAX / 10, 1);
          else if (arg == "--blocks")
            o.blocks = count(v);
          else if (arg == "--seconds")
            o.seconds = count(v, 3600, 1);
          else if (arg == "--gc-interval-ms")
            o.gc_interval_ms = count(v, day_ms, 1); // 0 would be no GC phase
          else if (arg == "--gc-check-interval-ms")
            o.gc_check_interval_ms = count(v, day_ms); // 0: only gc() checks
          else if (arg == "--scheduler-threads")
            o.threads = static_cast<std::uint32_t>(count(v, 256));
          else
            return false;
          return true;
        }))
    return 2;
  if (o.blocks < 10 * o.requests) {
    std::cerr << "gc_stall: --blocks " << o.blocks << " is less than 10 x "
              << "--requests (" << 10 * o.requests << "): the requests' 6-7 "
              << "blocks each could take usage past 70 %, toward the high "
              << "mark where eviction starts\n";
    return 2;
  }
  std::cout << nlohmann::json{{"requests", o.requests},
                              {"blocks", o.blocks},
                              {"seconds_per_phase", o.seconds},
                              {"scheduler_threads", o.threads}}
                 .dump()
            << std::endl;
  nlohmann::json gc;
  auto off = run(o, "gc_off", 0, 0, &gc);
  if (!off)
    return 1;
  std::cout << off->dump() << std::endl;
  auto on = run(o, "gc_on", o.gc_interval_ms, o.gc_check_interval_ms);
  if (!on)
    return 1;
  std::cout << on->dump() << std::endl;
  auto every = run(o, "gc_on_check_every_pass", o.gc_interval_ms,
                   o.gc_interval_ms);
  if (!every)
    return 1;
  std::cout << every->dump() << std::endl << gc.dump() << std::endl;
  return 0;
}
