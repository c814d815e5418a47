// The facade's gc and pressure callbacks on the threaded scheduler: what gc
// reclaims and reports, and each pressure level told once, in order, to
// callbacks that may replace themselves or throw.
#include <atomic>
#include <functional>
#include <memory>
#include <future>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "fixture.hpp"

using namespace kvtest;

namespace {

/// Thread-safe record of pressure callbacks. The callback shares the
/// record: a log declared after the cache may go before the cache stops
/// calling it.
struct pressure_log {
  struct record {
    std::mutex mtx;
    std::vector<memory_pressure> levels;
  };
  std::shared_ptr<record> rec = std::make_shared<record>();

  std::function<void(memory_pressure)> callback() {
    return [r = rec](memory_pressure lvl) {
      std::lock_guard<std::mutex> guard{r->mtx};
      r->levels.push_back(lvl);
    };
  }
  std::vector<memory_pressure> get() {
    std::lock_guard<std::mutex> guard{rec->mtx};
    return rec->levels;
  }
  std::size_t size() {
    return get().size();
  }
};

} // namespace

BOOST_FIXTURE_TEST_SUITE(facade_cache, watchdog)

BOOST_AUTO_TEST_CASE(gc_on_an_idle_cache_reclaims_nothing_and_checks_the_invariant) {
  cache_fixture f;
  auto h = f.alloc(f.req(1, 9));
  auto g = f.m().gc();
  BOOST_REQUIRE_MESSAGE(g, why(g));
  BOOST_TEST(g->caches_freed == 0u);
  BOOST_TEST(g->blocks_reclaimed == 0u);
  BOOST_TEST(g->memory_freed == 0u);
  BOOST_TEST(g->gc_time_ms > 0.0); // timed: it ran
  BOOST_TEST(h->is_valid());
  BOOST_TEST(f.used_blocks() == 3u);
}

BOOST_AUTO_TEST_CASE(gc_under_high_pressure_evicts_cached_blocks_and_says_so) {
  // 64 blocks: medium at 39 used, high at 52 (left below 48), critical at 61.
  cache_fixture f;
  auto bulk = f.alloc(f.req(1, 50 * 4));
  // A 37-token prompt: 10 blocks, 9 of them full and hashed. 60 used: high.
  auto p = f.alloc(f.req(2, 0, 256, iota_tokens(10, 37)));
  BOOST_TEST(f.used_blocks() == 60u);
  BOOST_TEST(eventually([&] {
    return f.checked_stats().pressure == memory_pressure::high;
  }));
  // Its end leaves 9 cached blocks at 50 used: still high.
  BOOST_REQUIRE(!f.m().deallocate(2));
  auto s = f.checked_stats();
  BOOST_TEST(s.cached_blocks == 9u);
  BOOST_TEST(s.free_blocks == 14u);
  // GC evicts the cached blocks toward the medium mark (38 held).
  auto g = f.m().gc();
  BOOST_REQUIRE_MESSAGE(g, why(g));
  BOOST_TEST(g->caches_freed == 0u);
  BOOST_TEST(g->blocks_reclaimed == 9u);
  BOOST_TEST(g->memory_freed == 9u * test_bytes_per_block);
  auto after = f.checked_stats();
  BOOST_TEST(after.cached_blocks == 0u);
  BOOST_TEST(after.eviction_count == 9u);
  BOOST_TEST(after.free_blocks == 14u);
  BOOST_TEST(bulk->is_valid());
  // Evicted means not findable: the same prompt now hits nothing.
  auto again = f.alloc(f.req(3, 0, 256, iota_tokens(10, 5)));
  BOOST_TEST(f.checked_stats().prefix_hit_tokens == 0u);
  BOOST_TEST(static_cast<bool>(f.m().gc()));
}

BOOST_AUTO_TEST_CASE(a_pressure_callback_may_replace_itself) {
  cache_fixture f;
  pressure_log log;
  auto first_calls = std::make_shared<std::atomic<int>>(0);
  auto& m = f.m();
  m.set_pressure_callback([&m, &log, first_calls](memory_pressure) {
    ++*first_calls;
    m.set_pressure_callback(log.callback()); // from inside: no deadlock
  });
  for (request_id id = 1; id <= 52; ++id) // medium, then high
    f.alloc(f.req(id, 4));
  // The new callback hears the level it was set at (medium), unless the
  // change to high reached it first.
  BOOST_TEST(eventually([&] {
    auto got = log.get();
    return !got.empty() && got.back() == memory_pressure::high;
  }));
  std::this_thread::sleep_for(std::chrono::milliseconds{20});
  auto got = log.get();
  BOOST_TEST((got == std::vector<memory_pressure>{memory_pressure::medium,
                                                  memory_pressure::high}
              || got == std::vector<memory_pressure>{memory_pressure::high}));
  BOOST_TEST(first_calls->load() == 1);
}

