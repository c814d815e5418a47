// block_pool actor: wraps detail::block_pool_core; after each message that
// changes usage it tells the supervisor if usage crossed a pressure mark,
// and after each step it tells the manager what the step did to its
// registry.
#include "kvactor/actors/block_pool.hpp"

#include <algorithm>
#include <memory>
#include <new>
#include <string>

#include <caf/actor_system.hpp>

#include "kvactor/actors/block_pool_state.hpp"
#include "kvactor/actors/crash_reason.hpp"
#include "kvactor/actors/stray_messages.hpp"
#include "kvactor/messages/error.hpp"

namespace kvactor {

namespace {

using namespace detail;

block_pool_actor::behavior_type
block_pool_fun(pool_ptr self, cache_config cfg,
               std::shared_ptr<block_pool_core> core, device_actor device,
               std::shared_ptr<index_hint> hint) {
  detail::handle_stray_messages(self);
  detail::name_crashes(self, "block pool");
  auto& st = self->state;
  st.init(cfg, std::move(core));
  st.core().share_index(std::move(hint));
  st.device = std::move(device);
  self->set_down_handler([self](const caf::down_msg& dm) {
    self->state.lanes.forget(dm.source); // a stepper went
    auto& subs = self->state.kv_subscribers;
    subs.erase(std::remove(subs.begin(), subs.end(), dm.source), subs.end());
    if (subs.empty())
      self->state.core().record_events(false);
  });
  return {
    [self, &st](allocate_atom, const allocation_request& req)
      -> caf::result<admission> {
      // A request admitted here for anyone else would have no handle and
      // no registry entry (schedulers hold this address: they admit
      // through steps, whose effects the manager registers).
      if (auto err = from_manager(self, st.registry, "allocate"))
        return err;
      st.expire_due_pins();
      st.set_clock();
      auto res = st.core().allocate(req);
      if (!res)
        return name_shortage("allocation of request " + std::to_string(req.id),
                             std::move(res.error()));
      st.report(self);
      return admission{req.id, res->cache_id, res->hit_tokens,
                       table_of(st.core(), req.id)};
    },
    [&st](can_alloc_atom, const allocation_request& req) {
      // Pins past their deadline mean nothing any more: dropping them
      // first (housekeeping, not a change a caller can see) makes the
      // answer match what allocate, which drops them too, would do.
      st.expire_due_pins();
      return st.core().can_allocate(req);
    },
    [self](extend_atom, request_id id, std::uint64_t cache_id, std::uint64_t n,
           const std::vector<token_id>& tokens) -> caf::result<extension> {
      auto ext = grow(self, id, cache_id, n, tokens, false);
      if (!ext)
        return std::move(ext.error());
      return after_copies<extension>(self, id, std::move(*ext),
                                     [](extension x) { return x; });
    },
    [self](extend_atom, request_id id, std::uint64_t cache_id,
           std::uint64_t n) -> caf::result<block_table> {
      auto ext = grow(self, id, cache_id, n, {}, true);
      if (!ext)
        return std::move(ext.error());
      return after_copies<block_table>(self, id, std::move(*ext),
                                       [](extension x) {
                                         return std::move(x.table);
                                       });
    },
    [self](append_atom, request_id id, std::uint64_t cache_id,
           const std::vector<token_id>& tokens) -> caf::result<block_table> {
      auto ext = grow(self, id, cache_id, tokens.size(), tokens, true);
      if (!ext)
        return std::move(ext.error());
      return after_copies<block_table>(self, id, std::move(*ext),
                                       [](extension x) {
                                         return std::move(x.table);
                                       });
    },
    [self](draft_atom, request_id id, std::uint64_t cache_id, std::uint64_t n,
           const std::vector<token_id>& tokens,
           std::uint32_t drafts) -> caf::result<block_table> {
      auto ext = grow(self, id, cache_id, n, tokens,
                      cache_id == current_incarnation, drafts);
      if (!ext)
        return std::move(ext.error());
      return after_copies<block_table>(self, id, std::move(*ext),
                                       [](extension x) {
                                         return std::move(x.table);
                                       });
    },
    [self](settle_atom, request_id id, std::uint64_t cache_id,
           std::uint32_t accepted) -> caf::result<block_table> {
      auto res = settle(self, id, cache_id, accepted,
                        cache_id == current_incarnation);
      if (!res)
        return std::move(res.error());
      return std::move(*res);
    },
    [self](free_atom, request_id id,
           std::uint64_t cache_id) -> caf::result<std::uint32_t> {
      return end_by_manager(self, id, cache_id, false);
    },
    [self](discard_atom, request_id id,
           std::uint64_t cache_id) -> caf::result<std::uint32_t> {
      return end_by_manager(self, id, cache_id, true);
    },
    [self, &st](reclaim_atom, request_id id,
                std::uint64_t cache_id) -> caf::result<bool, std::uint32_t> {
      if (auto err = from_manager(self, st.registry, "reclaim"))
        return err;
      if (st.core().find(id, cache_id) == nullptr)
        return {false, std::uint32_t{0}};
      auto res = st.core().reclaim(id, cache_id);
      if (!res)
        return std::move(res.error());
      st.lanes.ended(id, cache_id, end_reason::reclaimed, *res);
      st.report(self);
      return {true, *res};
    },
    [self](preempt_atom, request_id id,
           std::uint64_t cache_id) -> caf::result<std::uint32_t> {
      return preempt_by_manager(self, id, cache_id, false);
    },
    [self](preempt_atom, discard_atom, request_id id,
           std::uint64_t cache_id) -> caf::result<std::uint32_t> {
      return preempt_by_manager(self, id, cache_id, true);
    },
    [self, &st](fork_atom, request_id parent, std::uint64_t parent_cache_id,
                request_id child) -> caf::result<admission> {
      if (auto err = from_manager(self, st.registry, "fork"))
        return err;
      parent_cache_id = named_incarnation(st.core(), parent, parent_cache_id);
      if (auto err = check_current(st.core(), parent, parent_cache_id))
        return err;
      st.set_clock();
      auto res = st.core().fork(parent, child);
      if (!res)
        return std::move(res.error());
      st.report(self);
      return admission{child, res->cache_id, 0, table_of(st.core(), child)};
    },
    [self, &st](step_atom, step_request& step) -> caf::result<step_result> {
      auto sender = self->current_sender();
      auto stepper = caf::actor_cast<caf::actor_addr>(sender);
      // Its earlier steps' K/V are written, it says: the blocks of its
      // requests the supervisor preempted meanwhile are written no more.
      if (step.earlier_steps_written && st.core().num_drains() != 0)
        st.core().end_drains(st.lanes.drain_tag(stepper));
      st.expire_due_pins();
      st.set_clock();
      auto rejected = detail::reject_foreign(st.store, step);
      auto res = st.core().run_step(step, true, &st.trace);
      res.failed.insert(res.failed.end(),
                        std::make_move_iterator(rejected.begin()),
                        std::make_move_iterator(rejected.end()));
      if (st.lanes.step_done(stepper, step, res, st.trace))
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
      st.expire_due_pins(); // an expired pin is no pin: not counted as one
      return st.core().stats();
    },
    [&st](stats_atom, request_id id,
          std::uint64_t cache_id) -> caf::result<cache_handle_stats> {
      auto seq = st.core().find(id, cache_id);
      if (seq == nullptr)
        return check_incarnation(st.core(), id, cache_id);
      cache_handle_stats s;
      s.blocks_allocated = seq->blocks.size();
      s.tokens_stored = seq->num_tokens;
      auto slots = seq->blocks.size() * std::uint64_t{st.block_size};
      s.utilization = slots == 0 ? 0.0
                                 : static_cast<double>(seq->num_tokens)
                                     / static_cast<double>(slots);
      s.last_access = seq->last_access;
      return s; // memory_bytes: the handle knows the bytes per block
    },
    [self, &st](evict_atom, std::uint32_t n) {
      st.expire_due_pins(); // first: expired pins are evictable
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
      if (st.supervisor)
        return; // once, from the supervisor at its start: no one may divert
                // the usage reports (pressure, eviction, preemption) later
      st.supervisor = std::move(sup);
      st.band = static_cast<std::size_t>(-1); // report the current usage now
      st.report(self);
    },
    [self, &st](subscribe_atom, topic t, const caf::actor& sub) {
      if (t != topic::kv_events || !sub) // null: CAF's monitor would crash
        return;
      auto& subs = st.kv_subscribers;
      if (std::find(subs.begin(), subs.end(), sub.address()) == subs.end()) {
        subs.push_back(sub.address());
        if (!st.lanes.knows(sub.address())) // a stepper is watched already
          self->monitor(sub); // a subscriber that dies is dropped
      }
      // Changes nobody heard (before the first subscriber, or since the
      // last one left) count as one batch: a subscriber joining after them
      // starts past 1 and can tell it has no full picture.
      if (st.core().record_events(true))
        ++st.kv_seq;
    },
    [self, &st](unsubscribe_atom, topic t, const caf::actor& sub) {
      if (t != topic::kv_events)
        return;
      auto& subs = st.kv_subscribers;
      auto i = std::find(subs.begin(), subs.end(), sub.address());
      if (i == subs.end())
        return;
      subs.erase(i);
      // Its subscribe's monitor, or one per cycle would pile up - unless it
      // steps here too: CAF's demonitor drops every monitor of the pair.
      if (!st.lanes.knows(sub.address()))
        self->demonitor(sub);
      if (subs.empty())
        st.core().record_events(false);
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
      if (auto err = from_manager(self, st.registry, "swap in"))
        return err;
      if (auto err = check_current(st.core(), id, cache_id))
        return err;
      st.expire_due_pins(); // only once the message is accepted
      auto res = st.core().swap_in_begin(id);
      if (!res)
        return name_shortage("swap-in of request " + std::to_string(id),
                             std::move(res.error()));
      st.report(self);
      return std::move(*res);
    },
    [self, &st](swap_out_atom, request_id id, std::uint64_t cache_id,
                bool ok) -> caf::result<std::uint32_t, bool> {
      if (auto err = from_manager(self, st.registry, "swap out"))
        return err;
      bool ended = st.core().find(id, cache_id) == nullptr; // a ghost's
      std::vector<block_id> left;
      auto res = st.core().swap_out_done(id, cache_id, ok, &left);
      if (!res)
        return std::move(res.error());
      // Before any of them can go to a new owner (a local send is in the
      // device's mailbox when it returns): writes into them were refused
      // since the copy began, lest one land after the copy and be lost.
      if (!left.empty() && st.device)
        self->send(st.device, swap_out_atom::value, settle_atom::value,
                   std::move(left));
      // Failed: the blocks a relief counted as leaving stay. Usage is
      // reported even in the same band, so that the supervisor looks again.
      st.report(self, !ok && !ended);
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
      // Named by incarnation: the supervisor preempts them a round trip
      // later, when an id may name a newer request. Blocks that swaps in
      // flight take away count as gone (a failed swap-out reports usage
      // again, so a relief still follows). Whatever the answer, the next
      // change while usage is still to be relieved is reported: a round
      // that found too few victims (or only stale ones) ends, and nothing
      // else would make the supervisor look again.
      st.victims_watch = true;
      std::vector<std::pair<request_id, std::uint64_t>> out;
      auto leaving = st.core().blocks_leaving();
      if (leaving >= blocks)
        return out;
      for (auto id : st.core().choose_victims(blocks - leaving))
        if (auto seq = st.core().find(id))
          out.emplace_back(id, seq->cache_id);
      return out;
    },
    [self, &st](pin_atom, const std::string& tenant,
                const std::vector<token_id>& tokens, std::uint64_t ttl_ms,
                std::uint64_t salt) -> caf::result<std::uint32_t> {
      return for_tenant(self, tenant, [&](std::uint16_t t) {
        // First, as every operation that counts pins: a pin whose time ran
        // out must not count against max_pinned_blocks or keep its blocks
        // off the LRU for this one.
        st.expire_due_pins();
        return st.core().pin(t, tokens, ttl_ms, block_pool_state::now_ms(),
                             salt);
      });
    },
    [self, &st](unpin_atom, const std::string& tenant,
                const std::vector<token_id>& tokens,
                std::uint64_t salt) -> caf::result<std::uint32_t> {
      return for_tenant(self, tenant, [&](std::uint16_t t) {
        st.expire_due_pins(); // first: the reply counts live pins only
        return st.core().unpin(t, tokens, salt);
      });
    },
    [self, &st](tick_atom) {
      auto n = st.core().expire_pins(block_pool_state::now_ms());
      st.report(self);
      return n;
    },
    [self, &st](tick_atom, std::uint64_t drain) {
      // Only its own timer's: anyone else could end a drain early.
      if (caf::actor_cast<caf::actor_addr>(self->current_sender())
          != self->address())
        return;
      st.core().end_drain(drain); // usage (used blocks) stays as it was
    },
    [&st](index_atom) {
      std::vector<std::pair<std::uint64_t, block_id>> out;
      st.core().for_each_indexed(
        [&](std::uint64_t h, block_id b) { out.emplace_back(h, b); });
      std::sort(out.begin(), out.end());
      return out;
    },
    [self, &st](gather_atom, request_id id, std::uint64_t cache_id,
                std::uint32_t layer) -> caf::result<gathered_kv> {
      // Cold (a contiguous view): at the end with probe_atom's. (Placed
      // before stats_atom's, scale's 100k operations measured ~5 % slower,
      // 4 runs alternated with the build before it.) Forwarded with the
      // table as it is now, so the device reads these blocks before any
      // later owner's write to them (see interfaces.hpp).
      if (auto err = check_incarnation(st.core(), id, cache_id))
        return err;
      if (layer >= st.num_layers)
        return make_error(errc::invalid_request,
                          "request " + std::to_string(id) + ": layer "
                            + std::to_string(layer) + " >= num_layers "
                            + std::to_string(st.num_layers));
      auto t = table_of(st.core(), id);
      if (!t.holds_tokens())
        return make_error(errc::invalid_request,
                          "request " + std::to_string(id)
                            + " is swapped out: swap it in first");
      if (!st.device)
        return make_error(errc::device_failure,
                          "request " + std::to_string(id)
                            + ": this pool has no device to gather with");
      return self->delegate(st.device, gather_atom::value, layer,
                            std::move(t.blocks), t.num_tokens);
    },
    [&st](probe_atom, const std::vector<allocation_request>& reqs)
      -> caf::result<std::vector<std::uint64_t>> {
      // Last in the behavior: CAF 0.17 tries the handlers in order, and
      // the hot ones (extends, steps) come first.
      std::vector<std::uint64_t> out;
      out.reserve(reqs.size());
      for (auto& req : reqs) {
        // Allocate's checks, the device first (as the lane's admits and
        // the manager's allocate): a router must not rank first a prompt
        // that this cache never admits.
        if (!st.store.kind.empty())
          if (auto err = check_device(st.store, req))
            return err;
        auto n = st.core().cached_prefix(req);
        if (!n)
          return std::move(n.error());
        out.push_back(*n);
      }
      return out;
    },
  };
}

} // namespace

caf::expected<block_pool_actor>
spawn_block_pool(caf::actor_system& sys, const cache_config& cfg,
                 std::uint32_t num_blocks, device_actor device,
                 std::shared_ptr<detail::index_hint> hint) {
  // The pool's bookkeeping (some 85 bytes a block) is allocated here, not
  // in the actor: a block count this machine cannot hold fails as an error
  // naming it, not as an actor dead of bad_alloc behind a spawn that
  // answered.
  std::shared_ptr<block_pool_core> core;
  try {
    core = std::make_shared<block_pool_core>(cfg, num_blocks);
  } catch (const std::bad_alloc&) {
    // Named after the larger share (the simulator points at its line).
    return make_error(errc::invalid_config,
                      std::string{cfg.num_host_blocks > num_blocks
                                    ? "num_host_blocks"
                                    : "num_gpu_blocks"}
                        + ": no host memory for the block pool's "
                          "bookkeeping of "
                        + std::to_string(num_blocks) + " device and "
                        + std::to_string(cfg.num_host_blocks) + " host blocks");
  }
  return sys.spawn(block_pool_fun, cfg, std::move(core), std::move(device),
                   std::move(hint));
}

} // namespace kvactor
