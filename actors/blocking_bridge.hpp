// blocking_bridge: request/response between a plain thread and actors,
// without a scoped_actor per call. Replies are delivered by the replying
// actor's thread straight into the waiting caller's slot (through a CAF
// actor_companion); the caller spins briefly, then sleeps on a condition
// variable. Asynchronous messages to the bridge go to a notification handler.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>

#include <caf/actor.hpp>
#include <caf/actor_control_block.hpp>
#include <caf/expected.hpp>
#include <caf/message.hpp>

#include "kvactor/actors/id_map.hpp"

namespace caf {
class actor_system;
} // namespace caf

namespace kvactor::detail {

class blocking_bridge {
public:
  using notification_handler = std::function<void(caf::message&)>;

  /// Called with the reply of a call that had timed out, on the replying
  /// actor's thread (keep it short; it may send, but not call).
  using late_reply_handler = std::function<void(caf::message&)>;

  /// Called with a reply on the replying actor's thread, before the caller
  /// sees it, to cut it down to what the caller keeps: what the replier
  /// allocated for the rest (a block table) is then freed on the thread
  /// that allocated it, where malloc takes it back from its thread cache
  /// instead of under an arena lock (glibc's cross-thread free).
  using reply_trim = void (*)(caf::message&);

  explicit blocking_bridge(caf::actor_system& sys);

  /// Stops the companion; calls still waiting fail with request_receiver_down.
  ~blocking_bridge();

  blocking_bridge(const blocking_bridge&) = delete;
  blocking_bridge& operator=(const blocking_bridge&) = delete;

  /// Sends `msg` to `dest` as a request and waits for the reply (or an
  /// error message, or `timeout`: caf::sec::request_timeout; a timeout of
  /// milliseconds::max() waits for good).
  /// Thread-safe: any number of threads may call concurrently.
  /// With `on_late`, a reply that comes after the timeout goes to it (to
  /// undo what the request did: an allocation nobody will use). With
  /// `trim`, the reply the caller gets is the trimmed one (a late reply
  /// reaches on_late whole).
  caf::expected<caf::message> call(const caf::strong_actor_ptr& dest,
                                   caf::message msg,
                                   std::chrono::milliseconds timeout,
                                   late_reply_handler on_late = nullptr,
                                   reply_trim trim = nullptr);

  /// Ends every call now waiting with `err` (their late replies are
  /// dropped); with `close`, later calls fail at once with
  /// request_receiver_down.
  void fail_all(caf::error err, bool close = false);

  /// Sends `msg` to `dest` without waiting; the bridge is the sender.
  void send(const caf::strong_actor_ptr& dest, caf::message msg);

  /// Called (on an actor thread, one call at a time: keep it short, and
  /// never send to the bridge from it) for every message to the bridge that
  /// is not a reply. Once on_notification(nullptr) returned, the previous
  /// handler is neither running nor called again.
  void on_notification(notification_handler f);

  /// Monitors `whom`: its down_msg arrives as a notification (at once if it
  /// is already gone - so never call this while holding a lock the
  /// notification handler takes). Before the notification, calls still
  /// waiting on `whom` fail with request_receiver_down: an actor that went
  /// without answering (killed, or an exception in a handler) drops its
  /// promises, and CAF 0.17 answers none of them.
  void watch(const caf::actor_addr& whom);

  /// Ends the calls waiting on the actor with id `dest` with
  /// request_receiver_down (their late replies are dropped). Thread-safe.
  /// Cheap when none waits - the usual case, at every request's end: no
  /// error is made (a caf::error with a code takes a heap allocation).
  void fail_calls_to(std::uint64_t dest);

  /// The bridge as an actor (to subscribe it, or to own requests).
  caf::actor self() const;

private:
  /// One call in flight. The replier writes `reply`, then sets `done`
  /// (release); the caller spins on `done` without a lock and only then
  /// takes the mutex to sleep, so neither ever waits for the other's lock
  /// while both are running.
  struct slot {
    std::atomic<bool> done{false};
    std::mutex mtx;
    std::condition_variable cv;
    bool sleeping = false; ///< guarded by mtx
    caf::message reply;
    late_reply_handler on_late;
    reply_trim trim = nullptr;
    bool abandoned = false; ///< timed out, kept for on_late; guarded by mtx_
  };

  void deliver(std::uint64_t id, caf::message msg);

  /// Ends the call of `s` with `err` (its entry already out of pending_).
  static void fail(slot& s, const caf::error& err);

  struct call_entry {
    std::shared_ptr<slot> s;
    std::uint64_t dest; ///< the actor asked (its id)
  };

  caf::strong_actor_ptr companion_;
  std::mutex mtx_;
  /// By call id; chunks of 64 (a call in flight per calling thread).
  id_map<call_entry, 6> pending_;
  std::uint64_t next_id_ = 1;
  std::mutex notify_mtx_; ///< held while the handler runs
  notification_handler notify_;
  bool closed_ = false;
};

} // namespace kvactor::detail
