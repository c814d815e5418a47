// critical_steady: facade extend latency while usage sits at critical
// pressure with nobody to preempt - two tenants whose reservations fill
// the pool, each holding its reservation's worth - beside the same
// extends at low pressure, in one run. Within the critical band the pool
// wakes the supervisor at a change only if some tenant could offer a
// victim; waking it at every change cost a usage report and a victims
// query (O(requests log requests)) each, to name nobody.
// Usage: critical_steady [--requests N] [--extends K] [--scheduler-threads T]
//   N requests per tenant at critical (default 240: 960 of 1000 blocks),
//   K one-token extends each (at most 15: they stay in the second block).
#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvactor/actors/kv_cache_manager.hpp"
#include "kvactor/messages/error.hpp"
#include "bench_cache.hpp"
#include "bench_options.hpp"

using namespace kvactor;

namespace {

struct figures {
  double p50_us = 0;
  double p90_us = 0;
  std::uint64_t extends = 0;
  std::string pressure;
  std::uint64_t preemptions = 0;
  bool ok = false;
};

/// A pool of 1000 blocks of 16 tokens, tenants a and b reserving 500 each;
/// `per` requests of 17 tokens (2 blocks) per tenant, each extended by one
/// token `extends` times, timed.
figures run(std::uint64_t per, std::uint64_t extends, std::uint32_t threads) {
  cache_config cfg;
  cfg.block_size = 16;
  cfg.num_gpu_blocks = 1000;
  cfg.storage = "none";
  cfg.model = model_config{1, 1, 8, dtype::fp16};
  cfg.scheduler_threads = threads;
  tenant_config a, b;
  a.name = "a";
  a.reserved_blocks = 500;
  b.name = "b";
  b.reserved_blocks = 500;
  cfg.tenants = {a, b};
  figures out;
  kvactor::bench::bench_cache c("critical_steady", cfg);
  if (!c.mgr)
    return out;
  auto& m = *c.mgr;
  std::vector<std::shared_ptr<kv_cache_handle>> handles;
  for (std::uint64_t t = 0; t < 2; ++t)
    for (std::uint64_t i = 0; i < per; ++i) {
      allocation_request r;
      r.id = t * 100000 + i + 1;
      r.initial_tokens = 17;
      r.max_sequence_length = 32;
      r.num_layers = 1;
      r.num_heads = 1;
      r.head_dim = 8;
      r.tenant = t == 0 ? "a" : "b";
      auto h = m.allocate(r);
      if (!h) {
        std::cerr << "critical_steady: " << render(h.error()) << '\n';
        return out;
      }
      handles.push_back(*h);
    }
  std::vector<double> us;
  us.reserve(handles.size() * extends);
  for (std::uint64_t k = 0; k < extends; ++k)
    for (auto& h : handles) {
      auto t0 = std::chrono::steady_clock::now();
      auto err = m.extend(*h, 1);
      auto t1 = std::chrono::steady_clock::now();
      if (err) {
        std::cerr << "critical_steady: " << render(err) << '\n';
        return out;
      }
      us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
  auto st = m.stats();
  std::sort(us.begin(), us.end());
  out.extends = us.size();
  if (!us.empty()) {
    out.p50_us = us[us.size() / 2];
    out.p90_us = us[us.size() * 9 / 10];
  }
  out.pressure = to_string(st.pressure);
  out.preemptions = st.preemption_count;
  out.ok = true;
  return out;
}

nlohmann::json as_json(const figures& f) {
  return {{"extends", f.extends},       {"p50_us", f.p50_us},
          {"p90_us", f.p90_us},         {"pressure", f.pressure},
          {"preemptions", f.preemptions}};
}

} // namespace

int main(int argc, char** argv) {
  std::uint64_t per = 240;
  std::uint64_t extends = 15;
  std::uint32_t threads = 1;
  using kvactor::bench::count;
  if (!kvactor::bench::parse_options(
        argc, argv,
        "usage: critical_steady [--requests N] [--extends K] "
        "[--scheduler-threads T]\n",
        [&](const std::string& arg, const std::string& v) {
          if (arg == "--requests")
            per = count(v, 249, 1); // 2 x 249 x 2 blocks: within the pool
          else if (arg == "--extends")
            extends = count(v, 15, 1);
          else if (arg == "--scheduler-threads")
            threads = static_cast<std::uint32_t>(count(v, 64));
          else
            return false;
          return true;
        }))
    return 2;
  // Critical: 2 x per requests of 2 blocks (960 of 1000 at the default);
  // low: the same extends on 100 requests per tenant.
  auto critical = run(per, extends, threads);
  auto low = run(std::min<std::uint64_t>(per, 100), extends, threads);
  if (!critical.ok || !low.ok)
    return 1;
  std::cout << nlohmann::json{{"critical", as_json(critical)},
                              {"low", as_json(low)}}
                 .dump()
            << std::endl;
  return 0;
}
