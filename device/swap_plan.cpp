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

} // namespace kvactor::detail
