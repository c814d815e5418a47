// blocking_bridge: companion-based request/response for non-actor threads.
#include "kvactor/actors/blocking_bridge.hpp"

#include <algorithm>
#include <string>
#include <thread>

#include <caf/actor_companion.hpp>
#include <caf/actor_system.hpp>
#include <caf/mailbox_element.hpp>
#include <caf/scoped_execution_unit.hpp>
#include <caf/sec.hpp>
#include <caf/system_messages.hpp>

namespace kvactor::detail {

namespace {

caf::actor_companion* companion_of(const caf::strong_actor_ptr& ptr) {
  return static_cast<caf::actor_companion*>(
    caf::actor_cast<caf::abstract_actor*>(ptr));
}

/// request_timeout naming what timed out: "no reply within 5 ms to
/// 'extend' sent to actor 42" (the code stays CAF's: callers compare it).
caf::error timed_out(const caf::message& msg, caf::actor_id dest,
                     std::chrono::milliseconds timeout) {
  std::string what = "a message";
  if (!msg.empty() && msg.match_element<caf::atom_value>(0))
    what = "'" + caf::to_string(msg.get_as<caf::atom_value>(0)) + "'";
  return caf::make_error(caf::sec::request_timeout,
                         "no reply within " + std::to_string(timeout.count())
                           + " ms to " + what + " sent to actor "
                           + std::to_string(dest));
}

} // namespace

blocking_bridge::blocking_bridge(caf::actor_system& sys) {
  companion_ = caf::actor_cast<caf::strong_actor_ptr>(
    sys.spawn<caf::actor_companion>());
  // This runs inside the sender's enqueue - mostly its message handler
  // (the manager's, the pool's): nothing may throw out of it, or that actor
  // would die of it and the cache with it. What throws (a bad_alloc) is
  // dropped here; deliver() fails its caller first.
  companion_of(companion_)->on_enqueue([this](caf::mailbox_element_ptr ptr) {
    if (!ptr)
      return;
    try {
      auto msg = ptr->move_content_to_message();
      if (ptr->mid.is_response()) {
        deliver(ptr->mid.request_id().integer_value(), std::move(msg));
        return;
      }
      if (msg.match_elements<caf::down_msg>())
        fail_calls_to(msg.get_as<caf::down_msg>(0).source.id());
      // Under notify_mtx_, so that once on_notification(nullptr) returned
      // no handler runs any more (its owner may then go).
      std::lock_guard<std::mutex> guard{notify_mtx_};
      if (notify_)
        notify_(msg);
    } catch (...) {
    }
  });
}

blocking_bridge::~blocking_bridge() {
  fail_all(caf::make_error(caf::sec::request_receiver_down), true);
  auto self = companion_of(companion_);
  self->on_enqueue(nullptr);
  caf::scoped_execution_unit context{&self->home_system()};
  self->cleanup(caf::exit_reason::user_shutdown, &context);
}

void blocking_bridge::deliver(std::uint64_t id, caf::message msg) {
  std::shared_ptr<slot> s;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    auto i = pending_.find(id);
    if (i == pending_.end())
      return; // timed out: drop the late reply
    s = std::move(i->second.s);
    pending_.erase(i);
  }
  if (s->abandoned) { // its caller gave up: the late handler has it
    s->on_late(msg);
    return;
  }
  if (s->trim) {
    try {
      s->trim(msg);
    } catch (...) { // the caller must not wait for a reply it lost
      fail(*s, caf::make_error(caf::sec::runtime_error,
                               std::string{"the reply could not be taken in "
                                           "(trimming it threw)"}));
      return;
    }
  }
  s->reply = std::move(msg);
  s->done.store(true, std::memory_order_release);
  std::lock_guard<std::mutex> guard{s->mtx};
  if (s->sleeping)
    s->cv.notify_one();
}

