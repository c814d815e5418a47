// view_snapshot: what a contiguous handle's view costs. The contiguous
// layout serves [max_sequence_length, heads, head_dim] per view (two of
// them for kv_cache), a snapshot gathered from the paged pool into a fresh
// buffer; a request holds far fewer tokens than its model's longest
// sequence. Times --views calls of key_cache(0) and of kv_cache(0) on one
// request of --tokens tokens, max_sequence_length --max-len, 8 KV heads x
// 128 dims in fp16 (2 KiB a token), on the host backend; beside them, a
// plain memcpy of the bytes the request holds (the gather's own floor).
// The pools are filled with non-zero bytes before the cache starts, as a
// serving cache's are once written: a host pool untouched since its mmap
// reads as the kernel's shared zero page, which a gather reads from cache
// while the memcpy beside it reads real memory. Prints one JSON line.
//
//   view_snapshot [--tokens N] [--max-len M] [--views V]
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <nlohmann/json.hpp>

#include "kvactor/actors/kv_cache_manager.hpp"
#include "kvactor/actors/kv_cache_manager_actor.hpp"
#include "kvactor/device/storage.hpp"
#include "kvactor/messages/error.hpp"
#include "bench_cache.hpp"
#include "bench_options.hpp"
#include "latency_summary.hpp"

using namespace kvactor;
using kvactor::bench::latency_summary;
using clock_type = std::chrono::steady_clock;

int main(int argc, char** argv) {
  std::uint64_t tokens = 64;
  std::uint64_t max_len = 32768;
  std::size_t views = 50;
  using kvactor::bench::count;
  if (!kvactor::bench::parse_options(
        argc, argv, "usage: view_snapshot [--tokens N] [--max-len M] [--views V]\n",
        [&](const std::string& arg, const std::string& v) {
          if (arg == "--tokens")
            tokens = count(v);
          else if (arg == "--max-len")
            max_len = count(v);
          else if (arg == "--views")
            views = count(v);
          else
            return false;
          return true;
        }))
    return 2;
  if (tokens == 0 || tokens > max_len || views == 0) {
    std::cerr << "view_snapshot: needs 0 < tokens <= max-len and views > 0\n";
    return 2;
  }
  cache_config cfg;
  cfg.storage = "host";
  cfg.layout = "contiguous"; // which takes no prefix caching
  cfg.prefix_caching = false;
  cfg.model = model_config{1, 8, 128, dtype::fp16};
  // Twice what the request needs: one request alone stays below critical
  // pressure (or it would not be admitted).
  cfg.num_gpu_blocks = static_cast<std::uint32_t>(2 * (tokens / cfg.block_size + 1));
  cfg.num_host_blocks = 0;
  cfg.gc_interval_ms = 0;
  // The pools, written whole before any actor owns them (fill_byte in
  // every K and V row, the request's included).
  constexpr std::uint8_t fill_byte = 0x5a;
  auto made = make_storage(storage_options_for(cfg));
  if (!made) {
    std::cerr << "view_snapshot: " << render(made.error()) << '\n';
    return 1;
  }
  std::shared_ptr<storage> store{std::move(*made)};
  auto& lay = store->layout();
  for (std::uint32_t l = 0; l < lay.num_layers; ++l)
    std::memset(store->layer_base(l), fill_byte, lay.layer_bytes(lay.num_blocks));
  kvactor::bench::bench_cache cache{"view_snapshot", cfg, store};
  if (!cache.mgr)
    return 1;
  auto& mgr = cache.mgr;
  allocation_request req;
  req.max_sequence_length = max_len;
  req.num_layers = 1;
  req.num_heads = 8;
  req.head_dim = 128;
  req.initial_tokens = tokens;
  auto h = mgr->allocate(req);
  if (!h) {
    std::cerr << render(h.error()) << '\n';
    return 1;
  }
  auto since = [](clock_type::time_point t0) {
    return std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
  };
  // Each view is dropped before the next, as a caller that reads and lets
  // go does: the buffer's memory goes back each time.
  auto time_views = [&](bool both) {
    std::vector<double> us;
    for (std::size_t i = 0; i < views; ++i) {
      auto t0 = clock_type::now();
      auto v = both ? (*h)->kv_cache(0) : (*h)->key_cache(0);
      us.push_back(since(t0));
      if (!v || !*v) {
        std::cerr << "view_snapshot: "
                  << (v ? std::string{"no view"} : render(v.error())) << '\n';
        std::exit(1);
      }
      // The gather read the written pool: its first row holds fill_byte.
      if (static_cast<const std::uint8_t*>((*v)->data)[0] != fill_byte) {
        std::cerr << "view_snapshot: the view does not hold the pool's bytes\n";
        std::exit(1);
      }
    }
    return us;
  };
  const std::size_t row = 8 * 128 * 2;
  std::vector<std::uint8_t> src, dst;
  try {
    src.assign(2 * tokens * row, 1);
    dst.resize(src.size());
  } catch (const std::bad_alloc&) {
    std::cerr << "view_snapshot: --tokens " << tokens << ": no host memory for "
              << "the memcpy's two buffers of " << 2 * tokens * row
              << " bytes\n";
    return 1;
  }
  std::vector<double> copy_us;
  for (std::size_t i = 0; i < views; ++i) {
    auto t0 = clock_type::now();
    std::memcpy(dst.data(), src.data(), src.size());
    copy_us.push_back(since(t0));
  }
  auto key_us = time_views(false);
  auto kv_us = time_views(true);
  nlohmann::json out{{"bench", "view_snapshot"},
                     {"tokens", tokens},
                     {"max_sequence_length", max_len},
                     {"view_bytes", 2 * max_len * row},
                     {"held_bytes", 2 * tokens * row},
                     {"key_cache", latency_summary(key_us)},
                     {"kv_cache", latency_summary(kv_us)},
                     {"memcpy_held_bytes", latency_summary(copy_us)}};
  std::cout << out.dump() << std::endl;
  return 0;
}
