// Cross-stream ordering bookkeeping (hazards.hpp; the rules are inline).
#include "kvactor/device/hazards.hpp"

#include <cassert>

namespace kvactor::detail {

hazard_tracker::hazard_tracker(std::size_t num_blocks, std::size_t num_streams)
  : blocks_(num_blocks) {
  assert(num_streams <= max_streams);
  (void) num_streams;
}

} // namespace kvactor::detail
