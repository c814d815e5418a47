// facade_core: what the kv_cache_manager facade and its handles share - the
// started cache, the blocking bridge and the per-request slots. Internal.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>
#include <tuple>
#include <unordered_map>
#include <utility>

#include <caf/actor_cast.hpp>
#include <caf/make_message.hpp>

#include "kvactor/actors/blocking_bridge.hpp"
#include "kvactor/actors/id_map.hpp"
#include "kvactor/actors/kv_cache_handle.hpp"
#include "kvactor/actors/kv_cache_manager_actor.hpp"
#include "kvactor/actors/recent_ids.hpp"
#include "kvactor/actors/system_threads.hpp"
#include "kvactor/config/cache_config.hpp"
#include "kvactor/messages/error.hpp"
#include "kvactor/messages/step.hpp"
#include "kvactor/metrics/kv_event_file.hpp"

namespace kvactor::detail {

class facade_core : public std::enable_shared_from_this<facade_core> {
public:
  facade_core(caf::actor_system& sys, cache_config cfg, cache_system cache);

  /// Stops the manager (and with it every actor of the cache).
  ~facade_core();

  /// Stops the cache now: the manager (and with it every actor of the
  /// cache), the relay and the writers; every slot turns invalid.
  /// Idempotent. Called when the last facade copy goes, even while handles
  /// on other threads still hold the core for a call in flight.
  void stop();

  /// Request/response from a plain thread; the reply must be `Rs...`.
  template <class... Rs, class Handle, class... Ts>
  caf::expected<std::tuple<Rs...>> ask(const Handle& dest, Ts&&... xs) {
    return ask_undoable<Rs...>(nullptr, dest, std::forward<Ts>(xs)...);
  }

  /// ask, for a request that makes something (an allocation, a fork): if
  /// its reply comes only after the caller timed out, `undo` gets it, on
  /// the replier's thread, to end what nobody will use.
  template <class... Rs, class Handle, class... Ts>
  caf::expected<std::tuple<Rs...>>
  ask_undoable(blocking_bridge::late_reply_handler undo, const Handle& dest,
               Ts&&... xs) {
    auto res = call(std::move(undo), nullptr, dest, std::forward<Ts>(xs)...);
    if (!res)
      return std::move(res.error());
    if (!res->template match_elements<Rs...>())
      return unexpected(*res);
    return unpack<Rs...>(*res, std::index_sequence_for<Rs...>{});
  }

  /// ask_undoable for a reply `R, Rest...` of which the caller keeps only
  /// `R`: the rest (a block table) is dropped on the replier's thread.
  template <class R, class... Rest, class Handle, class... Ts>
  caf::expected<R> ask_first(blocking_bridge::late_reply_handler undo,
                             const Handle& dest, Ts&&... xs) {
    auto res = call(std::move(undo), keep_first<R, Rest...>, dest,
                    std::forward<Ts>(xs)...);
    if (!res)
      return std::move(res.error());
    if (!res->template match_elements<R>())
      return unexpected(*res);
    return std::move(res->template get_mutable_as<R>(0));
  }

  /// ask for a reply `Rs...` the caller does not keep, only its arrival
  /// (an extend's block table): dropped on the replier's thread.
  template <class... Rs, class Handle, class... Ts>
  caf::error ask_done(const Handle& dest, Ts&&... xs) {
    auto res = call(nullptr, drop<Rs...>, dest, std::forward<Ts>(xs)...);
    if (!res)
      return std::move(res.error());
    // An untrimmed reply is not `Rs...` (the destinations' typed
    // interfaces never answer these requests with nothing).
    return res->empty() ? caf::none : unexpected(*res);
  }

  /// The slot of the request whose handle actor is `h` (made on first
  /// sight; one per handle actor, shared by every reference).
  std::shared_ptr<request_slot> slot_for(const request_handle_actor& h,
                                         const request_info& info);

  /// How many ends of handle actors the facade has taken in so far. A
  /// caller that makes slots from a reply notes it before asking.
  std::uint64_t ends_taken() const noexcept {
    return ends_taken_.load();
  }

  /// Whether more ends came in since ends_taken() was `since` than the
  /// facade remembers (recent_ends_cap): then a slot made from a reply
  /// asked for at `since` may have missed its own end, forgotten before
  /// the slot was made - and would read valid for ever. Rare: more than
  /// 4096 ends between a reply and its slots (a list of thousands racing a
  /// step that frees as many).
  bool may_have_forgotten(std::uint64_t since) const noexcept {
    return ends_taken() - since > recent_ends_cap;
  }

