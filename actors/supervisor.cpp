// supervisor actor: handle deaths, GC, pressure levels and broadcasts.
#include "kvactor/actors/supervisor.hpp"

#include <algorithm>
#include <functional>
#include <chrono>
#include <memory>
#include <utility>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "kvactor/actors/crash_reason.hpp"
#include "kvactor/actors/pressure_tracker.hpp"
#include "kvactor/actors/reply_book.hpp"
#include "kvactor/actors/stray_messages.hpp"
#include "kvactor/messages/error.hpp"
#include "kvactor/messages/error_context.hpp"

namespace kvactor {

namespace {

struct supervisor_state {
  static inline const char* name = "kvactor.supervisor";

  block_pool_actor pool;
  kv_cache_manager_actor manager;
  std::unique_ptr<detail::pressure_tracker> tracker;
  double medium = 0;
  bool evict_at_high = true;
  bool preempt_at_critical = true;
  bool preempting = false; ///< victims chosen, preemptions in flight
  /// Critical usage came in during a round: look again when it ends.
  bool recheck = false;
  /// The victims the last round could not preempt because the manager
  /// does not know them (ended meanwhile, or an orphan, until a GC
  /// sweep): a round that the pool answers with these alone is not tried
  /// again (an orphan, named every time, would keep the rounds going for
  /// good). Not those the pool refused as stale (memory had come free, its
  /// blocks were shared, it was swapping): the pool names a victim by the
  /// same rules it refuses one, so one it names again is a victim again
  /// (its fork ended, usage rose) - skipped, the cache stayed critical
  /// until some later change.
  std::vector<std::pair<request_id, std::uint64_t>> refused;
  /// A timer GC pass is waiting on the pool or the manager: a tick then
  /// starts none (a pool held up - by a slow device copy, say - would
  /// otherwise queue one full pass per interval, to run back to back).
  bool timer_gc_running = false;
  std::uint64_t total_blocks = 0;
  std::uint64_t bytes_per_block = 0;
  std::chrono::milliseconds gc_interval{0};
  /// Timer passes per invariant check (gc_check_interval_ms, in passes;
  /// 0: never on the timer), and the passes run so far: the first checks.
  std::uint64_t check_every = 0;
  std::uint64_t passes = 0;
  pool_usage last;
  /// Weak, as the manager's registry holds owners: a subscription must not
  /// keep its subscriber alive (an owner whose last reference goes ends,
  /// and its requests with it). Monitored: one that dies is dropped.
  std::vector<caf::actor_addr> subscribers;
  /// GC requests waiting on the pool and the manager: answered with
  /// shutting_down if the supervisor exits first - by its exit handler, or
  /// if killed by its attached functor (the state is gone then).
  std::shared_ptr<detail::reply_book> shared_owed
    = std::make_shared<detail::reply_book>();
  detail::reply_book& owed = *shared_owed;

