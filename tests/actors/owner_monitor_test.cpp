// The manager watches each owner and each lifecycle subscriber with one
// monitor, however often the owner's live requests come and go: a monitor
// is an entry in the watched actor's list, so one left behind per request
// is memory that grows with every request (the blocking facade, a
// subscriber that owns one request at a time, leaked 40 bytes per
// allocate that way). The owner here counts the monitors attached to it.
#include "fixture.hpp"
#include "spawn_fn.hpp"

#include <atomic>
#include <memory>
#include <utility>

#include <caf/all.hpp>

using namespace kvactor;
using namespace kvactor::test;

namespace {

/// An actor that counts what is attached to it (monitors) and detached
/// again; it swallows every reply it gets (answering none: CAF's `drop`
/// would send an error back).
class counting_owner : public caf::event_based_actor {
public:
  counting_owner(caf::actor_config& cfg, std::shared_ptr<std::atomic<int>> live)
    : caf::event_based_actor(cfg), live_(std::move(live)) {
    // nop
  }

  void attach(caf::attachable_ptr ptr) override {
    ++*live_;
    caf::event_based_actor::attach(std::move(ptr));
  }

  size_t detach(const caf::attachable::token& what) override {
    auto n = caf::event_based_actor::detach(what);
    *live_ -= static_cast<int>(n);
    return n;
  }

  caf::behavior make_behavior() override {
    set_default_handler([](caf::scheduled_actor*, caf::message_view&)
                          -> caf::result<caf::message> { return caf::message{}; });
    return {[](caf::unit_t) {}};
  }

private:
  std::shared_ptr<std::atomic<int>> live_;
};

} // namespace

/// A cache and a counting owner; `monitors()` is how many monitors the
/// owner carries.
struct owner_fixture : cache_fixture {
  std::shared_ptr<std::atomic<int>> live = std::make_shared<std::atomic<int>>(0);
  caf::actor owner = sys.spawn<counting_owner>(live);

  int monitors() const {
    return live->load();
  }

  /// Sends (xs...) to the manager as the owner and runs the scheduler.
  template <class... Ts>
  void as_owner(Ts&&... xs) {
    caf::send_as(owner, mgr, std::forward<Ts>(xs)...);
    run();
  }

  std::uint64_t active() {
    return must(stats()).active_caches;
  }

  /// Runs one message of `whom` (which must have one waiting).
  template <class Handle>
  void step(const Handle& whom) {
    BOOST_REQUIRE(sched.prioritize(whom));
    sched.run_once();
  }

  /// The owner's exit reclaims every request it holds.
  void kill_owner() {
    caf::anon_send_exit(owner, caf::exit_reason::kill);
    run();
    BOOST_TEST(active() == 0u);
  }
};

BOOST_FIXTURE_TEST_SUITE(owner_monitors, owner_fixture)

BOOST_AUTO_TEST_CASE(only_its_owner_may_end_a_request_as_unclaimed) {
  // The facade's undo of a reply that came after its caller gave up ends
  // the request as a reclaim; from anyone else the message would end a
  // request its owner still uses. Straight to the manager or through the
  // request's handle actor (which anyone holding the handle can reach: it
  // passes the message on as from its sender).
  as_owner(allocate_atom::value, make_request(cfg, 1, 8));
  as_owner(allocate_atom::value, make_request(cfg, 2, 8));
  BOOST_REQUIRE(active() == 2u);
  auto found = ask_from<request_handle_actor, request_info>(
    self, mgr, lookup_atom::value, request_id{1});
  BOOST_REQUIRE(found);
  auto handle = std::get<0>(*found);
  const auto cache_id = std::get<1>(*found).cache_id;
  caf::scoped_actor stranger{sys};
  stranger->send(mgr, unclaimed_atom::value, request_id{1}, cache_id);
  caf::anon_send(mgr, unclaimed_atom::value, request_id{1}, cache_id);
  stranger->send(handle, unclaimed_atom::value);
  caf::anon_send(handle, unclaimed_atom::value);
  run();
  BOOST_TEST(active() == 2u);
  as_owner(unclaimed_atom::value, request_id{1}, cache_id + 1); // not it
  BOOST_TEST(active() == 2u);
  caf::send_as(owner, handle, unclaimed_atom::value); // through the handle
  run();
  BOOST_TEST(active() == 1u);
  auto second = ask_from<request_handle_actor, request_info>(
    self, mgr, lookup_atom::value, request_id{2});
  BOOST_REQUIRE(second);
  as_owner(unclaimed_atom::value, request_id{2}, std::get<1>(*second).cache_id);
  BOOST_TEST(active() == 0u);
}

