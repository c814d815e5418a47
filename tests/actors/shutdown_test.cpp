// Shutdown: an exit sent to the manager while requests are live, messages
// are in flight and subscribers listen ends every request (each learns it
// ended by shutdown) and every actor, on the deterministic scheduler and on
// the threaded one with a detached device; neither may hang.
#include "fixture.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <thread>

#include <boost/test/data/monomorphic.hpp>
#include <boost/test/data/test_case.hpp>
#include <caf/all.hpp>

#include "kvactor/messages/registration.hpp"
#include "spawn_fn.hpp"

using namespace kvactor;
using namespace kvactor::test;

namespace {

/// Runs `f` on its own thread; false if it did not finish within `limit`
/// (the process then ends: a hung actor system cannot be recovered).
template <class F>
bool finishes_within(std::chrono::seconds limit, F f) {
  auto done = std::async(std::launch::async, std::move(f));
  if (done.wait_for(limit) == std::future_status::timeout) {
    std::fprintf(stderr, "shutdown hung for %d s\n",
                 static_cast<int>(limit.count()));
    std::fflush(stderr);
    std::_Exit(3);
  }
  done.get();
  return true;
}

} // namespace

BOOST_AUTO_TEST_CASE(shutdown_with_live_requests_and_subscribers_never_hangs) {
  std::vector<request_ended> ended;
  std::size_t downs = 0;
  bool allocated = true;
  BOOST_TEST(finishes_within(std::chrono::seconds(30), [&] {
    auto c = timer_config();
    cache_fixture f{c};
    f.check_on_exit = false;
    caf::scoped_actor life{f.sys};
    caf::scoped_actor pressure{f.sys};
    f.subscribe(topic::lifecycle, life);
    f.subscribe(topic::pressure, pressure);
    std::vector<request_handle_actor> handles;
    for (request_id id = 1; id <= 20; ++id) {
      auto a = f.allocate(id, 4 * 3);
      allocated = allocated && static_cast<bool>(a);
      if (a) {
        handles.push_back(a->handle);
        f.self->monitor(a->handle);
      }
    }
    f.fork(1, 100);
    // Messages still in flight when the exit arrives.
    f.self->send(f.mgr, allocate_atom::value, make_request(c, 200, 4));
    f.self->send(f.mgr, extend_atom::value, request_id{2}, std::uint64_t{4});
    f.self->send(f.mgr, gc_atom::value);
    f.shutdown();
    ended = cache_fixture::ended_events(life);
    for (auto& h : handles)
      if (f.received_down(f.self, h.address()))
        ++downs;
  }));
  BOOST_TEST(allocated);
  BOOST_TEST(downs == 20u);
  // Every request that was live learned that it ended by shutdown.
  std::size_t by_shutdown = 0;
  for (auto& ev : ended)
    if (ev.reason == end_reason::shutdown)
      ++by_shutdown;
  BOOST_TEST(by_shutdown >= 21u);
}

