// A stalled GPU: device work not complete after device_timeout_ms. Every
// requester waiting on the device - the manager's swap, the pool awaiting a
// copy-on-write copy (it takes no other message meanwhile), a slot write
// waiting for its own work - hears the stall, naming the work, and the cache
// stops (the device actor sends the manager an exit before it answers
// anyone, then quits; the manager stops the rest - and so when the device
// actor is told to exit), where before they all waited for ever. Time is the deterministic scheduler's: it passes only
// when a test lets it.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <caf/all.hpp>

#include "fixture.hpp"
#include "kvactor/actors/device_actor.hpp"
#include "kvactor/messages/registration.hpp"
#include "slow_storage.hpp"
#include "bare_device.hpp"
#include "stall_fixture.hpp"
#include "spawn_fn.hpp"

using namespace kvactor;
using namespace kvactor::test;
using namespace std::chrono_literals;

namespace {

using event_log = std::shared_ptr<std::vector<std::string>>;

/// An actor standing in for a part of the cache (the manager, the pool),
/// and for a requester too: it logs, in order, the exits it is sent
/// ("exit: <reason>"), the answer to a swap-out of `moves` it asks `dev`
/// for at its start (none if empty), and the calls it gets ("call").
/// Answered, it makes a call to `next` (if any): a caller's next call,
/// sent once it heard. Sent an actor, it sends that actor an exit.
caf::actor spawn_spy(caf::actor_system& sys, const device_actor& dev,
                     event_log log, std::vector<block_move> moves,
                     caf::actor next = {}) {
  return spawn_fn(sys, [log, dev, moves, next](caf::event_based_actor* self) {
    self->set_exit_handler([log](caf::exit_msg& msg) {
      log->push_back("exit: " + render(msg.reason));
    });
    auto call_next = [self, next] {
      if (next)
        self->send(next, std::int32_t{1});
    };
    if (!moves.empty())
      self->request(dev, caf::infinite, swap_out_atom::value, moves)
        .then(
          [log, call_next](std::uint32_t) {
            log->push_back("swapped");
            call_next();
          },
          [log, call_next](caf::error& err) {
            log->push_back("answer: " + render(err));
            call_next();
          });
    return caf::behavior{
      [log](std::int32_t) { log->push_back("call"); },
      // Told to, it stops `whom` itself (an exit from it, as the manager's).
      [self](const caf::actor& whom) {
        self->send_exit(whom, caf::exit_reason::user_shutdown);
      }};
  });
}

} // namespace

BOOST_AUTO_TEST_SUITE(device_stall_suite)

BOOST_AUTO_TEST_CASE(a_stalled_swap_fails_its_requester_and_stops_the_cache) {
  stall_fixture f;
  auto a = f.allocate(1, 10);
  BOOST_REQUIRE(a);
  f.self->send(f.mgr, swap_out_atom::value, request_id{1});
  f.run();
  BOOST_TEST(f.store->pending() == 1u);
  f.let_pass(999ms); // slow, not stalled: nothing happens
  BOOST_TEST(f.reply() == "no reply");
  BOOST_TEST(!*f.store->told_stalled);
  f.let_pass(2ms);
  // And the storage knows: its teardown must not wait for the GPU.
  BOOST_TEST(*f.store->told_stalled);
  auto got = f.reply();
  BOOST_TEST(has(got, "device_failure"), got);
  BOOST_TEST(has(got, "swap-out of 3 blocks not complete after 1001 ms "
                      "(device_timeout_ms 1000): the GPU looks stalled"),
             got);
  auto why = f.manager_end();
  BOOST_TEST(has(why, "the cache stopped: its device actor ended "
                      "(kvactor: device_failure (device actor: swap-out of 3 "
                      "blocks not complete"),
             why);
  f.shutdown(); // nothing left to stop
}

