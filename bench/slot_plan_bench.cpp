// slot_plan_bench: the host work of one cuda write_slots call, on the CPU -
// validating the slot mapping, planning it (distinct blocks, last writers)
// and the cross-stream hazard checks per block written, for a new mapping;
// one memcmp and one hazard group renewed for a forward pass's next layer.
// It runs before each launch, so at 8 heads x 128 dims, where the kernel
// needs about 8 us for 4096 tokens on an H200, it decides whether the host
// keeps the GPU fed. Needs no GPU.
//
//   slot_plan_bench [--blocks N (8192)] [--tokens N (4096)] [--runs N (2000)]
//
// Prints two JSON lines per mapping shape - "layer": "first" (a new
// mapping, validated and planned, the hazards checked per block and
// recorded as a group) and "next" (the same mapping again, as a forward
// pass's later layers write it: one memcmp, and the group's ticket
// renewed) -
// for the shapes decode (every token in a random slot, as gpu_bench
// writes), prefill (runs of whole blocks), repeats (a decode mapping with
// every 8th token naming an earlier token's slot).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kvactor/device/hazards.hpp"
#include "kvactor/device/slot_plan.hpp"
#include "kvactor/device/validate.hpp"
#include "bench_options.hpp"

using namespace kvactor;

namespace {

std::vector<std::int64_t> mapping(const std::string& shape,
                                  const storage_layout& l, std::size_t tokens,
                                  std::mt19937_64& rng) {
  const auto bs = std::int64_t{l.block_size};
  std::vector<std::int64_t> out(tokens);
  if (shape == "prefill") {
    std::vector<std::int64_t> blocks(l.num_blocks);
    std::iota(blocks.begin(), blocks.end(), 0);
    std::shuffle(blocks.begin(), blocks.end(), rng);
    for (std::size_t i = 0; i < tokens; ++i)
      out[i] = blocks[i / l.block_size] * bs + static_cast<std::int64_t>(i % bs);
    return out;
  }
  std::vector<std::int64_t> slots(std::size_t{l.num_blocks} * l.block_size);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  std::copy(slots.begin(), slots.begin() + static_cast<std::ptrdiff_t>(tokens),
            out.begin());
  if (shape == "repeats")
    for (std::size_t i = 8; i < tokens; i += 8)
      out[i] = out[rng() % i];
  return out;
}

} // namespace

int main(int argc, char** argv) {
  storage_layout l;
  l.num_layers = 32;
  l.num_blocks = 8192;
  l.block_size = 16;
  l.num_heads = 8;
  l.head_dim = 128;
  std::size_t tokens = 4096;
  int runs = 2000;
  using kvactor::bench::count;
  if (!kvactor::bench::parse_options(
        argc, argv, "usage: slot_plan_bench [--blocks N] [--tokens N] [--runs N]\n",
        [&](const std::string& arg, const std::string& v) {
          if (arg == "--blocks")
            l.num_blocks = static_cast<std::uint32_t>(count(v));
          else if (arg == "--tokens")
            tokens = count(v);
          else if (arg == "--runs")
            runs = static_cast<int>(count(v, INT32_MAX));
          else
            return false;
          return true;
        }))
    return 2;
  if (l.num_blocks == 0 || runs < 1
      || tokens > std::size_t{l.num_blocks} * l.block_size) {
    std::fprintf(stderr, "slot_plan_bench: need 0 < tokens <= blocks * 16\n");
    return 2;
  }
  std::mt19937_64 rng{7};
  detail::slot_planner planner{l.num_blocks, l.block_size};
  detail::hazard_tracker hazards{l.num_blocks, 3};
  ticket next = 1;
  // Each shape twice: a step's first layer (a new mapping: validated and
  // planned; two mappings alternate) and its next layers (the same mapping
  // again, recognised by one memcmp), as the cuda backend's write_slots.
  for (const char* shape : {"decode", "prefill", "repeats"}) {
    const auto a = mapping(shape, l, tokens, rng);
    const auto b = mapping(shape, l, tokens, rng);
    for (bool next_layer : {false, true}) {
      std::vector<double> us;
      us.reserve(static_cast<std::size_t>(runs));
      std::size_t blocks = 0;
      for (int r = 0; r < runs + runs / 10; ++r) { // the first tenth warms up
        const auto& slots = next_layer || r % 2 == 0 ? a : b;
        auto t0 = std::chrono::steady_clock::now();
        const bool planned = planner.same_as_last(slots.data(), tokens);
        if (detail::check_write(l, 0, slots.data(), slots.data(), slots.data(),
                                tokens, !planned))
          return 1;
        // As cuda_ops.cpp: a repeated mapping right after its own write
        // renews the hazard group; a new one is checked block by block.
        const bool renew = planned && hazards.writes_pending(0);
        if (!planned)
          planner.plan(slots.data(), tokens);
        auto t = next++;
        if (renew) {
          hazards.renew_writes(t);
        } else {
          detail::hazard_tracker::waits w{};
          for (auto blk : planner.blocks())
            hazards.need_write(blk, 0, w);
          const auto written = planner.blocks();
          hazards.note_writes(written.begin(), written.size(), 0, t);
        }
        auto dt = std::chrono::duration<double, std::micro>(
                    std::chrono::steady_clock::now() - t0)
                    .count();
        if (r >= runs / 10)
          us.push_back(dt);
        blocks = planner.blocks().size();
      }
      std::sort(us.begin(), us.end());
      auto p50 = us[us.size() / 2];
      std::printf("{\"bench\":\"slot_plan\",\"shape\":\"%s\",\"layer\":\"%s\","
                  "\"tokens\":%zu,\"blocks_written\":%zu,\"pool_blocks\":%u,"
                  "\"p50_us\":%.2f,\"p99_us\":%.2f,\"ns_per_token\":%.2f}\n",
                  shape, next_layer ? "next" : "first", tokens, blocks,
                  l.num_blocks, p50, us[us.size() * 99 / 100],
                  1000.0 * p50 / double(tokens));
    }
  }
  return 0;
}
