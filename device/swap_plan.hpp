// Turns a batch of swap moves into runs of consecutive blocks, so that the
// CUDA backend issues one copy per run instead of one per block (each run's
// strided copies: swap_copies.hpp). CUDA-free: the unit tests replay the
// copies with memcpy.
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

} // namespace kvactor::detail
