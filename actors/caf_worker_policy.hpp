// caf_worker_policy: the scheduling policy of kvactor's CAF workers - CAF
// 0.17's work stealing, with workers that run what they wake in the order
// it woke, at most one fewer polling than the cores, and jobs from outside
// handed to the worker awake. Internal: included by caf_scheduler.cpp only
// (it needs CAF's scheduler headers).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <mutex>
#include <thread>

#ifdef __linux__
#include <sched.h>
#endif

#include <caf/policy/work_stealing.hpp>
#include <caf/resumable.hpp>
#include <caf/scheduler/abstract_coordinator.hpp>

namespace kvactor::detail {

/// How many workers may poll for work at once: one core fewer than the
/// process may run on (at least one), so that a thread calling in from
/// outside - the facade's caller, spinning for its reply - keeps a core.
inline std::size_t polling_workers_for_this_machine() {
  auto n = static_cast<std::size_t>(std::thread::hardware_concurrency());
#ifdef __linux__
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    n = static_cast<std::size_t>(CPU_COUNT(&set));
#endif
  return n > 1 ? n - 1 : 1;
}

/// CAF's work stealing with four changes.
///  - A worker runs the actors it wakes itself in the order they woke
///    (stock CAF runs the newest first). Newest first starves: under
///    sustained load one worker always has a fresher job (the next hop of a
///    request in flight), so an actor woken earlier - a handle actor told
///    to end, the supervisor with a pressure change - waits until the load
///    pauses; ended handle actors piled up by the tens of thousands.
///  - At most `max_polling` idle workers poll for work; the others sleep
///    on their condition variable at once. Stock CAF lets every idle
///    worker spin through its aggressive phase: CAF 0.17 starts at least
///    four, and on two cores four spinning workers and a spinning caller
///    took each other's time slices (the facade's allocate p99 ~100 us).
///  - A job from outside the workers (a facade call, a timer) goes to the
///    worker that began polling last while it is idle - polling, or asleep
///    since - or while it runs a job it began under `short_job` ago with
///    nothing queued behind it (the follow-up of the caller's previous
///    call, usually). Polling, nobody has to be woken (a futex call, ~1 us
///    on this project's VMs, then the wake-up's latency); asleep, it is
///    the one to wake: it last ran beside the caller, not on the caller's
///    core (these VMs show no shared cache between their cores, so Linux
///    wakes a thread on its last core or the waker's, busy or not).
///    Otherwise the next idle worker in round robin (CAF's order), which
///    may mean waking one: a call does not wait behind a long job, and
///    calls from several threads still spread over the workers.
///  - A job a worker's own thread hands to the coordinator (CAF does so
///    for a monitor's down, among others) stays with that worker, as
///    exec_later would have put it, instead of waking another.
class fifo_stealing : public caf::policy::work_stealing {
public:
  using super = caf::policy::work_stealing;

  /// The worker this thread is, and its coordinator (null on other threads).
  static inline thread_local void* this_thread_worker = nullptr;
  static inline thread_local void* this_thread_coordinator = nullptr;

  struct coordinator_data : super::coordinator_data {
    explicit coordinator_data(caf::scheduler::abstract_coordinator* p)
      : super::coordinator_data(p),
        max_polling(polling_workers_for_this_machine()) {
      // nop
    }

    const std::size_t max_polling;
    /// Idle workers polling now (only workers touch it).
    alignas(64) std::atomic<std::size_t> polling{0};
    /// 1 + the id of the worker that began polling last, whether it still
    /// polls, runs a job or sleeps since (0 until one polled). Read by
    /// every enqueue from outside, written only when another worker takes
    /// over: its own cache line. (Up to day 19 it was cleared when that
    /// worker slept, and the next call woke a sleeper in round robin -
    /// often one that last ran on the caller's core, where it then waited
    /// for the spinning caller's time slice.)
    alignas(64) std::atomic<std::size_t> poller{0};
  };

  struct worker_data : super::worker_data {
    explicit worker_data(caf::scheduler::abstract_coordinator* p)
      : super::worker_data(p) {
      // nop
    }

    worker_data(const worker_data& other) : super::worker_data(other) {
      // nop
    }

    /// When the worker began the job it runs now (steady_clock ticks); 0
    /// while it polls or sleeps. Written by the worker at each job, read by
    /// enqueues from outside.
    alignas(64) std::atomic<std::chrono::steady_clock::rep> busy_since{0};
  };

  /// How long a job may have run and still have a call from outside queue
  /// behind it rather than wake another worker.
  static constexpr std::chrono::microseconds short_job{10};

