// The device actor's state: the storage, the work submitted and not yet
// answered, the blocks swap-outs read, the staging for bytes that travel
// in messages - and how the actor's end reaches everyone: the cache's
// manager and pool first (tell_cache), then each waiting requester
// (answer_in_flight), however the actor ends. Internal to device_actor.cpp.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_clock.hpp>
#include <caf/local_actor.hpp>

#include "kvactor/device/storage.hpp"
#include "kvactor/messages/error.hpp"

namespace kvactor::detail {

/// What a piece of work is, for a stall's error: "<op> of <n> <unit>"
/// ("swap-out of 4 blocks"). Kept as parts and spelled only for a stall, so
/// an op's submission builds no text.
struct op_desc {
  const char* op;
  std::size_t n;
  const char* unit;

  std::string text() const {
    return std::string{op} + " of " + std::to_string(n) + " " + unit;
  }
};

struct device_state {
  static inline const char* name = "kvactor.device";

  /// CAF constructs the state with its actor; the destructor needs it.
  explicit device_state(caf::local_actor* owner) : self(owner) {}

  /// The actor itself: the destructor tells the cache of a kill or crash.
  caf::local_actor* self;

  std::shared_ptr<storage> store;
  /// Work not complete after this long is a stalled GPU; 0 = never.
  std::chrono::milliseconds timeout{0};
  /// Submitted work not yet answered, in submission order (answered in
  /// order of completion).
  struct pending {
    ticket t;
    std::function<void(caf::error)> finish;
    /// What it is, for a stall's error.
    op_desc what;
    /// Its submission, moved on to when it became the oldest unanswered
    /// work (drain): what the timeout bounds is the op's own run, not the
    /// queue it waited in behind earlier work on its stream.
    caf::actor_clock::time_point since;
  };
  std::deque<pending> queue;
  /// Device blocks that swap-outs read, with how many read each, from the
  /// swap's start until its copy failed or the pool settled it (the copy
  /// done, the request let the blocks go). A slot write into such a block
  /// is refused - ordered after the read, it would miss the host copy and
  /// be lost at swap-in. A map, not a
  /// counter per block: few blocks are in flight at once, and the actor's
  /// start allocates nothing that grows with the pool (a failure there
  /// would come after spawn_kv_cache had answered).
  std::unordered_map<std::uint32_t, std::uint32_t> swapping_out;
  /// A watchdog poll (delayed done_atom) is on its way.
  bool watchdog_armed = false;
  /// The cache's manager and pool (registry_atom, from spawn_kv_cache):
  /// told first when this actor stops (tell_cache). Null for a device actor
  /// outside a cache.
  caf::actor manager;
  caf::actor pool;
  /// The cache knows this actor stops: tell_cache ran.
  bool cache_told = false;
  /// Staging for bytes that arrive in or leave in messages (pinned on cuda);
  /// grows by doubling. Outgrown buffers are kept until the actor goes:
  /// freeing pinned memory (cudaFreeHost) waits for the whole device, so a
  /// write slightly larger than any before would wait behind every swap in
  /// flight. Kept, they cost at most as much again as the largest.
  struct staging_area {
    std::shared_ptr<std::uint8_t> buffer;
    std::size_t bytes = 0;
    std::vector<std::shared_ptr<std::uint8_t>> outgrown;
  };
  /// Shared with the actor's exit functor (device_fun), which frees it off
  /// a wake's thread: the state itself may be destroyed on one.
  std::shared_ptr<staging_area> staging = std::make_shared<staging_area>();

  /// Runs however the actor ends. Killed or crashed, it ran no exit
  /// handler (which answers the work in flight itself): CAF drops the
  /// promises unanswered, and their requesters - the pool, awaiting a
  /// copy-on-write copy and taking no other message meanwhile, among them
  /// - would wait for ever. (Each op's own cleanup still finds the state.)
  /// The cache hears of the end here, before those answers, as from the
  /// exit handler; CAF has set the reason (kill, or the crash's error) by
  /// the time the state goes.
  ~device_state() {
    if (self->fail_state())
      tell_cache(self->fail_state(), {});
    // Not on a wake's thread: CUDA forbids its calls in a host callback,
    // so the work cannot be waited for there.
    answer_in_flight(!storage::in_wake());
  }

