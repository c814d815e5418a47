// What the facade keeps per request, and when it lets go: one slot per
// handle actor however often handles are looked up, nothing left
// once the request ended, a slot made after its request's end (or its
// manager's death) born invalid,
// calls to an actor that went unanswered failing instead of hanging, a
// replaced pressure callback no longer running once the setter returned, and
// a step answered after its timeout leaving no admission behind.
#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include <caf/after.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/system_messages.hpp>
#include <caf/send.hpp>

#include "fixture.hpp"
#include "kvactor/actors/blocking_bridge.hpp"
#include "kvactor/actors/facade_core.hpp"
#include "kvactor/actors/kv_cache_handle.hpp"
#include "spawn_fn.hpp"

using namespace kvtest;

namespace {

/// The facade core behind a handle.
struct core_of : kv_cache_handle {
  static std::shared_ptr<detail::facade_core> get(const kv_cache_handle& h) {
    auto member = &core_of::core_;
    return (h.*member).lock();
  }
};

/// Request 1 (4 tokens) in a cache: its handle actor and what a lookup
/// reply would say of it (its allocate's handle has the same), to make a
/// slot from later.
struct one_request {
  cache_fixture f;
  std::shared_ptr<kv_cache_handle> h = f.alloc(f.req(1, 4));
  std::shared_ptr<detail::facade_core> core = core_of::get(*h);
  request_handle_actor actor = h->actor();
  request_info info = h->slot()->info;
};

} // namespace

BOOST_FIXTURE_TEST_SUITE(facade_tracking, watchdog)

BOOST_AUTO_TEST_CASE(a_request_is_tracked_once_and_forgotten_at_its_end) {
  cache_fixture f;
  auto h = f.alloc(f.req(1, 4));
  auto core = core_of::get(*h);
  BOOST_REQUIRE(core);
  h.reset();
  // Looked up again and again, every reference dropped each time: still one
  // slot for the one handle actor.
  for (int i = 0; i < 100; ++i) {
    auto again = f.m().get_handle(1);
    BOOST_REQUIRE(again);
    BOOST_REQUIRE(again->is_valid());
  }
  for (int i = 0; i < 10; ++i)
    BOOST_REQUIRE_EQUAL(f.m().list_handles().size(), 1u);
  auto t = core->tracked();
  BOOST_TEST(t.slots == 1u);
  BOOST_TEST(t.requests == 1u);
  // Ended while no handle references the slot: nothing stays behind.
  BOOST_REQUIRE(!f.m().deallocate(1));
  t = core->tracked();
  BOOST_TEST(t.slots == 0u);
  BOOST_TEST(t.requests == 0u);
  // The same for a request whose handle went before its end, never looked up.
  f.alloc(f.req(2, 4)).reset();
  BOOST_REQUIRE(!f.m().deallocate(2));
  t = core->tracked();
  BOOST_TEST(t.slots == 0u);
  BOOST_TEST(t.requests == 0u);
}

BOOST_AUTO_TEST_CASE(a_handle_that_names_no_incarnation_reaches_no_request) {
  // Cache id 0 is the pool's "whichever incarnation is live": a handle must
  // never send it. No slot the facade makes lacks its cache id; one made so
  // by hand is refused before anything is sent.
  one_request r;
  auto slot = std::make_shared<detail::request_slot>();
  slot->info = r.info;
  slot->info.cache_id = 0;
  slot->actor = r.actor;
  slot->handle_id = r.actor.id();
  auto blind = r.core->make_handle(slot);
  auto before = r.h->table();
  KV_CHECK_ERROR(r.f.m().append(*blind, {1, 2}, 1), errc::invalid_handle,
                 "names no incarnation");
  KV_CHECK_ERROR(r.f.m().extend(*blind, 1), errc::invalid_handle,
                 "names no incarnation");
  BOOST_TEST(!blind->checked_table());
  BOOST_TEST(r.h->table() == before);
}

BOOST_AUTO_TEST_CASE(a_slot_made_after_its_request_ended_is_born_invalid) {
  // A lookup or allocate reply on its way while the request ends (another
  // thread's deallocate, a preemption) makes its slot after the ended event:
  // that slot must not read valid.
  one_request r;
  auto& [f, h, core, actor, info] = r;
  h.reset();
  BOOST_REQUIRE(!f.m().deallocate(1));
  auto late = core->slot_for(actor, info);
  BOOST_TEST(!late->valid.load());
  BOOST_TEST(core->tracked().recent_ends >= 1u);
  // A new incarnation of the id is not affected.
  auto fresh = f.alloc(f.req(1, 4));
  BOOST_TEST(fresh->is_valid());
}