BOOST_AUTO_TEST_CASE(the_cache_hears_of_a_stall_before_anyone_waiting_on_it) {
  // The manager's down message is sent only as the device actor ends - on
  // a thread of its own, that can be after a caller told of the stall has
  // made its next call, which the cache would still serve. So the device
  // sends the manager and the pool registered with it an exit first: it is
  // ahead of every answer in their mailboxes, so of every message a caller
  // sends once answered. Spies stand in for a manager that is also the
  // requester, and for the pool, which the requester calls once answered
  // (an extend or a step would reach it so).
  stall_fixture f;
  auto dev = spawn_device_actor(f.sys, make_slow(stall_config()), false,
                                std::chrono::milliseconds{1000});
  auto pool_log = std::make_shared<std::vector<std::string>>();
  auto pool = spawn_spy(f.sys, dev, pool_log, {});
  auto log = std::make_shared<std::vector<std::string>>();
  auto spy = spawn_spy(f.sys, dev, log, {{0, 0}, {1, 1}}, pool);
  // Registered once: a later registration (the decoy's) is ignored, so no
  // one can divert the exit.
  auto decoy_log = std::make_shared<std::vector<std::string>>();
  auto decoy = spawn_spy(f.sys, dev, decoy_log, {});
  caf::anon_send(dev, registry_atom::value, spy, pool); // before the swap
  caf::anon_send(dev, registry_atom::value, decoy, decoy);
  f.run();
  BOOST_TEST(log->empty());
  f.let_pass(1001ms);
  BOOST_REQUIRE_EQUAL(log->size(), 2u);
  const std::string stalled = "kvactor: device_failure (device actor: "
                              "swap-out of 2 blocks not complete after 1001 ms";
  BOOST_TEST(has((*log)[0], "exit: " + stalled), (*log)[0]);
  BOOST_TEST(has((*log)[1], "answer: " + stalled), (*log)[1]);
  BOOST_REQUIRE_EQUAL(pool_log->size(), 2u);
  BOOST_TEST(has((*pool_log)[0], "exit: " + stalled), (*pool_log)[0]);
  BOOST_TEST((*pool_log)[1] == "call");
  BOOST_TEST(decoy_log->empty());
  for (auto& a : {spy, pool, decoy})
    caf::anon_send_exit(a, caf::exit_reason::kill);
  f.run();
  f.shutdown();
}

/// The logs of a manager spy (the requester) and a pool spy (called once
/// the requester is answered) registered with a slow device, after `stop`
/// (given the device's storage, the device and the manager spy) ends the
/// device with the swap in flight.
template <class Stop>
std::pair<std::vector<std::string>, std::vector<std::string>>
logs_after(Stop stop) {
  stall_fixture f;
  auto store = make_slow(stall_config());
  auto dev = spawn_device_actor(f.sys, store, false,
                                std::chrono::milliseconds{1000});
  auto pool_log = std::make_shared<std::vector<std::string>>();
  auto pool = spawn_spy(f.sys, dev, pool_log, {});
  auto log = std::make_shared<std::vector<std::string>>();
  auto spy = spawn_spy(f.sys, dev, log, {{0, 0}}, pool);
  caf::anon_send(dev, registry_atom::value, spy, pool);
  f.run();
  BOOST_REQUIRE(log->empty());
  stop(*store, dev, spy);
  f.run();
  for (auto& a : {spy, pool})
    caf::anon_send_exit(a, caf::exit_reason::kill);
  f.run();
  f.shutdown();
  return {*log, *pool_log};
}

const std::string stopped_in_flight = "answer: kvactor: shutting_down (device "
                                      "actor: stopped with this work in flight)";

BOOST_AUTO_TEST_CASE(the_cache_hears_of_an_exit_the_device_was_told_first_too) {
  // Told to exit with work in flight, the device answers it (shutting_down,
  // once the work is done) - after telling the manager and the pool, as
  // for a stall.
  auto [log, pool_log] = logs_after([](auto&, auto& dev, auto&) {
    caf::anon_send_exit(dev, caf::exit_reason::user_shutdown);
  });
  BOOST_REQUIRE_EQUAL(log.size(), 2u);
  BOOST_TEST(log[0] == "exit: exit_reason(user_shutdown)");
  BOOST_TEST(has(log[1], stopped_in_flight), log[1]);
  BOOST_TEST(pool_log == (std::vector<std::string>{
                           "exit: exit_reason(user_shutdown)", "call"}));
}

BOOST_AUTO_TEST_CASE(an_exit_with_stalled_work_gives_up_on_it_and_says_so) {
  // Told to exit, the device waits for its work in flight at most the
  // timeout: stalled, the work is answered as such, and the storage is
  // told, so that its teardown does not wait for the GPU either.
  std::shared_ptr<std::atomic<bool>> told;
  auto [log, pool_log] = logs_after([&](auto& store, auto& dev, auto&) {
    told = store.told_stalled;
    store.stall();
    caf::anon_send_exit(dev, caf::exit_reason::user_shutdown);
  });
  BOOST_REQUIRE_EQUAL(log.size(), 2u);
  BOOST_TEST(has(log[1], "stopped with this work in flight, the GPU stalled "
                         "(not complete within device_timeout_ms)"),
             log[1]);
  BOOST_TEST(*told);
}

