// block_pool actor: wraps detail::block_pool_core; after each message that
// changes usage it tells the supervisor if usage crossed a pressure mark,
// and after each step it tells the manager what the step did to its
// registry.
#include "kvactor/actors/block_pool.hpp"

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "kvactor/actors/block_pool_core.hpp"
#include "kvactor/actors/pressure_tracker.hpp"
#include "kvactor/actors/step_lane.hpp"
#include "kvactor/messages/error.hpp"

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>

#include <caf/send.hpp>

namespace kvactor {

namespace {

struct block_pool_state {
  static inline const char* name = "kvactor.block_pool";

  // Built in init(): CAF default-constructs the state before the spawn
  // function sees its arguments.
  std::unique_ptr<detail::block_pool_core> core_ptr;
  std::unique_ptr<detail::pressure_tracker> marks;
  std::size_t band = 0;
  supervisor_actor supervisor;
  device_actor device; ///< copies for copy-on-write
  std::vector<caf::actor> kv_subscribers;
  std::uint64_t kv_seq = 0;
  /// The manager, told each step's effects on its registry (none: a pool
  /// spawned alone), and the storage whose device a step's admits must name
  /// (kind "": not checked).
  kv_cache_manager_actor registry;
  storage_info store;
  detail::block_pool_core::step_trace trace; ///< scratch of the step handler
  detail::lane_ledger lanes; ///< who admitted what through a step
  std::uint32_t block_size = 0;

  void init(const cache_config& cfg, std::uint32_t num_blocks) {
    block_size = cfg.block_size;
    core_ptr = std::make_unique<detail::block_pool_core>(cfg, num_blocks);
    marks = std::make_unique<detail::pressure_tracker>(cfg.pressure, num_blocks);
  }

  detail::block_pool_core& core() {
    return *core_ptr;
  }
  const detail::block_pool_core& core() const {
    return *core_ptr;
  }

  /// After each message: KV events to their subscribers, usage crossings to
  /// the supervisor.
  void report(block_pool_actor::pointer self) {
    publish_events();
    auto b = marks->band(core().used_blocks());
    if (b == band || !supervisor)
      return;
    band = b;
    self->send(supervisor, usage_atom::value,
               pool_usage{core().used_blocks(), core().cached_blocks(),
                          core().num_blocks()});
  }

  void publish_events() {
    if (kv_subscribers.empty())
      return;
    auto events = core().take_events();
    if (events.empty())
      return;
    kv_event_batch batch;
    batch.seq = ++kv_seq;
    batch.block_size = block_size;
    batch.ts = std::chrono::duration<double>(
                 std::chrono::system_clock::now().time_since_epoch())
                 .count();
    batch.events.reserve(events.size());
    auto& tenants = core().tenants();
    for (auto& e : events)
      batch.events.push_back(kv_event{e.stored, e.hash, e.parent_hash, e.block,
                                      tenants[e.tenant].config.name,
                                      std::move(e.tokens)});
    for (auto& sub : kv_subscribers)
      caf::anon_send(sub, kv_event_atom::value, batch);
  }

  /// Lets pins whose time ran out go before an operation that takes
  /// blocks: the GC tick alone would leave them in the way until it comes
  /// (never, with gc_interval_ms 0).
  void expire_due_pins() {
    if (core().pinned_blocks() != 0)
      core().expire_pins(now_ms());
  }

  static std::uint64_t now_ms() {
    return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now().time_since_epoch())
        .count());
  }
};

using pool_ptr = block_pool_actor::stateful_pointer<block_pool_state>;

/// Has the device copy `copies` (copy-on-write) and calls `done` with its
/// outcome and the requests whose extends were undone because it failed.
/// The pool handles no other message until then (await): between the
/// extends and settle_copies only the rest of their step touched their
/// requests, so a failed copy can be undone exactly. An exit message
/// waits too, so the promise `done` answers is never dropped: the device
/// answers its work (with shutting_down if it is stopping) before the
/// pool quits.
/// NOTE: the pool pauses meanwhile. Copies are rare (a fork's first
/// append) and one block per request, so on CUDA the pause is a few
/// microseconds; on the host backend, whose copies run on the device
/// actor's thread in order, it also waits out a swap issued before it.
void copy_then(pool_ptr self, const std::vector<block_copy>& copies,
               std::function<void(caf::error, std::vector<request_id>)> done) {
  auto& st = self->state;
  auto finish = [self, copies, done](caf::error err) {
    auto undone = self->state.core().settle_copies(copies, !err);
    self->state.report(self);
    done(std::move(err), std::move(undone));
  };
  self->request(st.device, caf::infinite, copy_atom::value, copies)
    .await([finish](std::uint32_t) { finish(caf::none); },
           [finish](caf::error& err) { finish(std::move(err)); });
}

