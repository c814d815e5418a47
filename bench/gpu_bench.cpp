// gpu_bench: bandwidth of the cuda storage's copy_blocks, swaps, write_slots
// (layer by layer, and every layer at once: write_layers) and gather_blocks
// on random data and random block mappings, each beside the
// ceiling measured in the same run (device-to-device memcpy, pinned copies)
// and beside vLLM's one-cudaMemcpyAsync-per-block swap. Prints a table line
// and a JSON line per measurement, each saying what its events enclose:
// "gated" (the GPU work alone) or "ungated" (host submission included: the
// swaps, like the memcpy baselines they are compared with). Beside each
// default it sweeps the alternatives the launchers take (grid shapes,
// copy_blocks' and gather's load/store hints, write_slots' programmatic
// launch and early slot read, each swap mover alone), so that a new GPU
// shows at once whether a default still holds (the H200's figures:
// bench/HISTORY.md). The timing itself: gpu_timing.hpp.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
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
#include "gpu_timing.hpp"

using namespace kvactor;
using namespace kvactor::bench;

namespace {

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
    check(cudaFree(dev_pairs), "cudaFree");
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
    check(cudaFree(dev_runs), "cudaFree");
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
  // The same calls' GPU work alone: whether the kernels the storage queues
  // (a ticket's event between each two) still overlap as the kernel-alone
  // lines below. Safe to gate: with the one mapping every call but the
  // very first reuses its upload, so none waits for a ring slot.
  ms = median_ms(compute, 3, runs, [&](int) {
    for (std::uint32_t layer = 0; layer < l.num_layers; ++layer)
      require(st->write_slots(layer, in_of(layer), in_of(layer) + tokens * row,
                              slots.data(), tokens),
              "write_slots");
  }, timing::gated);
  report("write_slots x32 layers", l, tokens, 2.0 * input * l.num_layers, ms,
         c.d2d, timing::gated);
  // Every layer in one op (write_layers: one launch), from the same inputs
  // (a layer's K, then its V: both strided by one layer's K and V).
  for (auto how : {timing::ungated, timing::gated}) {
    ms = median_ms(compute, 3, runs, [&](int) {
      require(st->write_layers(0, l.num_layers, in_of(0), in_of(0) + tokens * row,
                               input, slots.data(), tokens),
              "write_layers");
    }, how);
    report("write_layers x32 layers", l, tokens, 2.0 * input * l.num_layers,
           ms, c.d2d, how);
  }
  // The kernel alone, as a forward pass runs it: the slot mapping already in
  // device memory, one launch per layer back to back. The storage lines
  // above add the storage's per-call host work (validation, slot planning
  // and hazard bookkeeping - timed on the CPU by slot_plan_bench - and the
  // mapping's upload through pinned memory), which at 8 heads may cost more
  // than the ~8 us the kernel needs per layer.
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
  // Every layer's write back to back, the launcher's parameters given:
  // the first layer's overlap mode, then the next layers'.
  // With `events`, an event is recorded after each kernel, as the storage
  // records each call's ticket: whether that keeps the kernels from
  // overlapping shows beside the line without.
  // Gated, the variants compare the kernels alone: ungated, the 32
  // cudaLaunchKernelEx calls of a run (some microseconds each on a slow host
  // CPU, the H200 machine's) against kernels of ~8 us may pace the GPU, and
  // the line would time the submission. Safe to gate: a launch and an event record only enqueue, never wait for the
  // stream, and every kernel variant was loaded when the storage started
  // (preload_kernels: a lazy load at the first launch could wait for the
  // held stream).
  using detail::write_overlap;
  std::vector<cudaEvent_t> tickets(l.num_layers);
  for (auto& ev : tickets)
    check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming),
          "cudaEventCreateWithFlags");
  auto write_layers = [&](int rows_per_warp, write_overlap first,
                          write_overlap next, bool early, timing how,
                          bool events = false) {
    return median_ms(compute, 3, runs, [&](int) {
      for (std::uint32_t layer = 0; layer < l.num_layers; ++layer) {
        check(static_cast<cudaError_t>(detail::launch_write_slots(
                geo, layer, in_of(layer), in_of(layer) + tokens * row,
                dev_slots, tokens, compute, rows_per_warp,
                layer == 0 ? first : next, early)),
              "launch_write_slots");
        if (events)
          check(cudaEventRecord(tickets[layer], compute), "cudaEventRecord");
      }
    }, how);
  };
  auto report_write = [&](const std::string& name, double write_ms,
                          timing how) {
    report(name.c_str(), l, tokens, 2.0 * input * l.num_layers, write_ms,
           c.d2d, how);
  };
  // As the storage launches a pass's layers (cuda_ops.cpp): the first waits
  // for the kernels before it, the next ones overlap it (write_chain.hpp).
  // Ungated as in bench/HISTORY.md's runs; gated, the figure the variants
  // below compare with.
  for (auto how : {timing::ungated, timing::gated})
    report_write("write_slots kernel x32 layers",
                 write_layers(0, write_overlap::launch, write_overlap::work,
                              true, how),
                 how);
  report_write("write_layers kernel x32 layers",
               median_ms(compute, 3, runs, [&](int) {
    check(static_cast<cudaError_t>(detail::launch_write_layers(
            geo, 0, l.num_layers, in_of(0), in_of(0) + tokens * row, input,
            dev_slots, tokens, compute)),
          "launch_write_layers");
  }), timing::ungated);
  // Like for like: as many back-to-back device-to-device memcpys of one
  // layer's bytes each (its K and V rows, contiguous), what a plain copy
  // reaches at this size, launch gaps included.
  {
    void* copy_dst = nullptr;
    check(cudaMalloc(&copy_dst, input * l.num_layers), "cudaMalloc");
    report_write("d2d memcpy x32 layers, same bytes",
                 median_ms(compute, 3, runs, [&](int) {
      for (std::uint32_t layer = 0; layer < l.num_layers; ++layer)
        check(cudaMemcpyAsync(static_cast<std::byte*>(copy_dst) + layer * input,
                              in_of(layer), input, cudaMemcpyDeviceToDevice,
                              compute),
              "cudaMemcpyAsync");
    }), timing::ungated);
    check(cudaFree(copy_dst), "cudaFree");
  }
  // Each layer waiting for the one before it (overlapping launches only,
  // the default until session 39), without programmatic dependent launch,
  // with the slot read before the row, and at other grid shapes: rows per
  // warp (the defaults, which the storage launches, are kernels.hpp's and
  // kernel_bodies.hpp's). All gated: compare them with the gated line of
  // the default above.
  const auto gated = timing::gated;
  report_write("write_slots kernel x32 layers, events between",
               write_layers(0, write_overlap::launch, write_overlap::work,
                            true, gated, true),
               gated);
  report_write("write_slots kernel layers wait",
               write_layers(0, write_overlap::launch, write_overlap::launch,
                            true, gated),
               gated);
  report_write("write_slots kernel no PDL",
               write_layers(0, write_overlap::none, write_overlap::none, true,
                            gated),
               gated);
  report_write("write_slots kernel slot first",
               write_layers(0, write_overlap::launch, write_overlap::work,
                            false, gated),
               gated);
  for (int per : {2, 4, 8})
    report_write("write_slots kernel " + std::to_string(per) + " rows/warp",
                 write_layers(per, write_overlap::launch, write_overlap::work,
                              true, gated),
                 gated);
  for (auto ev : tickets)
    check(cudaEventDestroy(ev), "cudaEventDestroy");
  check(cudaFree(dev_slots), "cudaFree");
  check(cudaFree(inputs), "cudaFree");

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
    check(cudaFree(dev_list), "cudaFree");
  }
  check(cudaFree(out), "cudaFree");
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
  check(cudaStreamDestroy(s), "cudaStreamDestroy");
  return 0;
}
