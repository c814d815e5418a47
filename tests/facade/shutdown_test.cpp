// Shutdown never hangs: caches started and stopped many times with live
// requests, outstanding handles, forks and pressure callbacks; facade
// destroyed before the system; handles held past the facade turn invalid
// and report errors instead of crashing. Every teardown runs under a time
// limit: a hang ends the run with a message instead of blocking CI.
#include <caf/after.hpp>
#include <caf/logger.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/system_messages.hpp>

#include "fixture.hpp"

using namespace kvtest;

namespace {

constexpr auto teardown_limit = std::chrono::seconds{30};

/// Runs `f` (a teardown) under teardown_limit; a hang ends the test binary
/// with exit code 124, since the hung objects cannot be destroyed again.
void must_finish(const char* what, std::function<void()> f) {
  if (!finishes_within(teardown_limit, std::move(f))) {
    std::fprintf(stderr, "\n*** %s did not finish within %llds ***\n", what,
                 static_cast<long long>(teardown_limit.count()));
    std::fflush(stderr);
    std::_Exit(124);
  }
}

/// Lets the calling thread's reference to the actor system's logger go, so
/// that another thread may destroy the system. CAF 0.17 fact: spawning keeps
/// a reference to the logger in a thread-local of the spawning thread, and
/// ~actor_system waits for the logger's destructor - a system destroyed on
/// another thread than the one that started the cache hangs without this.
void release_logger() {
  caf::logger::set_current_actor_system(nullptr);
}

/// Destroys `sys` on another thread, under the time limit.
void destroy_system(std::unique_ptr<caf::actor_system>& sys) {
  release_logger();
  must_finish("destroying the actor system", [&] { sys.reset(); });
}

/// Everything a handle must say once its cache is gone.
void check_dead(kv_cache_handle& h) {
  BOOST_TEST(!h.is_valid());
  BOOST_TEST(h.table().blocks.empty());
  BOOST_TEST(h.num_tokens() == 0u);
  BOOST_TEST(h.stats().blocks_allocated == 0u);
  KV_CHECK_ERROR(error_of(h.key_cache(0)), errc::invalid_handle);
  KV_CHECK_ERROR(error_of(h.kv_cache(1)), errc::invalid_handle);
  auto c = h.clone_handle();
  BOOST_TEST(!c->is_valid());
  KV_CHECK_ERROR(error_of(c->value_cache(0)), errc::invalid_handle);
}

/// Fills a cache with live requests (sharing prompt prefixes), forks and
/// growth, until `count` requests or the pool is full; returns handles.
std::vector<std::shared_ptr<kv_cache_handle>>
populate(kv_cache_manager& m, const cache_config& cfg, int count) {
  std::vector<std::shared_ptr<kv_cache_handle>> out;
  for (int i = 0; i < count; ++i) {
    auto prompt = iota_tokens(i % 3 * 100, 4 + static_cast<std::size_t>(i % 9));
    auto id = static_cast<request_id>(i + 1);
    auto h = m.allocate(make_request(cfg, id, 0, 256, prompt));
    if (!h) {
      BOOST_REQUIRE_MESSAGE(has_code(h.error(), errc::out_of_blocks),
                            why(h));
      break;
    }
    out.push_back(*h);
    if (i % 4 == 0) {
      auto c = m.fork(id, id + 1000);
      if (!c) {
        // The cache may preempt requests itself at critical pressure.
        BOOST_REQUIRE_MESSAGE(has_code(c.error(), errc::unknown_request),
                              why(c));
        continue;
      }
      m.extend(**c, 3); // may find the pool full
      out.push_back(*c);
      out.push_back((*c)->clone_handle());
    }
  }
  return out;
}

/// Allocates requests 2, 3, ... until one fails (the manager's stop has
/// reached the facade) or `deadline` passes; that failure, or none.
caf::error first_failed_allocate(cache_fixture& f,
                                 std::chrono::steady_clock::time_point deadline) {
  for (request_id id = 2; std::chrono::steady_clock::now() < deadline; ++id) {
    auto h = f.m().allocate(f.req(id, 4));
    if (!h)
      return std::move(h.error());
  }
  return caf::none;
}

} // namespace

BOOST_FIXTURE_TEST_SUITE(facade_shutdown, watchdog)

