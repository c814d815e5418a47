// facade_latency: round-trip latency of the blocking facade's allocate,
// extend and deallocate (p50 / p99 / mean), one call at a time from a plain
// thread, on a bookkeeping-only cache. Prints one JSON line.
//
//   facade_latency [--requests N] [--extends K] [--scheduler-threads T]
#include <algorithm>
#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <nlohmann/json.hpp>

#include "kvactor/actors/kv_cache_manager.hpp"
#include "kvactor/messages/error.hpp"
#include "bookkeeping_config.hpp"
#include "latency_summary.hpp"

using namespace kvactor;
using kvactor::bench::latency_summary;
using clock_type = std::chrono::steady_clock;

int main(int argc, char** argv) {
  std::size_t requests = 20000;
  std::size_t extends = 16;
  std::uint32_t threads = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string arg = argv[i];
    if (arg == "--requests")
      requests = std::stoul(argv[i + 1]);
    else if (arg == "--extends")
      extends = std::stoul(argv[i + 1]);
    else if (arg == "--scheduler-threads")
      threads = static_cast<std::uint32_t>(std::stoul(argv[i + 1]));
    else {
      std::cerr << "usage: facade_latency [--requests N] [--extends K] "
                   "[--scheduler-threads T]\n";
      return 2;
    }
  }
  auto cfg = kvactor::bench::bookkeeping_config(100000, threads);
  caf::actor_system_config sys_cfg;
  configure(sys_cfg, cfg);
  caf::actor_system sys{sys_cfg};
  auto mgr = kv_cache_manager::start(sys, cfg);
  if (!mgr) {
    std::cerr << render(mgr.error()) << '\n';
    return 1;
  }
  allocation_request req;
  req.max_sequence_length = 1 << 20;
  req.num_layers = 1;
  req.num_heads = 1;
  req.head_dim = 8;
  req.initial_tokens = 100;
  std::vector<double> alloc_us, extend_us, free_us;
  auto since = [](clock_type::time_point t0) {
    return std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
  };
  auto warmup = requests / 10;
  for (std::size_t i = 0; i < requests + warmup; ++i) {
    bool measured = i >= warmup;
    req.id = i + 1;
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
    }
    t0 = clock_type::now();
    auto err = mgr->deallocate(req.id);
    dt = since(t0);
    if (err) {
      std::cerr << "deallocate: " << render(err) << '\n';
      return 1;
    }
    if (measured)
      free_us.push_back(dt);
  }
  nlohmann::json out{{"bench", "facade_latency"},
                     {"scheduler_threads", threads},
                     {"allocate", latency_summary(alloc_us)},
                     {"extend", latency_summary(extend_us)},
                     {"deallocate", latency_summary(free_us)}};
  std::cout << out.dump() << std::endl;
  return 0;
}
