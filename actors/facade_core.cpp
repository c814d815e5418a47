// facade_core: its lifecycle (watching the cache, stopping it when the last
// copy goes), the KV-event writers and the pressure-callback relay; the
// slots it tracks per handle are in facade_slots.cpp.
#include "kvactor/actors/facade_core.hpp"

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <caf/system_messages.hpp>

#include <vector>

#include "kvactor/messages/error_context.hpp"
#include "kvactor/metrics/kv_event_file.hpp"

namespace kvactor::detail {

namespace {

/// What a facade call gets once the last copy of the facade went.
constexpr const char* facade_stopped = "the facade stopped: its last copy went";

} // namespace

facade_core::facade_core(caf::actor_system& sys, cache_config cfg,
                         cache_system cache)
  : sys_(sys), cfg_(std::move(cfg)), cache_(std::move(cache)), bridge_(sys) {
  // A request's end, however it came (deallocate, preemption, reclaim, an
  // actor client's step), reaches the bridge as a lifecycle event, on the
  // manager's thread before the manager handles anything else: no later
  // incarnation of the id can have a slot yet, and the slot turns invalid
  // before the handle actor has even seen its end message. (An actor
  // client's step ends requests in the pool, which replies to it before
  // the manager takes in the step's effects: until then a slot of a
  // request that step ended still reads as valid here.) Calls still waiting
  // on the request's handle actor fail there and then: the handle may have
  // gone without answering (killed: CAF 0.17 answers no dropped promise),
  // and its end is this event - the supervisor reclaims a handle that went
  // - so no monitor per handle actor is needed (one cost allocate 0.7 us).
  // A call sent just after the event (it read the slot valid first) is
  // answered by the handle all the same: ended normally or killed, it
  // answers what it took in (shutting_down for what it had passed on to
  // the pool), and CAF bounces the rest (shutdown_test:
  // every_call_to_a_killed_handle_is_answered).
  bridge_.on_notification([this](caf::message& msg) {
    if (msg.match_elements<ended_atom, request_ended>()) {
      if (auto handle = invalidate_request(msg.get_as<request_ended>(1)))
        bridge_.fail_calls_to(handle);
    } else if (msg.match_elements<caf::down_msg>()) {
      auto& dm = msg.get_as<caf::down_msg>(0);
      if (dm.source == cache_.manager.address()) {
        // The manager went, and the cache with it: no reply is coming, nor
        // an end event - a slot made from a reply already delivered (a
        // lookup, an allocate) must be born invalid too.
        // Its reason, when it names one (a part of the cache that ended),
        // is what the callers are told.
        auto why = has_code(dm.reason, errc::shutting_down)
                     ? dm.reason
                     : make_error(errc::shutting_down,
                                  "the cache stopped: its manager is gone"
                                    + (dm.reason ? " (" + render(dm.reason) + ")"
                                                 : std::string{}));
        {
          std::lock_guard<std::mutex> guard{mtx_};
          stop_reason_ = why;
        }
        stop_known_.notify_all();
        invalidate_all(true);
        bridge_.fail_all(why);
      }
      // The pool or the device went: the bridge failed calls to it.
    }
  });
  bridge_.watch(caf::actor_cast<caf::actor_addr>(cache_.manager));
  // Facade calls go to these two directly (steps, contiguous gathers).
  bridge_.watch(caf::actor_cast<caf::actor_addr>(cache_.pool));
  bridge_.watch(caf::actor_cast<caf::actor_addr>(cache_.device));
  bridge_.send(caf::actor_cast<caf::strong_actor_ptr>(cache_.manager),
               caf::make_message(subscribe_atom::value, topic::lifecycle,
                                 bridge_.self()));
  callback_ = std::make_shared<callback_state>();
}

facade_core::~facade_core() {
  // First, so that no notification touches the members as they go.
  bridge_.on_notification(nullptr);
  stop();
}

void facade_core::stop() {
  caf::actor relay;
  std::vector<caf::actor> writers;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (stopped_)
      return;
    stopped_ = true;
    relay = relay_;
    for (auto& w : writers_)
      writers.push_back(w.actor);
  }
  stop_known_.notify_all(); // no reason is coming now
  caf::anon_send_exit(cache_.manager, caf::exit_reason::user_shutdown);
  if (relay)
    caf::anon_send_exit(relay, caf::exit_reason::user_shutdown);
  for (auto& w : writers)
    caf::anon_send_exit(w, caf::exit_reason::user_shutdown);
  invalidate_all();
  // Calls still waiting fail now, later ones at once: a running pressure
  // callback's facade call among them, which would otherwise wait for the
  // manager - and on one of the cache's scheduler threads, with one
  // worker, for this very thread (the manager's exit queued behind it).
  bridge_.fail_all(make_error(errc::shutting_down, facade_stopped), true);
  // No pressure callback starts from now on; one running finishes first
  // (unless it is the one stopping the facade), so what it references -
  // the facade, say - stays good while it runs. Pressure events still
  // queued at the relay are dropped.
  auto& cb = *callback_;
  decltype(cb.f) old; // destroyed after the lock: see set_pressure_callback
  std::unique_lock<std::mutex> lock{cb.mtx};
  cb.stopped = true;
  old = std::move(cb.f);
  cb.idle.wait(lock, [&] {
    return cb.running == 0 || cb.caller == std::this_thread::get_id();
  });
  lock.unlock();
}