BOOST_AUTO_TEST_CASE(a_slot_whose_end_was_forgotten_is_confirmed_with_the_manager) {
  // The facade remembers the last 4096 ended handle actors; a list of
  // thousands racing a step that frees as many made slots after their
  // ends had been forgotten, valid for ever. Past that many ends, the
  // slots are checked against the manager's live requests.
  one_request r;
  auto& [f, h, core, actor, info] = r;
  auto live = f.alloc(f.req(2, 4));
  auto live_slot = core->slot_for(live->actor(), [&] {
    request_info i;
    i.request = f.req(2, 4);
    return i;
  }());
  auto since = core->ends_taken();
  h.reset();
  BOOST_REQUIRE(!f.m().deallocate(1));
  BOOST_TEST(!core->may_have_forgotten(since));
  // Ends of other handle actors push request 1's out of memory.
  for (std::uint64_t i = 0; i <= 4096; ++i)
    core->invalidate((std::uint64_t{1} << 40) + i, true);
  auto late = core->slot_for(actor, info);
  BOOST_TEST(late->valid.load()); // what the end alone cannot tell
  BOOST_TEST(core->may_have_forgotten(since));
  core->confirm_slots({late, live_slot});
  BOOST_TEST(!late->valid.load());
  BOOST_TEST(live_slot->valid.load());
  BOOST_TEST(live->is_valid());
  BOOST_TEST(core->tracked().slots == 1u);
  BOOST_TEST(core->tracked().requests == 1u);
  // Marked ended, it is remembered again: a slot made now is born invalid.
  BOOST_TEST(!core->slot_for(actor, info)->valid.load());
}

BOOST_AUTO_TEST_CASE(a_slot_that_could_not_be_confirmed_is_left_as_it_was) {
  // When the manager's list fails, nothing tells a live request from an
  // ended one: no slot is marked (marked ended, a live request would keep
  // its blocks with every call refused), and the caller learns why - an
  // allocate or fork then hands out no handle and ends the request.
  one_request r;
  auto& [f, h, core, actor, info] = r;
  auto slot = core->slot_for(actor, info);
  // From an actor's handler the facade refuses to block: the list fails.
  std::promise<caf::error> done;
  auto a = f.sys->spawn(
    [&](caf::event_based_actor* self, int) -> caf::behavior {
      return {[&, self](caf::get_atom) {
        done.set_value(core->confirm_slots({slot}));
        self->quit();
      }};
    },
    0);
  caf::anon_send(a, caf::get_atom::value);
  auto err = done.get_future().get();
  KV_CHECK_ERROR(err, errc::invalid_request,
                 "confirming 1 handle(s) against the manager's list");
  BOOST_TEST(slot->valid.load());
  BOOST_TEST(h->is_valid());
  BOOST_TEST(!f.m().extend(*h, 1));
  BOOST_TEST(core->tracked().slots == 1u);
}

BOOST_AUTO_TEST_CASE(a_lookup_that_could_not_be_confirmed_leaves_no_slot_behind) {
  // get_handle and list_handles hand out nothing when the confirmation
  // fails; a slot they made that no handle references is untracked then -
  // its end may be the one forgotten, and nothing else would untrack it.
  // A slot a handle references stays, as it was.
  one_request r;
  auto& [f, h, core, actor, info] = r;
  auto gone = f.alloc(f.req(2, 4));
  auto gone_actor = gone->actor();
  gone.reset();
  request_info gone_info;
  gone_info.request = f.req(2, 4);
  BOOST_TEST(core->tracked().slots == 2u);
  std::vector<std::shared_ptr<detail::request_slot>> made;
  made.push_back(core->slot_for(actor, info));
  made.push_back(core->slot_for(gone_actor, gone_info));
  core->drop_unconfirmed(std::move(made));
  BOOST_TEST(core->tracked().slots == 1u);
  BOOST_TEST(core->tracked().requests == 1u);
  BOOST_TEST(h->is_valid());
  BOOST_TEST(!f.m().extend(*h, 1));
  // Not marked ended: request 2 lives on, and a lookup tracks it again.
  auto again = f.m().get_handle(2);
  BOOST_REQUIRE(again);
  BOOST_TEST(again->is_valid());
  BOOST_TEST(core->tracked().slots == 2u);
}

