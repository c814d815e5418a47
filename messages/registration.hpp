// Registers kvactor's message types and error category with an actor system
// config. Call it on every config whose system runs kvactor actors or talks
// to them (both ends of a remote connection): an unregistered type is not a
// compile error, the peer just receives an empty message.
#pragma once

namespace caf {
class actor_system_config;
} // namespace caf

namespace kvactor {

/// Adds every message type (with a stable name) and the "kvactor" error
/// category with a readable renderer.
void add_message_types(caf::actor_system_config& cfg);

/// Scheduler settings for low-latency request/response from non-actor
/// threads (the facade): workers poll longer before sleeping, and CAF's
/// clock thread runs at the lowest priority (on Linux; see
/// registration.cpp). Optional.
void tune_for_latency(caf::actor_system_config& cfg);

} // namespace kvactor
