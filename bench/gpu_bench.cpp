// gpu_bench: bandwidth of the cuda storage's copy_blocks, swaps, write_slots
// and gather_blocks on random data and random block mappings, each beside the
// ceiling measured in the same run (device-to-device memcpy, pinned copies)
// and beside vLLM's one-cudaMemcpyAsync-per-block swap. Prints a table line
// and a JSON line per measurement, each saying what its events enclose:
// "gated" (the GPU work alone) or "ungated" (host submission included: the
// swaps, like the memcpy baselines they are compared with). Beside each
// default it sweeps the alternatives the launchers take (grid shapes,
// load/store hints, programmatic launch, the early slot read, each swap
// mover alone), so that a new GPU shows at once whether a default still
// holds (the H200's figures: bench/HISTORY.md).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "kvactor/device/cuda_storage.hpp"
#include "kvactor/device/kernels.hpp"
#include "kvactor/device/storage.hpp"
#include "kvactor/device/swap_plan.hpp"
#include "kvactor/messages/error.hpp"

using namespace kvactor;

namespace {

constexpr double GiB = 1024.0 * 1024.0 * 1024.0;

/// Set while a stream waits at a gate (below): failing then must open it
/// first, or CUDA's teardown at exit could wait for the spinning host
/// function until the time limit kills the process.
std::atomic<std::atomic<bool>*> open_on_failure{nullptr};

[[noreturn]] void fail_and_exit() {
  if (auto flag = open_on_failure.load())
    flag->store(true, std::memory_order_release);
  std::exit(1);
}

void check(cudaError_t err, const char* what) {
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

void fill(void* p, std::size_t bytes, std::uint64_t seed) {
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

const char* to_string(timing t) {
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
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

struct ceiling {
  const char* name;
  double gbps;
};

/// One measurement: a table line (ending in how it was timed) and a JSON
/// line (key "timed": "gated" or "ungated").
void report(const char* op, const storage_layout& l, std::size_t items,
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
ceilings measure_ceilings(cudaStream_t s, int runs) {
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
  cudaFree(a);
  cudaFree(b);
  cudaFreeHost(h);
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

std::vector<block_id> shuffled(std::uint32_t n, std::mt19937_64& rng) {
  std::vector<block_id> ids(n);
  std::iota(ids.begin(), ids.end(), 0u);
  std::shuffle(ids.begin(), ids.end(), rng);
  return ids;
}

/// vLLM's swap: per layer, per K/V cache, one cudaMemcpyAsync per block.
void per_block_swap(const storage_layout& l, std::byte* dev, std::byte* host,
                    const std::vector<block_move>& moves, bool out,
                    cudaStream_t s) {
  const auto bb = l.block_bytes();
  for (std::size_t plane = 0; plane < 2 * std::size_t{l.num_layers}; ++plane) {
    auto dp = dev + plane * l.num_blocks * bb;
    auto hp = host + plane * l.num_host_blocks * bb;
    for (auto& m : moves) {
      auto d = dp + m.device_block * bb;
      auto h = hp + m.host_block * bb;
      check(out ? cudaMemcpyAsync(h, d, bb, cudaMemcpyDeviceToHost, s)
                : cudaMemcpyAsync(d, h, bb, cudaMemcpyHostToDevice, s),
            "per-block memcpy");
    }
  }
}

/// The same per-block copies as one cudaMemcpyBatchAsync (CUDA 12.8+), for
/// comparison with the 2D-per-run copies the storage issues. False if the
/// driver refuses it.
bool batched_swap(const storage_layout& l, std::byte* dev, std::byte* host,
                  const std::vector<block_move>& moves, bool out,
                  cudaStream_t s) {
  const auto bb = l.block_bytes();
  std::vector<void*> dsts;
  std::vector<const void*> srcs;
  for (std::size_t plane = 0; plane < 2 * std::size_t{l.num_layers}; ++plane) {
    auto dp = dev + plane * l.num_blocks * bb;
    auto hp = host + plane * l.num_host_blocks * bb;
    for (auto& m : moves) {
      auto d = dp + m.device_block * bb;
      auto h = hp + m.host_block * bb;
      dsts.push_back(out ? static_cast<void*>(h) : static_cast<void*>(d));
      srcs.push_back(out ? static_cast<const void*>(d) : static_cast<const void*>(h));
    }
  }
  std::vector<std::size_t> sizes(dsts.size(), bb);
  cudaMemcpyAttributes attr{};
  attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  std::size_t index = 0;
  auto err = cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(),
                                  dsts.size(), &attr, &index, 1, s);
  if (err != cudaSuccess) {
    cudaGetLastError();
    std::printf("cudaMemcpyBatchAsync: %s\n", cudaGetErrorString(err));
    return false;
  }
  return true;
}

void bench_shape(std::uint32_t heads, const ceilings& c, int runs,
                 double pool_gib, std::mt19937_64& rng) {
  storage_layout l;
  l.num_layers = 32;
  l.block_size = 16;
  l.num_heads = heads;
  l.head_dim = 128;
  l.dtype = dtype::fp16;
  const double pool_bytes = pool_gib * GiB, tier_bytes = pool_bytes / 8;
  l.num_blocks = static_cast<std::uint32_t>(pool_bytes / l.bytes_per_block());
  l.num_host_blocks = static_cast<std::uint32_t>(tier_bytes / l.bytes_per_block());
  storage_options opts;
  opts.kind = "cuda";
  opts.layout = l;
  auto st = require(make_storage(opts), "make_storage");
  auto& cs = dynamic_cast<cuda_storage&>(*st);
  auto compute = static_cast<cudaStream_t>(
    cs.native_stream(cuda_storage::stream_role::compute));
  auto d2h = static_cast<cudaStream_t>(
    cs.native_stream(cuda_storage::stream_role::device_to_host));
  auto h2d = static_cast<cudaStream_t>(
    cs.native_stream(cuda_storage::stream_role::host_to_device));
  auto dev = static_cast<std::byte*>(st->layer_base(0));
  auto host = static_cast<std::byte*>(st->host_layer_base(0));
  fill(dev, l.device_bytes(), rng());
  fill(host, l.host_bytes(), rng()); // pinned: written over the bus
  const double bpb = static_cast<double>(l.bytes_per_block());

  // copy_blocks: a quarter of the pool onto another quarter.
  auto ids = shuffled(l.num_blocks, rng);
  std::vector<block_copy> pairs;
  for (std::uint32_t i = 0; i < l.num_blocks / 4; ++i)
    pairs.push_back({ids[i], ids[l.num_blocks / 2 + i]});
  auto ms = median_ms(compute, 3, runs, [&](int) {
    require(st->copy_blocks(pairs), "copy_blocks");
  }, timing::gated);
  report("copy_blocks", l, pairs.size(), 2 * bpb * pairs.size(), ms, c.d2d,
         timing::gated);
  // The kernel alone at other grid shapes: planes of a pair per CUDA block
  // (the storage launches kernel_bodies.hpp's copy_planes_per_cta).
  {
    detail::block_pair* dev_pairs = nullptr;
    check(cudaMalloc(reinterpret_cast<void**>(&dev_pairs),
                     pairs.size() * sizeof(detail::block_pair)),
          "cudaMalloc");
    check(cudaMemcpy(dev_pairs, pairs.data(),
                     pairs.size() * sizeof(detail::block_pair),
                     cudaMemcpyHostToDevice),
          "cudaMemcpy");
    const detail::pool_geometry geo{st->layer_base(0), l.num_layers,
                                    l.num_blocks, l.block_size,
                                    l.block_bytes() / l.block_size};
    for (int per : {1, 2, 4, 8, 64, -1}) {
      // -1: one plane per CUDA block, the other kind of loads and stores.
      const bool streaming = per > 0 ? detail::streaming_hints
                                     : !detail::streaming_hints;
      per = per > 0 ? per : 1;
      auto kms = median_ms(compute, 3, runs, [&](int) {
        check(static_cast<cudaError_t>(detail::launch_copy_blocks(
                geo, dev_pairs, pairs.size(), compute, per, streaming)),
              "launch_copy_blocks");
      }, timing::gated);
      const std::string name = "copy_blocks kernel " + std::to_string(per)
                               + " planes/CTA"
                               + (streaming ? " ld/st.cs" : " plain ld/st");
      report(name.c_str(), l, pairs.size(), 2 * bpb * pairs.size(), kms,
             c.d2d, timing::gated);
    }
    cudaFree(dev_pairs);
  }

  // Swaps: the whole host tier, random blocks on both sides.
  auto dev_ids = shuffled(l.num_blocks, rng);
  auto host_ids = shuffled(l.num_host_blocks, rng);
  std::vector<block_move> moves;
  for (std::uint32_t i = 0; i < l.num_host_blocks; ++i)
    moves.push_back({dev_ids[i], host_ids[i]});
  const double swap_bytes = bpb * moves.size();
  // Each storage swap ungated: its host work (validation, sorting,
  // coalescing, hazard checks, submission) inside the events, as the memcpy
  // baselines below have their submission inside theirs. Never gated: a
  // swap of a thousand scattered blocks submits a thousand copies, more than
  // a held stream queues, so the call itself would wait for the gate (seen
  // on the H200: the first gated swap_out waited the gate's 30 s out).
  auto swap_timed = [&](const char* op, const std::vector<block_move>& mv,
                        bool out) {
    auto stream = out ? d2h : h2d;
    auto& ceil = out ? c.d2h : c.h2d;
    auto call = [&](int) {
      require(out ? st->swap_out(mv) : st->swap_in(mv),
              out ? "swap_out" : "swap_in");
    };
    report(op, l, mv.size(), bpb * mv.size(),
           median_ms(stream, 2, runs / 2, call), ceil, timing::ungated);
  };
  swap_timed("swap_out", moves, true);
  swap_timed("swap_in", moves, false);
  // The two movers alone on the same moves (the storage splits a swap's
  // runs between them by length, swap_plan.hpp): every run by the copy
  // engines, and every run by the swap kernel at several grid sizes.
  {
    auto runs_all = detail::coalesce_moves(moves);
    const auto runs_bytes = runs_all.size() * sizeof(detail::swap_run);
    void* dev_runs = nullptr;
    check(cudaMalloc(&dev_runs, runs_bytes), "cudaMalloc");
    check(cudaMemcpy(dev_runs, runs_all.data(), runs_bytes,
                     cudaMemcpyHostToDevice),
          "cudaMemcpy");
    int pitch = 0;
    check(cudaDeviceGetAttribute(&pitch, cudaDevAttrMaxPitch, 0),
          "cudaDeviceGetAttribute");
    const detail::pool_geometry geo{st->layer_base(0), l.num_layers,
                                    l.num_blocks, l.block_size,
                                    l.block_bytes() / l.block_size};
    for (bool out : {true, false}) {
      auto stream = out ? d2h : h2d;
      auto& ceil = out ? c.d2h : c.h2d;
      const auto dir = out ? detail::swap_direction::device_to_host
                           : detail::swap_direction::host_to_device;
      const std::string side = out ? "swap_out" : "swap_in";
      auto ce = median_ms(stream, 2, runs / 2, [&](int) {
        check(static_cast<cudaError_t>(detail::launch_swap(
                geo, host, l.num_host_blocks, runs_all.data(), runs_all.size(),
                dir, static_cast<std::size_t>(pitch), stream)),
              "launch_swap");
      });
      report((side + " copy engines").c_str(), l, moves.size(), swap_bytes, ce,
             ceil, timing::ungated);
      for (int ctas : {4, 8, 16, 32, 64}) {
        auto km = median_ms(stream, 2, runs / 2, [&](int) {
          check(static_cast<cudaError_t>(detail::launch_swap_kernel(
                  geo, host, l.num_host_blocks,
                  static_cast<const detail::swap_run*>(dev_runs),
                  runs_all.size(), dir, stream, ctas)),
                "launch_swap_kernel");
        });
        report((side + " kernel " + std::to_string(ctas) + " CTAs").c_str(), l,
               moves.size(), swap_bytes, km, ceil, timing::ungated);
      }
    }
    cudaFree(dev_runs);
  }
  // Runs of 16 consecutive blocks on each side, the runs in random order on
  // the host side, so that they do not coalesce further.
  std::vector<block_move> runs16;
  auto run_ids = shuffled(l.num_host_blocks / 16, rng);
  for (std::uint32_t r = 0; r < run_ids.size(); ++r)
    for (std::uint32_t k = 0; k < 16; ++k)
      runs16.push_back({l.num_blocks - l.num_host_blocks + 16 * r + k,
                        16 * run_ids[r] + k});
  if (!runs16.empty())
    swap_timed("swap_out runs of 16", runs16, true);
  // vLLM's per-block copies, on a subset (each call costs microseconds).
  // Ungated: a plain memcpy loop's submission is its host work; compare
  // these with the storage swaps' ungated lines.
  std::vector<block_move> few(moves.begin(),
                              moves.begin() + std::min<std::size_t>(moves.size(), 256));
  ms = median_ms(d2h, 1, 3, [&](int) { per_block_swap(l, dev, host, few, true, d2h); });
  report("swap_out per-block vLLM", l, few.size(), bpb * few.size(), ms, c.d2h,
         timing::ungated);
  ms = median_ms(h2d, 1, 3, [&](int) { per_block_swap(l, dev, host, few, false, h2d); });
  report("swap_in per-block vLLM", l, few.size(), bpb * few.size(), ms, c.h2d,
         timing::ungated);
  bool batch_ok = true;
  ms = median_ms(d2h, 1, 3, [&](int) {
    batch_ok = batched_swap(l, dev, host, moves, true, d2h) && batch_ok;
  });
  if (batch_ok)
    report("swap_out batch memcpy", l, moves.size(), swap_bytes, ms, c.d2h,
           timing::ungated);

  // write_slots: 4096 tokens into random slots of every layer, one launch per
  // layer back to back (as a forward pass does), distinct inputs per layer.
  const std::size_t tokens = std::min<std::size_t>(
    4096, std::size_t{l.num_blocks} * l.block_size / 2);
  const auto row = l.block_bytes() / l.block_size;
  const std::size_t input = 2 * tokens * row; // K then V
  void* inputs = nullptr;
  check(cudaMalloc(&inputs, input * l.num_layers), "cudaMalloc");
  fill(inputs, input * l.num_layers, rng());
  auto slot_ids = shuffled(l.num_blocks * l.block_size, rng);
  std::vector<std::int64_t> slots(slot_ids.begin(), slot_ids.begin() + tokens);
  auto in_of = [&](std::uint32_t layer) {
    return static_cast<std::byte*>(inputs) + layer * input;
  };
  ms = median_ms(compute, 3, runs, [&](int) {
    for (std::uint32_t layer = 0; layer < l.num_layers; ++layer)
      require(st->write_slots(layer, in_of(layer), in_of(layer) + tokens * row,
                              slots.data(), tokens),
              "write_slots");
  });
  report("write_slots x32 layers", l, tokens, 2.0 * input * l.num_layers, ms,
         c.d2d, timing::ungated);
  // The kernel alone, as a forward pass runs it: the slot mapping already in
  // device memory, one launch per layer back to back. The line above adds
  // the storage's per-call host work (validation, slot planning and hazard
  // bookkeeping - timed on the CPU by slot_plan_bench - and the mapping's
  // upload through pinned memory), which at 8 heads may cost more than the
  // ~8 us the kernel needs per layer.
  std::int64_t* dev_slots = nullptr;
  check(cudaMalloc(reinterpret_cast<void**>(&dev_slots),
                   tokens * sizeof(std::int64_t)),
        "cudaMalloc");
  check(cudaMemcpy(dev_slots, slots.data(), tokens * sizeof(std::int64_t),
                   cudaMemcpyHostToDevice),
        "cudaMemcpy");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  const detail::pool_geometry geo{st->layer_base(0), l.num_layers, l.num_blocks,
                                  l.block_size, row};
  ms = median_ms(compute, 3, runs, [&](int) {
    for (std::uint32_t layer = 0; layer < l.num_layers; ++layer)
      check(static_cast<cudaError_t>(detail::launch_write_slots(
              geo, layer, in_of(layer), in_of(layer) + tokens * row, dev_slots,
              tokens, compute)),
            "launch_write_slots");
  });
  report("write_slots kernel x32 layers", l, tokens, 2.0 * input * l.num_layers,
         ms, c.d2d, timing::ungated);
  // Other grid shapes: rows per warp (kernel_bodies.hpp's
  // write_rows_per_warp is what the storage launches).
  // Like for like: as many back-to-back device-to-device memcpys of one
  // layer's bytes each (its K and V rows, contiguous), what a plain copy
  // reaches at this size, launch gaps included.
  {
    void* copy_dst = nullptr;
    check(cudaMalloc(&copy_dst, input * l.num_layers), "cudaMalloc");
    auto mms = median_ms(compute, 3, runs, [&](int) {
      for (std::uint32_t layer = 0; layer < l.num_layers; ++layer)
        check(cudaMemcpyAsync(static_cast<std::byte*>(copy_dst) + layer * input,
                              in_of(layer), input, cudaMemcpyDeviceToDevice,
                              compute),
              "cudaMemcpyAsync");
    });
    report("d2d memcpy x32 layers, same bytes", l, tokens,
           2.0 * input * l.num_layers, mms, c.d2d, timing::ungated);
    cudaFree(copy_dst);
  }
  // The other kinds of loads and stores, without programmatic dependent
  // launch, and with the slot read before the row (the defaults are
  // kernels.hpp's).
  for (int variant = 1; variant < 8; ++variant) {
    const bool streaming = (variant & 1) ? !detail::streaming_hints
                                         : detail::streaming_hints;
    const bool pdl = (variant & 2) == 0;
    const bool early = (variant & 4) == 0;
    auto kms = median_ms(compute, 3, runs, [&](int) {
      for (std::uint32_t layer = 0; layer < l.num_layers; ++layer)
        check(static_cast<cudaError_t>(detail::launch_write_slots(
                geo, layer, in_of(layer), in_of(layer) + tokens * row,
                dev_slots, tokens, compute, 0, streaming, pdl, early)),
              "launch_write_slots");
    });
    std::string name = "write_slots kernel";
    name += streaming ? " ld/st.cs" : " plain ld/st";
    name += pdl ? "" : " no PDL";
    name += early ? "" : " slot first";
    report(name.c_str(), l, tokens, 2.0 * input * l.num_layers, kms, c.d2d,
           timing::ungated);
  }
  for (int per : {2, 4, 8}) {
    auto kms = median_ms(compute, 3, runs, [&](int) {
      for (std::uint32_t layer = 0; layer < l.num_layers; ++layer)
        check(static_cast<cudaError_t>(detail::launch_write_slots(
                geo, layer, in_of(layer), in_of(layer) + tokens * row,
                dev_slots, tokens, compute, per)),
              "launch_write_slots");
    });
    const std::string name = "write_slots kernel " + std::to_string(per)
                             + " rows/warp";
    report(name.c_str(), l, tokens, 2.0 * input * l.num_layers, kms, c.d2d,
           timing::ungated);
  }
  cudaFree(dev_slots);
  cudaFree(inputs);

  // gather_blocks: 256 MiB of random blocks of one layer (K and V), full.
  const std::size_t list = std::min<std::size_t>(
    static_cast<std::size_t>(128.0 * 1024 * 1024 / l.block_bytes()),
    l.num_blocks / 2);
  std::vector<block_id> blocks(dev_ids.begin(), dev_ids.begin() + list);
  const std::size_t n = list * l.block_size;
  void* out = nullptr;
  check(cudaMalloc(&out, 2 * n * row), "cudaMalloc");
  auto out_k = static_cast<std::byte*>(out);
  ms = median_ms(compute, 3, runs, [&](int i) {
    require(st->gather_blocks(static_cast<std::uint32_t>(i) % l.num_layers,
                              blocks, n, out_k, out_k + n * row),
            "gather_blocks");
  }, timing::gated);
  report("gather_blocks", l, list, 4.0 * n * row, ms, c.d2d, timing::gated);
  {
    const detail::pool_geometry geo{st->layer_base(0), l.num_layers,
                                    l.num_blocks, l.block_size, row};
    std::uint32_t* dev_list = nullptr;
    check(cudaMalloc(reinterpret_cast<void**>(&dev_list),
                     list * sizeof(std::uint32_t)),
          "cudaMalloc");
    check(cudaMemcpy(dev_list, blocks.data(), list * sizeof(std::uint32_t),
                     cudaMemcpyHostToDevice),
          "cudaMemcpy");
    for (bool streaming : {false, true}) {
      auto gms = median_ms(compute, 3, runs, [&](int i) {
        check(static_cast<cudaError_t>(detail::launch_gather_blocks(
                geo, static_cast<std::uint32_t>(i) % l.num_layers, dev_list,
                list, n, out_k, out_k + n * row, compute, streaming)),
              "launch_gather_blocks");
      }, timing::gated);
      report(streaming ? "gather_blocks kernel ld/st.cs"
                       : "gather_blocks kernel plain",
             l, list, 4.0 * n * row, gms, c.d2d, timing::gated);
    }
    cudaFree(dev_list);
  }
  cudaFree(out);
}

} // namespace

int main(int argc, char** argv) {
  if (!cuda_device_available()) {
    std::puts("no CUDA device");
    return 0;
  }
  // gpu_bench [runs (20)] [device pool GiB (16; the host tier is 1/8 of it)]
  int runs = 20;
  if (argc > 1)
    runs = std::max(2, std::atoi(argv[1]));
  double pool_gib = 16;
  if (argc > 2)
    pool_gib = std::max(0.0625, std::atof(argv[2]));
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("gpu_bench on %s: median of %d runs after warm-up (swaps %d, "
              "per-block and batch memcpy lines 3), random data, random block "
              "mappings\n",
              prop.name, runs, runs / 2);
  std::printf("[gated]: a single storage call timed from when the GPU may "
              "start it (its host work held outside the events); [ungated]: "
              "the events bracket the call, host submission included. The "
              "memcpy baselines are ungated: compare them with the \"... "
              "ungated\" swap lines\n");
  std::printf("copy_blocks, write_slots, gather_blocks: GB/s of bytes read + "
              "written; swaps: GB/s of bytes moved\n");
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  auto c = measure_ceilings(s, runs);
  std::mt19937_64 rng{std::random_device{}()};
  for (std::uint32_t heads : {8u, 32u})
    bench_shape(heads, c, runs, pool_gib, rng);
  cudaStreamDestroy(s);
  return 0;
}