BOOST_AUTO_TEST_CASE(a_slot_made_after_the_manager_went_is_born_invalid) {
  // A lookup or allocate reply delivered just before the manager died
  // (killed: no exit handler, no end events) makes its slot after the
  // manager's down message: no end will ever come for it, so it must not
  // read valid, nor stay tracked.
  one_request r;
  auto& [f, h, core, actor, info] = r;
  f.check_at_end = false; // the test kills the cache
  caf::anon_send_exit(f.m().actor(), caf::exit_reason::kill);
  while (h->is_valid()) // the down message invalidates what was there
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto late = core->slot_for(actor, info);
  BOOST_TEST(!late->valid.load());
  BOOST_TEST(core->tracked().slots == 0u);
  BOOST_TEST(core->tracked().requests == 0u);
}

BOOST_AUTO_TEST_CASE(a_call_to_an_actor_that_went_unanswering_fails_at_once) {
  // An actor that keeps its promise and is killed never answers (CAF 0.17
  // answers no dropped promise): a watched one fails its waiting calls.
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  // The promises stay with the actor; the test thread polls a flag (the
  // vector, written on a worker, is not the test thread's to read).
  auto kept = std::make_shared<std::vector<caf::response_promise>>();
  auto in = std::make_shared<std::atomic<bool>>(false);
  auto silent = spawn_fn(sys, [kept, in](caf::event_based_actor* self) -> caf::behavior {
    return {[self, kept, in](std::int32_t) -> caf::result<std::int32_t> {
      kept->push_back(self->make_response_promise());
      in->store(true);
      return caf::delegated<std::int32_t>{};
    }};
  });
  {
    detail::blocking_bridge bridge{sys};
    bridge.watch(silent.address());
    auto call = std::async(std::launch::async, [&] {
      return bridge.call(caf::actor_cast<caf::strong_actor_ptr>(silent),
                         caf::make_message(std::int32_t{7}),
                         std::chrono::milliseconds{60000});
    });
    // The request is in (its promise kept) before the kill.
    BOOST_REQUIRE(eventually([&] { return in->load(); }));
    caf::anon_send_exit(silent, caf::exit_reason::kill);
    BOOST_REQUIRE(call.wait_for(std::chrono::seconds{20})
                  == std::future_status::ready);
    auto res = call.get();
    BOOST_REQUIRE(!res);
    BOOST_TEST((res.error() == caf::sec::request_receiver_down), render(res.error()));
  }
  kept->clear();
}

BOOST_AUTO_TEST_CASE(calls_on_a_handle_actor_killed_under_them_end_with_its_request) {
  // A handle actor killed while calls wait on it may drop their promises;
  // the facade fails them when the request's end arrives (the supervisor
  // reclaims a handle that went), long before the 60 s timeout. Each round
  // kills a handle while a thread keeps asking it for its stats.
  cache_fixture f;
  for (request_id id = 1; id <= 20; ++id) {
    auto h = f.alloc(f.req(id, 4));
    std::atomic<bool> stop{false};
    std::atomic<int> calls{0};
    auto asker = std::async(std::launch::async, [&] {
      while (!stop) {
        (void) h->stats(); // its stats, or "ended": never a hang
        ++calls;
      }
    });
    BOOST_REQUIRE(eventually([&] { return calls.load() > 10; }));
    caf::anon_send_exit(h->actor(), caf::exit_reason::kill);
    BOOST_REQUIRE(eventually([&] { return !h->is_valid(); }));
    stop = true;
    BOOST_REQUIRE(asker.wait_for(std::chrono::seconds{20})
                  == std::future_status::ready);
  }
  BOOST_TEST(eventually([&] { return f.checked_stats().active_caches == 0u; }));
}

BOOST_AUTO_TEST_CASE(a_handle_from_allocate_knows_its_incarnation) {
  // Allocate's reply names the incarnation it admitted, so the handle's
  // first call to the pool names it without asking its handle actor first;
  // a handle from a lookup names the same one.
  cache_fixture f;
  auto h = f.alloc(f.req(1, 0, 256, iota_tokens(1, 6)));
  auto looked = f.m().get_handle(1);
  BOOST_REQUIRE(looked);
  BOOST_TEST(h->slot()->info.cache_id != 0u);
  BOOST_TEST(h->slot()->info.cache_id == looked->slot()->info.cache_id);
  BOOST_TEST(h->slot()->info.request.id == request_id{1});
  BOOST_TEST(h->slot()->info.request.prompt.empty()); // not a copy of it
}