caf::error facade_core::system_thread_error() {
  // With one worker the wait would never end; with more, as many such
  // calls at once would take every worker.
  return make_error(errc::invalid_request,
                    "a blocking kv_cache_manager or kv_cache_handle call on "
                    "a thread of the cache's actor system (an actor's "
                    "handler) would wait for actors that need that thread: "
                    "send the typed message to actor() (or the handle's "
                    "actor()) instead, or call from a detached actor or "
                    "another thread");
}

caf::error facade_core::stop_error() {
  std::unique_lock<std::mutex> lock{mtx_};
  // A call bounced by the manager's closed mailbox comes back before its
  // down message (CAF closes the mailbox, then tells the monitors), which
  // brings the reason: wait for it - it is on its way - unless the facade
  // itself stopped (then nothing comes).
  stop_known_.wait_for(lock, std::chrono::seconds{1}, [&] {
    return static_cast<bool>(stop_reason_) || stopped_;
  });
  if (stop_reason_)
    return stop_reason_;
  return make_error(errc::shutting_down,
                    stopped_ ? std::string{facade_stopped}
                             : std::string{"the cache manager has stopped"});
}

caf::error facade_core::write_kv_events(const std::string& path) {
  // What would fail the confirmation below fails first, before a file is
  // opened or a writer subscribed: a failed call changes nothing (and a
  // retry would find the file known and make no writer).
  if (on_system_thread(sys_))
    return in_context("write_kv_events", system_thread_error());
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (stopped_ || manager_gone_)
      return make_error(errc::shutting_down,
                        "write_kv_events: the cache stopped");
  }
  auto opened = kv_event_file::open(path);
  if (!opened)
    return in_context("write_kv_events", opened.error());
  std::shared_ptr<kv_event_file> file = std::move(*opened);
  // One writer per file, however it is named: a second would write every
  // event again. Checked and recorded under one lock, so two calls racing
  // for one file make one writer.
  std::unique_lock<std::mutex> lock{mtx_};
  bool known = false;
  for (auto& w : writers_)
    known = known
            || (w.file->device() == file->device()
                && w.file->inode() == file->inode());
  if (!known) {
    // A detached actor: file I/O never blocks the scheduler's workers. The
    // manager comes as a spawn argument (as does the relay's below): with
    // none, CAF 0.17 dereferences a null tuple pointer (UBSan). A batch
    // the file system refuses is counted lost (kv_event_files()), and the
    // next is tried again.
    auto writer = sys_.spawn<caf::detached>(
      [file](caf::event_based_actor* self,
             const kv_cache_manager_actor& manager) -> caf::behavior {
        self->monitor(manager);
        self->set_down_handler([self](const caf::down_msg&) { self->quit(); });
        return {
          [file](kv_event_atom, const kv_event_batch& batch) {
            file->write(batch);
          },
        };
      },
      cache_.manager);
    caf::anon_send(cache_.manager, subscribe_atom::value, topic::kv_events,
                   writer);
    writers_.push_back({std::move(file), writer});
  }
  lock.unlock();
  // "From now on": the manager passes the subscription on to the pool, and
  // a step goes to the pool directly - it could overtake it. The manager's
  // stats ask the pool after it passed the subscription on: once they are
  // back, the pool records every later change.
  // (A timeout stays one: the cache may well be running.)
  if (auto err = ask_done<cache_manager_stats>(cache_.manager, stats_atom::value))
    return in_context("write_kv_events: the cache did not confirm the "
                      "subscription",
                      err,
                      err == caf::sec::request_timeout
                        ? std::nullopt
                        : std::optional<errc>{errc::shutting_down});
  return caf::none;
}

