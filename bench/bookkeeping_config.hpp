// The cache the latency benchmarks drive: bookkeeping only (storage "none",
// a one-layer, one-head model), GC on demand only, `threads` CAF workers.
#pragma once

#include <cstdint>

#include "kvactor/config/cache_config.hpp"

namespace kvactor::bench {

inline cache_config bookkeeping_config(std::uint32_t num_blocks,
                                       std::uint32_t threads) {
  cache_config cfg;
  cfg.storage = "none";
  cfg.num_gpu_blocks = num_blocks;
  cfg.model = model_config{1, 1, 8, dtype::fp16};
  cfg.scheduler_threads = threads;
  cfg.gc_interval_ms = 0;
  return cfg;
}

} // namespace kvactor::bench