BOOST_AUTO_TEST_CASE(a_handle_whose_actor_was_killed_grows_no_more_while_its_reclaim_waits) {
  // A handle's extends, appends and table reads go to the pool, which holds
  // the request until the supervisor's reclaim lands; once the handle actor
  // has begun to quit they fail as a call to it would. The manager is kept
  // busy, so the reclaim waits in its mailbox behind 20,000 lookups.
  cache_fixture f;
  for (request_id id = 1; id <= 10; ++id) {
    auto h = f.alloc(f.req(id, 4));
    BOOST_REQUIRE(!f.m().extend(*h, 1));
    caf::scoped_actor self{*f.sys};
    self->monitor(h->actor());
    for (int k = 0; k < 20000; ++k)
      caf::anon_send(f.m().actor(), lookup_atom::value, request_id{999999});
    caf::anon_send_exit(h->actor(), caf::exit_reason::kill);
    bool down = false;
    self->receive([&](caf::down_msg&) { down = true; },
                  caf::after(std::chrono::seconds{20}) >> [] {});
    BOOST_REQUIRE(down);
    KV_CHECK_ERROR(f.m().extend(*h, 4), errc::invalid_handle, "has ended");
    KV_CHECK_ERROR(f.m().append(*h, {1, 2}), errc::invalid_handle, "has ended");
    auto t = h->checked_table();
    BOOST_REQUIRE(!t);
    KV_CHECK_ERROR(t.error(), errc::invalid_handle, "has ended");
  }
  BOOST_TEST(eventually([&] { return f.checked_stats().active_caches == 0u; }));
}

BOOST_AUTO_TEST_CASE(a_replaced_pressure_callback_is_not_running_once_replaced) {
  cache_fixture f;
  std::mutex mtx;
  std::condition_variable cv;
  bool inside = false;
  bool release = false;
  auto calls = std::make_shared<std::atomic<int>>(0);
  // What the callback captures: gone (its destructor, slow on purpose, has
  // run) before the setter that replaced it returns.
  std::atomic<bool> captures_gone{false};
  struct capture {
    explicit capture(std::atomic<bool>* g) : gone(g) {
    }
    capture(const capture&) = delete;
    capture& operator=(const capture&) = delete;
    std::atomic<bool>* gone;
    ~capture() {
      std::this_thread::sleep_for(std::chrono::milliseconds{50});
      gone->store(true);
    }
  };
  auto held = std::make_shared<capture>(&captures_gone);
  f.m().set_pressure_callback([&, held](memory_pressure) {
    ++*calls;
    std::unique_lock<std::mutex> lock{mtx};
    inside = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
    inside = false;
  });
  // One block per request, up to 39 of 64: medium.
  std::vector<std::shared_ptr<kv_cache_handle>> live;
  for (request_id id = 1; id <= 39; ++id)
    live.push_back(f.alloc(f.req(id, 4)));
  {
    std::unique_lock<std::mutex> lock{mtx};
    BOOST_REQUIRE(cv.wait_for(lock, std::chrono::seconds{20},
                              [&] { return inside; }));
  }
  held.reset(); // the callback holds the last reference
  std::atomic<bool> replaced{false};
  bool gone_on_return = false;
  std::thread setter{[&] {
    f.m().set_pressure_callback(nullptr);
    gone_on_return = captures_gone.load();
    replaced = true;
  }};
  // While the old callback runs, replacing it does not return...
  std::this_thread::sleep_for(std::chrono::milliseconds{50});
  BOOST_TEST(!replaced.load());
  {
    std::lock_guard<std::mutex> lock{mtx};
    release = true;
    cv.notify_all();
  }
  setter.join();
  // ...and once it did, the old callback had returned.
  BOOST_TEST(replaced.load());
  {
    std::lock_guard<std::mutex> lock{mtx};
    BOOST_TEST(!inside);
  }
  BOOST_TEST(calls->load() == 1);
  BOOST_TEST(gone_on_return); // its captures too
}

