// scheduler_actor: the scheduler actor's state and the links of its step
// chain that scheduler.cpp (the chain, the end of a run, simulate()) and
// scheduler_data.cpp (the K/V bytes: writes and read-backs) share.
// Internal to the simulator: CAF types, kvactor::sim::sched.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <string>

#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>

#include "batcher.hpp"
#include "kvactor/messages/interfaces.hpp"
#include "progress.hpp"
#include "scheduler.hpp"

namespace kvactor::sim::sched {

constexpr auto reply_timeout = std::chrono::seconds{120};

struct sched_state {
  static inline const char* name = "kvactor.sim.scheduler";

  const scenario* sc = nullptr;
  std::unique_ptr<batcher> b;
  kv_cache_manager_actor mgr;
  step_actor lane; ///< where steps go (the manager hands it out)
  block_pool_actor pool; ///< for the invariant check at the end
  device_actor dev;
  bool write_data = false;
  std::uint32_t num_layers = 0;
  std::size_t row_bytes = 0; ///< one token's K (or V) in one layer
  memory_pressure level = memory_pressure::low;
  const std::atomic<bool>* interrupted = nullptr;
  progress* bar = nullptr;
  sim_outcome* out = nullptr;
  std::promise<void>* done = nullptr;
  /// Set as `done` is fulfilled, by deliver or by the actor's exit.
  std::shared_ptr<std::atomic<bool>> handed_over;
  std::uint64_t verifies = 0;
  bool finishing = false;
};

using sched_actor = caf::stateful_actor<sched_state>;

/// Records a warning for the report (the first few).
void warn(sched_actor* self, std::string text);

/// Ends the run (at its end, on interrupt or on `error`).
void finish(sched_actor* self, std::string error = {});

/// The chain's links, in order: [probe_step ->] send_step (and its
/// follow-ups) -> write_step -> swap_step -> verify_step -> stats_step
/// (which starts the next step).
void probe_step(sched_actor* self);
void send_step(sched_actor* self, step_request req);
void write_step(sched_actor* self);
void swap_step(sched_actor* self);
void verify_step(sched_actor* self);
void stats_step(sched_actor* self);

} // namespace kvactor::sim::sched