BOOST_AUTO_TEST_CASE(the_cache_hears_of_a_kill_first_too) {
  // Killed, the device runs no handler: its state, as it goes, tells the
  // manager and the pool (the reason CAF set) before it answers the work
  // in flight.
  auto [log, pool_log] = logs_after([](auto&, auto& dev, auto&) {
    caf::anon_send_exit(dev, caf::exit_reason::kill);
  });
  // Not the kill itself: CAF would kill the manager outright, and its exit
  // handler, which stops the cache and names why, would not run.
  const std::string killed = "exit: kvactor: shutting_down (the device actor "
                             "was killed)";
  BOOST_REQUIRE_EQUAL(log.size(), 2u);
  BOOST_TEST(log[0] == killed);
  BOOST_TEST(has(log[1], stopped_in_flight), log[1]);
  BOOST_TEST(pool_log == (std::vector<std::string>{killed, "call"}));
}

BOOST_AUTO_TEST_CASE(the_cache_hears_of_a_crash_first_too) {
  // A storage that throws crashes the device actor (no message handler
  // finishes): its state, as it goes, tells the manager and the pool the
  // crash's error, which names what was thrown.
  auto [log, pool_log] = logs_after([](auto& store, auto& dev, auto& spy) {
    store.throw_next();
    // As the manager: the device takes a swap from no one else.
    caf::send_as(spy, dev, swap_in_atom::value, std::vector<block_move>{{1, 1}});
  });
  BOOST_REQUIRE_EQUAL(log.size(), 2u);
  BOOST_TEST(log[0] == "exit: kvactor: device_failure (device actor: crashed: "
                      "slow_storage: thrown as the test asked)");
  BOOST_TEST(has(log[1], stopped_in_flight), log[1]);
  BOOST_REQUIRE_EQUAL(pool_log.size(), 2u);
  BOOST_TEST(pool_log[0] == log[0]);
  BOOST_TEST(pool_log[1] == "call");
}

BOOST_AUTO_TEST_CASE(an_exit_from_the_manager_is_told_to_no_one) {
  // The manager stopping the cache stops the pool itself: the device only
  // answers its work in flight.
  auto [log, pool_log] = logs_after([](auto&, auto& dev, auto& spy) {
    caf::anon_send(spy, caf::actor_cast<caf::actor>(dev));
  });
  BOOST_REQUIRE_EQUAL(log.size(), 1u);
  BOOST_TEST(has(log[0], stopped_in_flight), log[0]);
  BOOST_TEST(pool_log == std::vector<std::string>{"call"});
}

BOOST_AUTO_TEST_CASE(a_stalled_copy_on_write_copy_frees_the_pool_awaiting_it) {
  // The pool takes no other message while it awaits a copy: stalled, the
  // copy would hold every allocation for ever.
  stall_fixture f;
  BOOST_REQUIRE(f.allocate(1, 10)); // last block half full, shared below
  BOOST_REQUIRE(f.fork(1, 2));
  f.self->send(f.mgr, extend_atom::value, request_id{2}, std::uint64_t{1});
  f.run();
  BOOST_TEST(f.store->pending() == 1u); // the copy-on-write copy
  f.self->send(f.mgr, allocate_atom::value, make_request(f.cfg, 3, 4));
  f.run(); // queued behind the awaited copy
  f.let_pass(1500ms);
  // Both are answered, in either order: the extend with the stall, the
  // allocation queued behind it with the cache's stop (which names the
  // stall too - so each is told apart by what it names first).
  auto first = f.reply();
  auto second = f.reply();
  const bool extend_first = has(first, "device_failure (extend of request 2");
  const auto& extend = extend_first ? first : second;
  const auto& queued = extend_first ? second : first;
  BOOST_TEST(has(extend, "device_failure (extend of request 2"), extend);
  BOOST_TEST(has(extend, "copy of 1 block pairs not complete after"), extend);
  BOOST_TEST(has(queued, "shutting_down (the manager exited before it "
                         "answered allocate of request 3"),
             queued);
  BOOST_TEST(has(f.manager_end(), "its device actor ended"));
  f.shutdown();
}

