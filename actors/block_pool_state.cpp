// The block pool actor's state and shared helpers (block_pool_state.hpp):
// usage reports and KV events, copy-on-write through the device, the
// incarnation checks its handlers answer with.
#include "kvactor/actors/block_pool_state.hpp"

#include <algorithm>
#include <chrono>
#include <string>

#include <caf/send.hpp>

#include "kvactor/actors/incarnation_error.hpp"
#include "kvactor/messages/error.hpp"
#include "kvactor/messages/error_context.hpp"

namespace kvactor::detail {

void block_pool_state::init(const cache_config& cfg,
                            std::shared_ptr<block_pool_core> core) {
  block_size = cfg.block_size;
  num_layers = cfg.model.num_layers;
  grace = std::chrono::milliseconds{cfg.pressure.preempt_grace_ms};
  core_ptr = std::move(core);
  marks = std::make_unique<pressure_tracker>(cfg.pressure,
                                             core_ptr->num_blocks());
}

void block_pool_state::report(block_pool_actor::pointer self, bool always) {
  publish_events();
  auto used = core().used_blocks();
  auto b = marks->band(used);
  // The watch stays set while no tenant could offer a victim: all within
  // their reservations, say, with usage at critical - a steady state of a
  // pool its tenants' reservations fill, where waking the supervisor at
  // every change would cost a victims query (O(requests log requests))
  // each, to name nobody.
  auto wake = victims_watch && used >= marks->relief_target()
              && core().may_name_victims();
  if ((b == band && !always && !wake) || !supervisor)
    return;
  band = b;
  victims_watch = false;
  self->send(supervisor, usage_atom::value,
             pool_usage{core().used_blocks(), core().cached_blocks(),
                        core().num_blocks()});
}

void block_pool_state::publish_events() {
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
  for (auto& addr : kv_subscribers)
    if (auto sub = caf::actor_cast<caf::actor>(addr)) // null: it went
      caf::anon_send(sub, kv_event_atom::value, batch);
}

void block_pool_state::expire_due_pins() {
  if (core().pinned_blocks() != 0)
    core().expire_pins(now_ms());
}

void block_pool_state::set_clock() {
  core().set_clock(static_cast<std::uint64_t>(
    std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::system_clock::now().time_since_epoch())
      .count()));
}

std::uint64_t block_pool_state::now_ms() {
  return static_cast<std::uint64_t>(
    std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now().time_since_epoch())
      .count());
}

void copy_then(pool_ptr self, const std::vector<block_copy>& copies,
               std::function<void(caf::error, std::vector<request_id>)> done) {
  auto& st = self->state;
  auto finish = [self, copies, done](caf::error err) {
    auto undone = self->state.core().settle_copies(copies, !err);
    self->state.report(self);
    done(std::move(err), std::move(undone));
  };
  // Requested by the pool itself, never delegated: the device takes a
  // copy from its cache's pool alone (device_actor.cpp).
  self->request(st.device, caf::infinite, copy_atom::value, copies)
    .await([finish](std::uint32_t) { finish(caf::none); },
           [finish](caf::error& err) { finish(std::move(err)); });
}

caf::error copy_undone(request_id id, const caf::error& cause) {
  return in_context("extend of request " + std::to_string(id)
                      + " undone, the request is as it was: its copy-on-write "
                        "copy failed",
                    cause, errc::device_failure);
}

void fail_undone_extends(step_result& res, const caf::error& err,
                         const std::vector<request_id>& undone) {
  for (auto id : undone) {
    // The extend's delta goes (a verdict's cut, blocks empty, stays).
    res.changed.erase(std::remove_if(res.changed.begin(), res.changed.end(),
                                     [&](auto& d) {
                                       return d.id == id && !d.blocks.empty();
                                     }),
                      res.changed.end());
    res.failed.push_back(op_failure{id, copy_undone(id, err)});
  }
  res.copies.clear();
}

