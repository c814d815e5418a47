// The request handle actor: one per live request. It is the request's
// identity and lifetime (the manager ends it with its request, or when its
// owner dies; if it is killed, the supervisor reclaims the request's
// blocks), it grows the request (the pool has the device copy a
// shared block before it appends: copy-on-write) and serves its figures. The
// block table itself is kept by the block pool, so that a scheduler step and
// a prefix lookup-and-pin each stay one message; the handle answers table
// queries from there.
#pragma once

#include <cstdint>

#include "kvactor/actors/actor_slab.hpp"
#include "kvactor/messages/interfaces.hpp"

namespace caf {
class actor_system;
} // namespace caf

namespace kvactor {

/// Everything a handle actor starts with.
struct request_handle_args {
  request_info info;
  /// Prompt tokens its admission found cached (its stats report them).
  std::uint64_t hit_tokens = 0;
  std::uint32_t block_size = 0;
  std::uint64_t bytes_per_block = 0;
  block_pool_actor pool;
  kv_cache_manager_actor manager;
};

/// Spawns the handle. If it dies with an error (killed, crashed, stopped)
/// it tells `supervisor` as it goes, so that the request's blocks are
/// reclaimed - from its own exit, which runs however the actor ends: no
/// monitor, silent on the normal end every request has, and no table of
/// watched handles in the supervisor.
request_handle_actor spawn_request_handle(caf::actor_system& sys,
                                          request_handle_args args,
                                          const supervisor_actor& supervisor);

/// The slab handle actors live in (actor_slab.hpp): blocks cached for
/// reuse, and how many spawns reused one or took new memory.
detail::actor_slab::counts handle_slab_counts();

/// Starts fetching the memory of handle actor `h` (its control block and
/// the actor, state included) into the cache; reads nothing, so it is safe
/// from any thread. The manager calls it as it takes in a request's end,
/// a pool round trip before it sends the handle its end message: among
/// 100,000 live requests the handle is cold, and its first line alone -
/// the one the send reads - cost ~0.3 us there.
void prefetch_handle(const request_handle_actor& h) noexcept;

/// Whether handle actor `h` has begun to quit (killed, crashed, stopped:
/// a call sent to it now bounces, and the reclaim of its request is on its
/// way), read from the flag the actor sets as its exit starts - a relaxed
/// read, so a hint, not a lock: it may begin to quit right after. The
/// manager lists no such handle; the facade refuses a handle's calls that
/// go to the pool (extends, appends, table reads, drafts and their
/// settling, a contiguous view's gather) once it reads true, as the handle
/// actor would have. Null counts as gone.
bool is_going(const request_handle_actor& h) noexcept;

} // namespace kvactor
