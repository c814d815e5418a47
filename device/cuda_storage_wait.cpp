// Storage kind "cuda": waiting for tickets (done, wait, the bounded wait
// the device actor's stall detection uses), the completion callbacks that
// call the wake, and the stalled mark its teardown heeds (cuda_storage.hpp;
// memory, streams and ordering: cuda_storage.cpp).
#include "kvactor/device/cuda_storage.hpp"

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include <caf/error.hpp>
#include <cuda_runtime_api.h>

#include "kvactor/messages/error.hpp"

namespace kvactor {

namespace {

caf::error device_failure(std::string text) {
  return make_error(errc::device_failure, std::move(text));
}

} // namespace

// done() and finished() query the events even after a failure: an op is
// answered (device_failure, once the storage failed) only when the GPU no
// longer runs it. Answered earlier, the pool would undo it and give its
// blocks to others while its copy still wrote them. After a sticky error
// every query fails at once; after one that is not (a refused launch or
// event call), work queued before it still completes; work that never
// completes is the device actor's stall to report.
bool cuda_storage::done(ticket t) {
  bool all_done = false;
  if (auto err = tickets_.poll(t, all_done)) {
    fail(err, "cudaEventQuery");
    return true;
  }
  return all_done;
}

// Once the storage failed, the waits still wait for the ticket's work, for
// the reason done() queries: an error that is not sticky leaves work queued
// before it running, and answered early, the op's blocks would go to others
// while its copy still wrote them. After a sticky error the wait ends at
// once. Then the failure is reported.
caf::error cuda_storage::failed_after(int wait_result) {
  if (wait_result != 0)
    cudaGetLastError(); // not this thread's next launch's error
  return device_failure(failed_);
}

caf::error cuda_storage::wait(ticket t) {
  if (!failed_.empty())
    return failed_after(tickets_.sync(t));
  if (auto err = usable())
    return err;
  if (auto err = tickets_.sync(t))
    return fail(err, "cudaEventSynchronize");
  return caf::none;
}

bool cuda_storage::finished(ticket t) {
  bool complete = false;
  if (auto err = tickets_.poll_one(t, complete)) {
    fail(err, "cudaEventQuery");
    return true;
  }
  return complete;
}

caf::error cuda_storage::wait_one(ticket t) {
  if (!failed_.empty())
    return failed_after(tickets_.sync_one(t));
  if (auto err = usable())
    return err;
  if (auto err = tickets_.sync_one(t))
    return fail(err, "cudaEventSynchronize");
  return caf::none;
}

caf::error cuda_storage::wait_one_for(ticket t, std::chrono::nanoseconds limit,
                                      bool& timed_out) {
  timed_out = false;
  // Failed already: waits all the same (see failed_after), then reports it.
  const bool failed = !failed_.empty();
  if (!failed)
    if (auto err = usable())
      return err;
  auto outcome = [&]() -> caf::error {
    return failed ? device_failure(failed_) : caf::error{};
  };
  using clock = std::chrono::steady_clock;
  auto start = clock::now();
  for (;;) {
    bool complete = false;
    if (auto err = tickets_.poll_one(t, complete))
      return failed ? failed_after(err) : fail(err, "cudaEventQuery");
    if (complete)
      return outcome();
    auto waited = clock::now() - start;
    if (waited >= limit) {
      timed_out = true;
      return outcome();
    }
    if (waited < std::chrono::milliseconds{1})
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds{50});
  }
}

void cuda_storage::mark_stalled() noexcept {
  stalled_->store(true);
}

bool cuda_storage::busy() noexcept {
  // Not ready is work still queued; any other error is a failed device,
  // whose calls return at once. Either way the error is cleared, as
  // query() does (cuda_tickets.cpp): left as this thread's last error, a
  // not-ready would fail the next launch's check on this thread - a
  // restarted device actor's first copy, say - and the storage for good.
  auto running = [](CUstream_st* s) {
    if (s == nullptr)
      return false;
    auto err = cudaStreamQuery(s);
    if (err != cudaSuccess)
      cudaGetLastError();
    return err == cudaErrorNotReady;
  };
  for (std::size_t i = 0; i < num_streams; ++i)
    if (running(streams_[i]) || running(notifiers_[i]))
      return true;
  return running(uploads_.stream()) || running(swap_uploads_[0].stream())
         || running(swap_uploads_[1].stream());
}

void cuda_storage::set_wake(std::function<void()> wake) {
  // A new device actor on this storage (a restart's) after a stall that
  // passed - the work ended after all - frees its buffers again: only
  // work still queued keeps the storage marked stalled.
  if (wake && stalled_->load() && !busy())
    stalled_->store(false);
  has_wake_ = static_cast<bool>(wake);
  std::lock_guard<std::mutex> guard{wake_box_->mtx};
  wake_box_->wake = has_wake_ ? std::make_shared<const std::function<void()>>(
                                  std::move(wake))
                              : nullptr;
}

void cuda_storage::on_complete(void* box) {
  // Runs on CUDA's callback thread: must not call CUDA.
  auto* b = static_cast<wake_box*>(box);
  std::shared_ptr<const std::function<void()>> wake;
  {
    std::lock_guard<std::mutex> guard{b->mtx};
    wake = b->wake;
  }
  if (wake) {
    detail::wake_scope scope;
    (*wake)();
  }
}

} // namespace kvactor