BOOST_AUTO_TEST_CASE(caches_start_and_stop_many_times_with_live_requests) {
  auto cfg = small_config(64);
  cfg.gc_interval_ms = 5; // GC ticks while stopping, too
  caf::actor_system_config sys_cfg;
  configure(sys_cfg, cfg);
  auto sys = std::make_unique<caf::actor_system>(sys_cfg);
  std::vector<std::shared_ptr<kv_cache_handle>> survivors;
  auto calls = std::make_shared<std::atomic<int>>(0);
  for (int round = 0; round < 25; ++round) {
    auto started = kv_cache_manager::start(*sys, cfg);
    BOOST_REQUIRE_MESSAGE(started, why(started));
    auto mgr = std::make_unique<kv_cache_manager>(std::move(*started));
    mgr->set_pressure_callback([calls](memory_pressure) { ++*calls; });
    auto handles = populate(*mgr, cfg, 30); // past the medium mark
    BOOST_TEST(mgr->stats().active_caches > 10u);
    survivors.insert(survivors.end(), handles.begin(), handles.end());
    must_finish("destroying a facade", [&] { mgr.reset(); });
    for (auto& h : handles)
      BOOST_TEST(!h->is_valid());
  }
  BOOST_TEST(calls->load() > 0);
  for (auto& h : survivors)
    check_dead(*h);
  survivors.clear();
  destroy_system(sys);
}

BOOST_AUTO_TEST_CASE(systems_come_and_go_each_after_its_facade) {
  for (int round = 0; round < 8; ++round) {
    auto cfg = small_config(64);
    cfg.gc_interval_ms = 2;
    auto sys_cfg = std::make_unique<caf::actor_system_config>();
    configure(*sys_cfg, cfg);
    auto sys = std::make_unique<caf::actor_system>(*sys_cfg);
    auto started = kv_cache_manager::start(*sys, cfg);
    BOOST_REQUIRE_MESSAGE(started, why(started));
    auto mgr = std::make_unique<kv_cache_manager>(std::move(*started));
    auto seen = std::make_shared<std::atomic<int>>(0);
    mgr->set_pressure_callback([seen](memory_pressure) { ++*seen; });
    auto handles = populate(*mgr, cfg, 40);
    BOOST_TEST(eventually([&] { return seen->load() >= 1; }));
    release_logger();
    must_finish("destroying a facade, then its system", [&] {
      mgr.reset();
      sys.reset();
    });
    for (auto& h : handles)
      BOOST_TEST(!h->is_valid());
    handles.clear();
  }
}

BOOST_AUTO_TEST_CASE(a_slow_pressure_callback_does_not_block_shutdown) {
  auto f = std::make_unique<cache_fixture>();
  auto calls = std::make_shared<std::atomic<int>>(0);
  auto inside = std::make_shared<std::atomic<bool>>(false);
  f->m().set_pressure_callback([calls, inside](memory_pressure) {
    *inside = true;
    ++*calls;
    std::this_thread::sleep_for(std::chrono::milliseconds{200});
    *inside = false;
  });
  // Up and down through every level: six callbacks queued.
  for (request_id id = 1; id <= 61; ++id)
    f->alloc(f->req(id, 4));
  for (request_id id = 1; id <= 61; ++id)
    f->m().deallocate(id); // some may have been preempted at critical
  auto held = f->alloc(f->req(100, 8));
  auto t0 = std::chrono::steady_clock::now();
  release_logger();
  must_finish("shutdown with a slow callback", [&] { f.reset(); });
  std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
  BOOST_TEST_MESSAGE("shutdown took " << dt.count() << " s, "
                                      << calls->load() << " callbacks ran");
  // Once the facade is gone no callback runs: one in progress finished
  // first, the ones still queued are dropped (six were, 200 ms each).
  BOOST_TEST(!inside->load());
  auto after = calls->load();
  std::this_thread::sleep_for(std::chrono::milliseconds{500});
  BOOST_TEST(calls->load() == after);
  BOOST_TEST(!held->is_valid());
  check_dead(*held);
}

BOOST_AUTO_TEST_CASE(facade_copies_share_one_cache_and_the_last_stops_it) {
  cache_config cfg = small_config();
  caf::actor_system_config sys_cfg;
  configure(sys_cfg, cfg);
  auto sys = std::make_unique<caf::actor_system>(sys_cfg);
  {
    auto started = kv_cache_manager::start(*sys, cfg);
    BOOST_REQUIRE_MESSAGE(started, why(started));
    auto first = std::make_unique<kv_cache_manager>(*started);
    started = caf::error{}; // drop that copy too
    auto second = std::make_unique<kv_cache_manager>(*first);
    auto h = first->allocate(make_request(cfg, 1, 5));
    BOOST_REQUIRE_MESSAGE(h, why(h));
    BOOST_TEST(second->get_handle(1)->cache_id() == (*h)->cache_id());
    BOOST_TEST((second->actor() == first->actor()));
    must_finish("dropping one copy", [&] { first.reset(); });
    BOOST_TEST((*h)->is_valid());
    BOOST_TEST(!second->extend(**h, 3));
    BOOST_TEST((*h)->num_tokens() == 8u);
    BOOST_TEST(second->stats().active_caches == 1u);
    must_finish("dropping the last copy", [&] { second.reset(); });
    check_dead(**h);
  }
  destroy_system(sys);
}

