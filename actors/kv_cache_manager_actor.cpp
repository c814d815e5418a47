// kv_cache_manager actor: its behavior (request validation, the handlers
// of the front door; steps go to the pool, which reports their effects on
// the registry here). The registry helpers - adding a request, ending one
// (free, reclaim, preempt: a pool round trip, then end_request), GC's sweep
// for orphans - are in kv_cache_manager_registry.cpp; the swap in
// kv_cache_manager_swap.cpp; the monitors (the cache's parts, owners,
// lifecycle subscribers), the cache's stop and the subscriptions in
// kv_cache_manager_watch.cpp; the state they share in
// kv_cache_manager_state.hpp; spawn_kv_cache, which assembles a cache
// around it, in kv_cache_spawn.cpp.
#include "kvactor/actors/kv_cache_manager_actor.hpp"

#include <algorithm>
#include <cassert>
#include <memory>
#include <optional>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "kvactor/actors/block_pool.hpp"
#include "kvactor/actors/crash_reason.hpp"
#include "kvactor/actors/device_actor.hpp"
#include "kvactor/actors/incarnation_error.hpp"
#include "kvactor/actors/kv_cache_manager_state.hpp"
#include "kvactor/actors/request_handle.hpp"
#include "kvactor/actors/stray_messages.hpp"
#include "kvactor/actors/supervisor.hpp"
#include "kvactor/messages/error.hpp"
#include "kvactor/messages/error_context.hpp"

