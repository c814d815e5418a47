// The supervisor actor: watches every handle actor (each reports its death
// with an error from its own exit, and the request's blocks are
// reclaimed), runs GC on a timer and on demand, turns
// pool usage into pressure levels (with hysteresis) and broadcasts each change
// to its subscribers; under high pressure it evicts cached blocks toward the
// medium mark; at critical it preempts the victims the pool names
// (preempt_at_critical; else its broadcast leaves that to schedulers).
// Subscribers are held by address: a subscription keeps nobody alive. A
// timer GC that finds the pool's invariant broken ends the supervisor with
// the violation, and the manager stops the cache (fail-stop); a timer pass
// checks only every gc_check_interval_ms.
#pragma once

#include <cstdint>

#include "kvactor/config/cache_config.hpp"
#include "kvactor/messages/interfaces.hpp"

namespace caf {
class actor_system;
} // namespace caf

namespace kvactor {

/// Spawns the supervisor of `pool`; orphan sweeps and reclaims go through
/// `manager`. `bytes_per_block` converts blocks to bytes in GC figures.
supervisor_actor spawn_supervisor(caf::actor_system& sys, const cache_config& cfg,
                                  std::uint32_t num_blocks,
                                  std::uint64_t bytes_per_block,
                                  block_pool_actor pool,
                                  kv_cache_manager_actor manager);

} // namespace kvactor