std::vector<kv_event_file_stats> facade_core::kv_event_files() {
  std::lock_guard<std::mutex> guard{mtx_};
  std::vector<kv_event_file_stats> out;
  out.reserve(writers_.size());
  for (auto& w : writers_)
    out.push_back(w.file->stats());
  return out;
}

void facade_core::call_callback(callback_state& cb, memory_pressure level,
                                bool change) {
  std::shared_ptr<const std::function<void(memory_pressure)>> f;
  {
    std::lock_guard<std::mutex> guard{cb.mtx};
    if (change)
      cb.level = level;
    else if (cb.heard_generation == cb.generation
             || cb.level == memory_pressure::low)
      return;
    else
      level = cb.level;
    if (cb.stopped || !cb.f)
      return;
    f = cb.f;
    cb.running_generation = cb.generation;
    cb.heard_generation = cb.generation;
    ++cb.running;
    cb.caller = std::this_thread::get_id();
  }
  struct call_done { // also if the callback throws
    callback_state& cb;
    std::shared_ptr<const std::function<void(memory_pressure)>>& f;
    ~call_done() {
      // A replaced callback's last reference: its captures go before the
      // setter that replaced it may return.
      f.reset();
      std::lock_guard<std::mutex> guard{cb.mtx};
      --cb.running;
      cb.caller = {};
      cb.idle.notify_all();
    }
  } done{cb, f};
  // Not out of the relay's handler: CAF would stop the relay, and no later
  // level would reach any callback.
  try {
    (*f)(level);
  } catch (...) {
  }
}

void facade_core::set_pressure_callback(std::function<void(memory_pressure)> f) {
  bool has_callback = static_cast<bool>(f);
  // On the cache's scheduler threads the setter does not wait for a
  // running call of the old callback: a callback making a facade call
  // needs those threads, and with one worker waiting here would hold the
  // cache until that call timed out.
  const bool may_wait = !on_system_thread(sys_);
  // The old callback goes when this returns, no lock held: what it
  // captured may call the facade from its destructor.
  decltype(callback_->f) old;
  {
    auto& cb = *callback_;
    std::unique_lock<std::mutex> lock{cb.mtx};
    if (cb.stopped)
      return;
    old = std::move(cb.f);
    cb.f = f ? std::make_shared<const std::function<void(memory_pressure)>>(
                 std::move(f))
             : nullptr;
    auto mine = ++cb.generation;
    // The relay may have taken an old one just before: wait for that call
    // (its owner may free what it captured once this returns), unless it
    // is the call replacing itself - and not for calls of this callback or
    // a newer one: under a stream of level changes the relay goes from one
    // call to the next before a woken setter runs, and a setter waiting for
    // "no call at all" waited for every one of them.
    cb.idle.wait(lock, [&] {
      return cb.running == 0 || cb.running_generation >= mine
             || cb.caller == std::this_thread::get_id() || !may_wait;
    });
  }
  std::lock_guard<std::mutex> guard{mtx_};
  if (stopped_)
    return;
  if (relay_) {
    // A new callback hears the level the cache is at first (the relay
    // knows it), as the first one does from its subscription.
    if (has_callback)
      caf::anon_send(relay_, pressure_atom::value);
    return;
  }
  // One detached actor calls the callback, so a slow callback delays only
  // later callbacks, never the cache; one subscriber keeps them in order.
  relay_ = sys_.spawn<caf::detached>(
    [cb = callback_](caf::event_based_actor* self,
                     const kv_cache_manager_actor& manager) -> caf::behavior {
      self->monitor(manager);
      self->set_down_handler([self](const caf::down_msg&) { self->quit(); });
      return {
        [cb](pressure_atom, const pressure_event& ev) {
          call_callback(*cb, ev.level, true);
        },
        // A callback was set: it hears the last level this relay heard,
        // unless that is low or a change reached it first.
        [cb](pressure_atom) {
          call_callback(*cb, memory_pressure::low, false);
        },
      };
    },
    cache_.manager);
  caf::anon_send(cache_.manager, subscribe_atom::value, topic::pressure, relay_);
}

} // namespace kvactor::detail
