// Turns a batch of swap moves into runs of consecutive blocks, so that the
// CUDA backend issues one copy per run instead of one per block (each run's
// strided copies: swap_copies.hpp), and splits the runs between the copy
// engines (long runs) and the swap kernel (short ones). CUDA-free: the unit
// tests replay the copies with memcpy.
#pragma once

#include <vector>

#include "kvactor/device/kernels.hpp"
#include "kvactor/device/swap_copies.hpp"
#include "kvactor/messages/types.hpp"

namespace kvactor::detail {

/// Sorts `moves` by device block and merges neighbours whose device ids and
/// host ids both go up by one, so each run is a contiguous range on both
/// sides. Covers every move exactly once; empty for an empty batch.
/// REQUIRES: device ids distinct and host ids distinct (check_swap).
std::vector<swap_run> coalesce_moves(std::vector<block_move> moves);

/// Bytes per plane from which a run goes to the copy engines (one strided
/// copy per run) rather than to the swap kernel. Measured on the H200
/// (gpu_bench, bench/HISTORY.md): copy engines move 128 KiB pieces at 92-98 %
/// of pinned memcpy bandwidth but 32 KiB pieces at 67-74 %, a per-piece cost
/// the kernel does not pay.
constexpr std::size_t copy_engine_min_bytes = 128 * 1024;

/// A swap's runs by the mover that takes them.
struct swap_split {
  std::vector<swap_run> by_kernel;      // shorter than the threshold
  std::vector<swap_run> by_copy_engine; // the rest
};

/// Splits `runs` (of blocks of `block_bytes` per plane): runs of at least
/// `min_copy_bytes` per plane go to the copy engines, the rest to the
/// kernel; the order within each part is kept.
swap_split split_runs(const std::vector<swap_run>& runs,
                      std::size_t block_bytes,
                      std::size_t min_copy_bytes = copy_engine_min_bytes);

} // namespace kvactor::detail