BOOST_AUTO_TEST_CASE(a_stalled_slot_write_answers_everyone_waiting) {
  // A write waits for its own work on the device actor's thread; bounded,
  // a stalled one ends the wait, and the swap waiting before it is told
  // too. Both hear of the oldest work's stall: the swap, whose bound runs
  // out first (the write's own would start once the swap was answered).
  stall_fixture f;
  auto a = f.allocate(1, 10);
  BOOST_REQUIRE(a);
  BOOST_REQUIRE(f.allocate(2, 4));
  f.self->send(f.mgr, swap_out_atom::value, request_id{1});
  f.run();
  f.store->stall();
  auto b = f.table(2);
  BOOST_REQUIRE(b);
  f.self->send(f.cache.device, write_atom::value,
               f.one_slot_in(b->blocks.front()));
  f.run();
  // Both told of the work that stalled: the write first (its own reply),
  // then the swap (failed in the device, or closed by the manager's stop).
  auto write = f.reply();
  auto swap = f.reply();
  const std::string stalled = "swap-out of 3 blocks not complete after "
                              "1000 ms (device_timeout_ms 1000)";
  BOOST_TEST(has(write, "device_failure (device actor: " + stalled), write);
  BOOST_TEST(has(swap, "swap-out of request 1"), swap);
  BOOST_TEST(has(swap, stalled), swap);
  BOOST_TEST(has(f.manager_end(), "its device actor ended"));
  f.shutdown();
}

BOOST_AUTO_TEST_CASE(a_write_that_finds_the_gpu_stalled_writes_nothing) {
  // The write's own look at the work in flight (a swap-out holds blocks
  // closed to writes) finds the swap overdue: the device actor stops for
  // the stall then and there, and the write - on a GPU it just declared
  // stalled - is not staged, submitted or waited for, but told why. The
  // clock passes without the watchdog's poll, so the write is first to see.
  bare_device f{1000};
  f.self->send(f.dev, swap_out_atom::value,
               std::vector<block_move>{{4, 0}});
  f.run();
  BOOST_REQUIRE_EQUAL(f.store->pending(), 1u);
  f.sched.clock().current_time += 1001ms; // no timeout fires
  f.self->send(f.dev, write_atom::value, f.one_slot_in(8));
  f.run();
  const std::string stalled = "swap-out of 1 blocks not complete after "
                              "1001 ms (device_timeout_ms 1000)";
  auto swap = f.reply();
  BOOST_TEST(has(swap, "device_failure (device actor: " + stalled), swap);
  auto write = f.reply();
  BOOST_TEST(has(write, "device_failure (device actor: " + stalled), write);
  BOOST_TEST(f.untouched(8)); // its first slot was never written
  BOOST_TEST(has(f.device_end(), "not complete after"));
}

BOOST_AUTO_TEST_CASE(work_queued_behind_earlier_work_is_timed_from_when_that_ended) {
  // Two swaps on one stream, each 600 ms of a 1000 ms timeout: the second
  // waits 600 ms behind the first, then runs its own 600 ms. Healthy - the
  // GPU made progress all along - so the device must not call it stalled
  // at 1000 ms after its submission; only its own run, from when the work before it
  // was answered, counts.
  bare_device f{1000};
  f.self->send(f.dev, swap_out_atom::value,
               std::vector<block_move>{{4, 0}, {5, 1}});
  f.self->send(f.dev, swap_out_atom::value,
               std::vector<block_move>{{6, 2}});
  f.run();
  BOOST_REQUIRE(f.store->pending() == 2u);
  f.let_pass(600ms);
  f.store->complete_one(1);
  f.run();
  BOOST_TEST(f.reply() == "ok");
  f.let_pass(600ms); // 1200 ms since it was submitted, 600 ms its own
  BOOST_TEST(f.reply() == "no reply");
  BOOST_TEST(f.device_end() == "running");
  // Stalled from here: the bound still holds, from where its run began.
  f.let_pass(400ms);
  auto got = f.reply();
  BOOST_TEST(has(got, "swap-out of 1 blocks not complete after 1000 ms"), got);
  BOOST_TEST(has(f.device_end(), "not complete after"));
}

