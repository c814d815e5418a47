// The device actor's end when its last reference goes on a wake's thread. A
// CUDA completion callback (the storage's wake) briefly holds a strong
// reference to the device actor while it posts done_atom; if every other
// reference went meanwhile, the actor is destroyed right there - state,
// attached functors and all - on CUDA's callback thread, where no CUDA call
// may be made. Nothing with CUDA calls in its destructor may be released
// there: not the storage (its streams are synchronised), not the pinned
// staging buffers (cudaFreeHost). The test drops the last reference on a
// thread marked as running a wake (detail::wake_scope, as the backends mark
// theirs) and checks where each was released.
#include <chrono>
#include <cstdint>
#include <memory>
#include <tuple>
#include <utility>

#include "fixture.hpp"
#include "kvactor/actors/device_actor.hpp"
#include "slow_storage.hpp"

using namespace kvactor;
using namespace kvactor::test;

BOOST_AUTO_TEST_SUITE(device_teardown_suite)

BOOST_FIXTURE_TEST_CASE(a_device_actor_dropped_on_a_wake_releases_nothing_there,
                        cache_fixture) {
  auto log = std::make_shared<release_log>();
  auto store = make_slow(cfg);
  store->log = log;
  auto* ctl = store.get(); // the actor owns the storage from here on
  auto dev = spawn_device_actor(sys, std::move(store), false);
  run();
  // Two writes, the second larger than the first's staging: a buffer in
  // use and an outgrown one, both from host_buffer.
  auto row = row_bytes();
  for (std::size_t tokens : {1u, 64u}) {
    slot_write w;
    for (std::size_t i = 0; i < tokens; ++i)
      w.slots.push_back(static_cast<std::int64_t>(i));
    w.keys.assign(tokens * row, 1);
    w.values.assign(tokens * row, 2);
    self->send(dev, write_atom::value, std::move(w));
    run();
    ctl->complete(); // the wake: done_atom
    run();
    bool answered = false;
    self->receive([&](std::uint32_t n) { answered = n == tokens; },
                  [&](caf::error& err) { BOOST_FAIL(render(err)); },
                  caf::after(std::chrono::seconds(0)) >> [] {});
    BOOST_REQUIRE(answered);
  }
  // The watchdog's delayed poll holds a reference too: let it come.
  sched.trigger_timeouts();
  run();
  {
    detail::wake_scope on_a_wake;
    dev = nullptr; // the last reference
  }
  // What the actor must not release on the wake's thread goes on another.
  BOOST_REQUIRE(log->wait_for(2, std::chrono::seconds(10)));
  BOOST_TEST(!log->storage_in_wake());
  BOOST_TEST(log->buffers_in_wake() == 0);
}

BOOST_FIXTURE_TEST_CASE(a_device_actor_that_ends_leaves_its_successors_wake_alone,
                        cache_fixture) {
  // A storage handed to a new cache while the old cache's device actor is
  // still on its way out (a restart right after a facade went: its actors
  // end asynchronously): the old actor's cleanup must not clear the wake the
  // new one set, or the new one hears of completions only through its
  // watchdog's poll.
  auto store = make_slow(cfg);
  auto old_dev = spawn_device_actor(sys, store, false);
  run();
  auto new_dev = spawn_device_actor(sys, store, false);
  run();
  BOOST_REQUIRE(store->has_wake());
  self->send_exit(old_dev, caf::exit_reason::user_shutdown);
  run();
  old_dev = nullptr;
  run();
  BOOST_TEST(store->has_wake());
  // And the wake is the new actor's: a completion reaches it (no watchdog
  // poll runs here: its timeouts are not triggered).
  self->send(new_dev, copy_atom::value, std::vector<block_copy>{{0, 1}});
  run();
  store->complete();
  run();
  bool answered = false;
  self->receive([&](std::uint32_t n) { answered = n == 1; },
                [&](caf::error& err) { BOOST_FAIL(render(err)); },
                caf::after(std::chrono::seconds(0)) >> [] {});
  BOOST_TEST(answered);
  self->send_exit(new_dev, caf::exit_reason::user_shutdown);
  run();
}

BOOST_AUTO_TEST_SUITE_END()