BOOST_AUTO_TEST_CASE(a_step_answered_after_its_timeout_admits_nothing) {
  // Long prompts (2000 blocks to hash and look up) answered after a timeout
  // of nothing beyond the bridge's spin: the caller gets request_timeout,
  // and what the step admitted meanwhile must not stay behind.
  // Nor its prompt's blocks in the prefix index: nobody wrote their K/V.
  auto cfg = small_config(100000);
  cache_fixture f{cfg};
  auto prompt_of = [](request_id id) {
    return iota_tokens(static_cast<token_id>(id * 10000), 8000);
  };
  std::vector<bool> answered(41, false);
  std::size_t timed_out = 0;
  for (request_id id = 1; id <= 40; ++id) {
    step_request step;
    step.admits.push_back(f.req(id, 0, 8192, prompt_of(id)));
    BOOST_REQUIRE(!f.m().set_timeout(std::chrono::milliseconds{0}));
    auto r = f.m().step(std::move(step));
    BOOST_REQUIRE(!f.m().set_timeout(std::chrono::seconds{60}));
    if (r) {
      BOOST_REQUIRE_EQUAL(r->admitted.size(), 1u);
      answered[id] = true;
      BOOST_REQUIRE(!f.m().deallocate(id));
    } else {
      BOOST_REQUIRE_MESSAGE(r.error() == caf::sec::request_timeout, why(r));
      ++timed_out;
    }
  }
  BOOST_TEST_MESSAGE(timed_out << " of 40 steps timed out");
  BOOST_TEST(eventually([&] { return f.checked_stats().active_caches == 0u; }));
  BOOST_TEST(f.m().list_handles().empty());
  f.expect_hits_only_if_answered(answered, prompt_of);
}

BOOST_AUTO_TEST_CASE(a_step_admission_answered_late_is_not_handed_out) {
  // A step's late reply ends its admissions as unclaimed; until the reclaim
  // lands the manager still lists them, so a slot made for one from then
  // on is born invalid - by incarnation, the facade knowing no handle actor
  // of a step's admission. Deterministic: the late reply here names
  // request 7's incarnation under an id the manager does not hold, so the
  // manager reclaims nothing and only the facade's mark can say "ended".
  cache_fixture f;
  step_request step;
  step.admits.push_back(f.req(7, 4));
  auto r = f.m().step(std::move(step));
  BOOST_REQUIRE_MESSAGE(r, why(r));
  BOOST_REQUIRE_EQUAL(r->admitted.size(), 1u);
  auto cache_id = r->admitted[0].cache_id;
  auto h = f.m().get_handle(7);
  BOOST_REQUIRE(h);
  BOOST_REQUIRE(h->is_valid());
  auto core = core_of::get(*h);
  BOOST_REQUIRE(core);
  auto actor = h->actor();
  h.reset(); // no slot left for a lookup to find
  step_result late;
  late.admitted.push_back(admission{8, cache_id, 0, {}});
  auto reply = caf::make_message(std::move(late));
  core->unclaim_step_late()(reply);
  BOOST_TEST(!f.m().get_handle(7));
  for (auto& [id, listed] : f.m().list_handles())
    BOOST_TEST(id != 7u);
  request_info info;
  info.request = f.req(7, 4);
  info.cache_id = cache_id;
  BOOST_TEST(!core->slot_for(actor, info)->valid.load());
  // Another incarnation is not affected.
  info.cache_id = cache_id + 1000;
  BOOST_TEST(core->slot_for(actor, info)->valid.load());
  BOOST_REQUIRE(!f.m().deallocate(7));
  BOOST_TEST(f.checked_stats().active_caches == 0u);
}

