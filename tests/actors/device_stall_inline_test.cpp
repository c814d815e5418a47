// Work a device-actor handler waits for itself - a slot write, a gather -
// behind earlier work that is overdue or hangs. Neither is made on a GPU
// the actor has declared stalled (the oldest work overdue when it comes:
// nothing staged or submitted, the requester told of that work's stall),
// and its wait is no longer than what the oldest work has left of its own
// bound: on one stream it queues behind that work, so if that work hangs,
// the stall is that work's, noticed at its bound - not the write's, a
// whole timeout later (the actor's thread polls nothing while it waits).
// Copies and swaps check too before they are submitted. The device runs
// alone (bare_device.hpp); the stall stops its cache (device_stall_test.cpp).
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "bare_device.hpp"
#include "timed_storage.hpp"

using namespace kvactor;
using namespace kvactor::test;
using namespace std::chrono_literals;

namespace {

const std::string copy_overdue = "device_failure (device actor: copy of 1 "
                                 "block pairs not complete after 1001 ms";

} // namespace

BOOST_AUTO_TEST_SUITE(device_stall_inline_suite)

BOOST_AUTO_TEST_CASE(a_write_behind_an_overdue_copy_is_not_made) {
  // A copy (in a cache, the pool's copy-on-write) is overdue (the clock
  // passed without the watchdog's poll): the write that comes next is the
  // first to see it.
  bare_device f{1000};
  f.self->send(f.dev, copy_atom::value, std::vector<block_copy>{{4, 5}});
  f.run();
  BOOST_REQUIRE_EQUAL(f.store->pending(), 1u);
  f.sched.clock().current_time += 1001ms;
  f.self->send(f.dev, write_atom::value, f.one_slot_in(8));
  f.run();
  auto copy = f.reply();
  BOOST_TEST(has(copy, copy_overdue), copy);
  auto write = f.reply();
  BOOST_TEST(has(write, copy_overdue), write);
  BOOST_TEST(f.untouched(8));
  BOOST_TEST(f.store->pending() == 1u); // the write was never submitted
  BOOST_TEST(has(f.device_end(), "not complete after"));
}

BOOST_AUTO_TEST_CASE(a_gather_behind_an_overdue_swap_out_is_not_made) {
  bare_device f{1000};
  f.self->send(f.dev, swap_out_atom::value,
               std::vector<block_move>{{4, 0}});
  f.run();
  f.sched.clock().current_time += 1001ms;
  f.self->send(f.dev, gather_atom::value, std::uint32_t{0},
               std::vector<block_id>{8}, std::uint64_t{4});
  f.run();
  const std::string overdue = "swap-out of 1 blocks not complete after 1001 ms";
  auto swap = f.reply();
  BOOST_TEST(has(swap, overdue), swap);
  auto gather = f.reply();
  BOOST_TEST(has(gather, overdue), gather);
  BOOST_TEST(f.store->pending() == 1u);
}

BOOST_AUTO_TEST_CASE(a_copy_behind_an_overdue_copy_is_not_submitted) {
  bare_device f{1000};
  f.self->send(f.dev, copy_atom::value, std::vector<block_copy>{{4, 5}});
  f.run();
  f.sched.clock().current_time += 1001ms;
  f.self->send(f.dev, copy_atom::value, std::vector<block_copy>{{6, 7}});
  f.run();
  auto first = f.reply();
  BOOST_TEST(has(first, copy_overdue), first);
  auto second = f.reply();
  BOOST_TEST(has(second, copy_overdue), second);
  BOOST_TEST(f.store->pending() == 1u);
}

