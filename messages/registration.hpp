// Registers kvactor's message types and error category with an actor system
// config. Call it on every config whose system runs kvactor actors or talks
// to them (both ends of a remote connection): an unregistered type is not a
// compile error, the peer just receives an empty message. Also
// tune_for_latency: the CAF settings configure() applies with it.
#pragma once

namespace caf {
class actor_system_config;
} // namespace caf

namespace kvactor {

/// Adds every message type (with a stable name) and the "kvactor" error
/// category with a readable renderer.
void add_message_types(caf::actor_system_config& cfg);

/// The scheduler kvactor's systems should run on (configure() installs it):
/// work stealing whose workers run actors in the order they woke, so that
/// no actor starves under sustained load (stock CAF runs the newest first;
/// see actors/caf_scheduler.hpp); a clock thread woken only for timers and
/// run at the lowest priority (on Linux); workers that poll longer before
/// sleeping, for low-latency calls from non-actor threads (the facade).
/// Leaves a config that asks for another scheduler policy (CAF's
/// deterministic test scheduler) on that policy.
void tune_for_latency(caf::actor_system_config& cfg);

} // namespace kvactor