BOOST_AUTO_TEST_CASE(handles_in_use_on_other_threads_while_the_facade_goes) {
  auto f = std::make_unique<cache_fixture>();
  auto handles = populate(f->m(), f->cfg, 12);
  std::atomic<bool> stop{false};
  std::atomic<int> saw_end{0}; // threads that saw their handles turn invalid
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      std::size_t i = static_cast<std::size_t>(t);
      bool seen = false;
      while (!stop) {
        auto& h = *handles[i++ % handles.size()];
        auto tbl = h.table();
        auto v = h.key_cache(0);
        auto s = h.stats();
        (void) s;
        if (!seen && !h.is_valid() && tbl.blocks.empty() && !v) {
          seen = true;
          ++saw_end;
        }
      }
    });
  std::this_thread::sleep_for(std::chrono::milliseconds{50});
  // The last reference to the cache may now be taken by a handle's call.
  must_finish("destroying the facade under load", [&] { f->mgr.reset(); });
  BOOST_TEST(eventually([&] { return saw_end.load() == 4; },
                        std::chrono::seconds{20}));
  stop = true;
  must_finish("joining the handle threads", [&] {
    for (auto& th : threads)
      th.join();
  });
  for (auto& h : handles)
    check_dead(*h);
  handles.clear();
  release_logger();
  must_finish("destroying the actor system", [&] { f.reset(); });
}

BOOST_AUTO_TEST_CASE(an_actor_holding_requests_sees_them_end_at_shutdown) {
  auto f = std::make_unique<cache_fixture>();
  auto self = std::make_unique<caf::scoped_actor>(*f->sys);
  request_handle_actor held;
  (*self)
    ->request(f->m().actor(), caf::infinite, allocate_atom::value,
              f->req(1, 9))
    .receive([&](request_handle_actor& h, block_table&) { held = h; },
             [&](caf::error& err) { BOOST_FAIL(render(err)); });
  BOOST_REQUIRE(static_cast<bool>(held));
  (*self)->monitor(held);
  must_finish("destroying the facade", [&] { f->mgr.reset(); });
  // The handle actor goes with the cache (asynchronously)...
  bool down = false;
  (*self)->receive([&](caf::down_msg&) { down = true; },
                   caf::after(std::chrono::seconds{10}) >> [] {});
  BOOST_TEST(down);
  // ...and a request to it then fails instead of hanging.
  bool failed = false;
  (*self)
    ->request(held, std::chrono::seconds{5}, table_atom::value)
    .receive([&](block_table&) {}, [&](caf::error&) { failed = true; });
  BOOST_TEST(failed);
  held = nullptr;
  self.reset();
  release_logger();
  must_finish("destroying the actor system", [&] { f.reset(); });
}

// Calls after the manager went fail with kvactor's shutting_down, as the
// calls waiting at that moment do - not with CAF's request_receiver_down.
BOOST_AUTO_TEST_CASE(calls_after_the_manager_stopped_fail_with_shutting_down) {
  cache_fixture f;
  f.check_at_end = false; // the test stops the cache
  BOOST_REQUIRE(f.m().allocate(f.req(1, 4)));
  caf::anon_send_exit(f.m().actor(), caf::exit_reason::user_shutdown);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{10};
  auto err = first_failed_allocate(f, deadline);
  BOOST_REQUIRE(err);
  BOOST_TEST(is_error(err, errc::shutting_down, {"manager"}), render(err));
  auto freed = f.m().deallocate(1);
  BOOST_TEST(is_error(freed, errc::shutting_down, {}), render(freed));
  // Steps go to the pool, which stops with the manager.
  caf::error step_err;
  while (!step_err && std::chrono::steady_clock::now() < deadline) {
    auto res = f.m().step(step_request{});
    if (!res)
      step_err = res.error();
  }
  BOOST_REQUIRE(step_err);
  BOOST_TEST(is_error(step_err, errc::shutting_down, {}), render(step_err));
}

// When the manager stops for a reason that names what ended (it stops the
// cache so when its pool, device actor or supervisor ends: see the actor
// tests' shutdown_test), callers are told that reason - waiting calls and
// later ones alike - not just that the manager is gone.
BOOST_AUTO_TEST_CASE(calls_after_a_part_ended_are_told_which) {
  cache_fixture f;
  f.check_at_end = false; // the test stops the cache
  BOOST_REQUIRE(f.m().allocate(f.req(1, 4)));
  auto mgr = caf::actor_cast<caf::actor>(f.m().actor());
  caf::anon_send(mgr, caf::exit_msg{mgr.address(),
                                    make_error(errc::shutting_down,
                                               "the cache stopped: its device "
                                               "actor ended (kill)")});
  auto err = first_failed_allocate(
    f, std::chrono::steady_clock::now() + std::chrono::seconds{10});
  BOOST_REQUIRE(err);
  BOOST_TEST(is_error(err, errc::shutting_down, {"its device actor ended"}),
             render(err));
  auto freed = f.m().deallocate(1);
  BOOST_TEST(is_error(freed, errc::shutting_down, {"its device actor ended"}),
             render(freed));
}

BOOST_AUTO_TEST_SUITE_END()