/// Moves the extends of `res` that settle_copies undid (the requests in
/// `undone`) from `changed` to `failed`, with the device's error `err`.
void fail_undone_extends(step_result& res, const caf::error& err,
                         const std::vector<request_id>& undone) {
  for (auto id : undone) {
    res.changed.erase(std::remove_if(res.changed.begin(), res.changed.end(),
                                     [&](auto& d) { return d.id == id; }),
                      res.changed.end());
    res.failed.push_back(op_failure{id, err});
  }
  res.copies.clear();
}

/// None if incarnation `cache_id` of request `id` is live; otherwise the
/// error its handle answers with: the request it served has ended.
caf::error check_incarnation(const detail::block_pool_core& core, request_id id,
                             std::uint64_t cache_id) {
  if (core.find(id, cache_id) != nullptr)
    return caf::none;
  return make_error(errc::invalid_handle,
                    "request " + std::to_string(id) + " has ended");
}

/// None if request `id` is live as incarnation `cache_id`, the one the
/// manager's registry names. The registry follows the pool a few messages
/// late (steps reach the pool directly), so an operation the manager asks
/// for by id alone could hit a newer incarnation of the id.
caf::error check_current(const detail::block_pool_core& core, request_id id,
                         std::uint64_t cache_id) {
  if (core.find(id, cache_id) != nullptr)
    return caf::none;
  return make_error(errc::unknown_request,
                    "request " + std::to_string(id) + " is not allocated"
                      + (core.find(id) == nullptr
                           ? ""
                           : " (it ended; the id is live again)"));
}

/// None if the current message comes from the manager, or if no manager
/// registered (a pool spawned alone). The step lane hands the pool's
/// address to schedulers, so what only the manager may ask - ending,
/// forking and swapping requests - is refused from anyone else.
caf::error from_manager(block_pool_actor::pointer self,
                        const kv_cache_manager_actor& mgr, const char* what) {
  if (!mgr || self->current_sender() == caf::actor_cast<caf::strong_actor_ptr>(mgr))
    return caf::none;
  return make_error(errc::invalid_request,
                    std::string{what} + ": only the manager may ask the pool");
}

/// The table of a live request (after a successful operation on it).
block_table table_of(const detail::block_pool_core& core, request_id id) {
  return core.table(*core.find(id));
}