BOOST_AUTO_TEST_CASE(a_write_queued_behind_a_hanging_copy_names_the_copy) {
  // Halfway through the copy's bound, the GPU hangs and a write comes: the
  // write waits no longer than the copy has left, and the stall everyone
  // hears of is the copy's.
  bare_device f{1000};
  f.self->send(f.dev, copy_atom::value, std::vector<block_copy>{{4, 5}});
  f.run();
  f.sched.clock().current_time += 500ms;
  f.store->stall();
  f.self->send(f.dev, write_atom::value, f.one_slot_in(8));
  f.run();
  const std::string stalled = "device_failure (device actor: copy of 1 block "
                              "pairs not complete after 1000 ms";
  auto copy = f.reply();
  BOOST_TEST(has(copy, stalled), copy);
  auto write = f.reply();
  BOOST_TEST(has(write, stalled), write);
  BOOST_TEST(has(f.device_end(), "not complete after"));
}

BOOST_AUTO_TEST_CASE(a_write_whose_own_work_hangs_is_named_after_its_bound) {
  // Nothing older in flight: the write's own bound, and its own name.
  bare_device f{1000};
  f.store->stall();
  f.self->send(f.dev, write_atom::value, f.one_slot_in(8));
  f.run();
  auto write = f.reply();
  BOOST_TEST(has(write, "slot write of 1 tokens of layer 0 not complete after "
                        "1000 ms"),
             write);
}

BOOST_AUTO_TEST_CASE(a_write_behind_copies_that_complete_is_made) {
  // Earlier work within its bound, complete when the write looks: answered,
  // and the write made.
  bare_device f{1000};
  f.self->send(f.dev, copy_atom::value, std::vector<block_copy>{{4, 5}});
  f.run();
  f.sched.clock().current_time += 900ms;
  f.store->complete_one(1);
  f.self->send(f.dev, write_atom::value, f.one_slot_in(8));
  f.run();
  BOOST_TEST(f.reply() == "ok");
  BOOST_TEST(f.reply() == "ok");
  BOOST_TEST(!f.untouched(8));
  BOOST_TEST(f.device_end() == "running");
}

BOOST_AUTO_TEST_CASE(a_write_queued_behind_long_healthy_work_is_no_stall) {
  // One stream, a 1000 ms bound: a copy-on-write copy of 990 ms, then -
  // 10 ms later - a 30 ms write queued behind it. Healthy all along; the
  // write's own run is timed from when the copy was answered, as a copy
  // in its place would be (drain), not from its own submission.
  auto cfg = stall_config(1000);
  auto opts = storage_options_for(cfg);
  opts.kind = "host";
  auto made = make_storage(opts);
  BOOST_REQUIRE(made);
  auto timed = std::make_shared<timed_storage>(std::move(*made));
  cache_fixture f{cfg}; // its scheduler and actor; the device runs alone
  timed->sched = &f.sched;
  timed->durations = {990ms, 30ms};
  auto dev = spawn_device_actor(f.sys, timed, false, 1000ms);
  f.self->send(dev, copy_atom::value, std::vector<block_copy>{{4, 5}});
  f.run();
  f.sched.clock().current_time += 10ms;
  slot_write w;
  w.layer = 0;
  w.slots = {std::int64_t{5} * f.cfg.block_size};
  w.keys.assign(f.row_bytes(), 1);
  w.values.assign(f.row_bytes(), 2);
  f.self->send(dev, write_atom::value, w);
  f.run();
  for (int i = 0; i < 30; ++i) {
    f.sched.clock().current_time += 50ms;
    f.sched.trigger_timeouts();
    f.run();
  }
  std::vector<std::string> got;
  for (int i = 0; i < 2; ++i)
    f.self->receive([&](std::uint32_t) { got.push_back("ok"); },
                    [&](caf::error& err) { got.push_back(render(err)); },
                    caf::after(std::chrono::seconds(0)) >> [&] {
                      got.push_back("no reply");
                    });
  BOOST_TEST(got[0] == "ok");
  BOOST_TEST(got[1] == "ok");
  f.self->send_exit(dev, caf::exit_reason::user_shutdown);
  f.run();
}

BOOST_AUTO_TEST_SUITE_END()
