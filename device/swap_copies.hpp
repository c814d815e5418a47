// The strided copies that move runs of consecutive blocks between the device
// pool and the host tier across all layers (one cudaMemcpy2DAsync each).
// Free of CUDA and of CAF, so kernels.cu can include it (STYLE.md: no CAF
// header in .cu files); the runs come from swap_plan.hpp's coalesce_moves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvactor/device/kernels.hpp"

namespace kvactor::detail {

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
