// caf_scheduler: FIFO work-stealing workers, of which only as many poll as
// leave a core free, fed from outside through the one awake; and a clock
// that skips the cancellation of timeouts an actor never set. The
// coordinator that runs both is the scheduler module install_caf_scheduler
// adds to a config.
#include "kvactor/actors/caf_scheduler.hpp"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <mutex>
#include <thread>
#include <unordered_set>

#ifdef __linux__
#include <sched.h>
#endif

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/detail/set_thread_name.hpp>
#include <caf/detail/thread_safe_actor_clock.hpp>
#include <caf/logger.hpp>
#include <caf/policy/work_stealing.hpp>
#include <caf/scheduler/coordinator.hpp>
#include <caf/settings.hpp>

namespace kvactor::detail {

namespace {

/// CAF's thread-safe clock, except that cancel_timeouts(self) - called by
/// every actor as it quits - reaches the clock thread only for an actor
/// that set a timeout (a request with a timeout, a receive timeout, a
/// multi timeout). An actor sets and cancels its own timeouts from its own
/// execution, and always cancels as it quits, so the set holds exactly the
/// live actors that have set one; a pointer leaves it before its actor's
/// memory can be reused.
class quiet_clock final : public caf::detail::thread_safe_actor_clock {
public:
  using super = caf::detail::thread_safe_actor_clock;

  void set_ordinary_timeout(time_point t, caf::abstract_actor* self,
                            caf::atom_value type, uint64_t id) override {
    note(self);
    super::set_ordinary_timeout(t, self, type, id);
  }

  void set_request_timeout(time_point t, caf::abstract_actor* self,
                           caf::message_id id) override {
    note(self);
    super::set_request_timeout(t, self, id);
  }

  void set_multi_timeout(time_point t, caf::abstract_actor* self,
                         caf::atom_value type, uint64_t id) override {
    note(self);
    super::set_multi_timeout(t, self, type, id);
  }

  void cancel_timeouts(caf::abstract_actor* self) override {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      if (timed_.erase(self) == 0) {
        ++counts_.skipped;
        return; // nothing of it on the clock: no need to wake its thread
      }
      ++counts_.forwarded;
    }
    super::cancel_timeouts(self);
  }

  quiet_clock_counts counts() {
    std::lock_guard<std::mutex> guard{mtx_};
    return counts_;
  }

private:
  void note(caf::abstract_actor* self) {
    std::lock_guard<std::mutex> guard{mtx_};
    timed_.insert(self);
  }

  std::mutex mtx_;
  std::unordered_set<caf::abstract_actor*> timed_;
  quiet_clock_counts counts_;
};

/// How many workers may poll for work at once: one core fewer than the
/// process may run on (at least one), so that a thread calling in from
/// outside - the facade's caller, spinning for its reply - keeps a core.
std::size_t polling_workers_for_this_machine() {
#ifdef __linux__
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    auto n = static_cast<std::size_t>(CPU_COUNT(&set));
    return n > 1 ? n - 1 : 1;
  }
#endif
  auto n = static_cast<std::size_t>(std::thread::hardware_concurrency());
  return n > 1 ? n - 1 : 1;
}

/// CAF's work stealing with three changes.
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
///    worker that polled last while it polls, or while it runs a job it
///    began under `short_job` ago with nothing queued behind it (the
///    follow-up of the caller's previous call, usually); nobody has to be
///    woken - a futex call, ~1 us on this project's VMs, then the wake-up's
///    latency. Otherwise the next idle worker in round robin (CAF's order),
///    which may mean waking one: a call does not wait behind a long job,
///    and calls from several threads still spread over the workers.
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
    /// 1 + the id of the worker that began polling last (or, when none
    /// did, that woke last), until it sleeps; 0 when it sleeps. Read by every enqueue from outside, written only
    /// when another worker takes over or it sleeps: its own cache line.
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
      // Wakes it, should it have just gone to sleep.
      self->worker_by_id(hint - 1)->external_enqueue(job);
      return;
    }
    // Round robin over the idle workers (polling, or asleep: the enqueue
    // wakes it), past those running a job; when all run one, CAF's round
    // robin. (A burst of calls within short_job of each other can still
    // queue one behind a job that turns out long; the other workers' steals
    // take it at their next relaxed timeout, 10 ms.)
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
    const auto me = self->id() + 1;
    auto expected = me;
    d(self->parent()).poller.compare_exchange_strong(expected, 0,
                                                     std::memory_order_acq_rel);
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
      if (job != nullptr) {
        // Awake again: the hint's worker, unless another polls by now.
        std::size_t none = 0;
        d(self->parent()).poller.compare_exchange_strong(
          none, me, std::memory_order_acq_rel);
        return began(self, job);
      }
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
      return true; // polling, or going to sleep: the enqueue wakes it
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

/// CAF's work-stealing coordinator with FIFO workers, serving the quiet
/// clock from a thread of its own. (The base class still starts its stock
/// clock thread; nobody asks that clock for anything, so it sleeps.)
class kvactor_coordinator final
  : public caf::scheduler::coordinator<fifo_stealing> {
public:
  using super = caf::scheduler::coordinator<fifo_stealing>;

  explicit kvactor_coordinator(caf::actor_system& sys) : super(sys) {
    // nop
  }

  quiet_clock& clock() noexcept override {
    return clock_;
  }

protected:
  void start() override {
    clock_thread_ = std::thread{[this] {
      CAF_SET_LOGGER_SYS(&system());
      caf::detail::set_thread_name(quiet_clock_thread_name);
      system().thread_started();
      clock_.run_dispatch_loop();
      system().thread_terminates();
    }};
    super::start();
  }

  void stop() override {
    super::stop(); // the workers first: no actor sets a timeout after this
    clock_.cancel_dispatch_loop();
    clock_thread_.join();
  }

private:
  quiet_clock clock_;
  std::thread clock_thread_;
};

} // namespace

void install_caf_scheduler(caf::actor_system_config& cfg) {
  auto policy = caf::get_or(cfg, "scheduler.policy", caf::atom("stealing"));
  if (policy != caf::atom("stealing"))
    return;
  cfg.module_factories.push_back(
    [](caf::actor_system& sys) -> caf::actor_system::module* {
      return new kvactor_coordinator(sys);
    });
}

std::optional<quiet_clock_counts> quiet_clock_counts_of(caf::actor_system& sys) {
  auto* clock = dynamic_cast<quiet_clock*>(&sys.clock());
  if (clock == nullptr)
    return std::nullopt;
  return clock->counts();
}

} // namespace kvactor::detail
