// Per-block bookkeeping that orders work across CUDA streams: which pending
// ticket last wrote a block and which last read it on each stream. CUDA-free,
// so its rules are unit-tested without a GPU.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvactor/device/storage.hpp"

namespace kvactor::detail {

/// For every block of one tier, the latest ticket that wrote it (and on which
/// stream) and, per stream, the latest ticket that read it since that write.
/// Before an op is submitted on stream s, need_read / need_write collect, per
/// other stream, the newest ticket it must wait for:
///   read  of b: the last write of b (read-after-write);
///   write of b: the last write (write-after-write) and every read since it
///               (write-after-read).
/// Work on one stream is ordered by the stream itself, so s never waits on
/// s. Waiting on a stream's newest conflicting ticket covers its older ones
/// (a stream's events complete in order), and a write waited for every
/// earlier access of its block, so note_write may forget the reads it covers.
/// Tickets that already completed may stay recorded: the caller skips them.
/// Thread-safety: none (the storage's caller thread only).
class hazard_tracker {
public:
  static constexpr std::size_t max_streams = 4;

  /// The newest ticket to wait for on each stream; 0 = none.
  using waits = std::array<ticket, max_streams>;

  /// REQUIRES: num_streams <= max_streams.
  hazard_tracker(std::size_t num_blocks, std::size_t num_streams);

  void need_read(block_id b, std::size_t stream, waits& w) const noexcept;
  void need_write(block_id b, std::size_t stream, waits& w) const noexcept;

  /// Records that ticket `t` on `stream` reads / writes block `b`.
  void note_read(block_id b, std::size_t stream, ticket t) noexcept;
  void note_write(block_id b, std::size_t stream, ticket t) noexcept;

  std::size_t num_blocks() const noexcept {
    return write_.size();
  }

private:
  static void want(waits& w, std::size_t stream, ticket t) noexcept {
    if (t > w[stream])
      w[stream] = t;
  }

  std::size_t num_streams_;
  std::vector<ticket> write_;             // [num_blocks]
  std::vector<std::uint8_t> write_on_;    // [num_blocks]: stream of write_
  std::vector<ticket> read_;              // [num_blocks][num_streams]
};

} // namespace kvactor::detail
