// device actor: validates and submits storage work, replies when each op's
// own work completed (in completion order, not submission order).
// Completion is heard through the storage's wake (a CUDA host callback); a
// watchdog poll backs it up while replies are pending, because CUDA calls no
// host callback after a fault - without it a failed GPU would leave every
// waiting requester waiting forever. Work not complete after
// device_timeout_ms is a stalled GPU: everyone waiting is told, and the actor
// quits, so that the manager stops the cache. What it keeps, and how its
// end reaches the cache before anyone waiting: device_state.hpp.
#include "kvactor/actors/device_actor.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <caf/actor_clock.hpp>
#include <caf/actor_system.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "kvactor/actors/crash_reason.hpp"
#include "kvactor/actors/device_state.hpp"
#include "kvactor/actors/stray_messages.hpp"
#include "kvactor/device/validate.hpp"
#include "kvactor/messages/error.hpp"

namespace kvactor {

namespace {

using detail::device_state;
using detail::op_desc;

using device_ptr = device_actor::stateful_pointer<device_state>;

/// How often the watchdog polls while replies are pending. Completion is
/// normally heard at once through the wake; this bounds how late a fault
/// (or a lost wake) is noticed.
constexpr auto watchdog_period = std::chrono::milliseconds{2};

/// Storage none holds no bytes: a write or a gather is refused before its
/// staging buffer - which only grows - is made for it.
caf::error holds_data(const storage& s, const char* op) {
  if (s.kind() != storage_kind::none)
    return caf::none;
  return make_error(errc::invalid_request,
                    std::string{op} + ": storage none holds no data");
}

/// Whether the message being handled comes from `part` of the cache, or
/// no cache registered (`part` unset: a device spawned alone takes work
/// from anyone). Raw pointers, as the pool's from_manager: no reference
/// count touched.
bool sent_by(device_ptr self, const caf::actor& part) {
  return !part
         || caf::actor_cast<caf::abstract_actor*>(self->current_sender())
              == caf::actor_cast<caf::abstract_actor*>(part);
}

/// Copies and swaps are the cache's own work: once a cache registered
/// (registry_atom), a copy comes from its pool alone (copy-on-write, fork)
/// and a swap from its manager alone, as the settle of a swap-out does.
/// Writers hold this actor for their writes and gathers; one that sent a
/// swap-out would close blocks to writes for good and overwrite host
/// blocks a swapped-out request holds, and a copy would overwrite blocks
/// the pool gave others - nothing the pool accounts for. Refused, with
/// nothing submitted, as a settle from another is ignored. The pool and
/// the manager must therefore request() copies and swaps, not delegate()
/// them: a delegated message keeps its caller as the sender. This guards
/// against a client's mistake, not against code that sends as the pool
/// (caf::send_as), which CAF lets anyone do.
caf::error from_cache(device_ptr self, const op_desc& what,
                      const caf::actor& part, const char* part_name) {
  if (sent_by(self, part))
    return caf::none;
  return make_error(errc::invalid_request,
                    "device actor: " + what.text()
                      + " from an actor that is not this cache's "
                      + part_name
                      + ": copies and swaps are the cache's own work (swap "
                        "a request through the manager; a client sends the "
                        "device actor only slot writes, gathers and info)");
}

/// The GPU has not completed `what` in `waited`: every waiting requester
/// gets device_failure saying so, without waiting (the work may never
/// end), and the actor quits with it - the manager stops the cache: the
/// blocks the work touches cannot be handed on while it may still write
/// them, nor can the pool, awaiting a copy-on-write copy, go on without an
/// answer. The manager and the pool hear it first (tell_cache). Returns
/// the error.
caf::error stall(device_ptr self, const std::string& what,
                 std::chrono::milliseconds waited) {
  auto& st = self->state;
  auto err = make_error(errc::device_failure,
                        "device actor: " + what + " not complete after "
                          + std::to_string(waited.count())
                          + " ms (device_timeout_ms "
                          + std::to_string(st.timeout.count())
                          + "): the GPU looks stalled, the cache stops");
  st.store->mark_stalled(); // its teardown must not wait for the GPU
  st.tell_cache(err, {});
  auto open = std::move(st.queue);
  st.queue.clear();
  for (auto& p : open)
    p.finish(err);
  self->quit(err);
  return err;
}

/// Answers every pending request whose own work completed (or failed: after
/// a fault finished() is true for all, and wait_one() reports it), in any
/// order, so a copy-on-write or a write is not held behind an unrelated long
/// swap on another stream; keeps the watchdog armed while any remain.
/// Why answering out of order is safe: a reply promises that the op's own
/// effects are in place, and the storage orders every earlier op touching
/// the same blocks (read-after-write, write-after-read, write-after-write)
/// before the op runs - on one stream by the stream, across streams by
/// events (cuda_storage::order over detail::hazard_tracker) - so when the op
/// finished, all earlier work on its blocks finished too. Earlier work on
/// other blocks may still run; its own reply is still pending, so no block
/// it touches has been handed back to the pool.
/// Returns the stall's error if the oldest work was overdue (see stall: the
/// actor quits, everyone waiting was answered), so that a handler that
/// drains before its own work submits nothing to the stalled GPU.
/// Each entry leaves the queue only once its answer is decided, and is
/// answered at once: if the storage throws (finished, wait_one), every
/// entry is either answered or still whole in the queue, which the state's
/// destructor answers as the crash ends the actor.
caf::error drain(device_ptr self) {
  auto& st = self->state;
  auto& q = st.queue;
  bool oldest_answered = false; // the next is the oldest from now
  for (auto i = q.begin(); i != q.end();) {
    if (!st.store->finished(i->t)) {
      ++i;
      continue;
    }
    auto err = st.store->wait_one(i->t);
    oldest_answered = oldest_answered || i == q.begin();
    auto p = std::move(*i);
    i = q.erase(i); // at the front (completion in order) it moves nothing
    p.finish(std::move(err));
  }
  // The oldest unanswered work (the queue keeps submission order), timed
  // from when it became the oldest: every op submitted before it was then
  // answered, and the storage orders an op after earlier ops only, so from
  // then on it waits for nothing but its own run. Timed from its
  // submission, a healthy op queued behind others on its stream (a burst of
  // swaps, each well within the timeout) would count their runs as its own
  // and stop the cache for a stall that is none. The cost: stalled work on
  // another stream is noticed once the slower healthy work before it ends.
  if (!q.empty() && st.timeout.count() > 0) {
    auto now = self->clock().now();
    if (oldest_answered)
      q.front().since = std::max(q.front().since, now);
    auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
      now - q.front().since);
    if (waited >= st.timeout)
      return stall(self, q.front().what.text(), waited);
  }
  if (!q.empty() && !st.watchdog_armed) {
    st.watchdog_armed = true;
    self->delayed_send(self, watchdog_period, done_atom::value, true);
  }
  return caf::none;
}

/// Waits for `t`, work a handler submitted and waits for itself (a slot
/// write, a gather): past its bound, a stall of the op `what()` names
/// (named only then: a write's hot path builds no text). Bounded as drain
/// bounds queued work: by its own run, from when the work submitted before
/// it was all answered - on one stream it waits behind that work, and a
/// long healthy copy before it is no stall of its own. Until then the wait
/// ends at the oldest work's bound: the actor's thread polls nothing while
/// it waits here, and if that work is what hangs, the stall is its own
/// (drain names it), not the op queued behind it, a timeout later.
template <class Describe>
caf::error wait_own(device_ptr self, ticket t, Describe what) {
  auto& st = self->state;
  if (st.timeout.count() == 0)
    return st.store->wait_one(t);
  auto& q = st.queue; // work submitted before this op: nothing joins it here
  auto deadline = self->clock().now() + st.timeout;
  for (;;) {
    auto now = self->clock().now();
    const bool behind = !q.empty();
    auto until = behind ? q.front().since + st.timeout : deadline;
    auto limit = std::max(until - now, decltype(until - now)::zero());
    bool timed_out = false;
    auto err = st.store->wait_one_for(t, limit, timed_out);
    if (!timed_out)
      return err;
    if (!behind)
      return stall(self, what(), st.timeout);
    // The oldest's bound ran out: its stall, unless it just completed.
    auto oldest = q.front().t;
    if (auto stalled = drain(self))
      return stalled;
    if (!q.empty() && q.front().t == oldest)
      return stall(self, q.front().what.text(), st.timeout);
    // All before it answered: its own run is timed from now on.
    if (q.empty())
      deadline = std::max(deadline, self->clock().now() + st.timeout);
  }
}

/// Nothing to do when an op ends.
struct no_cleanup {
  void operator()(const caf::error&) const noexcept {
  }
};

/// Submits through `submit` (returns expected<ticket>) and replies with
/// `value` once the work completed, or with the error; `ended` runs first
/// then, with the error if any (only if the work was submitted). `what`
/// names the work in a stall's error.
template <class T, class Submit, class Ended = no_cleanup>
caf::result<T> run(device_ptr self, op_desc what, Submit submit, T value,
                   Ended ended = {}) {
  // Earlier work overdue: the actor stopped for the stall (quit takes
  // effect after this handler), so nothing is submitted to the GPU.
  if (auto err = drain(self))
    return err;
  auto t = submit();
  if (!t) {
    drain(self); // a fault fails the work already queued as well
    return std::move(t.error());
  }
  auto rp = self->make_response_promise<T>();
  self->state.queue.push_back(device_state::pending{
    *t, [rp, value, ended](caf::error err) mutable {
      ended(err);
      if (err)
        rp.deliver(std::move(err));
      else
        rp.deliver(std::move(value));
    },
    what, self->clock().now()});
  drain(self);
  return rp;
}

device_actor::behavior_type device_fun(device_ptr self,
                                       std::shared_ptr<storage> store,
                                       std::chrono::milliseconds timeout) {
  detail::handle_stray_messages(self);
  auto& st = self->state;
  st.store = std::move(store);
  // 0 is never; so is a negative one (this API skips the config's checks).
  st.timeout = std::max(timeout, std::chrono::milliseconds{0});
  // Completion callbacks come from a CUDA thread: only post a message.
  st.store->set_wake([addr = self->address()] {
    if (auto strong = caf::actor_cast<caf::strong_actor_ptr>(addr))
      caf::anon_send(caf::actor_cast<device_actor>(strong), done_atom::value);
  });
  // An exit with work in flight answers every waiting requester first: a
  // promise dropped unanswered would leave the block pool, which awaits its
  // copy-on-write copies, waiting forever - and so skipping its own exit.
  // The cache hears of the end first, as of a stall (tell_cache): unless
  // the manager is the one stopping it, it stops before anyone waiting
  // here is answered.
  self->set_exit_handler([self](const caf::exit_msg& msg) {
    if (!msg.reason)
      return; // a normal exit (of a linked actor): CAF ignores those too
    auto& st = self->state;
    st.tell_cache(msg.reason, msg.source);
    st.answer_in_flight(true);
    self->quit(msg.reason);
  });
  // A storage that throws ends the actor with device_failure naming what
  // was thrown; the state's destructor still tells the cache and answers
  // the work in flight.
  detail::name_crashes(self, "device actor", errc::device_failure);
  // The state is gone when attached functors run: hold the storage and the
  // staging (pinned on cuda) here. If the actor dies on a wake's thread (its
  // last reference was the wake's, briefly), CAF destroys the state and runs
  // this functor there, and dropping either would run CUDA calls in a CUDA
  // host callback (the storage's stream synchronisation, cudaFreeHost),
  // which CUDA forbids: another thread drops them.
  // The wake stays set: it only posts to this actor's address, which leads
  // nowhere once the actor is gone, while clearing it would clear the wake
  // of the next device actor on this storage (a restart's, spawned before
  // this one ended).
  self->attach_functor([store = st.store, staging = st.staging]() mutable {
    if (storage::in_wake())
      std::thread([s = std::move(store), a = std::move(staging)] {}).detach();
  });
  return {
    [self](copy_atom, const std::vector<block_copy>& pairs)
      -> caf::result<std::uint32_t> {
      auto what = op_desc{"copy", pairs.size(), "block pairs"};
      if (auto err = from_cache(self, what, self->state.pool, "pool"))
        return err;
      return run<std::uint32_t>(
        self, what,
        [&] { return self->state.store->copy_blocks(pairs); },
        static_cast<std::uint32_t>(pairs.size()));
    },
    [self](swap_out_atom, const std::vector<block_move>& moves)
      -> caf::result<std::uint32_t> {
      auto what = op_desc{"swap-out", moves.size(), "blocks"};
      if (auto err = from_cache(self, what, self->state.manager, "manager"))
        return err;
      // Submitted, the moves' sources are being read until the op ends
      // (the storage checked their range).
      return run<std::uint32_t>(
        self, what,
        [&] {
          auto t = self->state.store->swap_out(moves);
          if (t)
            for (auto& m : moves)
              self->state.close_to_writes(m.device_block);
          return t;
        },
        static_cast<std::uint32_t>(moves.size()),
        [self, moves](const caf::error& err) {
          // Copied, the blocks stay closed until the pool settles them: a
          // write now would still be lost (the request is leaving them).
          if (err)
            for (auto& m : moves)
              self->state.reopen_to_writes(m.device_block);
        });
    },
    [self](swap_out_atom, settle_atom, const std::vector<block_id>& blocks) {
      // In a cache, only its pool knows that a request let the blocks go:
      // a stray settle from anyone else would reopen blocks a swap-out
      // still reads, and a write then would be lost at swap-in. Ignored,
      // as a reacts_to message has no one to answer.
      auto& st = self->state;
      if (!sent_by(self, st.pool))
        return;
      for (auto b : blocks)
        st.reopen_to_writes(b);
    },
    [self](swap_in_atom, const std::vector<block_move>& moves)
      -> caf::result<std::uint32_t> {
      auto what = op_desc{"swap-in", moves.size(), "blocks"};
      if (auto err = from_cache(self, what, self->state.manager, "manager"))
        return err;
      return run<std::uint32_t>(
        self, what,
        [&] { return self->state.store->swap_in(moves); },
        static_cast<std::uint32_t>(moves.size()));
    },
    [self](write_atom, const slot_write& w) -> caf::result<std::uint32_t> {
      auto& lay = self->state.store->layout();
      auto row = std::size_t{lay.num_heads} * lay.head_dim * lay.elem_bytes();
      auto n = w.slots.size();
      if (w.keys.size() != n * row || w.values.size() != n * row)
        return make_error(errc::invalid_request,
                          "slot_write: " + std::to_string(n) + " slots need "
                            + std::to_string(n * row)
                            + " bytes of keys and of values, got "
                            + std::to_string(w.keys.size()) + " and "
                            + std::to_string(w.values.size()));
      // Checked before staging, as a gather is: a bad write must not leave
      // a large pinned buffer behind (staging only grows).
      if (auto err = detail::check_write(lay, w.layer, w.keys.data(),
                                         w.values.data(), w.slots.data(), n))
        return err;
      if (auto err = holds_data(*self->state.store, "slot_write"))
        return err;
      auto& st = self->state;
      // Swaps that ended but are not answered yet (their blocks reopen).
      // Or the oldest work is overdue: the actor stopped for the stall
      // (quit only takes effect after this handler), so nothing is staged,
      // submitted or waited for.
      if (auto err = drain(self))
        return err;
      for (std::size_t i = 0; !st.swapping_out.empty() && i < n; ++i) {
        auto slot = w.slots[i];
        if (slot < 0 || static_cast<std::uint64_t>(slot) / lay.block_size
                          >= lay.num_blocks)
          continue; // skipped, or refused by the storage's range check
        auto b = static_cast<std::uint32_t>(slot / lay.block_size);
        if (st.swapping_out.count(b) > 0)
          return make_error(errc::invalid_request,
                            "slot_write: slot " + std::to_string(slot)
                              + " is in block " + std::to_string(b)
                              + ", which a swap-out is reading: the write "
                                "would miss the host copy (a request "
                                "sharing the block writes it again once "
                                "the swap-out ended)");
      }
      // Stage in memory the backend accepts; wait here (for this op alone,
      // not for earlier swaps on other streams), so the staging is free
      // again when the next message comes.
      auto buf = st.stage(2 * n * row);
      if (buf == nullptr && n > 0)
        return make_error(errc::device_failure,
                          "slot_write: no staging memory for "
                            + std::to_string(2 * n * row) + " bytes");
      if (n > 0) {
        std::memcpy(buf, w.keys.data(), n * row);
        std::memcpy(buf + n * row, w.values.data(), n * row);
      }
      auto t = st.store->write_slots(w.layer, buf, buf + n * row,
                                     w.slots.data(), n);
      if (!t) {
        drain(self);
        return std::move(t.error());
      }
      auto err = wait_own(self, *t, [&] {
        return op_desc{"slot write", n, "tokens"}.text() + " of layer "
               + std::to_string(w.layer);
      });
      drain(self); // what finished meanwhile, or everything after a fault
      if (err)
        return err;
      auto skipped = std::count(w.slots.begin(), w.slots.end(), std::int64_t{-1});
      return static_cast<std::uint32_t>(n - static_cast<std::size_t>(skipped));
    },
    [self](gather_atom, std::uint32_t layer, const std::vector<block_id>& blocks,
           std::uint64_t num_tokens) -> caf::result<gathered_kv> {
      auto& lay = self->state.store->layout();
      auto row = std::size_t{lay.num_heads} * lay.head_dim * lay.elem_bytes();
      gathered_kv out;
      out.layer = layer;
      out.num_tokens = num_tokens;
      // Checked before staging: a bad request must not leave a large pinned
      // buffer behind (staging only grows).
      if (auto err = detail::check_gather_request(lay, layer, blocks,
                                                  num_tokens))
        return err;
      if (auto err = holds_data(*self->state.store, "gather"))
        return err;
      auto& st = self->state;
      // Earlier work overdue: stopped for the stall, as for a write.
      if (auto err = drain(self))
        return err;
      auto bytes = num_tokens * row;
      auto buf = st.stage(2 * bytes);
      if (buf == nullptr && bytes > 0)
        return make_error(errc::device_failure,
                          "gather: no staging memory for "
                            + std::to_string(2 * bytes) + " bytes");
      auto t = st.store->gather_blocks(layer, blocks, num_tokens, buf,
                                       buf + bytes);
      if (!t) {
        drain(self);
        return std::move(t.error());
      }
      auto err = wait_own(self, *t, [&] {
        return op_desc{"gather", blocks.size(), "blocks"}.text() + " of layer "
               + std::to_string(layer);
      });
      drain(self);
      if (err)
        return err;
      out.keys.assign(buf, buf + bytes);
      out.values.assign(buf + bytes, buf + 2 * bytes);
      return out;
    },
    [self](registry_atom, const caf::actor& manager, const caf::actor& pool) {
      auto& st = self->state;
      if (!st.manager) { // once: no one may re-point it later
        st.manager = manager;
        st.pool = pool;
      }
    },
    [self](info_atom) {
      auto& s = *self->state.store;
      auto& lay = s.layout();
      return storage_info{to_string(s.kind()), s.where(), lay.num_blocks,
                          lay.num_host_blocks, lay.bytes_per_block()};
    },
    [self](done_atom) {
      drain(self);
    },
    [self](done_atom, bool) { // the watchdog's poll
      self->state.watchdog_armed = false;
      drain(self);
    },
  };
}

} // namespace

device_actor spawn_device_actor(caf::actor_system& sys,
                                std::shared_ptr<storage> store, bool detached,
                                std::chrono::milliseconds timeout) {
  if (!detached)
    return sys.spawn(device_fun, std::move(store), timeout);
  return sys.spawn<caf::detached>(device_fun, std::move(store), timeout);
}

} // namespace kvactor