BOOST_AUTO_TEST_CASE(an_owner_that_subscribes_keeps_one_monitor_over_many_requests) {
  run();
  as_owner(subscribe_atom::value, topic::lifecycle, owner);
  BOOST_TEST(monitors() == 1);
  // One request at a time: the owner's count goes 0 -> 1 -> 0 each time.
  for (request_id id = 1; id <= 20; ++id) {
    as_owner(allocate_atom::value, make_request(cfg, id, 5));
    BOOST_REQUIRE(active() == 1u);
    BOOST_TEST(monitors() == 1);
    as_owner(free_atom::value, id);
    BOOST_REQUIRE(active() == 0u);
    BOOST_TEST(monitors() == 1);
  }
  // Unsubscribed while it owns a request: the monitor stays for that.
  as_owner(allocate_atom::value, make_request(cfg, 30, 5));
  as_owner(unsubscribe_atom::value, topic::lifecycle, owner);
  BOOST_TEST(monitors() == 1);
  kill_owner();
}

BOOST_AUTO_TEST_CASE(an_owner_keeps_one_monitor_while_alive_and_its_exit_reclaims) {
  run();
  for (request_id id = 1; id <= 10; ++id) {
    as_owner(allocate_atom::value, make_request(cfg, id, 5));
    BOOST_TEST(monitors() == 1);
    as_owner(free_atom::value, id);
    BOOST_TEST(monitors() <= 1);
  }
  // Two live at once, one monitor.
  as_owner(allocate_atom::value, make_request(cfg, 11, 5));
  as_owner(allocate_atom::value, make_request(cfg, 12, 5));
  BOOST_REQUIRE(active() == 2u);
  BOOST_TEST(monitors() == 1);
  // Subscribing and unsubscribing while it owns requests adds no monitor
  // and leaves the one that ownership needs.
  as_owner(subscribe_atom::value, topic::lifecycle, owner);
  BOOST_TEST(monitors() == 1);
  as_owner(unsubscribe_atom::value, topic::lifecycle, owner);
  BOOST_TEST(monitors() == 1);
  kill_owner();
}

BOOST_AUTO_TEST_CASE(an_owner_dying_with_an_allocate_in_flight_leaves_nothing) {
  // The owner holds request 1 and has allocate(2) at the pool when it dies.
  // The manager takes in its down message first (1's reclaim is under way,
  // by its handle actor), then the pool's admission of 2: registered under
  // the dead owner, which is watched anew (a monitor of a dead actor: a
  // second down, queued behind the reclaim's answer). That answer ended 1
  // and took one off the owner's count - the count 2 had just started: the
  // second down found the owner holding nothing, and request 2 stayed,
  // blocks and all, for good.
  run();
  as_owner(allocate_atom::value, make_request(cfg, 1, 4));
  BOOST_REQUIRE(active() == 1u);
  caf::send_as(owner, mgr, allocate_atom::value, make_request(cfg, 2, 4));
  step(mgr); // allocate(2) -> the pool
  caf::anon_send_exit(owner, caf::exit_reason::kill);
  step(owner); // it goes: its down message to the manager
  step(mgr);   // the down: 1 unclaimed -> its handle actor
  step(pool);  // allocate(2) admitted
  step(mgr);   // 2 registered under the dead owner, watched anew
  run();       // 1 reclaimed, answered; the second down
  BOOST_TEST(outcome(lookup(2)) == "unknown_request");
  BOOST_TEST(active() == 0u);
  BOOST_TEST(used_blocks() == 0u);
}