caf::error check_incarnation(const block_pool_core& core, request_id id,
                             std::uint64_t cache_id) {
  if (core.find(id, cache_id) != nullptr)
    return caf::none;
  if (cache_id == current_incarnation) // only the manager's forms take it
    return make_error(errc::invalid_request,
                      "request " + std::to_string(id)
                        + ": name its cache id here, not current_incarnation");
  auto live = core.find(id);
  return not_live(id, cache_id, live != nullptr ? live->cache_id : 0);
}

std::uint64_t named_incarnation(const block_pool_core& core, request_id id,
                                std::uint64_t cache_id) {
  if (cache_id != current_incarnation)
    return cache_id;
  auto seq = core.find(id);
  return seq != nullptr ? seq->cache_id : cache_id;
}

caf::error check_current(const block_pool_core& core, request_id id,
                         std::uint64_t cache_id) {
  if (core.find(id, cache_id) != nullptr)
    return caf::none;
  return make_error(errc::unknown_request,
                    "request " + std::to_string(id) + " is not allocated"
                      + (core.find(id) == nullptr
                           ? ""
                           : " (it ended; the id is live again)"));
}

caf::error from_manager(block_pool_actor::pointer self,
                        const kv_cache_manager_actor& mgr, const char* what) {
  // Raw pointers: no reference count touched on the allocate's hot path.
  auto* sender = caf::actor_cast<caf::abstract_actor*>(self->current_sender());
  if (!mgr || sender == caf::actor_cast<caf::abstract_actor*>(mgr))
    return caf::none;
  return make_error(errc::invalid_request,
                    std::string{what} + ": only the manager may ask the pool");
}

caf::error name_shortage(const std::string& what, caf::error err) {
  // A step's failures say whose they are too (failed_op).
  if (has_code(err, errc::quota_exceeded) || has_code(err, errc::out_of_blocks))
    return in_context(what, err);
  return err;
}

block_table table_of(const block_pool_core& core, request_id id) {
  return core.table(*core.find(id));
}

caf::expected<const sequence*> named_request(const block_pool_core& core,
                                             request_id id,
                                             std::uint64_t cache_id,
                                             bool by_manager) {
  // The manager's form may name whichever incarnation is live; a handle
  // always names its own.
  auto any = by_manager && cache_id == current_incarnation;
  if (auto seq = any ? core.find(id) : core.find(id, cache_id))
    return seq;
  return by_manager ? check_current(core, id, cache_id)
                    : check_incarnation(core, id, cache_id);
}

caf::expected<extension> grow(pool_ptr self, request_id id,
                              std::uint64_t cache_id, std::uint64_t n,
                              const std::vector<token_id>& tokens,
                              bool by_manager, std::uint32_t drafts) {
  auto& st = self->state;
  // Looked up once: extend adds no sequence, so `seq` stays valid for the
  // table below.
  auto seq = named_request(st.core(), id, cache_id, by_manager);
  if (!seq)
    return std::move(seq.error());
  if (!tokens.empty() && tokens.size() != n)
    return make_error(errc::invalid_request,
                      "request " + std::to_string(id) + ": "
                        + std::to_string(tokens.size()) + " token ids for "
                        + std::to_string(n) + " tokens");
  st.expire_due_pins();
  st.set_clock();
  auto res = st.core().extend(id, n, tokens.empty() ? nullptr : tokens.data(),
                              true, drafts);
  if (!res)
    return name_shortage("extend of request " + std::to_string(id) + " by "
                           + std::to_string(n) + " tokens",
                         std::move(res.error()));
  // Its writer may be no stepper's: a stepper's promise no longer ends
  // its drain, should the supervisor preempt it.
  st.lanes.grown_outside(id, (*seq)->cache_id);
  st.report(self);
  return extension{st.core().table(**seq), std::move(res->copies)};
}

