// Cross-stream ordering bookkeeping (hazards.hpp; the per-block rules are
// inline, the write groups' bulk steps here).
#include "kvactor/device/hazards.hpp"

#include <cassert>

namespace kvactor::detail {

hazard_tracker::hazard_tracker(std::size_t num_blocks, std::size_t num_streams)
  : blocks_(num_blocks) {
  assert(num_streams <= max_streams);
  (void) num_streams;
  // A group's blocks are distinct: reserved whole now, note_writes() never
  // allocates (it runs after its op was submitted, where it must not fail).
  group_.blocks.reserve(num_blocks);
}

void hazard_tracker::note_writes(const block_id* first, std::size_t n,
                                 std::size_t stream, ticket t) noexcept {
  settle();
  assert(n <= group_.blocks.capacity()); // distinct blocks: reserved
  group_.blocks.assign(first, first + n);
  group_.stream = stream;
  group_.last = t;
  group_.pending = true;
}

void hazard_tracker::apply_group() noexcept {
  group_.pending = false;
  for (auto b : group_.blocks)
    write(blocks_[b], group_.stream, group_.last);
}

} // namespace kvactor::detail
