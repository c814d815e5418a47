// A cache on a slow_storage whose device actor gives work a timeout
// (device_timeout_ms): the stall tests' fixture. Time is the deterministic
// scheduler's - it passes only when a test lets it - and the storage's work
// completes only when a test says so (slow_storage.hpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <caf/all.hpp>

#include "fixture.hpp"
#include "slow_storage.hpp"

namespace kvactor::test {

inline cache_config stall_config(std::uint64_t timeout_ms = 1000) {
  auto cfg = host_tier_config();
  cfg.device_timeout_ms = timeout_ms;
  return cfg;
}

/// The next reply in `self`'s mailbox: "ok" for any value, the rendered
/// error, or "no reply".
inline std::string next_reply(caf::scoped_actor& self) {
  std::string got = "no reply";
  self->receive([&](std::uint32_t) { got = "ok"; },
                [&](block_table&) { got = "ok"; },
                [&](gathered_kv&) { got = "ok"; },
                [&](request_handle_actor&, block_table&) { got = "ok"; },
                [&](caf::error& err) { got = render(err); },
                caf::after(std::chrono::seconds(0)) >> [] {});
  return got;
}

/// The replies waiting in `self`'s mailbox, in order: a count, or an
/// error's code.
inline std::vector<std::string> all_replies(caf::scoped_actor& self) {
  std::vector<std::string> out;
  for (bool more = true; more;)
    self->receive([&](std::uint32_t n) { out.push_back(std::to_string(n)); },
                  [&](caf::error& err) { out.push_back(outcome(err)); },
                  caf::after(std::chrono::seconds(0)) >> [&] { more = false; });
  return out;
}

/// Why the actor at `who` (which `self` monitors) ended, rendered, or
/// "running".
inline std::string end_of(caf::scoped_actor& self, const caf::actor_addr& who) {
  std::string why = "running";
  for (bool more = true; more;)
    self->receive(
      [&](caf::down_msg& dm) {
        if (dm.source == who)
          why = render(dm.reason);
      },
      caf::after(std::chrono::seconds(0)) >> [&] { more = false; });
  return why;
}

/// A write of one token into the first slot of block `b` of layer 0, for
/// `f`'s model.
inline slot_write one_slot_write(const cache_fixture& f, block_id b) {
  slot_write w;
  w.layer = 0;
  w.slots = {std::int64_t{b} * f.cfg.block_size};
  w.keys.assign(f.row_bytes(), 1);
  w.values.assign(f.row_bytes(), 2);
  return w;
}

/// A cache on a slow_storage whose device actor gives work `timeout_ms`.
struct stall_fixture : cache_fixture {
  std::shared_ptr<slow_storage> store;

  explicit stall_fixture(std::uint64_t timeout_ms = 1000)
    : stall_fixture(stall_config(timeout_ms),
                    make_slow(stall_config(timeout_ms))) {
  }
  stall_fixture(cache_config c, std::shared_ptr<slow_storage> s)
    : cache_fixture(std::move(c), s), store(std::move(s)) {
    self->monitor(mgr);
  }

  /// Lets `t` of the scheduler's clock pass (the device's watchdog polls
  /// meanwhile), then runs what that set off.
  void let_pass(caf::timespan t) {
    sched.advance_time(t);
    run();
  }

  /// The next reply in self's mailbox (next_reply).
  std::string reply() {
    return next_reply(self);
  }

  /// Why the manager ended, or "running".
  std::string manager_end() {
    return end_of(self, mgr.address());
  }

  /// A write of one token into the first slot of device block `b`.
  slot_write one_slot_in(block_id b) const {
    return one_slot_write(*this, b);
  }
};

inline bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

} // namespace kvactor::test