BOOST_AUTO_TEST_CASE(shutdown_on_the_threaded_scheduler_never_hangs) {
  bool ok = false;
  std::size_t ended = 0;
  BOOST_TEST(finishes_within(std::chrono::seconds(60), [&] {
    caf::actor_system_config sys_cfg;
    add_message_types(sys_cfg);
    sys_cfg.set("logger.file-verbosity", caf::atom("quiet"));
    sys_cfg.set("logger.console-verbosity", caf::atom("quiet"));
    caf::actor_system sys{sys_cfg};
    auto c = small_config();
    c.gc_interval_ms = 5;
    auto started = spawn_kv_cache(sys, c); // detached device
    if (!started)
      return;
    auto mgr = started->manager;
    int live = 0;
    {
      // Scoped actors count as running (hidden or not): they must be gone
      // before await_all_actors_done.
      caf::scoped_actor self{sys};
      caf::scoped_actor life{sys};
      caf::scoped_actor pressure{sys};
      self->send(mgr, subscribe_atom::value, topic::lifecycle,
                 caf::actor_cast<caf::actor>(life));
      self->send(mgr, subscribe_atom::value, topic::pressure,
                 caf::actor_cast<caf::actor>(pressure));
      for (request_id id = 1; id <= 40; ++id)
        self->request(mgr, std::chrono::seconds(10), allocate_atom::value,
                      make_request(c, id, 3 * (id % 2 + 1)))
          .receive([&](request_handle_actor&, block_table&) { ++live; },
                   [&](caf::error&) {});
      // A fork and a copy-on-write through the detached device.
      self->request(mgr, std::chrono::seconds(10), fork_atom::value,
                    request_id{2}, request_id{1000})
        .receive([&](request_handle_actor&, block_table&) { ++live; },
                 [&](caf::error&) {});
      self->request(mgr, std::chrono::seconds(10), extend_atom::value,
                    request_id{1000}, std::uint64_t{1})
        .receive([&](block_table&) {}, [&](caf::error&) {});
      std::this_thread::sleep_for(std::chrono::milliseconds(20)); // GC ticks
      caf::anon_send_exit(mgr, caf::exit_reason::user_shutdown);
      bool more = true;
      while (more && ended < 41)
        life->receive([&](ended_atom, request_ended& ev) {
                        if (ev.reason == end_reason::shutdown)
                          ++ended;
                      },
                      caf::after(std::chrono::seconds(5)) >> [&] {
                        more = false;
                      });
    }
    mgr = nullptr;
    sys.await_all_actors_done();
    ok = live == 41;
  }));
  BOOST_TEST(ok);
  BOOST_TEST(ended == 41u);
}

// A request the manager took but answers only after the pool or the device
// replies is a promise CAF 0.17 would drop at the manager's exit: the
// requester would wait for ever. Each gets shutting_down, naming what it
// asked, instead - killed as well (no exit handler runs then: the answers
// come from a functor attached to it).
BOOST_DATA_TEST_CASE(requests_pending_at_the_manager_when_it_exits_are_answered,
                     boost::unit_test::data::make({false, true}), killed) {
  auto c = host_tier_config();
  cache_fixture f{c};
  f.check_on_exit = false;
  BOOST_REQUIRE(f.allocate(1, 8));
  BOOST_REQUIRE(f.allocate(2, 8));
  caf::scoped_actor client{f.sys};
  client->send(f.mgr, allocate_atom::value, make_request(c, 0, 4)); // id 0 too
  client->send(f.mgr, preempt_atom::value, request_id{1});
  client->send(f.mgr, swap_out_atom::value, request_id{2});
  client->send(f.mgr, stats_atom::value);
  client->send(f.mgr, fork_atom::value, request_id{2}, request_id{4});
  // The manager takes all five and asks the pool; the pool has not run.
  BOOST_REQUIRE(f.sched.prioritize(f.mgr));
  f.sched.run_once();
  BOOST_REQUIRE(f.sched.has_job());
  caf::anon_send_exit(f.mgr, killed ? caf::exit_reason::kill
                                    : caf::exit_reason::user_shutdown);
  BOOST_REQUIRE(f.sched.prioritize(f.mgr));
  f.sched.run_once();
  f.run(); // the pool's late replies find the manager gone
  std::vector<std::string> got;
  bool more = true;
  while (more)
    client->receive(
      [&](caf::error& err) {
        BOOST_TEST(has_code(err, errc::shutting_down), render(err));
        got.push_back(render(err));
      },
      caf::after(std::chrono::seconds(0)) >> [&] { more = false; });
  BOOST_REQUIRE(got.size() == 5u);
  auto says = [&](const std::string& part) {
    for (auto& m : got)
      if (m.find(part) != std::string::npos)
        return true;
    return false;
  };
  BOOST_TEST(says("answered allocate of request 0"));
  BOOST_TEST(says("answered preempt of request 1"));
  BOOST_TEST(says("answered swap-out of request 2"));
  BOOST_TEST(says("answered stats"));
  BOOST_TEST(says("answered fork of request 4"));
  f.shutdown();
}