  /// Asks the manager for its live requests and marks each of `slots`
  /// whose handle actor is not among them ended. A slot still live then was
  /// tracked before the list was made: its end, whenever it comes, finds
  /// it. For slots may_have_forgotten. If the list fails (a timeout, the
  /// cache stopping), nothing is marked and the error says so: the caller
  /// hands out no handle it could not confirm (one marked ended while its
  /// request lived would hold its blocks with every call refused).
  caf::error confirm_slots(const std::vector<std::shared_ptr<request_slot>>& slots);

  /// Lets go of `slots`, made for a lookup whose confirmation failed (no
  /// handle went out), and untracks each that no handle references now:
  /// had its end been forgotten, nothing else would ever untrack it. Not
  /// marked ended - the request may live; a later lookup tracks it again.
  /// (Pass a vector built by push_back: a braced list's copies outlive the
  /// call.)
  void drop_unconfirmed(std::vector<std::shared_ptr<request_slot>>&& slots);

  /// A handle of the configured layout for `slot`.
  std::shared_ptr<kv_cache_handle> make_handle(std::shared_ptr<request_slot> slot);

  /// The incarnation (the pool's cache id) of `slot`'s request, for calls
  /// the facade sends the pool itself: extends, appends and table reads
  /// (which the handle actors relay for actor clients: straight to the
  /// pool, a hop less), drafts and a contiguous view's gather (which they
  /// do not relay, so each live request's behavior stays small): the
  /// slot's info has it, from the reply that made the slot (allocate's,
  /// a lookup's, a list's). Error: invalid_handle once the handle actor is
  /// going (is_going: killed or crashed, its request's reclaim on its way)
  /// or gone.
  caf::expected<std::uint64_t> incarnation(request_slot& slot);

  /// Ends the request of handle actor `handle` as unclaimed - an allocate
  /// or fork whose handle never went out (answered after its caller gave
  /// up, or unconfirmed): tells the handle actor, which has the manager
  /// reclaim it (a pool round trip after two hops; the registry holds the
  /// request until then), and marks it ended here first, so that no lookup
  /// meanwhile hands out a handle that reads valid.
  void unclaim(const request_handle_actor& handle);

  /// The late-reply handler of an allocate or fork: unclaims the request
  /// its reply made. It runs on the replier's thread, inside the reply's
  /// delivery - before the replier handles anything else, so before any
  /// lookup that could find the request - and never touches the core
  /// (which may be going): only the unclaimed set, shared with it.
  blocking_bridge::late_reply_handler unclaim_late() const;

  /// The late-reply handler of a step: ends its admissions again, each by
  /// its incarnation, as unclaimed (nobody writes their K/V), sent as the
  /// bridge (their owner) to `manager`, so that a timed-out step admits
  /// nothing and caches nothing. And, as unclaim_late, a slot made for one
  /// of them from now on is born invalid: the facade knows no handle actor
  /// of a step's admission, so by incarnation (the pool's cache id). A
  /// lookup answered before the reply came found a request that was live
  /// then; its handle turns invalid when the reclaim lands, as for any
  /// request ended by other hands.
  blocking_bridge::late_reply_handler unclaim_step_late() const;

  /// Ends the request of handle actor `made`, whose handle never went out
  /// (a fork whose child lookup failed), before it returns: no lookup hands
  /// it out from now on, and its incarnation is freed. None once the
  /// request ended (by this free, or before it); an error (a timeout, say)
  /// if that is not known - then the handle actor ends it as unclaimed
  /// when it gets to it.
  caf::error free_unreceived(const request_handle_actor& made);

  /// Marks the request of handle actor `handle_id` ended. With `ended`
  /// (its ended event, not its actor's down), a slot made for it later -
  /// by a lookup or an allocate whose reply was already on its way - starts
  /// invalid.
  void invalidate(std::uint64_t handle_id, bool ended = false);

  /// Marks the request of an ended event ended: by its handle actor where
  /// the event names it; otherwise the slot request `ev.id` maps to, if
  /// that is incarnation `ev.cache_id` or an older one. Returns the handle
  /// actor's id (0 if none was found).
  std::uint64_t invalidate_request(const request_ended& ev);

