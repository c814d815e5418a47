// caf_scheduler: CAF 0.17's work-stealing scheduler with a clock thread that
// is woken only by actors that set timeouts. Stock CAF 0.17 wakes its clock
// thread whenever any actor quits (local_actor::cleanup cancels the actor's
// timeouts through the clock's queue), and kvactor ends one handle actor per
// request: on two cores that wake-up preempts a worker or a caller waiting
// for a reply. Internal; installed by tune_for_latency.
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
