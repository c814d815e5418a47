// Turns a batch of swap moves into runs of consecutive blocks, so that the
// CUDA backend issues one copy per run instead of one per block, and each run
// into the strided copy that moves it across all layers. CUDA-free: the unit
// tests replay the copies with memcpy.
#pragma once

#include <vector>

#include "kvactor/device/kernels.hpp"
#include "kvactor/messages/types.hpp"

namespace kvactor::detail {

/// Sorts `moves` by device block and merges neighbours whose device ids and
/// host ids both go up by one, so each run is a contiguous range on both
/// sides. Covers every move exactly once; empty for an empty batch.
/// REQUIRES: device ids distinct and host ids distinct (check_swap).
std::vector<swap_run> coalesce_moves(std::vector<block_move> moves);

/// A strided copy, as cudaMemcpy2DAsync takes it: `height` rows of `width`
/// bytes, row i from byte src + i * spitch of the source side to byte dst +
/// i * dpitch of the destination side (offsets from each side's base).
struct strided_copy {
  std::size_t dst = 0;
  std::size_t dpitch = 0;
  std::size_t src = 0;
  std::size_t spitch = 0;
  std::size_t width = 0;
  std::size_t height = 0;
};

/// One copy per run: its count * block_bytes bytes in each of the 2 *
/// num_layers planes, a plane being num_blocks blocks on the device and
/// num_host_blocks blocks in the host tier (the same layout, kernels.hpp).
std::vector<strided_copy> swap_copies(const pool_geometry& pool,
                                      std::uint32_t num_host_blocks,
                                      const swap_run* runs,
                                      std::size_t num_runs,
                                      swap_direction dir);

} // namespace kvactor::detail