  /// Sends the manager and then the pool an exit with `reason`, once,
  /// before any waiting requester is answered (why: registry_atom in
  /// interfaces.hpp). An exit from the manager (`from`) is the cache
  /// stopping already: no one is told. A kill is passed on as an error
  /// naming it: CAF kills whoever is sent exit_reason::kill outright, and
  /// the manager would not run its exit handler, which stops the cache.
  void tell_cache(const caf::error& reason, const caf::actor_addr& from) {
    if (cache_told)
      return;
    cache_told = true;
    if (!manager || from == manager.address())
      return;
    auto why = reason == caf::exit_reason::kill
                 ? make_error(errc::shutting_down, "the device actor was killed")
                 : reason;
    self->send_exit(manager, why);
    if (pool && from != pool.address())
      self->send_exit(pool, why);
  }

  /// Answers every waiting requester shutting_down - once its work is done
  /// (`wait_first`): a requester that hears "not made" gives the blocks
  /// back (a copy-on-write destination, a swap-in's incoming blocks), and
  /// a copy still running would write into them after the pool handed them
  /// to another request. Blocking is fine here: the actor runs detached.
  /// After a fault the waits return at once; work that outlasts the
  /// timeout (a stalled GPU) is waited for no longer, nor is the rest. A
  /// wait that throws is taken as such a stall: this runs in the state's
  /// destructor too, which must not throw (std::terminate), and the rest
  /// must still be answered.
  void answer_in_flight(bool wait_first) {
    auto open = std::move(queue);
    queue.clear();
    // Whether the waits go on, or why they stopped.
    enum class waits { on, off, stalled, threw };
    auto w = wait_first && store ? waits::on : waits::off;
    for (auto& p : open) {
      if (w == waits::on) {
        bool timed_out = false;
        try {
          wait_bounded(p.t, timed_out); // its own error: shutting_down anyway
        } catch (...) {
          w = waits::threw;
        }
        if (timed_out)
          w = waits::stalled;
        if (w != waits::on)
          store->mark_stalled(); // nor may the storage's teardown wait
      }
      if (!p.finish)
        continue; // nothing to answer with: calling it would throw
      const char* why = "device actor: stopped with this work in flight";
      if (w == waits::stalled)
        why = "device actor: stopped with this work in flight, the GPU "
              "stalled (not complete within device_timeout_ms)";
      else if (w == waits::threw)
        why = "device actor: stopped with this work in flight, which it "
              "could not wait for (the storage threw)";
      p.finish(make_error(errc::shutting_down, why));
    }
  }

  /// Waits for `t` alone, for at most the timeout (none: for ever);
  /// `timed_out` says whether it gave up.
  caf::error wait_bounded(ticket t, bool& timed_out) {
    timed_out = false;
    if (timeout.count() == 0)
      return store->wait_one(t);
    return store->wait_one_for(t, timeout, timed_out);
  }

  /// One more swap-out reads device block `b`: writes into it are refused.
  void close_to_writes(std::uint32_t b) {
    ++swapping_out[b];
  }
  /// One swap-out less holds `b` closed (its copy failed, or the pool
  /// settled it). One no swap holds (a settle from a pool that is not this
  /// cache's) changes nothing.
  void reopen_to_writes(std::uint32_t b) {
    auto i = swapping_out.find(b);
    if (i != swapping_out.end() && --i->second == 0)
      swapping_out.erase(i);
  }

  /// At least `bytes` of staging, or null (the staging so far stays).
  std::uint8_t* stage(std::size_t bytes) {
    auto& a = *staging;
    if (bytes <= a.bytes)
      return a.buffer.get();
    auto want = std::max(bytes, 2 * a.bytes);
    auto next = store->host_buffer(want);
    if (!next && want > bytes)
      next = store->host_buffer(want = bytes);
    if (!next)
      return nullptr;
    if (a.buffer)
      a.outgrown.push_back(std::move(a.buffer));
    a.buffer = std::move(next);
    a.bytes = want;
    return a.buffer.get();
  }
};

} // namespace kvactor::detail
