// Who the cache manager watches and how it stops: the cache's parts (pool,
// device actor, supervisor - one unit: when one ends, the cache stops with
// a reason naming it), the owners of requests (when one dies, its requests
// are reclaimed, by way of their handle actors) and the lifecycle
// subscribers (dropped when they die), and the subscriptions that route
// each topic to the actor that publishes it.
// The handlers themselves are in kv_cache_manager_actor.cpp.
#include "kvactor/actors/kv_cache_manager_state.hpp"

#include <algorithm>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/send.hpp>

#include "kvactor/messages/error.hpp"
#include "kvactor/messages/error_context.hpp"

namespace kvactor::detail {

namespace {

/// The part of the cache `addr` is ("block pool", "device actor",
/// "supervisor"), or null for any other actor.
const char* part_name(const manager_state& st, const caf::actor_addr& addr) {
  if (addr == st.pool.address())
    return "block pool";
  if (addr == st.device.address())
    return "device actor";
  if (addr == st.supervisor.address())
    return "supervisor";
  return nullptr;
}

/// Stops the cache: every request ends (its subscribers told, end_reason
/// shutdown), replies owed get shutting_down, and the manager quits with
/// `reason` - the functor attached at spawn then stops the other parts.
void stop_cache(mgr_ptr self, const caf::error& reason) {
  auto& st = self->state;
  for (auto& kvp : st.registry) {
    request_ended ev{kvp.first, kvp.second.info.cache_id,
                     end_reason::shutdown, 0, kvp.second.handle.id()};
    tell_lifecycle(st, ev);
    self->send_exit(kvp.second.handle, caf::exit_reason::user_shutdown);
  }
  st.registry.clear();
  // Requests waiting on the pool or the device get their answer now:
  // CAF would drop these promises unanswered. When a part of the cache
  // ended, they are told which.
  st.owed.fail_all("the manager", has_code(reason, errc::shutting_down)
                                    ? context_of(reason)
                                    : std::string{});
  self->quit(reason);
}

/// A part of the cache ended (`part`, for `reason`): the cache stops with a
/// reason naming it.
void part_ended(mgr_ptr self, const char* part, const caf::error& reason) {
  stop_cache(self, make_error(errc::shutting_down,
                              std::string{"the cache stopped: its "} + part
                                + " ended ("
                                + (reason ? render(reason)
                                          : std::string{"normally"})
                                + ")"));
}

} // namespace

void watch_cache(mgr_ptr self) {
  auto& st = self->state;
  // The cache's parts are one unit (one-for-all): without its pool, device
  // or supervisor the cache cannot keep its promises (no blocks, no copies,
  // no GC - and a half-working cache fails later, and silently), so when
  // one ends the manager stops the cache, with a reason naming the part.
  self->monitor(st.pool);
  self->monitor(st.device);
  self->monitor(st.supervisor);
  self->set_down_handler([self](const caf::down_msg& dm) {
    auto& st = self->state;
    if (auto part = part_name(st, dm.source)) {
      part_ended(self, part, dm.reason);
      return;
    }
    // An owner went: reclaim every request it still held. The registry
    // names each request's owner; one scan (an owner dies rarely, a
    // request starts and ends often: no per-owner id set to keep), and
    // none for an owner that held nothing any more.
    // Through each request's handle actor, as an unclaimed request (the
    // handle sends it back, and the reclaim follows): a free the owner
    // sent its handle just before it quit is still in that handle's
    // mailbox, while this down message came straight here - reclaimed
    // first, the request would lose what it cached, and the free fail.
    // The handle passes the free on first, and both reach this manager in
    // that order; the reclaim then finds the request ended.
    if (auto o = st.owned.find(dm.source); o != st.owned.end()) {
      auto holds = o->second;
      st.owned.erase(o);
      if (holds > 0)
        for (auto& [id, e] : st.registry)
          if (e.owner && e.owner == dm.source) {
            self->send(e.handle, unclaimed_atom::value);
            // Its count is gone with the entry: the end of this request,
            // a pool round trip away, must not take one off the count of a
            // request the dead owner's allocate still in flight registers
            // meanwhile (and watches anew) - that request would leak.
            e.owner = caf::actor_addr{};
          }
    }
    // It may have been a lifecycle subscriber too: drop it there as well.
    auto& subs = st.lifecycle;
    subs.erase(std::remove(subs.begin(), subs.end(), dm.source), subs.end());
  });
  // Orderly shutdown on an exit message: tell subscribers, stop every actor
  // this manager spawned. The state is gone by the time attached functors
  // run, so those only hold copies of the fixed handles (for a kill).
  self->set_exit_handler([self](const caf::exit_msg& msg) {
    if (!msg.reason)
      return; // a linked actor ended normally: CAF ignores those too
    // The device actor says it stops (a stall, or an exit it was told)
    // before it answers anyone waiting on it: the same stop as its down
    // message would bring, only ahead of every call such a caller makes
    // next.
    if (auto part = part_name(self->state, msg.source)) {
      part_ended(self, part, msg.reason);
      return;
    }
    stop_cache(self, msg.reason);
  });
  self->attach_functor([sup = st.supervisor, pool = st.pool, dev = st.device,
                        reg = st.shared_registry,
                        owed = st.shared_owed](const caf::error&) {
    // Killed (no exit handler ran): its open promises still get answers.
    owed->fail_all("the manager");
    for (auto& kvp : *reg)
      caf::anon_send_exit(kvp.second.handle, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(sup, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(pool, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(dev, caf::exit_reason::user_shutdown);
  });
}

void subscribe(mgr_ptr self, topic t, const caf::actor& sub) {
  if (!sub)
    return; // a null handle: nobody to tell (CAF's monitor would crash)
  auto& st = self->state;
  switch (t) {
    case topic::pressure:
      caf::anon_send(st.supervisor, subscribe_atom::value, sub);
      break;
    case topic::lifecycle:
      if (!is_lifecycle_subscriber(st, sub.address())) {
        st.lifecycle.push_back(sub.address());
        // A subscriber that dies is dropped (one monitor per actor: an
        // owner is watched already).
        if (st.owned.count(sub.address()) == 0)
          self->monitor(sub);
      }
      break;
    case topic::kv_events:
      caf::anon_send(st.pool, subscribe_atom::value, t, sub);
      break;
  }
}

void unsubscribe(mgr_ptr self, topic t, const caf::actor& sub) {
  if (!sub)
    return; // never subscribed (and hashing its address would crash)
  auto& st = self->state;
  switch (t) {
    case topic::pressure:
      // Not the manager's own subscription, which keeps stats()'
      // level: its handle is public, and the level would freeze.
      if (sub.address() != self->address())
        self->send(st.supervisor, unsubscribe_atom::value, sub);
      break;
    case topic::lifecycle:
      st.lifecycle.erase(std::remove(st.lifecycle.begin(),
                                     st.lifecycle.end(), sub.address()),
                         st.lifecycle.end());
      // Its monitor goes too, unless it owns requests (then that one
      // monitor serves ownership: demonitor would drop it).
      if (st.owned.count(sub.address()) == 0
          && part_name(st, sub.address()) == nullptr)
        self->demonitor(sub.address());
      break;
    case topic::kv_events:
      caf::anon_send(st.pool, unsubscribe_atom::value, t, sub);
      break;
  }
}

} // namespace kvactor::detail