BOOST_AUTO_TEST_CASE(subscribing_and_unsubscribing_leaves_no_monitor_behind) {
  // Unsubscribing from pressure or KV events left the subscribe's monitor
  // on the subscriber: one more per cycle, until it went.
  run();
  for (int i = 0; i < 10; ++i)
    for (auto t : {topic::pressure, topic::lifecycle, topic::kv_events}) {
      as_owner(subscribe_atom::value, t, owner);
      as_owner(unsubscribe_atom::value, t, owner);
    }
  BOOST_TEST(monitors() == 0);
  // A stepper stays watched through its subscription's end: CAF's
  // demonitor would drop the step lane's monitor too.
  caf::send_as(owner, pool, step_atom::value, step_request{});
  step_request admit;
  admit.admits.push_back(make_request(cfg, 1, 5));
  caf::send_as(owner, pool, step_atom::value, admit);
  run();
  BOOST_REQUIRE(active() == 1u);
  auto watched = monitors();
  BOOST_TEST(watched >= 1);
  for (int i = 0; i < 10; ++i) {
    as_owner(subscribe_atom::value, topic::kv_events, owner);
    as_owner(unsubscribe_atom::value, topic::kv_events, owner);
  }
  BOOST_TEST(monitors() == watched);
  kill_owner(); // and its request goes with it
}

BOOST_AUTO_TEST_SUITE_END()

// -- an owner's last messages ----------------------------------------------------

BOOST_FIXTURE_TEST_SUITE(owner_exits, cache_fixture)

BOOST_AUTO_TEST_CASE(a_free_sent_through_the_handle_just_before_the_owner_quits_is_a_free) {
  // "Finish and exit": the owner frees through its handle actor and quits.
  // Its down message goes straight to the manager, the free by way of the
  // handle: reclaimed first, the request lost what it cached (a reclaim
  // unindexes what it brought) and the free failed.
  caf::scoped_actor sub{sys};
  subscribe(topic::lifecycle, sub);
  auto prompt = make_tokens(13, 7); // 3 full blocks and 1 token
  {
    caf::scoped_actor owner{sys};
    auto a = allocate_from(owner, make_prompt_request(cfg, 1, prompt));
    BOOST_REQUIRE(a);
    owner->send(a->handle, free_atom::value);
  } // the owner quits here
  run();
  auto ended = ended_events(sub);
  BOOST_REQUIRE(ended.size() == 1u);
  BOOST_TEST((ended[0].reason == end_reason::deallocated));
  BOOST_REQUIRE(allocate(make_prompt_request(cfg, 2, prompt)));
  BOOST_TEST(must(stats()).prefix_hit_tokens == 12u);
  BOOST_REQUIRE(free(2));
}

BOOST_AUTO_TEST_CASE(an_owner_that_quits_without_a_free_has_its_request_reclaimed) {
  caf::scoped_actor sub{sys};
  subscribe(topic::lifecycle, sub);
  {
    caf::scoped_actor owner{sys};
    BOOST_REQUIRE(allocate_from(owner, make_request(cfg, 1, 13)));
  }
  run();
  auto ended = ended_events(sub);
  BOOST_REQUIRE(ended.size() == 1u);
  BOOST_TEST((ended[0].reason == end_reason::reclaimed));
  BOOST_TEST(outcome(lookup(1)) == "unknown_request");
}


