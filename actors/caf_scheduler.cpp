// caf_scheduler: FIFO work-stealing workers, of which only as many poll as
// leave a core free, fed from outside through the one awake; and a clock
// that skips the cancellation of timeouts an actor never set. The
// coordinator that runs both is the scheduler module install_caf_scheduler
// adds to a config.
#include "kvactor/actors/caf_scheduler.hpp"
#include "kvactor/actors/caf_worker_policy.hpp"

#include <mutex>
#include <thread>
#include <unordered_set>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/detail/set_thread_name.hpp>
#include <caf/detail/thread_safe_actor_clock.hpp>
#include <caf/logger.hpp>
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