block_pool_actor::behavior_type block_pool_fun(pool_ptr self, cache_config cfg,
                                               std::uint32_t num_blocks,
                                               device_actor device) {
  auto& st = self->state;
  st.init(cfg, num_blocks);
  st.device = std::move(device);
  self->set_down_handler([self](const caf::down_msg& dm) {
    self->state.lanes.forget(dm.source); // a stepper went
    auto& subs = self->state.kv_subscribers;
    subs.erase(std::remove_if(subs.begin(), subs.end(),
                              [&](const caf::actor& x) {
                                return x.address() == dm.source;
                              }),
               subs.end());
    if (subs.empty()) {
      self->state.core().record_events(false);
      self->state.core().take_events();
    }
  });
  return {
    [self, &st](allocate_atom, const allocation_request& req)
      -> caf::result<admission> {
      st.expire_due_pins();
      auto res = st.core().allocate(req);
      if (!res)
        return std::move(res.error());
      st.report(self);
      return admission{req.id, res->cache_id, res->hit_tokens,
                       table_of(st.core(), req.id)};
    },
    [&st](can_alloc_atom, const allocation_request& req) {
      st.expire_due_pins();
      return st.core().can_allocate(req);
    },
    [self, &st](extend_atom, request_id id, std::uint64_t cache_id,
                std::uint64_t n,
                const std::vector<token_id>& tokens) -> caf::result<extension> {
      if (auto err = check_incarnation(st.core(), id, cache_id))
        return err;
      st.expire_due_pins();
      if (!tokens.empty() && tokens.size() != n)
        return make_error(errc::invalid_request,
                          "request " + std::to_string(id) + ": "
                            + std::to_string(tokens.size())
                            + " token ids for " + std::to_string(n)
                            + " tokens");
      auto res = st.core().extend(id, n, tokens.empty() ? nullptr : tokens.data(),
                                  true);
      if (!res)
        return std::move(res.error());
      st.report(self);
      extension ext{table_of(st.core(), id), std::move(res->copies)};
      if (ext.copies.empty())
        return ext;
      auto rp = self->make_response_promise<extension>();
      copy_then(self, ext.copies,
                [rp, ext](caf::error err, std::vector<request_id>) mutable {
        if (err)
          rp.deliver(std::move(err));
        else
          rp.deliver(std::move(ext));
      });
      return rp;
    },
    [self, &st](free_atom, request_id id,
                std::uint64_t cache_id) -> caf::result<std::uint32_t> {
      if (auto err = from_manager(self, st.registry, "free"))
        return err;
      if (auto err = check_current(st.core(), id, cache_id))
        return err;
      auto res = st.core().release(id);
      if (!res)
        return std::move(res.error());
      st.lanes.ended(id, cache_id, end_reason::deallocated, *res);
      st.report(self);
      return *res;
    },
    [self, &st](reclaim_atom, request_id id,
                std::uint64_t cache_id) -> caf::result<bool, std::uint32_t> {
      if (auto err = from_manager(self, st.registry, "reclaim"))
        return err;
      if (st.core().find(id, cache_id) == nullptr)
        return {false, std::uint32_t{0}};
      auto res = st.core().release(id);
      if (!res)
        return std::move(res.error());
      st.lanes.ended(id, cache_id, end_reason::reclaimed, *res);
      st.report(self);
      return {true, *res};
    },
    [self, &st](preempt_atom, request_id id,
                std::uint64_t cache_id) -> caf::result<std::uint32_t> {
      if (auto err = from_manager(self, st.registry, "preempt"))
        return err;
      if (auto err = check_current(st.core(), id, cache_id))
        return err;
      auto res = st.core().preempt(id);
      if (!res)
        return std::move(res.error());
      st.lanes.ended(id, cache_id, end_reason::preempted, *res);
      st.report(self);
      return *res;
    },
    [self, &st](fork_atom, request_id parent, std::uint64_t parent_cache_id,
                request_id child) -> caf::result<admission> {
      if (auto err = from_manager(self, st.registry, "fork"))
        return err;
      if (auto err = check_current(st.core(), parent, parent_cache_id))
        return err;
      auto res = st.core().fork(parent, child);
      if (!res)
        return std::move(res.error());
      st.report(self);
      return admission{child, res->cache_id, 0, table_of(st.core(), child)};
    },
    [self, &st](step_atom, step_request& step) -> caf::result<step_result> {
      st.expire_due_pins();
      auto rejected = detail::reject_foreign(st.store, step);
      auto res = st.core().run_step(step, true, &st.trace);
      res.failed.insert(res.failed.end(),
                        std::make_move_iterator(rejected.begin()),
                        std::make_move_iterator(rejected.end()));
      auto sender = self->current_sender();
      auto stepper = caf::actor_cast<caf::actor_addr>(sender);
      if (st.lanes.step_done(stepper, res, st.trace))
        self->monitor(stepper); // forgotten when it goes
      res.ended = st.lanes.take(stepper);
      // Before the reply: the manager's mailbox holds the effects before
      // anything the stepper sends it after reading the reply.
      if (st.registry && detail::has_effects(res))
        self->send(st.registry, step_atom::value,
                   detail::effects_of(step, res, st.trace),
                   caf::actor_cast<caf::actor>(sender));
      st.report(self);
      if (res.copies.empty())
        return res;
      auto rp = self->make_response_promise<step_result>();
      auto copies = res.copies;
      copy_then(self, copies, [self, rp, res](caf::error err,
                                              std::vector<request_id> undone) mutable {
        // The step's frees, preemptions and admissions happened whatever
        // the device did: the reply must still say so (the manager keeps
        // its registry by it). Only the extends whose copy-on-write copy
        // failed fail, undone, with the device's error.
        if (err)
          fail_undone_extends(res, err, undone);
        // The copies' holds are gone now: report usage as of the reply.
        res.free_blocks = self->state.core().free_blocks();
        res.used_blocks = self->state.core().used_blocks();
        rp.deliver(std::move(res));
      });
      return rp;
    },
    [&st](table_atom, request_id id) -> caf::result<block_table> {
      auto seq = st.core().find(id);
      if (seq == nullptr)
        return make_error(errc::unknown_request,
                          "request " + std::to_string(id) + " is not allocated");
      return st.core().table(*seq);
    },
    [&st](table_atom, request_id id,
          std::uint64_t cache_id) -> caf::result<block_table> {
      if (auto err = check_incarnation(st.core(), id, cache_id))
        return err;
      return table_of(st.core(), id);
    },
    [&st](stats_atom) {
      return st.core().stats();
    },
    [self, &st](evict_atom, std::uint32_t n) {
      auto done = st.core().evict(n);
      st.report(self);
      return done;
    },
    [&st](check_atom) -> caf::result<bool> {
      if (auto err = st.core().check_invariant())
        return err;
      return true;
    },
    [&st](list_atom) {
      std::vector<std::pair<request_id, std::uint64_t>> live;
      live.reserve(st.core().num_sequences());
      st.core().for_each_sequence([&](const detail::sequence& s) {
        live.emplace_back(s.id, s.cache_id);
      });
      return live;
    },
    [&st](registry_atom, const caf::actor& mgr, const storage_info& store) {
      if (st.registry)
        return; // once, from spawn_kv_cache: no one may re-point it later
      st.registry = caf::actor_cast<kv_cache_manager_actor>(mgr);
      st.store = store;
    },
    [self, &st](subscribe_atom, supervisor_actor sup) {
      st.supervisor = std::move(sup);
      st.band = static_cast<std::size_t>(-1); // report the current usage now
      st.report(self);
    },
    [self, &st](subscribe_atom, topic t, const caf::actor& sub) {
      if (t != topic::kv_events)
        return;
      auto& subs = st.kv_subscribers;
      if (std::find(subs.begin(), subs.end(), sub) == subs.end()) {
        subs.push_back(sub);
        self->monitor(sub); // a subscriber that dies is dropped
      }
      st.core().record_events(true);
    },
    [&st](unsubscribe_atom, topic t, const caf::actor& sub) {
      if (t != topic::kv_events)
        return;
      auto& subs = st.kv_subscribers;
      subs.erase(std::remove(subs.begin(), subs.end(), sub), subs.end());
      if (subs.empty()) {
        st.core().record_events(false);
        st.core().take_events();
      }
    },
    [self, &st](swap_out_atom, request_id id, std::uint64_t cache_id)
      -> caf::result<std::vector<block_move>> {
      if (auto err = from_manager(self, st.registry, "swap out"))
        return err;
      if (auto err = check_current(st.core(), id, cache_id))
        return err;
      auto res = st.core().swap_out_begin(id);
      if (!res)
        return std::move(res.error());
      st.report(self);
      return std::move(*res);
    },
    [self, &st](swap_in_atom, request_id id, std::uint64_t cache_id)
      -> caf::result<std::vector<block_move>> {
      st.expire_due_pins();
      if (auto err = from_manager(self, st.registry, "swap in"))
        return err;
      if (auto err = check_current(st.core(), id, cache_id))
        return err;
      auto res = st.core().swap_in_begin(id);
      if (!res)
        return std::move(res.error());
      st.report(self);
      return std::move(*res);
    },
    [self, &st](swap_out_atom, request_id id, std::uint64_t cache_id,
                bool ok) -> caf::result<std::uint32_t, bool> {
      if (auto err = from_manager(self, st.registry, "swap out"))
        return err;
      bool ended = st.core().find(id, cache_id) == nullptr; // a ghost's
      auto res = st.core().swap_out_done(id, cache_id, ok);
      if (!res)
        return std::move(res.error());
      st.report(self);
      return {*res, ended};
    },
    [self, &st](swap_in_atom, request_id id, std::uint64_t cache_id,
                bool ok) -> caf::result<std::uint32_t, bool> {
      if (auto err = from_manager(self, st.registry, "swap in"))
        return err;
      bool ended = st.core().find(id, cache_id) == nullptr; // a ghost's
      auto res = st.core().swap_in_done(id, cache_id, ok);
      if (!res)
        return std::move(res.error());
      st.report(self);
      return {*res, ended};
    },
    [&st](victims_atom, std::uint64_t blocks) {
      return st.core().choose_victims(blocks);
    },
    [self, &st](pin_atom, const std::string& tenant,
                const std::vector<token_id>& tokens,
                std::uint64_t ttl_ms) -> caf::result<std::uint32_t> {
      auto t = st.core().tenant_index(tenant);
      if (!t)
        return std::move(t.error());
      auto res = st.core().pin(*t, tokens, ttl_ms, block_pool_state::now_ms());
      if (!res)
        return std::move(res.error());
      st.report(self);
      return *res;
    },
    [self, &st](tick_atom) {
      auto n = st.core().expire_pins(block_pool_state::now_ms());
      st.report(self);
      return n;
    },
    [&st](index_atom) {
      std::vector<std::pair<std::uint64_t, block_id>> out;
      st.core().for_each_indexed(
        [&](std::uint64_t h, block_id b) { out.emplace_back(h, b); });
      std::sort(out.begin(), out.end());
      return out;
    },
  };
}

} // namespace

block_pool_actor spawn_block_pool(caf::actor_system& sys,
                                  const cache_config& cfg,
                                  std::uint32_t num_blocks, device_actor device) {
  return sys.spawn(block_pool_fun, cfg, num_blocks, std::move(device));
}

} // namespace kvactor