BOOST_AUTO_TEST_CASE(later_work_answered_first_does_not_restart_the_oldests_clock) {
  // Only the oldest work's end starts the next one's clock: a later op
  // that finished on another stream says nothing of the oldest, which
  // stalled.
  bare_device f{1000};
  f.self->send(f.dev, swap_out_atom::value,
               std::vector<block_move>{{4, 0}, {5, 1}});
  f.self->send(f.dev, copy_atom::value,
               std::vector<block_copy>{{0, 1}});
  f.run();
  f.let_pass(600ms);
  f.store->complete_one(2);
  f.run();
  BOOST_TEST(f.reply() == "ok");
  f.let_pass(400ms);
  auto got = f.reply();
  BOOST_TEST(has(got, "swap-out of 2 blocks not complete after 1000 ms"), got);
  BOOST_TEST(has(f.device_end(), "not complete after"));
}

BOOST_AUTO_TEST_CASE(with_no_timeout_the_device_waits_for_ever) {
  stall_fixture f{0};
  auto a = f.allocate(1, 10);
  BOOST_REQUIRE(a);
  f.self->send(f.mgr, swap_out_atom::value, request_id{1});
  f.run();
  f.let_pass(std::chrono::hours{24});
  BOOST_TEST(f.reply() == "no reply");
  BOOST_TEST(f.manager_end() == "running");
  BOOST_TEST(!*f.store->told_stalled);
  f.store->complete();
  f.run();
  BOOST_TEST(f.reply() == "ok");
}

BOOST_AUTO_TEST_CASE(a_negative_timeout_means_none_as_zero_does) {
  // spawn_device_actor skips the config's checks: a negative timeout is no
  // timeout, as 0 is (it had made a slot write's bounded wait give up at
  // once, a stall declared on a GPU that is fine).
  stall_fixture f;
  f.store->stall(); // a bounded wait would time out; an unbounded one waits
  auto dev = spawn_device_actor(f.sys, f.store, false, -1ms);
  f.self->send(dev, write_atom::value, f.one_slot_in(0));
  f.run();
  BOOST_TEST(f.reply() == "ok");
  caf::anon_send_exit(dev, caf::exit_reason::user_shutdown);
  f.run();
  f.shutdown();
}

BOOST_AUTO_TEST_CASE(on_the_threaded_scheduler_a_stall_is_answered_not_before_its_time) {
  // The real clock and a detached device, as in production: the watchdog's
  // delayed poll declares the stall, the manager stops the cache.
  caf::actor_system_config sys_cfg;
  add_message_types(sys_cfg);
  sys_cfg.set("logger.file-verbosity", caf::atom("quiet"));
  sys_cfg.set("logger.console-verbosity", caf::atom("quiet"));
  caf::actor_system sys{sys_cfg};
  auto c = stall_config(100);
  auto store = make_slow(c); // its work completes only when told: never here
  spawn_options opts;
  opts.store = store;
  auto started = spawn_kv_cache(sys, c, opts);
  BOOST_REQUIRE(started);
  auto mgr = started->manager;
  std::string swap = "no reply";
  std::string why = "running";
  caf::timespan waited{0};
  {
    caf::scoped_actor self{sys};
    self->monitor(mgr);
    bool allocated = false;
    self->request(mgr, std::chrono::seconds(30), allocate_atom::value,
                  make_request(c, 1, 10))
      .receive([&](request_handle_actor&, block_table&) { allocated = true; },
               [&](caf::error&) {});
    BOOST_REQUIRE(allocated);
    auto start = std::chrono::steady_clock::now();
    // 30 s: the hang this guards against, not a speed target.
    self->request(mgr, std::chrono::seconds(30), swap_out_atom::value,
                  request_id{1})
      .receive([&](std::uint32_t) { swap = "ok"; },
               [&](caf::error& err) { swap = render(err); });
    waited = std::chrono::steady_clock::now() - start;
    self->receive([&](caf::down_msg& dm) { why = render(dm.reason); },
                  caf::after(std::chrono::seconds(30)) >> [] {});
  }
  mgr = nullptr;
  *started = cache_system{}; // drops the handles, so the system can end
  sys.await_all_actors_done();
  BOOST_TEST(has(swap, "swap-out of 3 blocks not complete after"), swap);
  auto waited_ms =
    std::chrono::duration_cast<std::chrono::milliseconds>(waited).count();
  BOOST_TEST(waited_ms >= 100); // not declared early
  BOOST_TEST(has(why, "its device actor ended"), why);
}

BOOST_AUTO_TEST_SUITE_END()
