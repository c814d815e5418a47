// Tickets as pooled CUDA events (cuda_tickets.hpp).
#include "kvactor/device/cuda_tickets.hpp"

#include <cuda_runtime_api.h>

namespace kvactor::detail {

namespace {

/// cudaEventQuery, leaving no trace of "not ready": that answer is not an
/// error, but the runtime may keep it as the thread's last error, where the
/// next launch's cudaGetLastError() check would take it for a failed launch
/// (PyTorch clears it after every query for this reason).
cudaError_t query(cudaEvent_t ev) {
  auto err = cudaEventQuery(ev);
  if (err == cudaErrorNotReady)
    cudaGetLastError();
  return err;
}

} // namespace

ticket_table::~ticket_table() {
  // Destroying an event whose record is pending is allowed: the driver frees
  // it once complete.
  for (auto& [t, ev] : pending_)
    cudaEventDestroy(ev);
  for (auto ev : free_)
    cudaEventDestroy(ev);
}

int ticket_table::record(ticket t, CUstream_st* stream) {
  cudaEvent_t ev = nullptr;
  if (free_.empty()) {
    // Without cudaEventBlockingSync: a wait (sync, sync_one) spins on the
    // device actor's own detached thread - the lowest wake-up latency for
    // the write and gather replies, at the price of a busy core while one
    // waits behind a long swap. The scheduler's workers are not involved.
    if (auto err = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming))
      return err;
  } else {
    ev = free_.back();
    free_.pop_back();
  }
  if (auto err = cudaEventRecord(ev, stream)) {
    free_.push_back(ev);
    return err;
  }
  pending_.emplace_hint(pending_.end(), t, ev);
  return cudaSuccess;
}

CUevent_st* ticket_table::event(ticket t) const {
  auto i = pending_.find(t);
  return i == pending_.end() ? nullptr : i->second;
}

void ticket_table::release(std::map<ticket, CUevent_st*>::iterator i) {
  free_.push_back(i->second);
  pending_.erase(i);
}

int ticket_table::poll(ticket t, bool& all_done) {
  all_done = true;
  for (auto i = pending_.begin(); i != pending_.end() && i->first <= t;) {
    auto err = query(i->second);
    if (err == cudaErrorNotReady) {
      all_done = false;
      ++i;
    } else if (err != cudaSuccess) {
      return err;
    } else {
      release(i++);
    }
  }
  return cudaSuccess;
}

int ticket_table::sync(ticket t) {
  while (!pending_.empty() && pending_.begin()->first <= t) {
    if (auto err = cudaEventSynchronize(pending_.begin()->second))
      return err;
    release(pending_.begin());
  }
  return cudaSuccess;
}

int ticket_table::sync_one(ticket t) {
  auto i = pending_.find(t);
  if (i == pending_.end())
    return cudaSuccess;
  if (auto err = cudaEventSynchronize(i->second))
    return err;
  release(i);
  return cudaSuccess;
}

int ticket_table::poll_one(ticket t, bool& complete) {
  complete = true;
  auto i = pending_.find(t);
  if (i == pending_.end())
    return cudaSuccess;
  auto err = query(i->second);
  if (err == cudaErrorNotReady) {
    complete = false;
    return cudaSuccess;
  }
  if (err != cudaSuccess)
    return err;
  release(i);
  return cudaSuccess;
}

int ticket_table::trim() {
  while (!pending_.empty()) {
    auto err = query(pending_.begin()->second);
    if (err == cudaErrorNotReady)
      return cudaSuccess;
    if (err != cudaSuccess)
      return err;
    release(pending_.begin());
  }
  return cudaSuccess;
}

} // namespace kvactor::detail
