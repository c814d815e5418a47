// caf_scheduler: the CAF scheduler kvactor's systems run on - CAF 0.17's work
// stealing with these changes:
//  - workers run the actors they wake in the order they woke. Stock CAF runs
//    the newest first, which under sustained load starves every actor off
//    the hot path: ended handle actors piled up by the tens of thousands
//    until the load paused, and timers' messages waited likewise;
//  - at most one worker fewer than the process has cores polls for work at
//    a time (the others sleep until woken), and a job from outside the
//    workers - a facade call - goes to the worker awake now, unless it runs
//    a long job; stock CAF's idle workers all spin (at least four, on any
//    number of cores) and its calls go round robin, to sleepers too;
//  - the clock thread is woken only by actors that set timeouts. Stock CAF
//    0.17 wakes it whenever any actor quits (local_actor::cleanup cancels
//    the actor's timeouts through the clock's queue): on two cores that
//    wake-up preempts a worker or a caller waiting for a reply.
// Internal; installed by tune_for_latency (and so by configure()).
#pragma once

#include <cstdint>
#include <optional>

namespace caf {
class actor_system;
class actor_system_config;
} // namespace caf

namespace kvactor::detail {

/// Name of the quiet clock's thread (the stock one, idle, keeps "caf.clock").
inline constexpr const char* quiet_clock_thread_name = "kvactor.clock";

/// Makes systems built from `cfg` use this scheduler - unless `cfg`
/// asks for another policy than work stealing (CAF's deterministic test
/// scheduler, work sharing), which it leaves alone.
void install_caf_scheduler(caf::actor_system_config& cfg);

/// What the quiet clock did with the cancellations quitting actors asked
/// for: skipped (the actor had set no timeout) or passed on to the clock
/// thread.
struct quiet_clock_counts {
  std::uint64_t skipped = 0;
  std::uint64_t forwarded = 0;
};

/// The counts of `sys`'s quiet clock; none if `sys` runs another scheduler.
std::optional<quiet_clock_counts> quiet_clock_counts_of(caf::actor_system& sys);

} // namespace kvactor::detail
