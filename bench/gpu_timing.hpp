// gpu_bench's timing: CUDA events around a call, the median of many runs,
// optionally behind a gate that holds the stream until the call returned
// (so that the events enclose its GPU work alone), the memcpy ceilings
// measured in the same run, and one table line plus one JSON line per
// measurement. Included by gpu_bench.cpp alone.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include "kvactor/device/kernels.hpp"
#include "kvactor/device/storage.hpp"
#include "kvactor/messages/error.hpp"

namespace kvactor::bench {

constexpr double GiB = 1024.0 * 1024.0 * 1024.0;

/// Set while a stream waits at a gate (below): failing then must open it
/// first, or CUDA's teardown at exit could wait for the spinning host
/// function until the time limit kills the process.
inline std::atomic<std::atomic<bool>*> open_on_failure{nullptr};

[[noreturn]] inline void fail_and_exit() {
  if (auto flag = open_on_failure.load())
    flag->store(true, std::memory_order_release);
  std::exit(1);
}

inline void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "gpu_bench: %s: %s\n", what, cudaGetErrorString(err));
    fail_and_exit();
  }
}

template <class T>
T require(caf::expected<T> x, const char* what) {
  if (!x) {
    std::fprintf(stderr, "gpu_bench: %s: %s\n", what, render(x.error()).c_str());
    fail_and_exit();
  }
  return std::move(*x);
}

inline void fill(void* p, std::size_t bytes, std::uint64_t seed) {
  check(static_cast<cudaError_t>(detail::launch_fill_random(p, bytes, seed, nullptr)),
        "fill_random");
  check(cudaDeviceSynchronize(), "fill_random sync");
}

/// Holds a stream until opened. A storage call does host work (validation,
/// planning, hazard checks, uploads) before its GPU work; with the stream
/// held meanwhile, the events time the GPU's work alone. A call that waits
/// for the held stream itself would never return: after 30 s the gate opens
/// on its own and the measurement fails, naming it, instead of hanging.
struct gate {
  std::atomic<bool> open{false};
  std::atomic<bool> forced{false};
  static void CUDART_CB hold(void* self) {
    auto g = static_cast<gate*>(self);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!g->open.load(std::memory_order_acquire)) {
      // spin: a host function may make no CUDA call, and this one is short
      if (std::chrono::steady_clock::now() > deadline) {
        g->forced.store(true);
        return;
      }
    }
  }
};

/// What a measurement's CUDA events enclose.
enum class timing : std::uint8_t {
  /// The GPU work alone: the stream waits at a gate until the call returned,
  /// so its host work (validation, planning, hazards, uploads) is left out.
  gated,
  /// The call's host submission too: the events bracket the call, and the
  /// GPU may start as soon as the call enqueued something.
  ungated,
};

inline const char* to_string(timing t) {
  return t == timing::gated ? "gated" : "ungated";
}

