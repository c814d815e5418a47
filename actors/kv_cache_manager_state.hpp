// The manager actor's state and the helpers its handlers share: the
// registry (spawning, registering and ending request handles), the
// two-phase swap, and what the manager watches. Internal to the manager
// (kv_cache_manager_*.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "kvactor/actors/id_map.hpp"
#include "kvactor/actors/index_hint.hpp"
#include "kvactor/actors/reply_book.hpp"
#include "kvactor/config/cache_config.hpp"
#include "kvactor/messages/interfaces.hpp"

namespace kvactor::detail {

/// How many messages for each id are in flight (manager_state::admitting):
/// empty nearly always, so a look-up costs a size check.
class id_counts {
public:
  void add(request_id id) {
    ++n_[id];
  }
  void remove(request_id id) {
    auto i = n_.find(id);
    if (i != n_.end() && --i->second == 0)
      n_.erase(i);
  }
  bool contains(request_id id) const {
    return !n_.empty() && n_.count(id) != 0;
  }

private:
  std::unordered_map<request_id, std::uint32_t> n_;
};

/// Everything the manager actor keeps: its config and peers, the registry
/// of live requests, the owners it monitors and the lifecycle subscribers.
struct manager_state {
  static inline const char* name = "kvactor.manager";

  cache_config cfg;
  storage_info store;
  block_pool_actor pool;
  /// Where the pool looks ids up: a request passed on to it by id is
  /// prefetched from as it comes in (index_hint.hpp).
  std::shared_ptr<index_hint> pool_index;
  supervisor_actor supervisor;
  device_actor device;
  memory_pressure pressure = memory_pressure::low;

