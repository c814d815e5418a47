// A blocking facade call from an actor's handler, on one of the cache's
// scheduler threads, would hold a thread its own reply needs (with one
// worker, for good): the facade refuses it at once with invalid_request,
// sending nothing. A detached actor runs on a thread of its own and may
// call; so may any other thread.
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <optional>

#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>

#include "fixture.hpp"

using namespace kvtest;

namespace {

/// What the calls made inside an actor's handler came back with.
struct from_actor {
  caf::error allocate;
  caf::error extend;
  caf::error table;
  std::uint64_t tokens = 0;
};

/// Spawns an actor (detached or on the scheduler) that, told to, makes
/// facade calls and reports what they gave. The spawn takes an argument:
/// CAF 0.17 dereferences a spawn's empty argument tuple (UBSan).
template <caf::spawn_options Os>
from_actor call_from_actor(cache_fixture& f, kv_cache_handle& h,
                           const allocation_request& req) {
  std::promise<from_actor> done;
  auto a = f.sys->spawn<Os>(
    [&](caf::event_based_actor* self, int) -> caf::behavior {
      return {[&, self](caf::get_atom) {
        from_actor out;
        out.allocate = error_of(f.m().allocate(req));
        out.extend = f.m().extend(h, 1);
        out.table = error_of(h.checked_table());
        out.tokens = h.num_tokens();
        done.set_value(std::move(out));
        self->quit();
      }};
    },
    0);
  caf::anon_send(a, caf::get_atom::value);
  return done.get_future().get();
}

/// A cache on one scheduler thread at medium pressure (40 of 64 blocks
/// held), its calls timing out within the watchdog's limit.
struct one_worker_at_medium : cache_fixture {
  one_worker_at_medium() : cache_fixture(one_worker()) {
    BOOST_REQUIRE(!m().set_timeout(std::chrono::seconds{20}));
    alloc(req(1, 40 * 4));
  }
  static cache_config one_worker() {
    auto cfg = small_config(); // 64 blocks: medium from 39 used
    cfg.scheduler_threads = 1;
    return cfg;
  }
};

/// A pressure callback on `m` whose first call (the level the cache is at)
/// waits until released, then makes a facade call (stats) and records what
/// it gave. Later calls (the test's end changes the level) touch only what
/// they own.
struct held_callback {
  explicit held_callback(kv_cache_manager& m) {
    auto first = std::make_shared<std::atomic<bool>>(true);
    // `done` is the lambda's own copy, stored before the result wakes the
    // test: once woken, the test may end, and this object with it
    // (ThreadSanitizer saw the store land in freed memory).
    m.set_pressure_callback([&m, this, first, done = finished](memory_pressure) {
      if (!first->exchange(false))
        return;
      entered.set_value();
      go_now.wait();
      auto err = error_of(m.checked_stats());
      done->store(true);
      result.set_value(std::move(err)); // the last touch of this object
    });
    entered.get_future().wait();
  }
  std::promise<void> entered;
  std::promise<void> go;
  std::shared_future<void> go_now = go.get_future().share();
  std::promise<caf::error> result;
  std::shared_ptr<std::atomic<bool>> finished
    = std::make_shared<std::atomic<bool>>(false);
};

/// Runs `body` in an actor's handler - on the cache's only scheduler
/// thread - and releases `cb`'s running call once the handler holds it;
/// returns when the handler is done.
template <class Body>
void in_handler_while_held(cache_fixture& f, held_callback& cb, Body body) {
  std::promise<void> handling;
  std::promise<void> done;
  auto a = f.sys->spawn(
    [&](caf::event_based_actor* self, int) -> caf::behavior {
      return {[&, self](caf::get_atom) {
        handling.set_value();
        body();
        done.set_value();
        self->quit();
      }};
    },
    0);
  caf::anon_send(a, caf::get_atom::value);
  handling.get_future().wait();
  cb.go.set_value();
  done.get_future().wait();
}

} // namespace

BOOST_FIXTURE_TEST_SUITE(facade_system_threads, watchdog)

BOOST_AUTO_TEST_CASE(an_actors_handler_gets_invalid_request_and_changes_nothing) {
  cache_fixture f;
  auto h = f.alloc(f.req(1, 6));
  auto before = f.checked_stats();
  auto got = call_from_actor<caf::no_spawn_options>(f, *h, f.req(2, 4));
  KV_CHECK_ERROR(got.allocate, errc::invalid_request, "an actor's handler",
                 "actor()");
  KV_CHECK_ERROR(got.extend, errc::invalid_request, "an actor's handler");
  KV_CHECK_ERROR(got.table, errc::invalid_request, "an actor's handler");
  BOOST_TEST(got.tokens == 0u); // a getter that cannot fail answers zero
  // Nothing was sent: request 2 is not there, request 1 did not grow.
  BOOST_TEST(!f.m().get_handle(2));
  BOOST_TEST(h->num_tokens() == 6u);
  auto after = f.checked_stats();
  BOOST_TEST(after.free_blocks == before.free_blocks);
  BOOST_TEST(after.allocation_count == before.allocation_count);
}

BOOST_AUTO_TEST_CASE(a_detached_actor_may_call) {
  cache_fixture f;
  auto h = f.alloc(f.req(1, 6));
  auto got = call_from_actor<caf::detached>(f, *h, f.req(2, 4));
  BOOST_TEST(!got.allocate, render(got.allocate));
  BOOST_TEST(!got.extend, render(got.extend));
  BOOST_TEST(!got.table, render(got.table));
  BOOST_TEST(got.tokens == 7u);
  BOOST_TEST(f.m().get_handle(2));
}

BOOST_AUTO_TEST_CASE(an_actor_replacing_a_running_callback_does_not_wait_for_it) {
  // With one worker, an actor's handler that waited for the running
  // pressure callback would hold the thread that callback's own facade
  // call needs: both stuck until the call timed out.
  one_worker_at_medium f;
  held_callback cb{f.m()};
  in_handler_while_held(f, cb, [&] { f.m().set_pressure_callback(nullptr); });
  auto err = cb.result.get_future().get();
  BOOST_TEST(!err, "the callback's stats call: " << render(err));
}

BOOST_AUTO_TEST_CASE(an_actor_dropping_the_last_copy_waits_for_a_running_callback) {
  // The last copy's destruction waits for a running callback (which may
  // reference the facade, as the README suggests), even in an actor's
  // handler: it fails the facade's waiting calls first, so the callback's
  // own call returns without the scheduler thread this handler holds.
  one_worker_at_medium f;
  auto owned = std::make_shared<std::optional<kv_cache_manager>>(
    std::move(*f.mgr));
  f.mgr.reset(); // the actor's copy is the last
  held_callback cb{**owned};
  bool finished_first = false;
  in_handler_while_held(f, cb, [&] {
    owned->reset();
    finished_first = cb.finished->load();
  });
  BOOST_TEST(finished_first, "the last copy went before the running "
                             "callback finished");
  KV_CHECK_ERROR(cb.result.get_future().get(), errc::shutting_down,
                 "the facade stopped");
}

BOOST_AUTO_TEST_SUITE_END()