  /// The handle actors (by id) of the slots that the requests a step may
  /// end - its frees and extends - map to now.
  std::unordered_map<request_id, std::uint64_t>
  handles_of(const step_request& step);

  /// Marks every slot ended and untracks it (shutdown); with
  /// `manager_gone`, every slot made from now on is born ended too.
  void invalidate_all(bool manager_gone = false);

  /// What the facade tracks now (for tests and diagnostics): handle actors
  /// with a slot, request ids mapped to one, ended handle actors remembered.
  struct tracking {
    std::size_t slots = 0;
    std::size_t requests = 0;
    std::size_t recent_ends = 0;
  };
  tracking tracked();

  /// Spawns a writer of KV events to `path` (JSON lines), subscribed.
  caf::error write_kv_events(const std::string& path);

  /// What each KV-event file took and lost, in the order they were named.
  std::vector<kv_event_file_stats> kv_event_files();

  /// The pressure callback; replaces the previous one. Once this returns,
  /// the previous one is not running and is not called again (unless this
  /// is called from inside it: then it finishes its call).
  void set_pressure_callback(std::function<void(memory_pressure)> f);

  const cache_config& config() const noexcept {
    return cfg_;
  }
  const cache_system& cache() const noexcept {
    return cache_;
  }
  std::chrono::milliseconds timeout() const noexcept {
    return std::chrono::milliseconds{timeout_ms_.load(std::memory_order_relaxed)};
  }
  void timeout(std::chrono::milliseconds t) noexcept {
    timeout_ms_.store(t.count(), std::memory_order_relaxed);
  }

  /// The actor the facade's calls come from: the stepper of its steps,
  /// so the owner of what they admit.
  caf::actor sender() const {
    return bridge_.self();
  }

private:
  /// The bridge call under the facade's timeout; a call to the manager or
  /// the pool that finds it gone fails with shutting_down, one made on a
  /// thread of the cache's actor system with invalid_request (nothing
  /// sent: see on_system_thread).
  template <class Handle, class... Ts>
  caf::expected<caf::message> call(blocking_bridge::late_reply_handler undo,
                                   blocking_bridge::reply_trim trim,
                                   const Handle& dest, Ts&&... xs) {
    if (on_system_thread(sys_))
      return system_thread_error();
    auto to = caf::actor_cast<caf::strong_actor_ptr>(dest);
    auto res = bridge_.call(to, caf::make_message(std::forward<Ts>(xs)...),
                            timeout(), std::move(undo), trim);
    if (!res) {
      // The manager or the pool (steps) gone, or the facade stopped:
      // kvactor's own code, as calls waiting at that moment get (a
      // handle's callers map it to invalid_handle themselves). Compared
      // here, off the path of calls that succeed.
      auto addr = to ? to->address() : caf::actor_addr{};
      bool to_cache = addr == cache_.manager.address()
                      || addr == cache_.pool.address();
      if (to_cache && res.error() == caf::sec::request_receiver_down)
        return stop_error();
    }
    return res;
  }

  /// shutting_down, with the reason the manager stopped with when it
  /// named one (a part of the cache that ended).
  caf::error stop_error();

  /// invalid_request: a blocking call on one of the system's own threads.
  static caf::error system_thread_error();

  static caf::error unexpected(const caf::message& reply) {
    return make_error(errc::invalid_request,
                      "unexpected reply: " + to_string(reply));
  }

  /// Reply trims (run on the replier's thread; a reply that is not
  /// `R, Rest...` - an error - passes whole).
  template <class R, class... Rest>
  static void keep_first(caf::message& reply) {
    if (reply.match_elements<R, Rest...>())
      reply = caf::make_message(std::move(reply.get_mutable_as<R>(0)));
  }
  template <class... Rs>
  static void drop(caf::message& reply) {
    if (reply.match_elements<Rs...>())
      reply = caf::message{};
  }

  template <class... Rs, size_t... Is>
  static std::tuple<Rs...> unpack(caf::message& msg, std::index_sequence<Is...>) {
    return std::tuple<Rs...>{std::move(msg.get_mutable_as<Rs>(Is))...};
  }