namespace kvactor::detail {

namespace {

/// Whether a new admission of `id` would be a duplicate: it is in the
/// registry and no end of it is in flight (after a free the client did not
/// wait for, the pool - which has both in order - judges).
bool registered(const manager_state& st, request_id id) {
  return st.registry.count(id) != 0 && !st.ending.contains(id);
}

/// Whether lookup and list hand out entry `e` of `id`: not while its end
/// is in flight to the pool, nor once its handle actor is going (killed or
/// crashed: the supervisor's reclaim report is on its way; every call on
/// that handle would fail).
bool listed(const manager_state& st, request_id id,
            const manager_state::entry& e) {
  return !st.ending.contains(id) && !is_going(e.handle);
}

/// The incarnation a by-id operation on `id` names: the registry's
/// (prefetching its handle, which the operation's end visits) or - while
/// the manager's own admission of `id` is in flight, for a client that did
/// not wait for its reply - current_incarnation: the pool has that
/// admission first. None: `id` is not allocated.
std::optional<std::uint64_t> incarnation_of(mgr_ptr self, request_id id) {
  auto& st = self->state;
  if (st.admitting.contains(id))
    return current_incarnation;
  auto i = st.registry.find(id);
  if (i == st.registry.end())
    return std::nullopt;
  prefetch_handle(i->second.handle);
  return i->second.info.cache_id;
}

/// The manager's stats: the pool's, in bytes too, with the level heard.
cache_manager_stats manager_stats(const manager_state& st, pool_stats p) {
  cache_manager_stats s;
  auto bpb = st.store.bytes_per_block;
  s.total_blocks = p.total_blocks;
  s.free_blocks = p.total_blocks - p.used_blocks - p.draining_blocks;
  s.draining_blocks = p.draining_blocks;
  s.cached_blocks = p.cached_blocks;
  s.total_memory_bytes = p.total_blocks * bpb;
  s.used_memory_bytes = p.used_blocks * bpb;
  s.active_caches = p.active_requests;
  s.cache_hit_rate = p.query_tokens == 0
                       ? 0.0
                       : static_cast<double>(p.hit_tokens)
                           / static_cast<double>(p.query_tokens);
  s.eviction_count = p.evictions;
  s.allocation_count = p.allocations;
  s.allocation_failures = p.allocation_failures;
  s.pressure = st.pressure;
  s.preemption_count = p.preemptions;
  s.block_size = st.cfg.block_size;
  s.prefix_query_tokens = p.query_tokens;
  s.prefix_hit_tokens = p.hit_tokens;
  s.host_total_blocks = p.host_total_blocks;
  s.host_free_blocks = p.host_free_blocks;
  s.swap_out_count = p.swap_outs;
  s.swap_in_count = p.swap_ins;
  s.swap_in_shared_blocks = p.swap_in_shared;
  s.tenants = std::move(p.tenants);
  s.blocks_allocated = p.blocks_allocated;
  s.prefix_hit_blocks = p.prefix_hit_blocks;
  s.blocks_freed = p.blocks_freed;
  s.blocks_cached = p.blocks_cached;
  s.cow_copies = p.cow_copies;
  s.draft_tokens = p.draft_tokens;
  s.draft_tokens_rejected = p.draft_tokens_rejected;
  return s;
}

/// allocate's work for both its replies: the request's handle actor, and
/// `second(admission, request without its prompt)`.
template <class Second, class Make>
caf::result<request_handle_actor, Second>
admit(mgr_ptr self, allocation_request& req, Make second) {
  auto& st = self->state;
  st.pool_index->prefetch(req.id); // the pool's duplicate check
  if (auto err = check_device(st.store, req))
    return err;
  if (registered(st, req.id))
    return make_error(errc::duplicate_request,
                      "request " + std::to_string(req.id)
                        + " is already allocated");
  // Before the promise, which takes the sender out of the message.
  auto owner = owner_of(self);
  auto rp = owe(self,
                self->make_response_promise<request_handle_actor, Second>(),
                "allocate", req.id);
  auto params = without_prompt(req);
  st.admitting.add(params.id);
  self->request(st.pool, caf::infinite, allocate_atom::value, std::move(req))
    .then(
      [self, rp, params, owner, second](admission& a) mutable {
        self->state.admitting.remove(params.id);
        auto h = add_request(self, params, a.cache_id, a.hit_tokens,
                             std::move(owner));
        rp.deliver(std::move(h), second(a, params));
      },
      [self, rp, id = params.id](caf::error& err) mutable {
        self->state.admitting.remove(id);
        rp.deliver(as_ours("allocate of request " + std::to_string(id), err,
                           errc::shutting_down));
      });
  return rp.promise();
}

} // namespace

kv_cache_manager_actor::behavior_type
manager_fun(mgr_ptr self, cache_config cfg, storage_info store,
            device_actor device, block_pool_actor pool,
            std::shared_ptr<index_hint> pool_index) {
  detail::handle_stray_messages(self);
  detail::name_crashes(self, "cache manager");
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.store = store;
  st.device = std::move(device);
  st.pool = std::move(pool);
  assert(pool_index != nullptr);
  st.pool_index = std::move(pool_index);
  st.supervisor = spawn_supervisor(self->system(), st.cfg, store.num_blocks,
                                   store.bytes_per_block, st.pool,
                                   caf::actor_cast<kv_cache_manager_actor>(self));
  // Keep the current pressure level for stats().
  self->request(st.supervisor, caf::infinite, subscribe_atom::value,
                caf::actor_cast<caf::actor>(self))
    .then([self](memory_pressure level) { self->state.pressure = level; });
  watch_cache(self);
  return {
    [self](allocate_atom, allocation_request& req)
      -> caf::result<request_handle_actor, block_table> {
      return admit<block_table>(
        self, req, [](admission& a, const allocation_request&) {
          return std::move(a.table);
        });
    },
    [self](allocate_atom, allocation_request& req, info_atom)
      -> caf::result<request_handle_actor, request_info> {
      return admit<request_info>(
        self, req, [](admission& a, const allocation_request& params) {
          request_info info;
          info.cache_id = a.cache_id;
          info.request = params;
          return info;
        });
    },
    [self](extend_atom, request_id id,
           std::uint64_t n) -> caf::result<block_table> {
      // Straight to the pool, which answers the client: the handle actor
      // only relayed (one hop less, and no visit to a cold actor). The pool
      // knows which requests are live - ahead of the registry, which takes
      // in an actor client's steps a message later - so the registry is
      // not asked either (at 100,000 live requests, two cache misses less).
      self->state.pool_index->prefetch(id);
      return self->delegate(self->state.pool, extend_atom::value, id,
                            current_incarnation, n);
    },
    [self](append_atom, request_id id,
           std::vector<token_id>& tokens) -> caf::result<block_table> {
      self->state.pool_index->prefetch(id);
      return self->delegate(self->state.pool, append_atom::value, id,
                            current_incarnation, std::move(tokens));
    },
    [self](draft_atom, request_id id, std::uint64_t n,
           std::vector<token_id>& tokens,
           std::uint32_t drafts) -> caf::result<block_table> {
      self->state.pool_index->prefetch(id);
      return self->delegate(self->state.pool, draft_atom::value, id,
                            current_incarnation, n, std::move(tokens), drafts);
    },
    [self](settle_atom, request_id id,
           std::uint32_t accepted) -> caf::result<block_table> {
      self->state.pool_index->prefetch(id);
      return self->delegate(self->state.pool, settle_atom::value, id,
                            current_incarnation, accepted);
    },
    [self](free_atom, request_id id) -> caf::result<std::uint32_t> {
      self->state.pool_index->prefetch(id); // fetched during our lookup
      auto cache_id = incarnation_of(self, id);
      if (!cache_id)
        return make_error(errc::unknown_request, unknown("free", id));
      return free_request(self, id, *cache_id, false);
    },
    [self](discard_atom, request_id id) -> caf::result<std::uint32_t> {
      auto cache_id = incarnation_of(self, id);
      if (!cache_id)
        return make_error(errc::unknown_request, unknown("discard", id));
      return free_request(self, id, *cache_id, false, true);
    },
    [self](free_atom, request_id id,
           std::uint64_t cache_id) -> caf::result<std::uint32_t> {
      self->state.pool_index->prefetch(id);
      auto& reg = self->state.registry;
      auto i = reg.find(id);
      if (i == reg.end() || i->second.info.cache_id != cache_id)
        return detail::not_live(id, cache_id,
                                i == reg.end() ? 0 : i->second.info.cache_id,
                                errc::invalid_handle, false);
      prefetch_handle(i->second.handle);
      return free_request(self, id, cache_id, true);
    },
    [self](fork_atom, request_id parent, request_id child)
      -> caf::result<request_handle_actor, block_table> {
      auto& st = self->state;
      auto parent_cache_id = incarnation_of(self, parent);
      if (!parent_cache_id)
        return make_error(errc::unknown_request, unknown("fork", parent));
      if (registered(st, child))
        return make_error(errc::duplicate_request,
                          "request " + std::to_string(child)
                            + " is already allocated");
      // Before the promise, which takes the sender out of the message.
      auto owner = owner_of(self);
      auto rp = owe(self,
                    self->make_response_promise<request_handle_actor, block_table>(),
                    "fork", child);
      st.admitting.add(child);
      self->request(st.pool, caf::infinite, fork_atom::value, parent,
                    *parent_cache_id, child)
        .then(
          [self, rp, parent, child, owner](admission& a) mutable {
            auto& st = self->state;
            st.admitting.remove(child);
            // The parent the pool forked: registered by now (its admission
            // came back first), and still (its end, if any, comes after).
            auto i = st.registry.find(parent);
            if (i == st.registry.end()) {
              // Only an orphan (which GC sweeps) is unknown here: so is
              // its child.
              reclaim_request(self, child, a.cache_id);
              rp.deliver(make_error(errc::unknown_request,
                                    "request " + std::to_string(child) + ": "
                                      + unknown("fork", parent)));
              return;
            }
            auto req = i->second.info.request;
            req.id = child;
            // A fork hit nothing: its blocks are its parent's, written.
            auto h = add_request(self, req, a.cache_id, 0, std::move(owner));
            rp.deliver(std::move(h), std::move(a.table));
          },
          [self, rp, child](caf::error& err) mutable {
            self->state.admitting.remove(child);
            rp.deliver(as_ours("fork of request " + std::to_string(child), err,
                               errc::shutting_down));
          });
      return rp.promise();
    },
    [self](can_alloc_atom, const allocation_request& req) -> caf::result<bool> {
      auto& st = self->state;
      if (check_device(st.store, req) || registered(st, req.id))
        return false;
      return self->delegate(st.pool, can_alloc_atom::value, req);
    },
    [self](stats_atom) -> caf::result<cache_manager_stats> {
      auto rp = owe(self, self->make_response_promise<cache_manager_stats>(),
                    "stats");
      self->request(self->state.pool, caf::infinite, stats_atom::value)
        .then(
          [self, rp](pool_stats& p) mutable {
            rp.deliver(manager_stats(self->state, std::move(p)));
          },
          [rp](caf::error& err) mutable {
            rp.deliver(as_ours("stats", err, errc::shutting_down));
          });
      return rp.promise();
    },
    [self](gc_atom) -> caf::result<cache_gc_stats> {
      return self->delegate(self->state.supervisor, gc_atom::value);
    },
    [self](lookup_atom, request_id id)
      -> caf::result<request_handle_actor, request_info> {
      auto& st = self->state;
      auto i = st.registry.find(id);
      // One whose end (a free, a reclaim: an unclaimed one, say) has gone
      // to the pool is live no more, though its entry waits for the reply;
      // nor is one whose handle actor died, its reclaim on the way.
      if (i == st.registry.end() || !listed(st, id, i->second))
        return make_error(errc::unknown_request, unknown("lookup", id));
      return {i->second.handle, i->second.info};
    },
    [self](list_atom) {
      auto& st = self->state;
      std::vector<handle_entry> out;
      out.reserve(st.registry.size());
      for (auto& kvp : st.registry)
        if (listed(st, kvp.first, kvp.second)) // as lookup
          out.push_back(handle_entry{kvp.first, kvp.second.handle,
                                     kvp.second.info});
      std::sort(out.begin(), out.end(),
                [](auto& x, auto& y) { return x.id < y.id; });
      return out;
    },
    [self](table_atom, request_id id) -> caf::result<block_table> {
      auto& st = self->state;
      if (!incarnation_of(self, id))
        return make_error(errc::unknown_request, unknown("table", id));
      return self->delegate(st.pool, table_atom::value, id);
    },
    [self](step_atom, step_request& step) -> caf::result<step_result> {
      // The pool checks the admits' device, replies to the sender (who owns
      // what it admits) and tells us the step's effects first.
      return self->delegate(self->state.pool, step_atom::value, std::move(step));
    },
    [self](step_atom) -> step_actor {
      return self->state.pool;
    },
    [self](step_atom, step_effects& fx, const caf::actor& owner) {
      // Only the pool says what a step did; anyone else could end entries.
      if (self->current_sender()
          != caf::actor_cast<caf::strong_actor_ptr>(self->state.pool))
        return;
      auto frees = fx.freed.size() - fx.discarded;
      for (std::size_t k = 0; k < fx.freed.size(); ++k)
        end_request(self, fx.freed[k],
                    k < frees ? end_reason::deallocated
                              : end_reason::discarded,
                    count_at(fx.freed_blocks, k), false);
      // A preempted request's owner hears of it (preempt_atom), as with a
      // preempt through the manager - unless it is the stepper, whose
      // result says so.
      auto ptr = caf::actor_cast<caf::strong_actor_ptr>(owner);
      auto addr = owner.address();
      for (std::size_t k = 0; k < fx.preempted.size(); ++k) {
        auto i = self->state.registry.find(fx.preempted[k]);
        bool tell = i != self->state.registry.end() && i->second.owner
                    && i->second.owner != addr;
        end_request(self, fx.preempted[k], end_reason::preempted,
                    count_at(fx.preempted_blocks, k), tell);
      }
      for (std::size_t i = 0; i < fx.admitted.size(); ++i)
        add_request(self, fx.admitted[i], fx.cache_ids[i],
                    i < fx.hit_tokens.size() ? fx.hit_tokens[i] : 0, ptr);
    },
    [self](preempt_atom, request_id id) -> caf::result<std::uint32_t> {
      auto cache_id = incarnation_of(self, id);
      if (!cache_id)
        return make_error(errc::unknown_request, unknown("preempt", id));
      return preempt_request(self, id, *cache_id);
    },
    [self](preempt_atom, request_id id,
           std::uint64_t cache_id) -> caf::result<std::uint32_t> {
      // The supervisor's victims, chosen a round trip ago: the id may name
      // a newer incarnation by now, which nobody chose. Chosen at any
      // moment, a victim may not have had its K/V written: the blocks it
      // brought leave the prefix index.
      auto& reg = self->state.registry;
      auto i = reg.find(id);
      if (i == reg.end() || i->second.info.cache_id != cache_id)
        return detail::not_live(id, cache_id,
                                i == reg.end() ? 0 : i->second.info.cache_id,
                                errc::unknown_request, false);
      prefetch_handle(i->second.handle);
      return preempt_request(self, id, cache_id, true);
    },
    [self](subscribe_atom, topic t, const caf::actor& sub) {
      subscribe(self, t, sub);
    },
    [self](unsubscribe_atom, topic t, const caf::actor& sub) {
      unsubscribe(self, t, sub);
    },
    [self](reclaim_atom, request_id id, std::uint64_t cache_id) {
      auto& st = self->state;
      // The supervisor's report of a dead handle; from anyone else it would
      // end a request its owner still uses.
      if (caf::actor_cast<caf::actor_addr>(self->current_sender())
          != st.supervisor.address())
        return;
      auto i = st.registry.find(id);
      if (i == st.registry.end() || i->second.info.cache_id != cache_id)
        return; // ended normally before its handle went down
      // And only if that handle did go: the supervisor relays reports from
      // anyone (a handle reports from its own exit, with no sender), and
      // its address is no secret (a gc reply comes from it). A handle in
      // the registry can only go through quit(), which marks it shutting
      // down before its report leaves.
      auto h = caf::actor_cast<caf::abstract_actor*>(i->second.handle);
      if (h == nullptr
          || !h->getf(caf::abstract_actor::is_shutting_down_flag))
        return;
      reclaim_request(self, id, cache_id);
    },
    [self](unclaimed_atom, request_id id, std::uint64_t cache_id) {
      // A reply that found its caller gone: nobody writes its K/V. Only
      // from its owner (the facade's bridge; an allocate's or fork's comes
      // through its handle actor, as from the bridge) or from this manager
      // (an owner that died, through the handle): from anyone else it
      // would end a request its owner still uses.
      auto& reg = self->state.registry;
      auto i = reg.find(id);
      if (i == reg.end() || i->second.info.cache_id != cache_id)
        return;
      auto from = caf::actor_cast<caf::actor_addr>(self->current_sender());
      if (!from
          || (from != self->address()
              && from != i->second.owner))
        return;
      reclaim_request(self, id, cache_id);
    },
    [self](reclaim_atom) -> caf::result<cache_gc_stats> {
      return reclaim_orphans(self);
    },
    [self](pressure_atom, const pressure_event& ev) {
      // Only the supervisor says what the level is (stats, metrics).
      if (self->current_sender()
          == caf::actor_cast<caf::strong_actor_ptr>(self->state.supervisor))
        self->state.pressure = ev.level;
    },
    [self](swap_out_atom, request_id id) -> caf::result<std::uint32_t> {
      return swap_out_request(self, id);
    },
    [self](swap_in_atom, request_id id) -> caf::result<block_table> {
      return swap_in_request(self, id);
    },
    [self](pin_atom, std::string& tenant, std::vector<token_id>& tokens,
           std::uint64_t ttl_ms, std::uint64_t salt) -> caf::result<std::uint32_t> {
      return self->delegate(self->state.pool, pin_atom::value,
                            std::move(tenant), std::move(tokens), ttl_ms, salt);
    },
    [self](unpin_atom, std::string& tenant, std::vector<token_id>& tokens,
           std::uint64_t salt) -> caf::result<std::uint32_t> {
      return self->delegate(self->state.pool, unpin_atom::value,
                            std::move(tenant), std::move(tokens), salt);
    },
    [self](probe_atom, std::vector<allocation_request>& reqs)
      -> caf::result<std::vector<std::uint64_t>> {
      // Last: CAF 0.17 tries the handlers in order (the pool answers).
      return self->delegate(self->state.pool, probe_atom::value,
                            std::move(reqs));
    },
  };
}

} // namespace kvactor::detail
