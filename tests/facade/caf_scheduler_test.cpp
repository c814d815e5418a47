// kvactor's CAF scheduler (tune_for_latency): no actor starves while one
// worker is saturated - a timer's message, handle actors told to end; actors
// that quit without having set a timeout no longer wake the clock thread,
// while every kind of timer - request timeouts, receive timeouts, delayed
// messages - still fires, and an actor that quits with a timer pending still
// has it cancelled. With more workers than may poll, a call from outside
// does not wait behind a long job, after a pause wakes the worker that ran
// the last one, and no job is stranded. Systems asking
// for another scheduler keep theirs.
// configure() runs the workers asked for, or CAF's default for 0.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <caf/actor_registry.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/defaults.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/sec.hpp>
#include <caf/send.hpp>

#include "fixture.hpp"
#include "kvactor/actors/caf_scheduler.hpp"
#include "kvactor/actors/kv_cache_manager.hpp"
#include "kvactor/messages/registration.hpp"
#include "spawn_fn.hpp"

using namespace kvtest;
using kvactor::detail::quiet_clock_counts;
using kvactor::detail::quiet_clock_counts_of;
using namespace std::chrono_literals;

namespace {

/// A system on kvactor's scheduler; one worker unless told otherwise, and
/// sleeping workers that steal at CAF's relaxed timeout unless given one.
struct quiet_system {
  caf::actor_system_config cfg;
  caf::actor_system sys;

  explicit quiet_system(std::size_t workers = 1,
                        caf::timespan relaxed_sleep = caf::timespan{0})
    : sys{(kvactor::tune_for_latency(cfg),
           cfg.set("scheduler.max-threads", workers),
           relaxed_sleep.count() > 0
             ? (void) cfg.set("work-stealing.relaxed-sleep-duration",
                              relaxed_sleep)
             : (void) 0,
           cfg)} {
    // nop
  }
};

/// The clock's counts once `done(counts)` holds, or after 5 s. An actor
/// cancels its timeouts last as it quits - after leaving the running count
/// and after sending its down messages - so a test that saw it go waits
/// for its cancellation.
template <class Pred>
quiet_clock_counts settled_counts(caf::actor_system& sys, Pred done) {
  auto counts = *quiet_clock_counts_of(sys);
  for (int i = 0; i < 5000 && !done(counts); ++i) {
    std::this_thread::sleep_for(1ms);
    counts = *quiet_clock_counts_of(sys);
  }
  return counts;
}

/// Sends `x + 1` on to `other`, naming itself, until `stop` is set: two of
/// them keep one worker busy for good, always with a freshly woken actor.
/// With `anonymous`, its sends name no execution unit (as a monitor's down
/// does): from a worker's thread they reach the coordinator's enqueue.
caf::behavior bouncer(caf::event_based_actor* self,
                      std::shared_ptr<std::atomic<bool>> stop,
                      bool anonymous = false) {
  return {[self, stop, anonymous](std::int64_t x, const caf::actor& other) {
    if (stop->load())
      return;
    if (anonymous)
      caf::anon_send(other, x + 1, caf::actor_cast<caf::actor>(self));
    else
      self->send(other, x + 1, caf::actor_cast<caf::actor>(self));
  }};
}

} // namespace

BOOST_FIXTURE_TEST_SUITE(caf_scheduler_suite, watchdog)

