// Coalescing of swap moves into contiguous runs (swap_plan.hpp).
#include "kvactor/device/swap_plan.hpp"

#include <algorithm>

namespace kvactor::detail {

std::vector<swap_run> coalesce_moves(std::vector<block_move> moves) {
  std::sort(moves.begin(), moves.end(),
            [](const block_move& x, const block_move& y) {
              return x.device_block < y.device_block;
            });
  std::vector<swap_run> runs;
  for (auto& m : moves) {
    if (!runs.empty()) {
      auto& last = runs.back();
      if (m.device_block == last.device_first + last.count
          && m.host_block == last.host_first + last.count) {
        ++last.count;
        continue;
      }
    }
    runs.push_back(swap_run{m.device_block, m.host_block, 1});
  }
  return runs;
}

swap_split split_runs(const std::vector<swap_run>& runs,
                      std::size_t block_bytes, std::size_t min_copy_bytes) {
  swap_split out;
  for (auto& r : runs)
    (std::size_t{r.count} * block_bytes >= min_copy_bytes
       ? out.by_copy_engine
       : out.by_kernel)
      .push_back(r);
  return out;
}

std::vector<strided_copy> swap_copies(const pool_geometry& pool,
                                      std::uint32_t num_host_blocks,
                                      const swap_run* runs,
                                      std::size_t num_runs,
                                      swap_direction dir) {
  const std::size_t bb = pool.block_bytes();
  const std::size_t dev_pitch = bb * pool.num_blocks;
  const std::size_t host_pitch = bb * num_host_blocks;
  const std::size_t planes = std::size_t{2} * pool.num_layers;
  const bool to_host = dir == swap_direction::device_to_host;
  std::vector<strided_copy> out;
  out.reserve(num_runs);
  for (std::size_t i = 0; i < num_runs; ++i) {
    const auto& run = runs[i];
    const std::size_t dev = std::size_t{run.device_first} * bb;
    const std::size_t host = std::size_t{run.host_first} * bb;
    const std::size_t width = std::size_t{run.count} * bb;
    if (to_host)
      out.push_back({host, host_pitch, dev, dev_pitch, width, planes});
    else
      out.push_back({dev, dev_pitch, host, host_pitch, width, planes});
  }
  return out;
}

} // namespace kvactor::detail
