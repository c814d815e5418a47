// scheduler: the scheduler actor (its K/V writes and read-backs are in
// scheduler_data.cpp, its cache probe in scheduler_probe.cpp). Each step is
// one chain of messages:
//   [probe the waiting requests' cached prefixes (cached_prefix order)] ->
//   step (frees, extends, admissions) -> [more admissions]* ->
//   [write the computed tokens' K/V, one message per layer] ->
//   [preemption "swap": swap out victims, or else swap in] ->
//   [read one request back, every verify_every steps] -> stats -> next step.
// Between steps, an idle gap (nothing to run or send until the next
// arrival) is skipped without messages (batcher::skip_idle).
// At the end, the final stats and the pool's invariant check. Pressure
// changes arrive as (pressure_atom, pressure_event) from the supervisor,
// preemptions the supervisor makes as (preempt_atom, request_ended) from
// the manager.
#include "scheduler.hpp"

#include <atomic>
#include <chrono>
#include <future>
#include <memory>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>

#include "kvactor/actors/kv_cache_manager.hpp"
#include "kvactor/actors/kv_cache_manager_actor.hpp"
#include "kvactor/messages/error.hpp"
#include "kvactor/messages/interfaces.hpp"
#include "scheduler_actor.hpp"

namespace kvactor::sim {

namespace sched {

using clock_type = std::chrono::steady_clock;

/// Steps with requests waiting and nothing running before the run gives up.
constexpr std::uint64_t stall_limit = 1000;

/// Idle gaps shorter than this are stepped through (batcher::skip_idle):
/// under a millisecond of empty messages, and the time series of a run
/// that is seldom idle for long keeps a row per step.
constexpr std::uint64_t skip_min_gap = 64;

/// Idle steps whose new arrivals one skip may draw: a few milliseconds of
/// work, so an interrupt is seen promptly even while the arrivals of a
/// very long, very quiet run are drawn.
constexpr std::uint64_t skip_draw_steps = 1u << 16;

constexpr std::size_t max_warnings = 40;

void next_step(sched_actor* self);

void warn(sched_actor* self, std::string text) {
  auto& w = self->state.out->warnings;
  if (w.size() < max_warnings)
    w.push_back(std::move(text));
}

/// Hands the figures over and stops.
void deliver(sched_actor* self) {
  auto& st = self->state;
  auto& b = *st.b;
  auto& out = *st.out;
  out.steps = b.step();
  out.idle_steps_skipped = b.skipped_steps();
  out.tenants = b.final_figures();
  out.series = b.series().totals();
  out.samples = b.series().take_rows();
  out.ended_before_free = b.ended_before_free();
  out.preempted_mid_swap = b.preempted_mid_swap();
  out.chunk_extends = b.chunk_extends();
  out.preempted_mid_prefill = b.preempted_mid_prefill();
  out.warnings.insert(out.warnings.begin(), b.warnings().begin(),
                      b.warnings().end());
  out.inconsistencies = b.inconsistencies();
  auto done = st.done;
  st.done = nullptr;
  st.handed_over->store(true);
  self->quit();
  done->set_value(); // last: the caller reads `out` from here on
}

/// The pool checks its accounting invariant, then the figures go.
void check_and_deliver(sched_actor* self) {
  self->request(self->state.pool, reply_timeout, check_atom::value)
    .then(
      [self](bool) {
        self->state.out->invariant_checked = true;
        deliver(self);
      },
      [self](caf::error& err) {
        // Any other error: the pool is gone (a failed run) or did not
        // answer in time - nothing checked, which fails the run too.
        auto& out = *self->state.out;
        if (has_code(err, errc::invariant_violation)) {
          out.invariant_checked = true;
          out.invariant_error = render(err);
        } else {
          out.invariant_unchecked = render(err);
        }
        deliver(self);
      });
}

/// Ends the run (at its end, on interrupt or on `error`): final stats and
/// the invariant check first.
void finish(sched_actor* self, std::string error) {
  auto& st = self->state;
  if (st.finishing)
    return;
  st.finishing = true;
  if (!error.empty())
    st.out->error = std::move(error);
  self->send(st.mgr, unsubscribe_atom::value, topic::pressure,
             caf::actor_cast<caf::actor>(self));
  self->request(st.mgr, reply_timeout, stats_atom::value)
    .then(
      [self](cache_manager_stats& s) {
        self->state.out->final_stats = std::move(s);
        self->state.out->have_final_stats = true;
        check_and_deliver(self);
      },
      [self](caf::error& err) {
        warn(self, "final stats: " + render(err));
        check_and_deliver(self);
      });
}

void stats_step(sched_actor* self) {
  self->request(self->state.mgr, reply_timeout, stats_atom::value)
    .then(
      [self](cache_manager_stats& s) {
        auto& st = self->state;
        auto& b = *st.b;
        b.record(s, st.level);
        progress_state p;
        p.step = b.step() + 1;
        p.steps = st.sc->steps;
        p.running = b.running();
        p.waiting = b.waiting();
        p.used_blocks = s.total_blocks - s.free_blocks;
        p.total_blocks = s.total_blocks;
        p.pressure = to_string(st.level);
        st.bar->update(p);
        b.end_step();
        next_step(self);
      },
      [self](caf::error& err) { finish(self, "stats: " + render(err)); });
}

/// Brings swapped requests back while they fit, one message each.
void swap_in_some(sched_actor* self) {
  auto& st = self->state;
  auto id = st.b->next_swap_in();
  if (!id)
    return verify_step(self);
  self->request(st.mgr, reply_timeout, swap_in_atom::value, *id)
    .then(
      [self, id](block_table& t) {
        self->state.b->swapped_in(*id, t);
        swap_in_some(self);
      },
      [self, id](caf::error& err) {
        auto more = self->state.b->swap_in_failed(*id, err);
        if (!more)
          return finish(self, render(more.error()));
        if (*more)
          return swap_in_some(self);
        verify_step(self);
      });
}

/// Swaps out victims[i...], one message each (the bytes of this step are
/// written by now, so the host tier gets them).
void swap_out_all(sched_actor* self, std::shared_ptr<std::vector<request_id>> victims,
                  std::size_t i) {
  auto& st = self->state;
  if (i == victims->size())
    return verify_step(self);
  auto id = (*victims)[i];
  self->request(st.mgr, reply_timeout, swap_out_atom::value, id)
    .then(
      [self, victims, i, id](std::uint32_t) {
        self->state.b->swapped_out(id);
        swap_out_all(self, victims, i + 1);
      },
      [self, victims, i, id](caf::error& err) {
        if (auto fail = self->state.b->swap_out_failed(id, err))
          return finish(self, render(fail));
        swap_out_all(self, victims, i + 1);
      });
}

/// Preemption "swap": victims of this step's shortage go to the host tier;
/// in a step without one, swapped requests come back.
void swap_step(sched_actor* self) {
  auto& st = self->state;
  if (st.sc->preemption != preemption_mode::swap)
    return verify_step(self);
  auto victims = std::make_shared<std::vector<request_id>>(st.b->swap_victims());
  if (!victims->empty())
    return swap_out_all(self, std::move(victims), 0);
  swap_in_some(self);
}

void send_step(sched_actor* self, step_request req) {
  auto t0 = clock_type::now();
  self->request(self->state.lane, reply_timeout, step_atom::value, std::move(req))
    .then(
      [self, t0](step_result& res) {
        auto& st = self->state;
        auto dt = std::chrono::duration<double, std::micro>(clock_type::now() - t0);
        st.out->step_round_trip_us.push_back(dt.count());
        auto more = st.b->apply(res);
        if (!more)
          return finish(self, render(more.error()));
        if (*more) {
          auto req = st.b->more_admits();
          if (!req.admits.empty())
            return send_step(self, std::move(req));
        }
        write_step(self);
      },
      [self](caf::error& err) { finish(self, "step message: " + render(err)); });
}

/// The progress bar after a skipped idle gap: the clock moved, nothing else.
void report_skip(sched_actor* self) {
  auto& st = self->state;
  auto& last = st.b->series().back();
  progress_state p;
  p.step = st.b->step();
  p.steps = st.sc->steps;
  p.used_blocks = last.used_blocks;
  p.total_blocks = last.total_blocks;
  p.pressure = to_string(last.pressure);
  st.bar->update(p);
}

void next_step(sched_actor* self) {
  auto& st = self->state;
  // Idle gaps are skipped here, no message sent for them; a long one may
  // take many bounded skips, each followed by the checks.
  for (;;) {
    if (st.interrupted->load()) {
      st.out->interrupted = true;
      return finish(self);
    }
    if (st.b->done())
      return finish(self);
    if (st.b->stalled_steps() >= stall_limit)
      return finish(self, "stalled: " + std::to_string(st.b->waiting())
                            + " requests waiting and "
                            + std::to_string(st.b->swapped())
                            + " swapped out, nothing running and none "
                              "admitted or swapped in for "
                            + std::to_string(stall_limit) + " steps");
    if (st.b->skip_idle(skip_min_gap, skip_draw_steps) == 0)
      break;
    report_skip(self);
  }
  st.b->start_step();
  probe_step(self);
}

caf::behavior scheduler_fun(sched_actor* self, const scenario* sc,
                            sim_outcome* out, kv_cache_manager_actor mgr,
                            device_actor dev, block_pool_actor pool,
                            storage_info info,
                            const std::atomic<bool>* interrupted, progress* bar,
                            std::promise<void>* done, std::size_t series_cap) {
  auto& st = self->state;
  st.sc = sc;
  st.out = out;
  st.mgr = std::move(mgr);
  st.dev = std::move(dev);
  st.pool = std::move(pool);
  st.write_data = info.kind != "none";
  auto& model = out->effective.model;
  st.num_layers = model.num_layers;
  st.row_bytes = std::size_t{model.num_kv_heads} * model.head_dim
                 * size_of(model.dtype);
  st.interrupted = interrupted;
  st.bar = bar;
  st.done = done;
  st.handed_over = std::make_shared<std::atomic<bool>>(false);
  // An actor that fails (an exception in a handler, a kill) never reaches
  // deliver: the caller, waiting on `done`, is told and stops waiting.
  self->attach_functor(
    [flag = st.handed_over, out, done](const caf::error& reason) {
      if (flag->exchange(true))
        return;
      out->error = "the scheduler actor stopped: " + render(reason);
      done->set_value();
    });
  st.b = std::make_unique<batcher>(*sc, out->effective, info.device,
                                   st.write_data, series_cap);
  self->send(st.mgr, subscribe_atom::value, topic::pressure,
             caf::actor_cast<caf::actor>(self));
  self->request(st.mgr, reply_timeout, step_atom::value)
    .then(
      [self](step_actor& lane) {
        self->state.lane = std::move(lane);
        next_step(self);
      },
      [self](caf::error& err) { finish(self, "step lane: " + render(err)); });
  return {
    [self](pressure_atom, const pressure_event& ev) {
      self->state.level = ev.level;
      ++self->state.out->pressure_entered[static_cast<int>(ev.level) & 3];
    },
    [self](preempt_atom, const request_ended& ev) {
      self->state.b->preempted_elsewhere(ev.id, ev.cache_id);
    },
  };
}

} // namespace sched

sim_outcome simulate(const scenario& s, const std::atomic<bool>& interrupted,
                     progress& bar, std::size_t series_cap) {
  sim_outcome out;
  out.effective = s.cache;
  out.verify_every = s.verify_every;
  auto t0 = sched::clock_type::now();
  {
    // Everything lives in this scope: the system's destructor waits for
    // every actor before `out` is handed back.
    caf::actor_system_config sys_cfg;
    configure(sys_cfg, s.cache);
    caf::actor_system sys{sys_cfg};
    auto cache = spawn_kv_cache(sys, s.cache);
    if (!cache) {
      // A config only the device found wrong (storage auto without a block
      // count, say) is the scenario's: bad input, named by its file.
      if (cache.error() == errc::invalid_config) {
        out.bad_scenario = true;
        out.error = message_of(cache_start_error(s, cache.error()));
      } else {
        out.error = "cannot start the cache: " + render(cache.error());
      }
      return out;
    }
    out.started = true;
    storage_info info;
    caf::error err;
    {
      caf::scoped_actor blocking{sys};
      blocking->request(cache->device, sched::reply_timeout, info_atom::value)
        .receive([&](storage_info& i) { info = std::move(i); },
                 [&](caf::error& e) { err = std::move(e); });
    }
    if (!err) {
      out.storage = info.kind;
      out.device = to_string(info.device);
      out.bytes_per_block = info.bytes_per_block;
      out.effective.num_gpu_blocks = info.num_blocks;
      err = check_fits(s, info.num_blocks); // the pool's real size is known now
      if (err) {
        out.bad_scenario = true;
        out.error = message_of(err);
      }
    }
    if (!err) {
      std::promise<void> done;
      auto finished = done.get_future();
      // Held to the end: an actor nobody references ends (`unreachable`)
      // whenever its mailbox runs empty with no request of its own open.
      auto driver = sys.spawn(sched::scheduler_fun, &s, &out, cache->manager,
                              cache->device, cache->pool, info, &interrupted,
                              &bar, &done, series_cap);
      finished.wait();
    } else if (!out.bad_scenario) {
      out.error = "cannot ask the device actor what it serves: " + render(err);
    }
    caf::anon_send_exit(cache->manager, caf::exit_reason::user_shutdown);
  }
  out.wall_s = std::chrono::duration<double>(sched::clock_type::now() - t0).count();
  return out;
}

} // namespace kvactor::sim