// What a replaced callback captured goes after the setter let its lock go:
// a destructor that calls the facade - here, setting a callback itself -
// deadlocked on that lock (on the same thread) when it ran under it.
BOOST_AUTO_TEST_CASE(a_replaced_callbacks_captures_may_call_the_facade_as_they_go) {
  cache_fixture f;
  auto& m = f.m();
  auto dropped = std::make_shared<std::atomic<int>>(0);
  struct calls_on_drop {
    kv_cache_manager* m = nullptr;
    std::shared_ptr<std::atomic<int>> dropped;
    ~calls_on_drop() {
      if (m == nullptr)
        return;
      m->set_pressure_callback(nullptr);
      ++*dropped;
    }
  };
  {
    auto guard = std::make_shared<calls_on_drop>();
    guard->m = &m;
    guard->dropped = dropped;
    m.set_pressure_callback([guard](memory_pressure) {});
  } // the callback holds the guard alone now
  auto done = std::async(std::launch::async, [&] {
    m.set_pressure_callback([](memory_pressure) {});
  });
  BOOST_REQUIRE(done.wait_for(std::chrono::seconds{10})
                == std::future_status::ready);
  BOOST_TEST(dropped->load() >= 1);
}

// A callback set in place of another first hears the level the cache is
// at, as the first one and a pressure subscriber do; so does one set after
// an empty one - and each hears it once.
BOOST_AUTO_TEST_CASE(a_replacing_callback_hears_the_level_now) {
  cache_fixture f;
  pressure_log first;
  auto& m = f.m();
  m.set_pressure_callback(first.callback());
  for (request_id id = 1; id <= 52; ++id) // medium, then high
    f.alloc(f.req(id, 4));
  BOOST_REQUIRE(eventually([&] { return first.size() >= 2; }));
  pressure_log second;
  m.set_pressure_callback(second.callback());
  BOOST_TEST(eventually([&] { return second.size() >= 1; }));
  m.set_pressure_callback(nullptr);
  pressure_log third;
  m.set_pressure_callback(third.callback());
  BOOST_TEST(eventually([&] { return third.size() >= 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds{20});
  using levels = std::vector<memory_pressure>;
  BOOST_TEST(second.get() == levels{memory_pressure::high},
             boost::test_tools::per_element());
  BOOST_TEST(third.get() == levels{memory_pressure::high},
             boost::test_tools::per_element());
  BOOST_TEST(first.get() == (levels{memory_pressure::medium, memory_pressure::high}),
             boost::test_tools::per_element());
  // Back to low: it hears the change; a callback set at low hears nothing
  // until the next one.
  for (request_id id = 1; id <= 52; ++id)
    BOOST_REQUIRE(!m.deallocate(id));
  BOOST_TEST(eventually([&] { return third.size() >= 3; }));
  pressure_log fourth;
  m.set_pressure_callback(fourth.callback());
  std::this_thread::sleep_for(std::chrono::milliseconds{20});
  BOOST_TEST(fourth.size() == 0u);
  BOOST_TEST(third.get() == (levels{memory_pressure::high, memory_pressure::medium,
                                    memory_pressure::low}),
             boost::test_tools::per_element());
}

// A setter waits for a call of the callback it replaces (its captures may
// go once the setter returns), not for calls of the new one: the relay goes
// from the old callback's call straight to the next level's, with the new
// callback, before the woken setter runs - and a setter that waited for no
// call at all to run waited as long as the new callback ran.
BOOST_AUTO_TEST_CASE(replacing_a_callback_waits_for_the_old_one_only) {
  cache_fixture f;
  auto& m = f.m();
  std::promise<void> release_old;
  std::promise<void> release_new;
  auto old_gate = release_old.get_future().share();
  auto new_gate = release_new.get_future().share();
  std::atomic<int> old_calls{0};
  std::atomic<int> new_calls{0};
  m.set_pressure_callback([&, old_gate](memory_pressure) {
    if (++old_calls == 1)
      old_gate.wait();
  });
  for (request_id id = 1; id <= 52; ++id) // medium (the old one holds), high
    f.alloc(f.req(id, 4));
  BOOST_REQUIRE(eventually([&] { return old_calls.load() == 1; }));
  std::atomic<bool> set{false};
  std::thread setter{[&] {
    m.set_pressure_callback([&, new_gate](memory_pressure) {
      ++new_calls;
      new_gate.wait();
    });
    set = true;
  }};
  std::this_thread::sleep_for(std::chrono::milliseconds{20});
  BOOST_TEST(!set.load()); // the old callback's call still runs
  release_old.set_value();
  BOOST_TEST(eventually([&] { return new_calls.load() == 1; }));
  BOOST_TEST(eventually([&] { return set.load(); })); // the new one still runs
  release_new.set_value();
  setter.join();
  BOOST_TEST(old_calls.load() == 1);
}

BOOST_AUTO_TEST_CASE(a_throwing_pressure_callback_stops_no_later_level) {
  // The exception once left the relay's handler: CAF stopped the relay,
  // and no callback, however often replaced, heard of pressure again.
  cache_fixture f;
  pressure_log log;
  auto& m = f.m();
  auto thrown = std::make_shared<std::atomic<int>>(0);
  m.set_pressure_callback([&log, thrown](memory_pressure lvl) {
    log.callback()(lvl);
    ++*thrown;
    throw std::runtime_error("a throwing pressure callback");
  });
  for (request_id id = 1; id <= 52; ++id) // medium, then high: both heard
    f.alloc(f.req(id, 4));
  BOOST_TEST(eventually([&] { return log.size() >= 2; }));
  BOOST_TEST(thrown->load() == 2);
  pressure_log second;
  m.set_pressure_callback(second.callback()); // hears high, the level now
  for (request_id id = 53; id <= 61; ++id) // critical
    f.alloc(f.req(id, 4));
  BOOST_TEST(eventually([&] { return second.size() >= 2; }));
  auto heard = second.get();
  BOOST_TEST(heard.front() == memory_pressure::high);
  BOOST_TEST(heard.at(1) == memory_pressure::critical);
}

BOOST_AUTO_TEST_CASE(pressure_callback_gets_each_level_once_in_order) {
  cache_fixture f;
  pressure_log log;
  f.m().set_pressure_callback(log.callback());
  // One block per request, up to 61 of 64: medium (39), high (52),
  // critical (61).
  for (request_id id = 1; id <= 61; ++id)
    f.alloc(f.req(id, 4));
  BOOST_TEST(eventually([&] { return log.size() >= 3; }));
  std::vector<memory_pressure> rising{memory_pressure::medium,
                                      memory_pressure::high,
                                      memory_pressure::critical};
  auto seen = log.get();
  seen.resize(std::min<std::size_t>(seen.size(), 3));
  BOOST_TEST(seen == rising, boost::test_tools::per_element());
  // Falling with hysteresis: below 58 high, below 48 medium, below 36 low.
  // (At critical the cache may preempt requests itself: free what is left.)
  auto live = f.m().list_handles();
  for (auto i = live.rbegin(); i != live.rend(); ++i) {
    auto err = f.m().deallocate(i->first);
    BOOST_TEST((!err || has_code(err, errc::unknown_request)), render(err));
  }
  BOOST_TEST(eventually([&] { return log.size() >= 6; }));
  std::this_thread::sleep_for(std::chrono::milliseconds{50});
  std::vector<memory_pressure> all{
    memory_pressure::medium, memory_pressure::high, memory_pressure::critical,
    memory_pressure::high,   memory_pressure::medium, memory_pressure::low};
  BOOST_TEST(log.get() == all, boost::test_tools::per_element());
  BOOST_TEST(eventually([&] {
    return f.checked_stats().pressure == memory_pressure::low;
  }));
  // A new callback replaces the old one.
  pressure_log second;
  f.m().set_pressure_callback(second.callback());
  for (request_id id = 100; id < 140; ++id)
    f.alloc(f.req(id, 4));
  BOOST_TEST(eventually([&] { return second.size() >= 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds{50});
  BOOST_TEST(second.get() == std::vector<memory_pressure>{memory_pressure::medium},
             boost::test_tools::per_element());
  BOOST_TEST(log.size() == 6u);
}

BOOST_AUTO_TEST_SUITE_END()
