// Tickets of the CUDA backend: each submitted op records one pooled CUDA
// event; done() and wait() query or synchronise the events of every ticket up
// to the one asked about, finished() and wait_one() that ticket's alone.
// CUDA types stay opaque (forward declarations).
#pragma once

#include <map>
#include <vector>

#include "kvactor/device/storage.hpp"

struct CUevent_st;
struct CUstream_st;

namespace kvactor::detail {

/// The pending tickets and their events. A ticket leaves the table once its
/// event is known complete; its event goes back to a free list for reuse
/// (safe: cudaStreamWaitEvent captures the record it sees when called).
/// Functions return a cudaError_t as int (0 = success).
/// Thread-safety: none (the storage's caller thread only).
class ticket_table {
public:
  ticket_table() = default;
  ~ticket_table();
  ticket_table(const ticket_table&) = delete;
  ticket_table& operator=(const ticket_table&) = delete;

  /// Records a (reused or new) event for ticket `t` at the tail of `stream`.
  /// REQUIRES: t greater than every recorded ticket.
  int record(ticket t, CUstream_st* stream);

  /// The event of `t` while it may still be pending; nullptr once it was
  /// seen complete (or if it was never recorded).
  CUevent_st* event(ticket t) const;

  /// Queries every pending ticket <= t and forgets the complete ones;
  /// `all_done` tells whether none <= t remains.
  int poll(ticket t, bool& all_done);

  /// Blocks until every ticket <= t completed.
  int sync(ticket t);

  /// Blocks until ticket `t` alone completed (no-op if it is not pending).
  int sync_one(ticket t);

  /// Queries ticket `t` alone and forgets it if complete; `complete` tells
  /// whether it is (true if it is not pending).
  int poll_one(ticket t, bool& complete);

  /// Forgets the oldest tickets while they are complete, so the table stays
  /// small when callers never ask about their tickets.
  int trim();

  std::size_t pending() const noexcept {
    return pending_.size();
  }

private:
  void release(std::map<ticket, CUevent_st*>::iterator i);

  std::map<ticket, CUevent_st*> pending_;
  std::vector<CUevent_st*> free_;
};

} // namespace kvactor::detail