BOOST_AUTO_TEST_CASE(an_owner_whose_last_reference_goes_has_its_requests_reclaimed) {
  // The usual end of an event-based actor in CAF: nobody holds it any
  // more. The registry held it strongly, so it never went, no down message
  // came, and its requests (one allocated, one admitted by a step it sent)
  // kept their blocks until the cache stopped.
  caf::scoped_actor sub{sys};
  subscribe(topic::lifecycle, sub);
  auto gone = std::make_shared<std::atomic<bool>>(false);
  auto got = std::make_shared<std::atomic<int>>(0);
  {
    auto owner = spawn_fn(sys, [&, gone, got](caf::event_based_actor* me)
                                 -> caf::behavior {
      me->attach_functor([gone](const caf::error&) { *gone = true; });
      me->request(mgr, caf::infinite, allocate_atom::value,
                   make_request(cfg, 1, 9))
        .then([got](const request_handle_actor&, const block_table&) { ++*got; },
              [](caf::error&) {});
      step_request admit;
      admit.admits.push_back(make_request(cfg, 2, 5));
      me->request(pool, caf::infinite, step_atom::value, admit)
        .then([got](const step_result&) { ++*got; }, [](caf::error&) {});
      return {[](caf::unit_t) {}};
    });
  } // the spawner's reference goes; the requests' messages hold it a while
  run();
  BOOST_REQUIRE(got->load() == 2);
  BOOST_TEST(gone->load());
  BOOST_TEST(must(stats()).active_caches == 0u);
  BOOST_TEST(used_blocks() == 0u);
  auto ended = ended_events(sub);
  BOOST_REQUIRE(ended.size() == 2u);
  for (auto& e : ended)
    BOOST_TEST((e.reason == end_reason::reclaimed));
}

BOOST_AUTO_TEST_CASE(a_subscription_keeps_no_owner_alive) {
  // An owner subscribed to pressure, lifecycle and KV events, as a
  // scheduler does: the supervisor, the manager and the pool each kept it
  // by a strong reference, so its last reference never went, and neither
  // did its request's blocks.
  auto gone = std::make_shared<std::atomic<bool>>(false);
  auto got = std::make_shared<std::atomic<int>>(0);
  {
    auto owner = spawn_fn(sys, [&, gone, got](caf::event_based_actor* me)
                                 -> caf::behavior {
      me->attach_functor([gone](const caf::error&) { *gone = true; });
      auto hm = caf::actor_cast<caf::actor>(me);
      for (auto t : {topic::pressure, topic::lifecycle, topic::kv_events})
        me->send(mgr, subscribe_atom::value, t, hm);
      me->request(mgr, caf::infinite, allocate_atom::value,
                  make_request(cfg, 1, 9))
        .then([got](const request_handle_actor&, const block_table&) { ++*got; },
              [](caf::error&) {});
      return {[](pressure_atom, const pressure_event&) {},
              [](ended_atom, const request_ended&) {},
              [](kv_event_atom, const kv_event_batch&) {}};
    });
  }
  run();
  BOOST_REQUIRE(got->load() == 1);
  BOOST_TEST(gone->load());
  BOOST_TEST(must(stats()).active_caches == 0u);
  BOOST_TEST(used_blocks() == 0u);
  // Those alive still hear: a subscriber held elsewhere gets its notices.
  caf::scoped_actor sub{sys};
  subscribe(topic::lifecycle, sub);
  BOOST_REQUIRE(allocate(2, 4));
  BOOST_REQUIRE(free(2));
  BOOST_TEST(ended_events(sub).size() == 1u);
}

BOOST_AUTO_TEST_CASE(a_killed_handle_is_not_handed_out_before_its_reclaim) {
  // Killed, its handle actor reports to the supervisor, which passes the
  // report on; a lookup or list the manager answers meanwhile handed out a
  // handle every call on which fails.
  auto a = allocate(1, 9);
  BOOST_REQUIRE(a);
  caf::anon_send_exit(a->handle, caf::exit_reason::kill);
  BOOST_REQUIRE(sched.prioritize(a->handle));
  sched.run_once(); // it goes; its report is on the way
  self->send(mgr, lookup_atom::value, request_id{1});
  BOOST_REQUIRE(sched.prioritize(mgr));
  sched.run_once();
  auto found = reply_to<request_handle_actor, request_info>(self);
  BOOST_TEST(outcome(found) == "unknown_request");
  self->send(mgr, list_atom::value);
  BOOST_REQUIRE(sched.prioritize(mgr));
  sched.run_once();
  auto listed = reply_to<std::vector<handle_entry>>(self);
  BOOST_REQUIRE(listed);
  BOOST_TEST(std::get<0>(*listed).empty());
  run();
  BOOST_TEST(outcome(lookup(1)) == "unknown_request");
  BOOST_TEST(must(stats()).active_caches == 0u);
}

BOOST_AUTO_TEST_SUITE_END()