caf::expected<caf::message>
blocking_bridge::call(const caf::strong_actor_ptr& dest, caf::message msg,
                      std::chrono::milliseconds timeout,
                      late_reply_handler on_late, reply_trim trim) {
  if (!dest)
    return caf::make_error(caf::sec::invalid_argument);
  auto s = std::make_shared<slot>();
  s->on_late = std::move(on_late);
  s->trim = trim;
  std::uint64_t id;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (closed_)
      return caf::make_error(caf::sec::request_receiver_down);
    id = next_id_++;
    pending_.try_emplace(id, call_entry{s, dest->id()});
  }
  // The caller keeps a reference to the request's content until the reply
  // is in: its memory - a 2 KB prompt, say - is then mostly freed here, on
  // the thread that allocated it (unless the worker drops its reference
  // after the reply: then by the worker, as before). Freed by the worker,
  // a chunk past glibc's per-thread cache went back to this thread's arena
  // under its lock, which this thread was taking at the same moment for its
  // next call's allocation: a futex wake or wait (~1-2 us here) on most
  // prompted allocates. A handler that takes the content by mutable reference
  // copies it (CAF's copy on write), on its own thread and arena.
  caf::message keep = msg;
  dest->enqueue(caf::make_mailbox_element(companion_, caf::make_message_id(id),
                                          {}, std::move(msg)),
                nullptr);
  // Replies usually arrive within microseconds: spin briefly (without
  // holding any lock the replier needs) before paying for a sleep and a
  // wake-up.
  auto spin_until = std::chrono::steady_clock::now()
                    + std::chrono::microseconds{50};
  while (!s->done.load(std::memory_order_acquire)
         && std::chrono::steady_clock::now() < spin_until) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  if (!s->done.load(std::memory_order_acquire)) {
    // wait_for adds the limit to now(): keep the sum representable
    // (milliseconds::max() means "no limit" to a caller).
    auto limit = std::min(timeout, std::chrono::milliseconds{
                                     std::chrono::hours{24 * 365 * 100}});
    std::unique_lock<std::mutex> lock{s->mtx};
    s->sleeping = true;
    auto ok = s->cv.wait_for(lock, limit, [&] {
      return s->done.load(std::memory_order_acquire);
    });
    s->sleeping = false;
    if (!ok) {
      lock.unlock();
      {
        std::lock_guard<std::mutex> guard{mtx_};
        if (auto i = pending_.find(id); i != pending_.end()) {
          if (s->on_late)
            s->abandoned = true; // the reply goes to on_late
          else
            pending_.erase(i);
          return timed_out(keep, dest->id(), timeout);
        }
      }
      // deliver (or fail_all) took the slot and is about to set `done`:
      // wait for it, saying so, so that it wakes us.
      lock.lock();
      s->sleeping = true;
      s->cv.wait(lock, [&] { return s->done.load(std::memory_order_acquire); });
      s->sleeping = false;
    }
  }
  auto reply = std::move(s->reply);
  if (reply.match_elements<caf::error>())
    return reply.get_as<caf::error>(0);
  return reply;
}

void blocking_bridge::fail(slot& s, const caf::error& err) {
  if (s.abandoned)
    return; // nobody waits; no reply will come to undo
  s.reply = caf::make_message(err);
  s.done.store(true, std::memory_order_release);
  std::lock_guard<std::mutex> guard{s.mtx};
  s.cv.notify_all();
}

void blocking_bridge::fail_all(caf::error err, bool close) {
  std::lock_guard<std::mutex> guard{mtx_};
  closed_ = closed_ || close;
  for (auto& kvp : pending_)
    fail(*kvp.second.s, err);
  pending_.clear();
}

void blocking_bridge::fail_calls_to(std::uint64_t dest) {
  // Replies the actor did send were delivered on its thread before its
  // down message left: what waits now is not coming.
  std::lock_guard<std::mutex> guard{mtx_};
  caf::error err;
  for (auto i = pending_.begin(); i != pending_.end();) {
    if (i->second.dest == dest) {
      if (!err)
        err = caf::make_error(caf::sec::request_receiver_down);
      fail(*i->second.s, err);
      pending_.erase(i); // the last entry moves into i's place
    } else {
      ++i;
    }
  }
}

void blocking_bridge::send(const caf::strong_actor_ptr& dest, caf::message msg) {
  if (dest)
    dest->enqueue(caf::make_mailbox_element(companion_, caf::make_message_id(),
                                            {}, std::move(msg)),
                  nullptr);
}

void blocking_bridge::on_notification(notification_handler f) {
  std::lock_guard<std::mutex> guard{notify_mtx_};
  notify_ = std::move(f);
}

void blocking_bridge::watch(const caf::actor_addr& whom) {
  companion_of(companion_)->monitor(whom);
}

caf::actor blocking_bridge::self() const {
  return caf::actor_cast<caf::actor>(companion_);
}

} // namespace kvactor::detail
