// Cross-stream ordering bookkeeping (hazards.hpp).
#include "kvactor/device/hazards.hpp"

#include <algorithm>
#include <cassert>

namespace kvactor::detail {

hazard_tracker::hazard_tracker(std::size_t num_blocks, std::size_t num_streams)
  : num_streams_(num_streams),
    write_(num_blocks, 0),
    write_on_(num_blocks, 0),
    read_(num_blocks * num_streams, 0) {
  assert(num_streams <= max_streams);
}

void hazard_tracker::need_read(block_id b, std::size_t stream,
                               waits& w) const noexcept {
  if (write_[b] != 0 && write_on_[b] != stream)
    want(w, write_on_[b], write_[b]);
}

void hazard_tracker::need_write(block_id b, std::size_t stream,
                                waits& w) const noexcept {
  need_read(b, stream, w);
  const ticket* reads = &read_[std::size_t{b} * num_streams_];
  for (std::size_t s = 0; s < num_streams_; ++s)
    if (s != stream && reads[s] != 0)
      want(w, s, reads[s]);
}

void hazard_tracker::note_read(block_id b, std::size_t stream,
                               ticket t) noexcept {
  read_[std::size_t{b} * num_streams_ + stream] = t;
}

void hazard_tracker::note_write(block_id b, std::size_t stream,
                                ticket t) noexcept {
  write_[b] = t;
  write_on_[b] = static_cast<std::uint8_t>(stream);
  auto reads = read_.begin() + static_cast<std::ptrdiff_t>(b * num_streams_);
  std::fill(reads, reads + static_cast<std::ptrdiff_t>(num_streams_), 0);
}

} // namespace kvactor::detail

