// The manager actor: kvactor's front door. It validates requests, spawns one
// request_handle actor per request, keeps the registry request id -> handle,
// answers the manager-level questions and forwards the batched step message
// to the pool's step lane. It spawns (and on exit stops) the supervisor;
// spawn_kv_cache spawns the block pool and the device actor beside it, and
// the manager stops them as it exits.
#pragma once

#include <memory>

#include <caf/expected.hpp>

#include "kvactor/config/cache_config.hpp"
#include "kvactor/device/storage.hpp"
#include "kvactor/messages/interfaces.hpp"

namespace caf {
class actor_system;
} // namespace caf

namespace kvactor {

/// A started cache: the manager actor and what it runs on.
struct cache_system {
  kv_cache_manager_actor manager;
  device_actor device;
  /// The block pool (for diagnostics and tests: clients go through the
  /// manager, whose registry an allocation made here bypasses).
  block_pool_actor pool;
  /// The storage the device actor owns; the facade serves tensor views of
  /// it in-process. Never touched by anyone but the device actor otherwise.
  std::shared_ptr<storage> store;
};

/// How to spawn the cache's actors.
struct spawn_options {
  /// Run the device actor on its own thread (always, except in tests on
  /// CAF's deterministic scheduler, which cannot step a detached actor).
  bool detached_device = true;
  /// A storage backend to use instead of making one from the config's
  /// `storage`: an embedder's own memory, or a test's fault injection. Its
  /// layout must match the config's model, block size and pool sizes.
  std::shared_ptr<storage> store;
};

/// The storage spawn_kv_cache makes for `cfg`: kind, layout, sizing. An
/// embedder bringing its own backend (spawn_options::store) gives it this
/// layout (with num_blocks filled in when `cfg` sizes the pool from memory).
storage_options storage_options_for(const cache_config& cfg);

/// Validates `cfg`, allocates the storage (a shortage fails here, at start,
/// not later), spawns the device actor, the block pool and the manager (which
/// spawns the supervisor). The manager stops all of them when it exits; send
/// it an exit message with a reason (`exit_reason::user_shutdown`), or drop
/// the facade, to shut down. An exit message without one - what a linked
/// actor sends when it ends normally - is ignored, as CAF's default does.
caf::expected<cache_system> spawn_kv_cache(caf::actor_system& sys,
                                           const cache_config& cfg,
                                           spawn_options opts = {});

} // namespace kvactor