/// Median milliseconds of `runs` timed calls of op(i) on `stream` (CUDA
/// events around each), after `warmup` untimed ones, timed as `how` says.
/// NOTE: gate only an op that never waits for `stream` itself (one storage
/// call: several could wrap the upload ring and wait for a slot whose
/// consumer sits behind the gate).
template <class F>
double median_ms(cudaStream_t stream, int warmup, int runs, F&& op,
                 timing how = timing::ungated) {
  const bool gated = how == timing::gated;
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<float> times;
  for (int i = 0; i < warmup + runs; ++i) {
    gate g;
    if (gated) {
      check(cudaLaunchHostFunc(stream, &gate::hold, &g), "cudaLaunchHostFunc");
      open_on_failure.store(&g.open);
    }
    check(cudaEventRecord(start, stream), "cudaEventRecord");
    op(i);
    check(cudaEventRecord(stop, stream), "cudaEventRecord");
    g.open.store(true, std::memory_order_release);
    open_on_failure.store(nullptr);
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    if (g.forced.load()) {
      std::fprintf(stderr, "gpu_bench: a gated call waited 30 s for the stream "
                           "its gate held (run %d): no figure\n", i);
      fail_and_exit();
    }
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    if (i >= warmup)
      times.push_back(ms);
  }
  check(cudaEventDestroy(start), "cudaEventDestroy");
  check(cudaEventDestroy(stop), "cudaEventDestroy");
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

struct ceiling {
  const char* name;
  double gbps;
};

/// One measurement: a table line (ending in how it was timed) and a JSON
/// line (key "timed": "gated" or "ungated").
inline void report(const char* op, const storage_layout& l, std::size_t items,
            double bytes, double ms, const ceiling& c, timing how) {
  const double gbps = bytes / (ms * 1e-3) / 1e9;
  const double kib = static_cast<double>(l.block_bytes()) / 1024;
  std::printf("%-30s %2u heads %4.0f KiB %6zu items %7.2f GiB %9.3f ms "
              "%8.1f GB/s  %.3f of %s (%.1f GB/s)  [%s]\n",
              op, l.num_heads, kib, items, bytes / GiB, ms, gbps, gbps / c.gbps,
              c.name, c.gbps,
              how == timing::gated ? "gated: GPU work only"
                                   : "ungated: host submission included");
  std::printf("{\"bench\":\"gpu\",\"op\":\"%s\",\"layers\":%u,\"block_size\":%u,"
              "\"heads\":%u,\"head_dim\":%u,\"block_bytes\":%zu,\"items\":%zu,"
              "\"bytes\":%.0f,\"median_ms\":%.4f,\"gbps\":%.2f,"
              "\"ceiling\":\"%s\",\"ceiling_gbps\":%.2f,\"fraction\":%.4f,"
              "\"timed\":\"%s\"}\n",
              op, l.num_layers, l.block_size, l.num_heads, l.head_dim,
              l.block_bytes(), items, bytes, ms, gbps, c.name, c.gbps,
              gbps / c.gbps, to_string(how));
  std::fflush(stdout);
}

struct ceilings {
  ceiling d2d, h2d, d2h;
};

/// Plain copies measured in this run: d2d 1 GiB (bytes read + written),
/// pinned 256 MiB each way (bytes moved).
inline ceilings measure_ceilings(cudaStream_t s, int runs) {
  const std::size_t big = std::size_t{1} << 30;
  const std::size_t pinned = std::size_t{256} << 20;
  void *a = nullptr, *b = nullptr, *h = nullptr;
  check(cudaMalloc(&a, big), "cudaMalloc");
  check(cudaMalloc(&b, big), "cudaMalloc");
  check(cudaHostAlloc(&h, pinned, cudaHostAllocDefault), "cudaHostAlloc");
  fill(a, big, 1);
  fill(h, pinned, 2);
  auto d2d = median_ms(s, 3, runs, [&](int) {
    check(cudaMemcpyAsync(b, a, big, cudaMemcpyDeviceToDevice, s), "d2d");
  });
  auto h2d = median_ms(s, 3, runs, [&](int) {
    check(cudaMemcpyAsync(b, h, pinned, cudaMemcpyHostToDevice, s), "h2d");
  });
  auto d2h = median_ms(s, 3, runs, [&](int) {
    check(cudaMemcpyAsync(h, a, pinned, cudaMemcpyDeviceToHost, s), "d2h");
  });
  check(cudaFree(a), "cudaFree");
  check(cudaFree(b), "cudaFree");
  check(cudaFreeHost(h), "cudaFreeHost");
  ceilings c{{"d2d memcpy", 2.0 * big / (d2d * 1e-3) / 1e9},
             {"pinned h2d memcpy", pinned / (h2d * 1e-3) / 1e9},
             {"pinned d2h memcpy", pinned / (d2h * 1e-3) / 1e9}};
  std::printf("ceilings: d2d memcpy 1 GiB %.1f GB/s (read + written), pinned "
              "256 MiB h2d %.1f GB/s, d2h %.1f GB/s\n",
              c.d2d.gbps, c.h2d.gbps, c.d2h.gbps);
  std::printf("{\"bench\":\"gpu\",\"op\":\"ceilings\",\"d2d_gbps\":%.2f,"
              "\"h2d_gbps\":%.2f,\"d2h_gbps\":%.2f}\n",
              c.d2d.gbps, c.h2d.gbps, c.d2h.gbps);
  return c;
}

} // namespace kvactor::bench