// The supervisor likewise (a GC waiting on the pool). The pool needs no
// book: it awaits its copy-on-write copies, and its exit waits with it.
BOOST_DATA_TEST_CASE(a_gc_pending_when_the_supervisor_exits_is_answered,
                     boost::unit_test::data::make({false, true}), killed) {
  cache_fixture f;
  f.check_on_exit = false;
  BOOST_REQUIRE(f.allocate(1, 6));
  caf::scoped_actor client{f.sys};
  client->send(f.sup, gc_atom::value);
  BOOST_REQUIRE(f.sched.prioritize(f.sup));
  f.sched.run_once(); // asks the pool, which has not run
  caf::anon_send_exit(f.sup, killed ? caf::exit_reason::kill
                                    : caf::exit_reason::user_shutdown);
  BOOST_REQUIRE(f.sched.prioritize(f.sup));
  f.sched.run_once();
  f.run();
  std::string got = "no reply";
  client->receive([&](caf::error& err) { got = render(err); },
                  [&](cache_gc_stats&) { got = "gc stats"; },
                  caf::after(std::chrono::seconds(0)) >> [] {});
  BOOST_TEST(got.find("shutting_down (the supervisor exited before it "
                      "answered gc)")
               != std::string::npos,
             got);
  f.shutdown();
}

BOOST_AUTO_TEST_CASE(a_step_waiting_on_its_copy_when_the_pool_exits_gets_its_result) {
  cache_fixture f;
  f.check_on_exit = false;
  BOOST_REQUIRE(f.allocate(1, 6)); // the last block half full
  BOOST_REQUIRE(f.fork(1, 2));
  caf::scoped_actor client{f.sys};
  step_request step;
  extend_op op;
  op.id = 2;
  op.num_tokens = 1; // into the shared block: copy-on-write
  step.extends = {op};
  client->send(f.pool, step_atom::value, step);
  BOOST_REQUIRE(f.sched.prioritize(f.pool));
  f.sched.run_once(); // asks the device for the copy
  caf::anon_send_exit(f.pool, caf::exit_reason::user_shutdown);
  f.run();
  std::string got = "no reply";
  client->receive([&](caf::error& err) { got = render(err); },
                  [&](step_result& res) {
                    got = res.changed.size() == 1u && res.failed.empty()
                            ? "extended"
                            : "step result without the extend";
                  },
                  caf::after(std::chrono::seconds(0)) >> [] {});
  BOOST_TEST(got == "extended");
  f.shutdown();
}

// Every call to a handle actor that is killed is answered: those it had
// taken in with shutting_down (it answers what it passed on to the pool as
// it goes), those still in its mailbox or sent after its end with
// request_receiver_down (CAF bounces them). The facade, failing its calls
// only at the request's end, relies on it for a call sent just after that
// end: none waits for its timeout.
BOOST_AUTO_TEST_CASE(every_call_to_a_killed_handle_is_answered) {
  cache_fixture f;
  auto a = f.allocate(1, 9);
  BOOST_REQUIRE(a);
  caf::scoped_actor client{f.sys};
  // What a pending request got: "ok", or its error's code.
  auto answer = [](auto& pending, auto value) {
    std::string out = "none";
    pending.receive([&](decltype(value)&) { out = "ok"; },
                    [&](caf::error& err) { out = outcome(err); });
    return out;
  };
  auto stats = client->request(a->handle, caf::infinite, stats_atom::value);
  auto grow = client->request(a->handle, caf::infinite, extend_atom::value,
                              std::uint64_t{4});
  caf::anon_send_exit(a->handle, caf::exit_reason::kill);
  f.run();
  for (auto got : {answer(stats, cache_handle_stats{}), answer(grow, block_table{})})
    BOOST_TEST((got == "shutting_down" || got == "request_receiver_down"), got);
  auto late = client->request(a->handle, caf::infinite, stats_atom::value);
  f.run();
  BOOST_TEST(answer(late, cache_handle_stats{}) == "request_receiver_down");
  BOOST_TEST(f.used_blocks() == 0u); // and the request was reclaimed
}

