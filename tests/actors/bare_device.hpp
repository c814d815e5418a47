// A device actor alone - no cache around it - on a slow_storage whose work
// completes when a test says (slow_storage.hpp): the fixture of the tests of
// the device actor's own queue, replies, stalls and faults. In a cache only
// the pool copies and only the manager swaps (interfaces.hpp); a device
// spawned alone has no cache registered, so it takes copies and swaps from
// anyone, and the test's own actor drives it with raw moves.
// stand_in_for_cache() registers the test's actor as the manager and a
// stand-in as the pool, as spawn_kv_cache registers the real ones. The
// fixture's cache (cache_fixture) is there for its scheduler and actor
// only; it runs on a storage of its own.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "kvactor/actors/device_actor.hpp"
#include "spawn_fn.hpp"
#include "stall_fixture.hpp"

namespace kvactor::test {

struct bare_device : cache_fixture {
  std::shared_ptr<slow_storage> store;
  device_actor dev;
  /// The pool's stand-in, once stand_in_for_cache() registered one.
  caf::actor pool_stand_in;

  /// With a host tier of 8 blocks; work not complete after `timeout_ms`
  /// (0: never) is a stalled GPU.
  explicit bare_device(std::uint64_t timeout_ms = 0)
    : bare_device(stall_config(timeout_ms)) {
  }
  /// Storage shaped as `c` says, with its device_timeout_ms.
  explicit bare_device(cache_config c)
    : cache_fixture(c),
      store(make_slow(c)),
      dev(spawn_device_actor(sys, store, false,
                             std::chrono::milliseconds{c.device_timeout_ms})) {
    self->monitor(dev);
    run();
  }

  ~bare_device() {
    // From the registered manager, if any: no one is told (tell_cache).
    self->send_exit(dev, caf::exit_reason::user_shutdown);
    if (pool_stand_in)
      self->send_exit(pool_stand_in, caf::exit_reason::kill);
    run();
  }

  /// Registers the test's actor as the cache's manager and a stand-in that
  /// takes no message as its pool: copies from the test's actor are then
  /// refused, swaps taken, and a settle counts only from the stand-in.
  void stand_in_for_cache() {
    pool_stand_in = spawn_fn(sys, [](caf::event_based_actor*) -> caf::behavior {
      return {[](std::int32_t) {}};
    });
    caf::anon_send(dev, registry_atom::value, caf::actor_cast<caf::actor>(self),
                   pool_stand_in);
    run();
  }

  /// Lets `t` of the scheduler's clock pass (the device's watchdog polls
  /// meanwhile), then runs what that set off.
  void let_pass(caf::timespan t) {
    sched.advance_time(t);
    run();
  }

  /// The replies waiting in self's mailbox, in order: a count, or an
  /// error's code.
  std::vector<std::string> replies() {
    return all_replies(self);
  }

  /// The next reply in self's mailbox (next_reply).
  std::string reply() {
    return next_reply(self);
  }

  /// Why the device actor ended, rendered, or "running".
  std::string device_end() {
    return end_of(self, dev.address());
  }

  /// A write of one token into the first slot of block `b`, layer 0.
  slot_write one_slot_in(block_id b) const {
    return one_slot_write(*this, b);
  }

  /// Block `b`'s first slot of layer 0 still holds zeros (never written).
  bool untouched(block_id b) const {
    auto& lay = store->layout();
    auto* slot = static_cast<const std::uint8_t*>(store->layer_base(0))
                 + b * lay.block_bytes();
    for (std::size_t i = 0; i < lay.row_bytes(); ++i)
      if (slot[i] != 0)
        return false;
    return true;
  }
};

} // namespace kvactor::test
