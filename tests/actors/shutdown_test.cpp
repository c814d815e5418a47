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

#include <caf/all.hpp>

#include "kvactor/messages/registration.hpp"

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
