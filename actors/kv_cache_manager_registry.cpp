// The manager's registry: request id -> handle actor, its parameters and
// its owner (monitored once per owner); how a request ends through the
// manager (free, reclaim, preempt: the pool first, then the registry), the
// lifecycle notifications sent when it does, and GC's sweep for requests the
// pool holds that the registry does not know.
#include "kvactor/actors/kv_cache_manager_state.hpp"
#include "kvactor/actors/incarnation_error.hpp"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/send.hpp>

#include "kvactor/actors/request_handle.hpp"
#include "kvactor/messages/error.hpp"
#include "kvactor/messages/error_context.hpp"

namespace kvactor::detail {

std::string unknown(const char* op, request_id id) {
  auto name = "request " + std::to_string(id);
  return std::string{op} + " of " + name + ": " + name + " is not allocated";
}

request_handle_actor add_request(mgr_ptr self, const allocation_request& req,
                                 std::uint64_t cache_id,
                                 std::uint64_t hit_tokens,
                                 const caf::strong_actor_ptr& owner) {
  auto& st = self->state;
  request_handle_args args;
  args.info.request = without_prompt(req);
  args.info.cache_id = cache_id;
  args.hit_tokens = hit_tokens;
  args.block_size = st.cfg.block_size;
  args.bytes_per_block = st.store.bytes_per_block;
  args.pool = st.pool;
  args.manager = caf::actor_cast<kv_cache_manager_actor>(self);
  auto info = args.info;
  auto h = spawn_request_handle(self->system(), std::move(args), st.supervisor);
  if (owner) {
    // One monitor per actor: a subscriber is watched already.
    // `owner` is alive here (strong, since its message came), as monitor
    // needs; the entry keeps only its address.
    auto addr = caf::actor_cast<caf::actor_addr>(owner);
    auto [o, fresh] = st.owned.try_emplace(addr, 0);
    ++o->second;
    if (fresh && !is_lifecycle_subscriber(st, addr))
      self->monitor(owner);
  }
  st.registry[req.id] = manager_state::entry{
    h, std::move(info), caf::actor_cast<caf::actor_addr>(owner)};
  return h;
}

bool is_lifecycle_subscriber(const manager_state& st,
                             const caf::actor_addr& addr) {
  return std::find(st.lifecycle.begin(), st.lifecycle.end(), addr)
         != st.lifecycle.end();
}

void tell_lifecycle(const manager_state& st, const request_ended& ev) {
  for (auto& addr : st.lifecycle)
    if (auto sub = caf::actor_cast<caf::actor>(addr)) // null: it went
      caf::anon_send(sub, ended_atom::value, ev);
}

void end_request(mgr_ptr self, request_id id, end_reason why,
                 std::uint32_t released, bool tell_owner) {
  auto& st = self->state;
  auto i = st.registry.find(id);
  if (i == st.registry.end())
    return;
  auto e = std::move(i->second);
  st.registry.erase(i);
  // The owner stays watched with no request left, until it goes: most
  // owners hold one request after another, and a monitor set up and torn
  // down for each would cost an attach and a detach on the owner each time.
  if (e.owner)
    if (auto o = st.owned.find(e.owner);
        o != st.owned.end())
      --o->second;
  self->send(e.handle, end_atom::value, why);
  request_ended ev{id, e.info.cache_id, why, released, e.handle.id()};
  tell_lifecycle(st, ev);
  if (tell_owner)
    if (auto owner = caf::actor_cast<caf::actor>(e.owner)) // null: it went
      caf::anon_send(owner, preempt_atom::value, ev);
}

/// Ends registered request `id` (incarnation `cache_id`): the pool releases
/// its blocks, then the registry lets it go. If the pool had ended that
/// incarnation already (a step's effects not yet here), it fails - with
/// unknown_request, or invalid_handle for a handle's free - and the step's
/// effects end the registry entry. (Callers prefetch the handle actor,
/// which end_request sends its end a pool round trip later.)
caf::result<std::uint32_t> free_request(mgr_ptr self, request_id id,
                                        std::uint64_t cache_id,
                                        bool by_handle, bool discard) {
  auto rp = owe(self, self->make_response_promise<std::uint32_t>(),
                discard ? "discard" : "free", id);
  self->state.ending.add(id);
  auto done = [self, rp, id, discard](std::uint32_t released) mutable {
    self->state.ending.remove(id);
    end_request(self, id,
                discard ? end_reason::discarded : end_reason::deallocated,
                released, false);
    rp.deliver(released);
  };
  auto failed = [self, rp, id, by_handle, discard](caf::error& err) mutable {
    self->state.ending.remove(id);
    if (by_handle && has_code(err, errc::unknown_request))
      err = ended_error(id);
    rp.deliver(as_ours(std::string{discard ? "discard" : "free"}
                         + " of request " + std::to_string(id),
                       err, errc::shutting_down));
  };
  auto& pool = self->state.pool;
  if (discard)
    self->request(pool, caf::infinite, discard_atom::value, id, cache_id)
      .then(std::move(done), std::move(failed));
  else
    self->request(pool, caf::infinite, free_atom::value, id, cache_id)
      .then(std::move(done), std::move(failed));
  return rp.promise();
}

/// Asks the pool to reclaim incarnation `cache_id` of `id` (its owner or
/// its handle is gone, or nobody received it) and ends the registry entry
/// if the pool did: if the
/// pool had ended that incarnation already, the entry under `id` may by the
/// time of the reply be a newer one, which must stay.
void reclaim_request(mgr_ptr self, request_id id, std::uint64_t cache_id) {
  self->state.ending.add(id);
  self->request(self->state.pool, caf::infinite, reclaim_atom::value, id,
                cache_id)
    .then(
      [self, id](bool found, std::uint32_t released) {
        self->state.ending.remove(id);
        if (found)
          end_request(self, id, end_reason::reclaimed, released, false);
      },
      [self, id](caf::error&) { self->state.ending.remove(id); });
}

caf::result<std::uint32_t> preempt_request(mgr_ptr self, request_id id,
                                           std::uint64_t cache_id,
                                           bool unindex) {
  // Before the promise, which takes the sender out of the message.
  auto sender = self->current_sender();
  auto rp = owe(self, self->make_response_promise<std::uint32_t>(),
                "preempt", id);
  // The supervisor's (unindex) the pool may refuse, the victim living on:
  // not an end a lookup should hide meanwhile.
  bool counted = !unindex;
  if (counted)
    self->state.ending.add(id);
  auto ended = [self, rp, id, sender, counted](std::uint32_t released) mutable {
    auto& st = self->state;
    if (counted)
      st.ending.remove(id);
    // The entry of what the pool ended (the registry has caught up).
    auto i = st.registry.find(id);
    bool by_owner = i != st.registry.end() && i->second.owner
                    && i->second.owner == caf::actor_cast<caf::actor_addr>(sender);
    end_request(self, id, end_reason::preempted, released, !by_owner);
    rp.deliver(released);
  };
  auto failed = [self, rp, id, counted](caf::error& err) mutable {
    if (counted)
      self->state.ending.remove(id);
    rp.deliver(as_ours("preemption of request " + std::to_string(id), err,
                       errc::shutting_down));
  };
  auto& pool = self->state.pool;
  if (unindex)
    self->request(pool, caf::infinite, preempt_atom::value, discard_atom::value,
                  id, cache_id)
      .then(std::move(ended), std::move(failed));
  else
    self->request(pool, caf::infinite, preempt_atom::value, id, cache_id)
      .then(std::move(ended), std::move(failed));
  return rp.promise();
}

caf::result<cache_gc_stats> reclaim_orphans(mgr_ptr self) {
  auto rp = owe(self, self->make_response_promise<cache_gc_stats>(),
                "reclaim");
  self->request(self->state.pool, caf::infinite, list_atom::value)
    .then(
      [self, rp](std::vector<std::pair<request_id, std::uint64_t>>& live) mutable {
        // Pool replies arrive in order: every admission the pool made
        // before this list has already been registered here, so a live
        // request missing from the registry is a true orphan.
        auto& st = self->state;
        auto stats = std::make_shared<cache_gc_stats>();
        auto pending = std::make_shared<std::size_t>(0);
        auto failed = std::make_shared<caf::error>(); // the first error
        auto answer = [stats, failed](auto& p) {
          if (*failed)
            p.deliver(*failed);
          else
            p.deliver(*stats);
        };
        for (auto& [id, cache_id] : live) {
          auto i = st.registry.find(id);
          if (i != st.registry.end() && i->second.info.cache_id == cache_id)
            continue;
          ++*pending;
          self->request(st.pool, caf::infinite, reclaim_atom::value, id, cache_id)
            .then(
              [self, rp, stats, pending, answer](bool found,
                                                 std::uint32_t released) mutable {
                if (found) {
                  stats->caches_freed += 1;
                  stats->blocks_reclaimed += released;
                  stats->memory_freed
                    += released * self->state.store.bytes_per_block;
                }
                if (--*pending == 0)
                  answer(rp);
              },
              [rp, pending, failed, answer, id = id](caf::error& err) mutable {
                if (!*failed)
                  *failed = as_ours("gc: reclaiming request " + std::to_string(id),
                                    err, errc::shutting_down);
                if (--*pending == 0)
                  answer(rp);
              });
        }
        if (*pending == 0)
          rp.deliver(*stats);
      },
      [rp](caf::error& err) mutable {
        rp.deliver(as_ours("gc: listing the pool's requests", err,
                           errc::shutting_down));
      });
  return rp.promise();
}

void set_swapped(mgr_ptr self, request_id id, std::uint64_t cache_id,
                 bool swapped) {
  auto& reg = self->state.registry;
  auto i = reg.find(id);
  if (i != reg.end() && i->second.info.cache_id == cache_id)
    i->second.info.swapped = swapped;
}

} // namespace kvactor::detail