  struct entry {
    request_handle_actor handle;
    request_info info;
    /// Weak: the registry must not keep an owner alive. An actor whose
    /// last reference goes ends (its monitor's down message reclaims its
    /// requests); a strong pointer here kept it, and them, for good.
    caf::actor_addr owner;
  };
  using registry_map = id_map<entry>;
  /// Shared with the functor that stops the handles if the manager is
  /// killed (the state is gone by then).
  std::shared_ptr<registry_map> shared_registry = std::make_shared<registry_map>();
  registry_map& registry = *shared_registry;
  /// How many live requests each owner holds, kept at 0 until the owner
  /// goes: one monitor per actor (not per request - a monitor is a list
  /// entry on the observed actor, removed by a search), set up when it
  /// first owns a request or subscribes to lifecycle events, whichever
  /// comes first. The entries name their owners; when one dies, a scan of
  /// the registry finds its requests.
  std::unordered_map<caf::actor_addr, std::size_t> owned;
  /// Lifecycle subscribers, weak as owners are (a subscription must not
  /// keep an owner alive, nor its requests); monitored, dropped when gone.
  std::vector<caf::actor_addr> lifecycle;
  /// Ids whose admission (allocate, fork) or end (free, discard, preempt,
  /// reclaim) went to the pool and is not answered yet, with how many: the
  /// registry follows the pool by that round trip. A client that sends its
  /// next message for such an id without waiting for the reply still gets
  /// what the pool, which has both in order, makes of it - a free right
  /// after an allocate frees what it admitted (the manager names the
  /// pool's current incarnation then), an allocate right after a free is
  /// no duplicate (the pool judges).
  id_counts admitting;
  id_counts ending;
  /// Replies owed while the pool or the device works: answered with
  /// shutting_down if the manager exits first - by its exit handler, or
  /// if killed by the functor attached at spawn (the state is gone then).
  std::shared_ptr<reply_book> shared_owed = std::make_shared<reply_book>();
  reply_book& owed = *shared_owed;
};

using mgr_ptr = kv_cache_manager_actor::stateful_pointer<manager_state>;

/// "<op> of request <id>: request <id> is not allocated".
std::string unknown(const char* op, request_id id);

/// Spawns and registers the handle of a request the pool just admitted,
/// which found `hit_tokens` of its prompt cached (its stats report them).
request_handle_actor add_request(mgr_ptr self, const allocation_request& req,
                                 std::uint64_t cache_id,
                                 std::uint64_t hit_tokens,
                                 const caf::strong_actor_ptr& owner);

/// Whether `addr` is subscribed to lifecycle events (the manager monitors
/// it for that too).
bool is_lifecycle_subscriber(const manager_state& st, const caf::actor_addr& addr);

/// Sends `ev` to each lifecycle subscriber still alive.
void tell_lifecycle(const manager_state& st, const request_ended& ev);

/// Removes a request from the registry, ends its handle and tells the
/// lifecycle subscribers (and, for preemptions it did not ask for, the owner).
void end_request(mgr_ptr self, request_id id, end_reason why,
                 std::uint32_t released, bool tell_owner);

/// Ends request `id` (incarnation `cache_id`, or current_incarnation for
/// an id whose admission is in flight) as a free - from
/// its handle (`by_handle`: invalid_handle once ended) or by id - through
/// the pool (with `discard`, caching nothing it wrote), then
/// end_request. Callers prefetch the handle actor.
caf::result<std::uint32_t> free_request(mgr_ptr self, request_id id,
                                        std::uint64_t cache_id, bool by_handle,
                                        bool discard = false);

/// Asks the pool to reclaim incarnation `cache_id` of `id` (its owner or
/// its handle went, or nobody received it) and ends the registry entry if
/// the pool did.
void reclaim_request(mgr_ptr self, request_id id, std::uint64_t cache_id);

/// GC's sweep (the supervisor's `reclaim_atom`): ends every request the
/// pool holds that the registry does not (an allocate whose caller gave up
/// before its handle was made, say). Reply: what was reclaimed, or the
/// first error.
caf::result<cache_gc_stats> reclaim_orphans(mgr_ptr self);

/// Preempts incarnation `cache_id` of request `id` (current_incarnation:
/// whichever the pool holds, for an id whose admission is in flight); its
/// owner is told unless it asked. With `unindex`, the blocks it lets go
/// leave the prefix index (block_pool_core::preempt).
caf::result<std::uint32_t> preempt_request(mgr_ptr self, request_id id,
                                           std::uint64_t cache_id,
                                           bool unindex = false);

/// Marks incarnation `cache_id` of a registered request swapped out or in
/// (a newer incarnation of the id is left alone).
void set_swapped(mgr_ptr self, request_id id, std::uint64_t cache_id,
                 bool swapped);

/// The manager's swap-out and swap-in of registered request `id`
/// (kv_cache_manager_swap.cpp): the pool reserves the other side's blocks,
/// the device copies, the pool commits - or undoes everything when the copy
/// fails, so a failed swap changes nothing. Reply: the device blocks moved,
/// or the request's new table.
caf::result<std::uint32_t> swap_out_request(mgr_ptr self, request_id id);
caf::result<block_table> swap_in_request(mgr_ptr self, request_id id);

/// Who the manager watches (kv_cache_manager_watch.cpp): monitors the
/// cache's parts - when one ends, or the manager is told to exit, the
/// cache stops (every request ends, owed replies get shutting_down) - and
/// reclaims a dead owner's requests; a kill still stops every part.
void watch_cache(mgr_ptr self);

/// Routes a subscription to `t` (pressure: the supervisor's, kv_events:
/// the pool's; lifecycle: the manager's own, monitored) or its end. A null
/// `sub` is ignored.
void subscribe(mgr_ptr self, topic t, const caf::actor& sub);
void unsubscribe(mgr_ptr self, topic t, const caf::actor& sub);

/// The manager's behavior (kv_cache_manager_actor.cpp); spawn_kv_cache
/// spawns it over the other actors of a cache, with the hint `pool`
/// publishes its id index to. REQUIRES: pool_index != nullptr.
kv_cache_manager_actor::behavior_type
manager_fun(mgr_ptr self, cache_config cfg, storage_info store,
            device_actor device, block_pool_actor pool,
            std::shared_ptr<index_hint> pool_index);

/// `rp`, booked in the manager's owed replies as `what` of request `id`.
template <class... Ts>
booked_promise<Ts...> owe(mgr_ptr self, caf::typed_response_promise<Ts...> rp,
                          const char* what, request_id id) {
  return {self->state.owed, std::move(rp), owed_what{what, true, id}};
}

/// `rp`, booked in the manager's owed replies as `what` (of no request).
template <class... Ts>
booked_promise<Ts...> owe(mgr_ptr self, caf::typed_response_promise<Ts...> rp,
                          const char* what) {
  return {self->state.owed, std::move(rp), owed_what{what}};
}

/// The actor that sent the current message, as an owner (null if none).
/// Call it before make_response_promise, which moves the sender out.
inline caf::strong_actor_ptr owner_of(mgr_ptr self) {
  return self->current_sender();
}

} // namespace kvactor::detail