  /// Cached blocks to evict so that used + cached falls to the medium mark.
  std::uint32_t eviction_target() const {
    if (!evict_at_high || tracker->level() < memory_pressure::high)
      return 0;
    // The tracker's medium mark (rounded as the tracker rounds it: 0.57
    // of 100 blocks is 57, where a plain product truncates to 56).
    auto mark = pressure_mark(medium, total_blocks);
    auto held = last.used_blocks + last.cached_blocks;
    if (held <= mark)
      return 0;
    return static_cast<std::uint32_t>(std::min(held - mark, last.cached_blocks));
  }
};

using sup_ptr = supervisor_actor::stateful_pointer<supervisor_state>;

void relieve(sup_ptr self);

/// A round of preemption ended; `acted`: it had victims (each ended, or was
/// refused as stale - it ended by other hands, went to the host tier or
/// shared its blocks meanwhile). Usage may still be critical - requests
/// grew while its victims went, or a victim shared its blocks by then -
/// and above the critical mark the pool reports no change: look again,
/// with the pool's usage now. Only after a round that had victims, or
/// during which critical usage came in, so that rounds stop when nothing
/// can go (the pool then names none, or only the victims the round before
/// could not preempt).
void round_done(sup_ptr self, bool acted) {
  auto& st = self->state;
  st.preempting = false;
  auto again = acted || st.recheck;
  st.recheck = false;
  if (!again)
    return;
  self->request(st.pool, caf::infinite, stats_atom::value)
    .then(
      [self](const pool_stats& now) {
        auto& st = self->state;
        st.last.used_blocks = now.used_blocks;
        st.last.cached_blocks = now.cached_blocks;
        relieve(self);
      },
      [](caf::error&) {}); // the pool is gone: the manager stops the cache
}

/// At critical pressure: preempt (recompute-style, through the manager, which
/// tells each owner) the victims the pool names, until usage is back under
/// the high mark and out of critical (relief_target). One round at a time.
/// Each preemption lands a round trip after the choice: the pool refuses a
/// victim that no longer relieves anything by then (see the manager's
/// preempt_atom with a cache id).
void relieve(sup_ptr self) {
  auto& st = self->state;
  if (!st.preempt_at_critical
      || st.tracker->level() < memory_pressure::critical)
    return;
  if (st.preempting) {
    st.recheck = true;
    return;
  }
  auto target = st.tracker->relief_target();
  auto used = st.last.used_blocks;
  if (used < target)
    return;
  st.preempting = true;
  self->request(st.pool, caf::infinite, victims_atom::value, used - target + 1)
    .then(
      [self](std::vector<std::pair<request_id, std::uint64_t>>& victims) {
        // Ended or refused, each victim counts: a refused one was stale,
        // and fresh victims may still be needed - unless the pool named
        // only those the last round could not preempt.
        auto& st = self->state;
        auto tried = [&](const std::pair<request_id, std::uint64_t>& v) {
          return std::find(st.refused.begin(), st.refused.end(), v)
                 != st.refused.end();
        };
        auto again = !victims.empty()
                     && std::all_of(victims.begin(), victims.end(), tried);
        st.refused.clear();
        if (victims.empty() || again) {
          round_done(self, false);
          return;
        }
        auto pending = std::make_shared<std::size_t>(victims.size());
        auto one_done = [self, pending] {
          if (--*pending == 0)
            round_done(self, true);
        };
        for (auto& v : victims)
          self->request(st.manager, caf::infinite, preempt_atom::value,
                        v.first, v.second)
            .then([one_done](std::uint32_t) { one_done(); },
                  [self, one_done, v](caf::error& err) {
                    if (!has_code(err, errc::invalid_request)) // not stale
                      self->state.refused.push_back(v);
                    one_done();
                  });
      },
      [self](caf::error&) { self->state.preempting = false; });
}

/// One GC pass: evict under pressure, sweep orphans through the manager,
/// verify the invariant (if `check`: it holds the pool for a scan of every
/// block and table). `done` receives the figures or the first error.
/// Eviction comes first so that the figures count each block once: the
/// blocks it evicts were cached before the sweep, and the sweep's were
/// held by orphans meanwhile. (Evicting after the sweep could take an
/// orphan's blocks just cached - returned and evicted, counted twice.)
using gc_callback = std::function<void(caf::expected<cache_gc_stats>)>;

void run_gc(sup_ptr self, gc_callback done, bool check) {
  auto& st = self->state;
  auto t0 = std::chrono::steady_clock::now();
  auto rp = std::make_shared<gc_callback>(std::move(done));
  auto fail = [rp](caf::error& err) {
    (*rp)(as_ours("gc", err, errc::shutting_down));
  };
  // The pool reports usage only when it crosses a mark: blocks cached since
  // then are unknown here. Refresh before sizing the eviction.
  self->request(st.pool, caf::infinite, stats_atom::value)
    .then(
      [self, rp, t0, fail, check](const pool_stats& now) {
        auto& st = self->state;
        st.last.used_blocks = now.used_blocks;
        st.last.cached_blocks = now.cached_blocks;
        auto evict = st.eviction_target();
        relieve(self);
        caf::anon_send(st.pool, tick_atom::value); // expired pins
        self->request(st.pool, caf::infinite, evict_atom::value, evict)
          .then(
            [self, rp, t0, fail, check](std::uint32_t evicted) {
              auto& st = self->state;
              self->request(st.manager, caf::infinite, reclaim_atom::value)
                .then(
                  [self, rp, t0, evicted, fail, check](cache_gc_stats swept) {
                    auto finish = [self, rp, t0, swept, evicted](bool) {
                      auto& st = self->state;
                      auto res = swept;
                      res.blocks_reclaimed += evicted;
                      res.memory_freed += evicted * st.bytes_per_block;
                      std::chrono::duration<double, std::milli> dt
                        = std::chrono::steady_clock::now() - t0;
                      res.gc_time_ms = dt.count();
                      (*rp)(res);
                    };
                    if (!check) {
                      finish(true);
                      return;
                    }
                    self->request(self->state.pool, caf::infinite,
                                  check_atom::value)
                      .then(finish, fail);
                  },
                  fail);
            },
            fail);
      },
      fail);
}

supervisor_actor::behavior_type
supervisor_fun(sup_ptr self, cache_config cfg, std::uint32_t num_blocks,
               std::uint64_t bytes_per_block, block_pool_actor pool,
               kv_cache_manager_actor manager) {
  detail::handle_stray_messages(self);
  detail::name_crashes(self, "supervisor");
  auto& st = self->state;
  st.pool = std::move(pool);
  st.manager = std::move(manager);
  st.tracker = std::make_unique<detail::pressure_tracker>(cfg.pressure,
                                                          num_blocks);
  st.medium = cfg.pressure.medium;
  st.evict_at_high = cfg.pressure.evict_cached_at_high;
  st.preempt_at_critical = cfg.pressure.preempt_at_critical;
  st.total_blocks = num_blocks;
  st.last.total_blocks = num_blocks;
  st.bytes_per_block = bytes_per_block;
  st.gc_interval = std::chrono::milliseconds{cfg.gc_interval_ms};
  if (cfg.gc_interval_ms > 0 && cfg.gc_check_interval_ms > 0)
    st.check_every = (cfg.gc_check_interval_ms + cfg.gc_interval_ms - 1)
                     / cfg.gc_interval_ms;
  self->send(st.pool, subscribe_atom::value,
             caf::actor_cast<supervisor_actor>(self));
  self->set_exit_handler([self](const caf::exit_msg& msg) {
    if (!msg.reason)
      return; // a normal exit (of a linked actor): CAF ignores those too
    self->state.owed.fail_all("the supervisor");
    self->quit(msg.reason);
  });
  self->attach_functor([owed = st.shared_owed](const caf::error&) {
    owed->fail_all("the supervisor"); // killed: no exit handler ran
  });
  if (st.gc_interval.count() > 0)
    self->delayed_send(self, st.gc_interval, tick_atom::value);
  // A subscriber that dies is dropped. (Handle actors report their own
  // abnormal deaths: see reclaim_atom.)
  self->set_down_handler([self](const caf::down_msg& dm) {
    auto& subs = self->state.subscribers;
    subs.erase(std::remove(subs.begin(), subs.end(), dm.source), subs.end());
  });
  return {
    [self](usage_atom, const pool_usage& u) {
      auto& st = self->state;
      // Only the pool's: a forged report would broadcast a false pressure
      // level and, at critical, preempt real requests.
      if (caf::actor_cast<caf::actor_addr>(self->current_sender())
          != st.pool.address())
        return;
      st.last = u;
      auto prev = st.tracker->level();
      if (st.tracker->update(u.used_blocks)) {
        pressure_event ev{st.tracker->level(), prev, u.used_blocks,
                          u.total_blocks};
        // Named as the sender (a typed actor cannot send() to an untyped
        // one): the manager takes its level from the supervisor only.
        auto me = caf::actor_cast<caf::strong_actor_ptr>(self);
        auto msg = caf::make_message(pressure_atom::value, ev);
        for (auto& addr : st.subscribers)
          if (auto sub = caf::actor_cast<caf::strong_actor_ptr>(addr))
            sub->enqueue(me, caf::make_message_id(), msg, self->context());
        if (auto n = st.eviction_target())
          caf::anon_send(st.pool, evict_atom::value, n);
      }
      relieve(self);
    },
    [self](reclaim_atom, request_id id, std::uint64_t cache_id) {
      // Killed, crashed or stopped: the manager decides whether the request
      // is still live (reclaim) or already ended (nothing to do).
      self->send(self->state.manager, reclaim_atom::value, id, cache_id);
    },
    [self](gc_atom) -> caf::result<cache_gc_stats> {
      detail::booked_promise<cache_gc_stats> rp{
        self->state.owed, self->make_response_promise<cache_gc_stats>(),
        detail::owed_what{"gc"}};
      run_gc(self,
             [rp](caf::expected<cache_gc_stats> res) mutable {
               if (res)
                 rp.deliver(std::move(*res));
               else
                 rp.deliver(std::move(res.error()));
             },
             true);
      return rp.promise();
    },
    [self](subscribe_atom,
           const caf::actor& sub) -> caf::result<memory_pressure> {
      if (!sub) // CAF's monitor would crash on it
        return make_error(errc::invalid_request,
                          "subscribe: the subscriber is a null actor handle");
      auto& st = self->state;
      auto level = st.tracker->level();
      if (std::find(st.subscribers.begin(), st.subscribers.end(), sub.address())
          == st.subscribers.end()) {
        st.subscribers.push_back(sub.address());
        self->monitor(sub); // a subscriber that dies is dropped
        // Subscribed on its behalf (the manager's topic::pressure), `sub`
        // does not get this reply: above low, it hears the level now
        // (previous == level: no change), before any later change - both
        // from here, so in order - or it would hear nothing until then.
        if (level != memory_pressure::low
            && self->current_sender() != caf::actor_cast<caf::strong_actor_ptr>(sub)) {
          pressure_event ev{level, level, st.last.used_blocks,
                            st.last.total_blocks};
          sub->enqueue(caf::actor_cast<caf::strong_actor_ptr>(self),
                       caf::make_message_id(),
                       caf::make_message(pressure_atom::value, ev),
                       self->context());
        }
      }
      return level;
    },
    [self](unsubscribe_atom, const caf::actor& sub) {
      // Never the manager (its stats' level would freeze): the supervisor
      // answers every gc, so anyone can learn its address and ask.
      if (sub == caf::actor_cast<caf::actor>(self->state.manager))
        return;
      auto& subs = self->state.subscribers;
      auto i = std::find(subs.begin(), subs.end(), sub.address());
      if (i == subs.end())
        return;
      subs.erase(i);
      self->demonitor(sub); // its subscribe's: one per cycle would pile up
    },
    [self](pressure_atom) {
      return self->state.tracker->level();
    },
    [self](tick_atom) {
      auto& st = self->state;
      // Only its own timer's: a stray tick would start a second timer
      // chain (with gc_interval_ms 0, a GC loop that never stops).
      if (caf::actor_cast<caf::actor_addr>(self->current_sender())
          != self->address())
        return;
      // A timer pass answers nobody. It checks the invariant on the first
      // pass and then every gc_check_interval_ms (the check holds the pool
      // for a scan of it all). A broken invariant means the pool's
      // accounting can no longer be trusted - a block may be handed to two
      // requests, mixing their K/V without an error - so the cache stops
      // (fail-stop): the supervisor ends with the violation, and the
      // manager stops the cache with a reason naming it. (CAF's log, the
      // other place to put it, is compiled out in Debian's CAF.) Other
      // failures - the pool or manager going, which stops the cache anyway -
      // change nothing here.
      self->delayed_send(self, st.gc_interval, tick_atom::value);
      if (st.timer_gc_running)
        return;
      st.timer_gc_running = true;
      auto check = st.check_every > 0 && st.passes++ % st.check_every == 0;
      run_gc(
        self,
        [self](caf::expected<cache_gc_stats> res) {
          self->state.timer_gc_running = false;
          if (!res && has_code(res.error(), errc::invariant_violation)) {
            auto why = in_context("periodic GC", res.error());
            // gc() calls waiting here hear the violation too.
            self->state.owed.fail_all("the supervisor", render(why));
            self->quit(why);
          }
        },
        check);
    },
  };
}

} // namespace

supervisor_actor spawn_supervisor(caf::actor_system& sys,
                                  const cache_config& cfg,
                                  std::uint32_t num_blocks,
                                  std::uint64_t bytes_per_block,
                                  block_pool_actor pool,
                                  kv_cache_manager_actor manager) {
  return sys.spawn(supervisor_fun, cfg, num_blocks, bytes_per_block,
                   std::move(pool), std::move(manager));
}

} // namespace kvactor