BOOST_AUTO_TEST_CASE(a_request_whose_allocate_timed_out_is_never_handed_out) {
  // An allocate answered after its caller gave up is ended again, as
  // unclaimed: its handle actor passes that on to the manager, which has
  // the pool reclaim it - until then the registry holds the request. A
  // lookup meanwhile (the caller retrying, another thread listing) must not
  // hand out a handle that reads valid, only to turn invalid once the
  // reclaim lands: a timed-out allocate leaves no request behind.
  // Probes of a cached 8000-token prompt keep the pool busy: the first
  // before the admission (the allocate is answered late), the second
  // after it (the reclaim waits behind it, the lookups do not: the manager
  // answers them) - deterministically, each lookup in that window is one
  // that must find nothing.
  auto cfg = small_config(100000);
  cache_fixture f{cfg};
  auto prompt_of = [](request_id id) {
    return iota_tokens(static_cast<token_id>(id * 10000), 8000);
  };
  BOOST_REQUIRE(!f.m().deallocate(f.alloc(f.req(1, 0, 8192, prompt_of(1)))->id()));
  std::vector<allocation_request> busy;
  for (request_id k = 0; k < 200; ++k)
    busy.push_back(f.req(1000 + k, 0, 8192, prompt_of(1)));
  auto keeper = f.alloc(f.req(999, 4)); // for the facade's core
  auto core = core_of::get(*keeper);
  BOOST_REQUIRE(core);
  std::size_t timed_out = 0;
  std::size_t looked_up = 0;
  std::size_t handed_out = 0; // valid handles of timed-out requests
  for (request_id id = 2; id <= 11; ++id) {
    auto since = core->ends_taken();
    caf::anon_send(f.m().actor(), probe_atom::value, busy);
    BOOST_REQUIRE(!f.m().set_timeout(std::chrono::milliseconds{0}));
    auto h = f.m().allocate(f.req(id, 0, 8192, prompt_of(id)));
    BOOST_REQUIRE(!f.m().set_timeout(std::chrono::seconds{60}));
    if (h) { // answered in time after all
      BOOST_REQUIRE(!f.m().deallocate(id));
      continue;
    }
    BOOST_REQUIRE_MESSAGE(h.error() == caf::sec::request_timeout, why(h));
    ++timed_out;
    caf::anon_send(f.m().actor(), probe_atom::value, busy);
    // Until the facade hears of the request's end (the reclaim landed).
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds{30};
    while (core->ends_taken() == since) {
      BOOST_REQUIRE(std::chrono::steady_clock::now() < until);
      auto again = f.m().get_handle(id);
      handed_out += again && again->is_valid() ? 1 : 0;
      for (auto& [listed, lh] : f.m().list_handles())
        handed_out += listed == id && lh->is_valid() ? 1 : 0;
      ++looked_up;
    }
    BOOST_TEST(!f.m().get_handle(id));
  }
  BOOST_TEST_MESSAGE(timed_out << " of 10 allocations timed out, " << looked_up
                               << " lookups meanwhile");
  BOOST_TEST(timed_out > 0u);
  BOOST_TEST(handed_out == 0u, handed_out << " valid handle(s) handed out of "
                                          << "requests whose allocate timed out");
  BOOST_REQUIRE(!f.m().deallocate(999));
  BOOST_TEST(eventually([&] { return f.checked_stats().active_caches == 0u; }));
}

BOOST_AUTO_TEST_CASE(a_request_nobody_received_is_freed_and_says_so) {
  // A fork whose child lookup failed hands out no handle, so it frees the
  // child before it returns - and sends it unclaimed only if that free
  // did not answer. A free through the handle actor was failed by the
  // request's own end event (which fails the calls waiting on its handle
  // actor) before its answer came: it never read as done.
  one_request r;
  auto& [f, h, core, actor, info] = r;
  auto other = f.alloc(f.req(2, 4));
  auto err = core->free_unreceived(actor);
  BOOST_TEST(!err, render(err));
  // Ended by the time it returned, and handed out by no lookup.
  BOOST_TEST(!h->is_valid());
  BOOST_TEST(!f.m().get_handle(1));
  BOOST_TEST(f.checked_stats().active_caches == 1u);
  // One that ended already: nothing to do, and nothing else ends - the
  // id's next request included.
  auto fresh = f.alloc(f.req(1, 4));
  err = core->free_unreceived(actor);
  BOOST_TEST(!err, render(err));
  BOOST_TEST(fresh->is_valid());
  BOOST_TEST(other->is_valid());
  BOOST_TEST(f.checked_stats().active_caches == 2u);
}

BOOST_AUTO_TEST_CASE(a_negative_timeout_is_refused_and_changes_nothing) {
  cache_fixture f;
  auto err = f.m().set_timeout(std::chrono::milliseconds{-5});
  BOOST_TEST(has_code(err, errc::invalid_request), render(err));
  BOOST_TEST(render(err).find("-5 ms") != std::string::npos, render(err));
  // Still the default: calls wait for their replies.
  BOOST_TEST(static_cast<bool>(f.m().allocate(f.req(1, 4))));
}

BOOST_AUTO_TEST_SUITE_END()