// A handle's extend passed on to a pool that ended just before: CAF
// bounces it to the handle, which answers with the cache's shutting_down
// naming the extend - not CAF's bare request_receiver_down, which names
// nothing (and which the facade reads as the handle's own end).
BOOST_AUTO_TEST_CASE(an_extend_in_flight_when_the_pool_ends_is_answered_as_ours) {
  cache_fixture f;
  f.check_on_exit = false;
  auto a = f.allocate(1, 9);
  BOOST_REQUIRE(a);
  caf::scoped_actor client{f.sys};
  auto grow = client->request(a->handle, caf::infinite, extend_atom::value,
                              std::uint64_t{4}); // waits in the handle's mailbox
  caf::anon_send_exit(f.pool, caf::exit_reason::kill);
  BOOST_REQUIRE(f.sched.prioritize(f.pool));
  f.sched.run_once(); // the pool ends before the handle asks it
  f.run();
  std::string got = "no answer";
  grow.receive([&](block_table&) { got = "ok"; },
               [&](caf::error& err) { got = render(err); });
  BOOST_TEST(got.find("shutting_down (extend of request 1") != std::string::npos,
             got);
}

BOOST_AUTO_TEST_CASE(a_swap_in_whose_table_the_ended_pool_cannot_give_says_so) {
  // The swap-in is committed; the pool ends before the manager reads the
  // table for its reply: shutting_down, naming the swap-in (CAF's bare
  // request_receiver_down before).
  cache_fixture f{host_tier_config()};
  f.check_on_exit = false;
  BOOST_REQUIRE(f.allocate(1, 8));
  BOOST_REQUIRE(outcome(f.ask<std::uint32_t>(f.mgr, swap_out_atom::value,
                                             request_id{1}))
                == "ok");
  caf::scoped_actor client{f.sys};
  client->send(f.mgr, swap_in_atom::value, request_id{1});
  auto has_job = [&](const caf::actor_addr& a) {
    for (auto* j : f.sched.jobs)
      if (auto* x = dynamic_cast<caf::abstract_actor*>(j);
          x && x->address() == a)
        return true;
    return false;
  };
  auto mgr_once = [&] {
    BOOST_REQUIRE(f.sched.prioritize(f.mgr));
    f.sched.run_once();
  };
  mgr_once();                       // the manager asks the pool to begin
  f.run_except(f.mgr.address());    // the pool's moves
  mgr_once();                       // to the device
  f.run_except(f.mgr.address());    // copied
  for (int i = 0; i < 10 && !has_job(f.pool.address()); ++i)
    mgr_once();                     // the commit, to the pool
  BOOST_REQUIRE(has_job(f.pool.address()));
  f.run_except(f.mgr.address());    // committed
  caf::anon_send_exit(f.pool, caf::exit_reason::kill); // ahead of the table
  for (int i = 0; i < 10 && has_job(f.mgr.address()); ++i)
    mgr_once();                     // the commit's reply: the table asked
  f.run();
  std::string got = "no reply";
  client->receive([&](block_table&) { got = "ok"; },
                  [&](caf::error& err) { got = render(err); },
                  caf::after(std::chrono::seconds(0)) >> [] {});
  BOOST_TEST(got.find("shutting_down (swap-in of request 1 done, but its "
                      "table could not be read")
               != std::string::npos,
             got);
}