BOOST_AUTO_TEST_CASE(a_timer_fires_while_the_only_worker_is_saturated) {
  quiet_system q;
  auto stop = std::make_shared<std::atomic<bool>>(false);
  auto a = q.sys.spawn(bouncer, stop, false);
  auto b = q.sys.spawn(bouncer, stop, false);
  caf::anon_send(a, std::int64_t{0}, b);
  // The stopper's message comes from the clock thread while a and b keep
  // the worker busy; newest-first workers would never run the stopper.
  std::promise<void> stopped;
  auto stopper = spawn_fn(q.sys, [stop, &stopped](caf::event_based_actor* self)
                               -> caf::behavior {
    return {[self, stop, &stopped](std::int32_t) {
      stop->store(true);
      stopped.set_value();
      self->quit();
    }};
  });
  caf::delayed_anon_send(stopper, 5ms, std::int32_t{0});
  auto fired = stopped.get_future().wait_for(10s) == std::future_status::ready;
  stop->store(true); // frees the worker either way
  BOOST_REQUIRE_MESSAGE(fired, "the timer's message never ran");
  caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(b, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_CASE(ended_handle_actors_quit_while_the_load_goes_on) {
  auto cfg = small_config(256);
  cfg.scheduler_threads = 1;
  cache_fixture f{cfg};
  auto& sys = *f.sys;
  auto mgr = f.m().actor();
  // A client keeps 16 allocate-then-free churns in flight, 3000 in all, and
  // counts the running actors as the last one lands - before the load has
  // paused. Each churn ended a handle actor; newest-first workers left
  // every one of them waiting behind the load.
  constexpr std::size_t window = 16;
  constexpr std::size_t churns = 3000;
  constexpr auto failed = static_cast<std::size_t>(-1);
  std::promise<std::size_t> running_at_end;
  spawn_fn(sys, [&, mgr](caf::event_based_actor* self) {
    auto next = std::make_shared<std::size_t>(0);
    auto done = std::make_shared<std::size_t>(0);
    auto over = std::make_shared<bool>(false);
    auto finish = [over, &running_at_end](std::size_t running) {
      if (!*over) {
        *over = true;
        running_at_end.set_value(running);
      }
    };
    auto churn = std::make_shared<std::function<void()>>();
    *churn = [=, &f, &sys] {
      if (*next == churns)
        return;
      auto id = ++*next;
      self->request(mgr, caf::infinite, allocate_atom::value, f.req(id, 4))
        .then(
          [=, &sys](request_handle_actor&, block_table&) {
            self->request(mgr, caf::infinite, free_atom::value, id)
              .then(
                [=, &sys](std::uint32_t) {
                  if (++*done == churns) {
                    finish(sys.registry().running());
                    *churn = nullptr; // it holds itself
                    return;
                  }
                  (*churn)();
                },
                [=](caf::error&) { finish(failed); });
          },
          [=](caf::error&) { finish(failed); });
    };
    for (std::size_t k = 0; k < window; ++k)
      (*churn)();
  });
  auto fut = running_at_end.get_future();
  BOOST_REQUIRE(fut.wait_for(60s) == std::future_status::ready);
  auto running = fut.get();
  BOOST_REQUIRE_MESSAGE(running != failed, "an allocate or a free failed");
  // The cache's own actors, the client, and at most the last few handles.
  BOOST_TEST_MESSAGE("actors running as the load ended: " << running);
  BOOST_TEST(running < 100u);
}

BOOST_AUTO_TEST_CASE(a_call_from_outside_does_not_wait_behind_a_long_job) {
  // Four workers whose sleepers steal only every 10 s: a call stranded
  // behind the long job would wait for it (or for a steal), not 5 s.
  quiet_system q{4, caf::timespan{10s}};
  auto& sys = q.sys;
  auto stop = std::make_shared<std::atomic<bool>>(false);
  auto started = std::make_shared<std::atomic<bool>>(false);
  auto hog = spawn_fn(sys, [stop, started](caf::event_based_actor*) -> caf::behavior {
    return {[stop, started](std::int32_t) {
      started->store(true);
      auto until = std::chrono::steady_clock::now() + 30s;
      while (!stop->load() && std::chrono::steady_clock::now() < until)
        std::this_thread::yield();
    }};
  });
  auto echo = spawn_fn(sys, [](caf::event_based_actor*) -> caf::behavior {
    return {[](std::int32_t x) { return x; }};
  });
  caf::scoped_actor self{sys};
  bool answered = false;
  auto ask = [&](std::int32_t k) {
    self->request(echo, 5s, k).receive(
      [&](std::int32_t x) { answered = x == k; },
      [&](caf::error&) { answered = false; });
  };
  // Both actors started (a start queued behind the hog would strand its
  // actor, whatever the routing of calls).
  ask(0);
  BOOST_REQUIRE(answered);
  std::this_thread::sleep_for(5ms);
  caf::anon_send(hog, std::int32_t{0});
  for (int i = 0; i < 5000 && !started->load(); ++i)
    std::this_thread::sleep_for(1ms);
  BOOST_REQUIRE(started->load());
  std::this_thread::sleep_for(1ms); // the hog's job is no longer short
  // More calls than workers, each after the worker that ran the last one
  // stopped polling: round robin alone would queue one behind the hog.
  for (std::int32_t k = 1; k <= 8 && answered; ++k) {
    std::this_thread::sleep_for(2ms);
    ask(k);
  }
  stop->store(true);
  BOOST_TEST(answered);
  caf::anon_send_exit(hog, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(echo, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_CASE(a_call_after_a_pause_wakes_the_worker_that_served_the_last) {
  // Four workers, asleep between calls (a pause is far longer than their
  // polling), whose sleepers never wake on their own within the test: each
  // call wakes the worker that began polling last - the one that ran the
  // call before, on the core beside the caller's - not the next sleeper in
  // round robin (which would pick the same one in 1 of 4 calls).
  quiet_system q{4, caf::timespan{10s}};
  auto& sys = q.sys;
  auto where = spawn_fn(sys, [](caf::event_based_actor*) -> caf::behavior {
    return {[](std::int32_t) {
      return static_cast<std::uint64_t>(
        std::hash<std::thread::id>{}(std::this_thread::get_id()));
    }};
  });
  caf::scoped_actor self{sys};
  auto ask = [&] {
    std::uint64_t thread = 0;
    self->request(where, 5s, std::int32_t{0}).receive(
      [&](std::uint64_t t) { thread = t; }, [&](caf::error&) { thread = 0; });
    return thread;
  };
  std::this_thread::sleep_for(20ms); // every worker asleep
  auto first = ask();
  BOOST_REQUIRE(first != 0u);
  for (int i = 0; i < 6; ++i) {
    std::this_thread::sleep_for(20ms);
    BOOST_TEST(ask() == first);
  }
  caf::anon_send_exit(where, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_CASE(calls_from_many_threads_and_actor_chains_all_complete) {
  // Fewer workers may poll than run (the rest sleep until woken): no job
  // may be stranded. Eight threads call four echo actors while two pairs
  // of bouncers keep workers busy - one pair sending through the
  // coordinator from the workers' threads; every call gets its answer.
  quiet_system q{4};
  auto& sys = q.sys;
  auto stop = std::make_shared<std::atomic<bool>>(false);
  auto a = sys.spawn(bouncer, stop, false);
  auto b = sys.spawn(bouncer, stop, false);
  caf::anon_send(a, std::int64_t{0}, b);
  auto c = sys.spawn(bouncer, stop, true);
  auto d = sys.spawn(bouncer, stop, true);
  caf::anon_send(c, std::int64_t{0}, d);
  std::vector<caf::actor> echoes;
  for (int i = 0; i < 4; ++i)
    echoes.push_back(spawn_fn(sys, [](caf::event_based_actor*) -> caf::behavior {
      return {[](std::int32_t x) { return x + 1; }};
    }));
  std::atomic<int> wrong{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 8; ++t)
    callers.emplace_back([&, t] {
      caf::scoped_actor self{sys};
      for (std::int32_t k = 0; k < 500; ++k)
        self->request(echoes[(t + k) % 4], 10s, k).receive(
          [&](std::int32_t x) {
            if (x != k + 1)
              ++wrong;
          },
          [&](caf::error&) { ++wrong; });
    });
  for (auto& caller : callers)
    caller.join();
  stop->store(true);
  BOOST_TEST(wrong.load() == 0);
  for (auto& e : echoes)
    caf::anon_send_exit(e, caf::exit_reason::user_shutdown);
  for (auto& x : {a, b, c, d})
    caf::anon_send_exit(x, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_CASE(actors_quitting_without_timeouts_do_not_reach_the_clock) {
  quiet_system q;
  BOOST_REQUIRE(quiet_clock_counts_of(q.sys).has_value());
  auto before = *quiet_clock_counts_of(q.sys);
  for (int i = 0; i < 1000; ++i)
    spawn_fn(q.sys, [](caf::event_based_actor* self) { self->quit(); });
  q.sys.await_all_actors_done();
  auto after = settled_counts(q.sys, [&](const quiet_clock_counts& c) {
    return c.skipped - before.skipped >= 1000;
  });
  BOOST_TEST(after.skipped - before.skipped >= 1000u);
  BOOST_TEST(after.forwarded == before.forwarded);
}

BOOST_AUTO_TEST_CASE(request_timeouts_fire_and_are_cancelled_at_exit) {
  quiet_system q;
  // Never answers: the request can only end by its timeout.
  auto silent = spawn_fn(q.sys, [](caf::event_based_actor*) -> caf::behavior {
    return {[](std::int32_t) -> caf::result<std::int32_t> {
      return caf::delegated<std::int32_t>{};
    }};
  });
  {
    caf::scoped_actor self{q.sys};
    bool timed_out = false;
    self->request(silent, 20ms, std::int32_t{1})
      .receive([](std::int32_t) {},
               [&](caf::error& err) {
                 timed_out = err == caf::sec::request_timeout;
               });
    BOOST_TEST(timed_out);
  }
  // The scoped actor set a timeout: its exit went to the clock.
  BOOST_TEST(quiet_clock_counts_of(q.sys)->forwarded >= 1u);
  caf::anon_send_exit(silent, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_CASE(receive_timeouts_and_delayed_messages_arrive) {
  quiet_system q;
  caf::scoped_actor self{q.sys};
  auto client = caf::actor_cast<caf::actor>(self);
  // Reports its receive timeout, then quits.
  spawn_fn(q.sys, [client](caf::event_based_actor* ev) -> caf::behavior {
    return {
      [](std::int32_t) {},
      caf::after(10ms) >> [ev, client] {
        ev->send(client, std::string{"idle"});
        ev->quit();
      },
    };
  });
  caf::delayed_anon_send(client, 15ms, std::int32_t{42});
  std::string idle;
  std::int32_t delayed = 0;
  for (int i = 0; i < 2; ++i)
    self->receive([&](const std::string& s) { idle = s; },
                  [&](std::int32_t x) { delayed = x; },
                  caf::after(5s) >> [] { BOOST_FAIL("a timer did not fire"); });
  BOOST_TEST(idle == "idle");
  BOOST_TEST(delayed == 42);
}

BOOST_AUTO_TEST_CASE(an_actor_quitting_with_a_timer_pending_has_it_cancelled) {
  quiet_system q;
  caf::scoped_actor self{q.sys};
  auto client = caf::actor_cast<caf::actor>(self);
  auto before = *quiet_clock_counts_of(q.sys);
  // Its receive timeout is an hour away when it quits: the cancellation
  // must reach the clock (exactly this one actor's).
  auto sleeper = spawn_fn(q.sys, [client](caf::event_based_actor* ev) -> caf::behavior {
    return {
      [ev](std::int32_t) { ev->quit(); },
      caf::after(std::chrono::seconds{3600}) >> [ev, client] {
        ev->send(client, std::string{"woke"});
      },
    };
  });
  self->monitor(sleeper);
  self->send(sleeper, std::int32_t{0});
  self->receive([](const caf::down_msg&) {});
  auto after = settled_counts(q.sys, [&](const quiet_clock_counts& c) {
    return c.forwarded > before.forwarded;
  });
  BOOST_TEST(after.forwarded - before.forwarded == 1u);
}

BOOST_AUTO_TEST_CASE(other_schedulers_are_left_alone) {
  {
    caf::actor_system_config cfg;
    cfg.set("scheduler.policy", caf::atom("testing"));
    kvactor::tune_for_latency(cfg);
    caf::actor_system sys{cfg};
    BOOST_TEST(!quiet_clock_counts_of(sys).has_value());
    BOOST_TEST(dynamic_cast<caf::scheduler::test_coordinator*>(&sys.scheduler())
               != nullptr);
  }
  caf::actor_system_config plain;
  caf::actor_system sys{plain};
  BOOST_TEST(!quiet_clock_counts_of(sys).has_value());
}

BOOST_AUTO_TEST_CASE(configure_runs_the_workers_asked_for_or_cafs_default) {
  // DESIGN.md: scheduler_threads 0 means CAF's default (in CAF 0.17 at
  // least four workers, whatever the cores).
  for (std::uint32_t asked : {0u, 1u, 3u}) {
    kvactor::cache_config cfg;
    cfg.scheduler_threads = asked;
    caf::actor_system_config sys_cfg;
    kvactor::configure(sys_cfg, cfg);
    caf::actor_system sys{sys_cfg};
    auto expected = asked > 0 ? std::size_t{asked}
                              : caf::defaults::scheduler::max_threads;
    BOOST_TEST(sys.scheduler().num_workers() == expected);
  }
}

BOOST_AUTO_TEST_SUITE_END()