  template <class Coordinator>
  void central_enqueue(Coordinator* self, caf::resumable* job) {
    if (this_thread_coordinator == self) {
      // A worker's own thread, running an actor that sent without naming
      // its execution unit: the job is that worker's, as CAF's exec_later
      // would have made it (it runs once the current job is done).
      static_cast<typename Coordinator::worker_type*>(this_thread_worker)
        ->exec_later(job);
      return;
    }
    auto n = self->num_workers();
    if (n == 1) {
      self->worker_by_id(0)->external_enqueue(job);
      return;
    }
    auto hint = d(self).poller.load(std::memory_order_acquire);
    if (hint != 0 && awake_and_free(d(self->worker_by_id(hint - 1)))) {
      // Wakes it if it sleeps.
      self->worker_by_id(hint - 1)->external_enqueue(job);
      return;
    }
    // Round robin over the idle workers (polling, or asleep: the enqueue
    // wakes it), past those running a job; when all run one, CAF's round
    // robin. (A burst of calls within short_job of each other can still
    // queue one behind a job that turns out long: a polling worker steals
    // it, and each sleeping one tries one worker at random per relaxed
    // timeout, 100 ms (see tune_for_latency). Steals take the newest job,
    // as in CAF, so the one stranded may go last. Stealing more eagerly -
    // the oldest job, every worker at a timeout, once more before
    // sleeping - was tried on day 19 and cost scale with default workers
    // 10-25 % per operation: each steal moves work, and its data, to the
    // other core.)
    auto first = d(self).next_worker++ % n;
    for (std::size_t k = 0; k < n; ++k) {
      auto* w = self->worker_by_id((first + k) % n);
      if (d(w).busy_since.load(std::memory_order_relaxed) == 0) {
        w->external_enqueue(job);
        return;
      }
    }
    self->worker_by_id(first)->external_enqueue(job);
  }

  template <class Worker>
  void internal_enqueue(Worker* self, caf::resumable* job) {
    d(self).queue.append(job);
  }

  template <class Worker>
  caf::resumable* dequeue(Worker* self) {
    auto& own = d(self);
    if (this_thread_worker != self) {
      this_thread_worker = self;
      this_thread_coordinator = self->parent();
    }
    if (self->parent()->num_workers() > 1)
      own.busy_since.store(0, std::memory_order_relaxed);
    auto* job = poll(self);
    if (job != nullptr)
      return began(self, job);
    // Nothing came while polling (or no poller's place was free): sleep
    // until an enqueue wakes us, stealing at each of the relaxed strategy's
    // timeouts - CAF's relaxed phase, unchanged. An enqueue appends, then
    // takes the lock and wakes us if we sleep; we check the queue under
    // that lock before sleeping, so no job is missed.
    auto& relaxed = own.strategies[2];
    auto& wait = own.waitdata;
    for (std::size_t i = 1;; ++i) {
      bool woken;
      {
        std::unique_lock<std::mutex> guard{wait.lock};
        wait.sleeping = true;
        woken = wait.cv.wait_for(guard, relaxed.sleep_duration,
                                 [&] { return !own.queue.empty(); });
        wait.sleeping = false;
      }
      if (woken)
        job = own.queue.take_head();
      else if (i % relaxed.steal_interval == 0)
        job = try_steal(self);
      if (job != nullptr)
        return began(self, job);
    }
  }

private:
  /// Notes when `self` began `job` (with one worker, whom every enqueue
  /// goes to, nobody reads it).
  template <class Worker>
  static caf::resumable* began(Worker* self, caf::resumable* job) {
    if (self->parent()->num_workers() > 1) {
      auto now = std::chrono::steady_clock::now().time_since_epoch().count();
      d(self).busy_since.store(now != 0 ? now : 1, std::memory_order_relaxed);
    }
    return job;
  }

  /// Whether a job from outside may queue at `w` (see the class comment).
  static bool awake_and_free(worker_data& w) {
    auto since = w.busy_since.load(std::memory_order_relaxed);
    if (since == 0)
      return true; // polling, or asleep: the enqueue wakes it
    if (!w.queue.empty())
      return false;
    auto now = std::chrono::steady_clock::now().time_since_epoch().count();
    return now - since
           < std::chrono::duration_cast<std::chrono::steady_clock::duration>(
               short_job)
               .count();
  }

  /// The aggressive phase of CAF's polling, if fewer than max_polling
  /// workers poll now: the head of our queue, and every steal_interval
  /// attempts a steal. (kvactor configures no moderate phase.)
  template <class Worker>
  caf::resumable* poll(Worker* self) {
    auto& shared = d(self->parent());
    auto n = shared.polling.load(std::memory_order_relaxed);
    do {
      if (n >= shared.max_polling)
        return nullptr;
    } while (!shared.polling.compare_exchange_weak(n, n + 1,
                                                   std::memory_order_relaxed));
    auto me = self->id() + 1;
    if (shared.poller.load(std::memory_order_relaxed) != me)
      shared.poller.store(me, std::memory_order_release);
    auto& own = d(self);
    auto& aggressive = own.strategies[0];
    caf::resumable* job = nullptr;
    for (std::size_t i = 0; i < aggressive.attempts && job == nullptr;
         i += aggressive.step_size) {
      job = own.queue.take_head();
      if (job == nullptr && i % aggressive.steal_interval == 0)
        job = try_steal(self);
    }
    shared.polling.fetch_sub(1, std::memory_order_relaxed);
    return job;
  }
};

} // namespace kvactor::detail
