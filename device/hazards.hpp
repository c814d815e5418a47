// Per-block bookkeeping that orders work across CUDA streams: which pending
// ticket last wrote a block and which last read it on each stream, and the
// one shortcut a forward pass needs (a batch's writes kept as a group whose
// ticket the next layer's write of the same blocks renews). CUDA-free, so
// its rules are unit-tested without a GPU.
#pragma once

#include <array>
#include <cassert>
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
/// s (the one exception, write_slots kernels of one chain that may run
/// together, write other layers' bytes of their blocks: write_chain.hpp). Waiting on a stream's newest conflicting ticket covers its older ones
/// (a stream's events complete in order), and a write waited for every
/// earlier access of its block, so note_write may forget the reads it covers.
/// Tickets that already completed may stay recorded: the caller skips them.
///
/// Groups: write_slots writes the same blocks once per layer, thousands of
/// them in a decode batch. note_writes() records such a batch as one group
/// (its block list, stream and ticket) instead of entry by entry; while no
/// other call came since, writes_pending() says a write of the same blocks
/// on the same stream has nothing to wait for, and renew_writes() moves the
/// group to that write's ticket: O(1) per layer instead of O(blocks). Any
/// other call first applies the group to its blocks' entries, leaving them
/// exactly as note_write() of each block by the group's newest ticket would
/// have (the older tickets are covered by it: one stream, in order): the
/// next copy, gather or swap pays that O(blocks) once per step.
/// Thread-safety: none (the storage's caller thread only).
class hazard_tracker {
public:
  static constexpr std::size_t max_streams = 4;

  /// The newest ticket to wait for on each stream; 0 = none.
  using waits = std::array<ticket, max_streams>;

  /// REQUIRES: num_streams <= max_streams.
  hazard_tracker(std::size_t num_blocks, std::size_t num_streams);
  // Not copyable: a copied group would lose the capacity reserved for it.
  hazard_tracker(const hazard_tracker&) = delete;
  hazard_tracker& operator=(const hazard_tracker&) = delete;

  // Inline, and one entry (one cache line at most) per block: write_slots
  // calls them for every block a batch of thousands of tokens writes.

  void need_read(block_id b, std::size_t stream, waits& w) noexcept {
    settle();
    auto& e = blocks_[b];
    if (e.write != 0 && e.write_on != stream)
      want(w, e.write_on, e.write);
  }

  void need_write(block_id b, std::size_t stream, waits& w) noexcept {
    settle();
    auto& e = blocks_[b];
    if (e.write != 0 && e.write_on != stream)
      want(w, e.write_on, e.write);
    // Streams past num_streams never read (their entries stay 0).
    for (std::size_t s = 0; s < max_streams; ++s)
      if (s != stream)
        want(w, s, e.read[s]);
  }

  /// Records that ticket `t` on `stream` reads / writes block `b`.
  void note_read(block_id b, std::size_t stream, ticket t) noexcept {
    settle();
    blocks_[b].read[stream] = t;
  }

  void note_write(block_id b, std::size_t stream, ticket t) noexcept {
    settle();
    write(blocks_[b], stream, t);
  }

  /// Records that ticket `t` on `stream` writes each of the `n` distinct
  /// blocks at `first`, as one group (see the class comment).
  void note_writes(const block_id* first, std::size_t n, std::size_t stream,
                   ticket t) noexcept;

  /// True if note_writes() or renew_writes() on `stream` was the last call
  /// (writes_pending() aside): another write of exactly the group's blocks
  /// on `stream` then conflicts with nothing the stream does not already
  /// order before it, and needs no waits.
  bool writes_pending(std::size_t stream) const noexcept {
    return group_.pending && group_.stream == stream;
  }

  /// Ticket `t`, on the group's stream, writes the group's blocks again.
  /// REQUIRES: writes_pending(that stream).
  void renew_writes(ticket t) noexcept {
    assert(group_.pending);
    group_.last = t;
  }

  std::size_t num_blocks() const noexcept {
    return blocks_.size();
  }

private:
  static void want(waits& w, std::size_t stream, ticket t) noexcept {
    if (t > w[stream])
      w[stream] = t;
  }

  struct entry {
    std::array<ticket, max_streams> read{}; // per stream, since the write
    ticket write = 0;                       // the last write (0: none)
    std::uint32_t write_on = 0;             // its stream
  };

  static void write(entry& e, std::size_t stream, ticket t) noexcept {
    e.write = t;
    e.write_on = static_cast<std::uint32_t>(stream);
    e.read = {};
  }

  /// Applies a pending group to its blocks' entries.
  void settle() noexcept {
    if (group_.pending)
      apply_group();
  }
  void apply_group() noexcept;

  struct group {
    std::vector<block_id> blocks; // distinct
    std::size_t stream = 0;
    ticket last = 0;              // the newest write of them all
    bool pending = false;
  };

  std::vector<entry> blocks_;
  group group_;
};

} // namespace kvactor::detail