caf::result<std::uint32_t> end_by_manager(pool_ptr self, request_id id,
                                          std::uint64_t cache_id,
                                          bool discard) {
  auto& st = self->state;
  if (auto err = from_manager(self, st.registry, discard ? "discard" : "free"))
    return err;
  cache_id = named_incarnation(st.core(), id, cache_id);
  if (auto err = check_current(st.core(), id, cache_id))
    return err;
  auto res = discard ? st.core().discard(id) : st.core().release(id);
  if (!res)
    return std::move(res.error());
  st.lanes.ended(id, cache_id,
                 discard ? end_reason::discarded : end_reason::deallocated,
                 *res);
  st.report(self);
  return *res;
}

namespace {

/// The supervisor's victims are chosen a round trip before their
/// preemption lands; by then memory may have come free (other requests
/// ended), the victim may have gone to the host tier (its device blocks
/// leave with the copy) or have forked (its blocks shared, none freed by
/// its end). Such a victim is refused, with why, and lives on.
caf::error still_a_victim(block_pool_state& st, request_id id) {
  auto& core = st.core();
  auto seq = core.find(id);
  auto no = [&](const std::string& why) {
    return make_error(errc::invalid_request,
                      "request " + std::to_string(id)
                        + " is no longer preempted for memory pressure: "
                        + why);
  };
  if (seq->where != residency::resident)
    return no("it is swapped out or swapping, its device blocks leave "
              "with the copy");
  auto used = core.used_blocks();
  auto leaving = core.blocks_leaving();
  auto target = st.marks->relief_target();
  if (used < target + leaving)
    return no(std::to_string(used) + " blocks are in use"
              + (leaving == 0 ? std::string{}
                              : ", " + std::to_string(leaving)
                                  + " of them leaving with swaps in flight")
              + ", under the " + std::to_string(target)
              + " a relief brings usage under");
  if (core.exclusive_blocks(*seq) == 0)
    return no("every block it holds is shared, its end frees none");
  // As choose_victims: never from a tenant at or below its reservation -
  // which it may have reached since (its other requests ended).
  auto& ts = core.tenants()[seq->tenant];
  auto reserved = ts.config.reserved_blocks;
  if (reserved != 0 && ts.used <= reserved)
    return no("tenant '" + ts.config.name + "' holds "
              + std::to_string(ts.used) + " blocks, within its "
              + std::to_string(reserved) + " reserved");
  return caf::none;
}

} // namespace

caf::result<std::uint32_t> preempt_by_manager(pool_ptr self, request_id id,
                                              std::uint64_t cache_id,
                                              bool unindex) {
  auto& st = self->state;
  if (auto err = from_manager(self, st.registry, "preempt"))
    return err;
  cache_id = named_incarnation(st.core(), id, cache_id);
  if (auto err = check_current(st.core(), id, cache_id))
    return err;
  if (unindex)
    if (auto err = still_a_victim(st, id))
      return err;
  caf::expected<std::uint32_t> res{std::uint32_t{0}};
  if (unindex && st.grace.count() > 0) {
    // The supervisor's victim: its blocks drain until the grace's end, or
    // a step of its stepper with earlier_steps_written (which ends the
    // drains tagged with it).
    auto tag = st.lanes.drain_tag(st.lanes.stepper_of(id, cache_id));
    res = st.core().preempt_draining(id, tag);
    if (res && st.core().last_drain() != 0)
      self->delayed_send(self, st.grace, tick_atom::value,
                         st.core().last_drain());
  } else {
    res = st.core().preempt(id, unindex);
  }
  if (!res)
    return std::move(res.error());
  st.lanes.ended(id, cache_id, end_reason::preempted, *res);
  st.report(self);
  return *res;
}

caf::expected<block_table> settle(pool_ptr self, request_id id,
                                  std::uint64_t cache_id,
                                  std::uint64_t accepted, bool by_manager) {
  auto& st = self->state;
  auto seq = named_request(st.core(), id, cache_id, by_manager);
  if (!seq)
    return std::move(seq.error());
  st.set_clock();
  auto res = st.core().settle_drafts(id, accepted);
  if (!res)
    return std::move(res.error());
  st.report(self);
  return st.core().table(**seq);
}

} // namespace kvactor::detail
