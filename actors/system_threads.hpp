// system_threads: which threads an actor system started itself - its
// scheduler's workers, where every actor's handlers run, and its clock
// threads. A blocking facade call made there waits for actors that may
// need that very thread (with one worker, for good): the facade refuses it
// instead (facade_core::call). Marked by a CAF thread hook that
// configure() installs; a system configured without it marks nothing, nor
// does a platform other than Linux (the hook tells a detached actor's
// thread by its name). CAF-free.
#pragma once

namespace caf {
class actor_system;
class actor_system_config;
} // namespace caf

namespace kvactor::detail {

/// Adds to `cfg` the thread hook that marks each thread its systems start
/// as that system's own.
void mark_system_threads(caf::actor_system_config& cfg);

/// Whether the calling thread is one `sys` started (a scheduler worker: an
/// actor's handler, a reply handler; or a clock thread). Detached actors
/// run on threads of their own, which are not marked.
bool on_system_thread(const caf::actor_system& sys) noexcept;

} // namespace kvactor::detail