  caf::actor_system& sys_;
  cache_config cfg_;
  cache_system cache_;
  blocking_bridge bridge_;
  std::atomic<std::chrono::milliseconds::rep> timeout_ms_{60000};
  /// A handle actor the facade made a slot for (tracked until its request
  /// ends, even while no handle references the slot).
  struct slot_entry {
    std::weak_ptr<request_slot> slot;
    request_id request = 0;
  };
  /// How many ended handle actors are remembered (a slot made after its
  /// end is one reply late; the list only has to outlast replies in
  /// flight).
  static constexpr std::size_t recent_ends_cap = 4096;
  using slot_map = id_map<slot_entry>;
  /// Forgets the slot at `i` and its request's mapping to it (under mtx_).
  void untrack(slot_map::iterator i);
  /// Requests ended as unclaimed (see unclaim, unclaim_step_late): a slot
  /// made for one is born invalid. By handle actor (an allocate's, a
  /// fork's) or by incarnation (a step's admissions). Shared with the
  /// late-reply handlers, which may outlive the core; its own lock, taken
  /// after mtx_ where both are. The last recent_ends_cap of each are
  /// remembered (CAF never reuses an actor id, the pool never a cache id):
  /// they only have to outlast a reclaim, whose end event then puts each
  /// handle actor in recent_ends_.
  struct unclaimed_set {
    std::mutex mtx;
    recent_ids ids{recent_ends_cap};
    recent_ids incarnations{recent_ends_cap};
    void insert(std::uint64_t handle_id) {
      std::lock_guard<std::mutex> guard{mtx};
      ids.insert(handle_id);
    }
    void insert_incarnation(std::uint64_t cache_id) {
      std::lock_guard<std::mutex> guard{mtx};
      incarnations.insert(cache_id);
    }
    /// Whether the request of handle actor `handle_id`, incarnation
    /// `cache_id` (0: not known), was ended as unclaimed.
    bool contains(std::uint64_t handle_id, std::uint64_t cache_id) {
      std::lock_guard<std::mutex> guard{mtx};
      return ids.contains(handle_id)
             || (cache_id != 0 && incarnations.contains(cache_id));
    }
  };
  std::shared_ptr<unclaimed_set> unclaimed_ = std::make_shared<unclaimed_set>();
  std::mutex mtx_;
  slot_map slots_;                   ///< by handle id
  id_map<std::uint64_t> by_request_; ///< request id -> handle id
  recent_ids recent_ends_{recent_ends_cap}; ///< handle ids
  /// Ends put into recent_ends_, ever (changed under mtx_; read without:
  /// allocate's hot path reads it).
  std::atomic<std::uint64_t> ends_taken_{0};
  bool stopped_ = false; ///< guarded by mtx_
  /// The manager went (its down message came): no end event will come for
  /// any request, so a slot made from now on is born invalid. Not stopped_,
  /// which would skip stop()'s wait for a running pressure callback.
  bool manager_gone_ = false; ///< guarded by mtx_
  /// Why the manager went, once it did (shutting_down). Guarded by mtx_.
  caf::error stop_reason_;
  std::condition_variable stop_known_; ///< stop_reason_ set
  caf::actor relay_; ///< calls the pressure callback (detached)
  /// KV event files, one writer each (detached), known by device and
  /// inode. Guarded by mtx_.
  struct event_writer {
    std::shared_ptr<kv_event_file> file;
    caf::actor actor;
  };
  std::vector<event_writer> writers_;
  /// The pressure callback, shared with the relay that calls it. The relay
  /// calls a snapshot without holding `mtx` (so the callback may replace
  /// itself); stop() fails the bridge's calls, clears it and waits for a
  /// call in progress, unless that call is the one stopping the facade.
  struct callback_state {
    std::mutex mtx;
    std::condition_variable idle;
    std::shared_ptr<const std::function<void(memory_pressure)>> f;
    bool stopped = false;
    std::size_t running = 0;
    std::thread::id caller; ///< of the call in progress
    /// Bumped by each set; the call in progress runs the callback of
    /// `running_generation` (a setter waits for older ones only).
    std::uint64_t generation = 0;
    std::uint64_t running_generation = 0;
    /// The generation of the callback called last: a callback set since
    /// has heard no level yet.
    std::uint64_t heard_generation = 0;
    /// The last level the relay heard.
    memory_pressure level = memory_pressure::low;
  };
  std::shared_ptr<callback_state> callback_;

  /// On the relay, so calls are in order: calls the callback set now with
  /// `level`, a change (`change`: the relay learns the level), or - for a
  /// callback just set - with the last level heard, if that is above low
  /// and the callback has heard none yet.
  static void call_callback(callback_state& cb, memory_pressure level,
                            bool change);
};

} // namespace kvactor::detail