// An exit message without a reason is what a linked actor sends when it
// ends normally; CAF's default ignores it, and so does the manager now (it
// shut the whole cache down on one before).
BOOST_AUTO_TEST_CASE(a_linked_actor_ending_normally_stops_nothing) {
  cache_fixture f;
  auto a = f.allocate(1, 9);
  BOOST_REQUIRE(a);
  auto mgr = caf::actor_cast<caf::actor>(f.mgr);
  spawn_fn(f.sys, [mgr](caf::event_based_actor* linked) {
    linked->link_to(mgr);
    linked->quit();
  });
  caf::anon_send_exit(f.mgr, caf::exit_reason::normal);
  f.run();
  BOOST_TEST(outcome(f.stats()) == "ok");
  BOOST_TEST(outcome(f.handle_table(a->handle)) == "ok");
  BOOST_TEST(f.used_blocks() == 3u);
}

// The cache's parts are one unit: when the pool, the device actor or the
// supervisor ends (killed, crashed, or sent an exit by someone), the
// manager stops the cache with a reason naming the part, every request
// ends (by shutdown) and the parts still running stop too - instead of a
// cache that answers some calls and fails others, or (the supervisor gone)
// silently never collects garbage again.
BOOST_DATA_TEST_CASE(a_part_that_ends_stops_the_cache_naming_the_part,
                     boost::unit_test::data::make({0, 1, 2}), which) {
  cache_fixture f;
  f.check_on_exit = false;
  caf::scoped_actor life{f.sys};
  f.subscribe(topic::lifecycle, life);
  auto a = f.allocate(1, 9);
  BOOST_REQUIRE(a);
  caf::actor part;
  std::string name;
  switch (which) {
    case 0:
      part = caf::actor_cast<caf::actor>(f.pool), name = "block pool";
      break;
    case 1:
      part = caf::actor_cast<caf::actor>(f.cache.device), name = "device actor";
      break;
    default:
      part = caf::actor_cast<caf::actor>(f.sup), name = "supervisor";
  }
  caf::actor others[] = {caf::actor_cast<caf::actor>(f.pool),
                         caf::actor_cast<caf::actor>(f.cache.device),
                         caf::actor_cast<caf::actor>(f.sup),
                         caf::actor_cast<caf::actor>(f.mgr),
                         caf::actor_cast<caf::actor>(a->handle)};
  for (auto& x : others)
    f.self->monitor(x);
  caf::anon_send_exit(part, caf::exit_reason::kill);
  f.run();
  std::string mgr_reason = "manager still running";
  std::size_t downs = 0;
  for (bool more = true; more;)
    f.self->receive(
      [&](caf::down_msg& dm) {
        ++downs;
        if (dm.source == f.mgr.address())
          mgr_reason = render(dm.reason);
      },
      caf::after(std::chrono::seconds(0)) >> [&] { more = false; });
  BOOST_TEST(downs == 5u); // every part, the manager and the request's handle
  BOOST_TEST(mgr_reason.find("shutting_down (the cache stopped: its " + name
                             + " ended (")
               != std::string::npos,
             mgr_reason);
  std::vector<end_reason> why;
  for (bool more = true; more;)
    life->receive([&](ended_atom, request_ended& ev) { why.push_back(ev.reason); },
                  caf::after(std::chrono::seconds(0)) >> [&] { more = false; });
  BOOST_TEST((why == std::vector<end_reason>{end_reason::shutdown}));
}

// Stopped in order (user_shutdown), too: a part has no business ending first.
BOOST_AUTO_TEST_CASE(a_part_stopped_in_order_stops_the_cache_too) {
  cache_fixture f;
  f.check_on_exit = false;
  f.self->monitor(f.mgr);
  caf::anon_send_exit(f.sup, caf::exit_reason::user_shutdown);
  f.run();
  std::string mgr_reason = "manager still running";
  f.self->receive(
    [&](caf::down_msg& dm) { mgr_reason = render(dm.reason); },
    caf::after(std::chrono::seconds(0)) >> [] {});
  BOOST_TEST(mgr_reason.find("its supervisor ended (") != std::string::npos,
             mgr_reason);
}
