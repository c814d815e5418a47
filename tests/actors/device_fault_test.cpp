// A cache whose GPU is slow or fails: a slot write is refused while a
// swap-out reads its block, a fault leaves the pool's accounting as it was
// (a failed swap stays where it was; a step still reports what it did,
// failing only the extend whose copy failed), and work in flight is
// answered when the device actor is stopped, killed or crashes. The
// storage is the host backend with a GPU's timing. The device actor's own
// queue, alone: device_queue_test.cpp.
#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <caf/send.hpp>

#include "fixture.hpp"
#include "slow_storage.hpp"
#include "stall_fixture.hpp"

using namespace kvactor;
using namespace kvactor::test;

namespace {

/// A cache (with a host tier of 8 blocks) on a slow_storage.
struct slow_fixture : cache_fixture {
  std::shared_ptr<slow_storage> store;

  explicit slow_fixture(std::shared_ptr<slow_storage> s = make_slow(host_tier_config()))
    : cache_fixture(host_tier_config(), s), store(std::move(s)) {
  }

  /// Request 1 (10 tokens: its last block of 4 is shared and half full)
  /// and its fork 2, whose first extend copies that block; 2's handle and
  /// what the manager knows of it.
  std::pair<request_handle_actor, request_info> forked_pair() {
    BOOST_REQUIRE(allocate(1, 10));
    BOOST_REQUIRE(fork(1, 2));
    auto looked = lookup(2);
    BOOST_REQUIRE(looked);
    return *looked;
  }

  /// forked_pair(), then 2's one-token extend sent straight to the pool,
  /// whose copy-on-write copy is in flight (and the pool awaits it).
  void copy_in_flight() {
    auto info = forked_pair().second;
    self->send(cache.pool, extend_atom::value, request_id{2}, info.cache_id,
               std::uint64_t{1}, std::vector<token_id>{});
    run();
    BOOST_TEST(store->pending() == 1u);
  }

  /// A write of one token into the second slot of device block `b` (and one
  /// skipped slot of -1).
  slot_write one_slot_in(block_id b) const {
    const std::size_t row = std::size_t{cfg.model.num_kv_heads}
                            * cfg.model.head_dim * size_of(cfg.model.dtype);
    slot_write w;
    w.layer = 0;
    w.slots = {-1, std::int64_t{b} * cfg.block_size + 1};
    w.keys.assign(2 * row, 1);
    w.values.assign(2 * row, 2);
    return w;
  }

  /// The replies (a count or an error) waiting in self's mailbox, in order.
  std::vector<std::string> replies() {
    return all_replies(self);
  }

  /// The swap reply waiting in `who`'s mailbox: "swapped", the error as
  /// rendered, or "no reply".
  static std::string swap_reply(caf::scoped_actor& who) {
    std::string got = "no reply";
    who->receive([&](std::uint32_t) { got = "swapped"; },
                 [&](caf::error& err) { got = render(err); },
                 caf::after(std::chrono::seconds(0)) >> [] {});
    return got;
  }
};

using strings = std::vector<std::string>;

} // namespace

BOOST_AUTO_TEST_SUITE(device_fault_suite)

BOOST_FIXTURE_TEST_CASE(a_write_after_a_swap_outs_copy_is_refused_until_the_pool_let_the_blocks_go,
                        slow_fixture) {
  // The copy is done and answered, but the manager's second phase has not
  // reached the pool: the request still holds its blocks, about to leave
  // them. A write now would land after the host copy and be lost at
  // swap-in: refused. Once the pool let the blocks go they are a new
  // owner's, and take writes.
  auto a = allocate(1, 10);
  BOOST_REQUIRE(a);
  self->send(mgr, swap_out_atom::value, request_id{1});
  run();
  BOOST_TEST(store->pending() == 1u);
  auto first = a->table.blocks.front();
  store->complete(); // the wake's message is now ahead of the write
  self->send(cache.device, write_atom::value, one_slot_in(first));
  run();
  // The write's refusal, then the swap's reply (3 blocks moved).
  BOOST_TEST(replies() == (strings{"invalid_request", "3"}));
  auto s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->swap_out_count == 1u);
  self->send(cache.device, write_atom::value, one_slot_in(first));
  run();
  BOOST_TEST(replies() == strings{"1"});
}

BOOST_FIXTURE_TEST_CASE(a_swap_out_closes_the_blocks_it_shares_to_their_other_holders_too,
                        slow_fixture) {
  // Request 1's pass has not written when its fork 2 is swapped out. 1
  // stays, but it writes the blocks it shares with 2 only for tokens 2
  // holds as well: taken now, such a write would miss 2's host copy, and
  // 2 come back with stale K/V (its partial last block is copied back from
  // the host tier) - silently. The write fails, naming the block; once
  // the swap-out is answered, 1 writes again, and 2's copy is its own to
  // refresh (a swap of a request whose sharers had not written is the
  // scheduler's to avoid).
  auto a = allocate(make_prompt_request(cfg, 1, make_tokens(10, 7)));
  BOOST_REQUIRE(a); // 3 blocks of 4, the last half full
  BOOST_REQUIRE(fork(1, 2));
  self->send(mgr, swap_out_atom::value, request_id{2});
  run();
  BOOST_TEST(store->pending() == 1u);
  auto last = a->table.blocks.back();
  self->send(cache.device, write_atom::value, one_slot_in(last));
  run();
  self->receive(
    [&](std::uint32_t n) { BOOST_ERROR("the write went through: " << n); },
    [&](caf::error& err) {
      BOOST_TEST(outcome(err) == "invalid_request");
      BOOST_TEST(render(err).find("block " + std::to_string(last)
                                  + ", which a swap-out is reading")
                 != std::string::npos, render(err));
      BOOST_TEST(render(err).find("once the swap-out ended") != std::string::npos);
    },
    caf::after(std::chrono::seconds(0)) >> [] { BOOST_ERROR("no reply"); });
  store->complete();
  run();
  BOOST_TEST(replies() == strings{"3"});
  self->send(cache.device, write_atom::value, one_slot_in(last));
  run();
  BOOST_TEST(replies() == strings{"1"});
}

BOOST_FIXTURE_TEST_CASE(after_a_failure_that_is_not_sticky_work_still_running_waits,
                        slow_fixture) {
  // The copy-on-write copy still runs after a failure that leaves the
  // device running: answered now, the pool would undo the extend and hand
  // the copy's destination to another request while the copy writes it.
  // New work - a slot write here - fails at once; the copy is answered
  // once it ran.
  copy_in_flight();
  store->fail_later();
  self->send(cache.device, write_atom::value, one_slot_in(8));
  run();
  sched.trigger_timeouts(); // the watchdog polls too
  run();
  auto got = [&] {
    strings out;
    for (bool more = true; more;)
      self->receive([&](extension&) { out.push_back("extension"); },
                    [&](std::uint32_t n) { out.push_back(std::to_string(n)); },
                    [&](caf::error& err) { out.push_back(outcome(err)); },
                    caf::after(std::chrono::seconds(0)) >> [&] { more = false; });
    return out;
  };
  BOOST_TEST(got() == strings{"device_failure"}); // the new write alone
  BOOST_TEST(store->pending() == 1u);
  store->complete();
  run();
  BOOST_TEST(got() == strings{"device_failure"}); // the extend, undone
}

BOOST_FIXTURE_TEST_CASE(a_fault_during_a_swap_leaves_the_request_resident,
                        slow_fixture) {
  auto a = allocate(1, 10);
  BOOST_REQUIRE(a);
  auto before = stats();
  BOOST_REQUIRE(before);
  self->send(mgr, swap_out_atom::value, request_id{1});
  run();
  BOOST_TEST(store->pending() == 1u); // the copy to the host tier is under way
  store->fail();
  sched.trigger_timeouts();
  run();
  // device_failure, naming the request and that the swap was undone (the
  // device's error alone names neither).
  auto got = swap_reply(self);
  BOOST_TEST(got.rfind("kvactor: device_failure (swap-out of request 1 undone, "
                       "the request is where it was: the device copy failed: ",
                       0)
               == 0u,
             got);
  // Phase two undid the reservation: same blocks, nothing in the host tier.
  auto t = table(1);
  BOOST_REQUIRE(t);
  BOOST_TEST(t->blocks == a->table.blocks);
  BOOST_TEST(t->num_tokens == 10u);
  auto after = stats();
  BOOST_REQUIRE(after);
  BOOST_TEST(after->free_blocks == before->free_blocks);
  BOOST_TEST(after->host_free_blocks == before->host_free_blocks);
  BOOST_TEST(after->swap_out_count == before->swap_out_count);
  // The request can still be freed; the fixture checks the invariant.
  BOOST_TEST(value_or(free(1), 0u) == 3u);
}

BOOST_FIXTURE_TEST_CASE(an_id_freed_mid_swap_is_free_at_once_and_the_swap_leaves_its_successor_alone,
                        slow_fixture) {
  auto a = allocate(1, 10); // 3 blocks
  BOOST_REQUIRE(a);
  auto before = stats();
  BOOST_REQUIRE(before);
  auto old = lookup(1);
  BOOST_REQUIRE(old);
  caf::scoped_actor swapper{sys};
  swapper->send(mgr, swap_out_atom::value, request_id{1});
  run();
  BOOST_TEST(store->pending() == 1u); // the copy to the host tier
  // Freed mid-copy: it ends now (its blocks come back when the copy is
  // done), and its id may be admitted again at once.
  BOOST_TEST(value_or(free(1), 99u) == 0u);
  auto again = allocate(1, 4);
  BOOST_REQUIRE(again);
  auto now = lookup(1);
  BOOST_REQUIRE(now);
  BOOST_TEST(now->second.cache_id != old->second.cache_id);
  BOOST_TEST(used_blocks() == 4u); // the copy still reads the old three
  store->complete();
  run();
  // The swap's requester learns the request ended during the move.
  auto reply = swap_reply(swapper);
  BOOST_TEST(reply.find("ended before its swap-out was answered")
               != std::string::npos,
             reply);
  // The copy's end returned the old incarnation's blocks, device and host,
  // and did not touch the new one: resident, same table, not swapped.
  now = lookup(1);
  BOOST_REQUIRE(now);
  BOOST_TEST(!now->second.swapped);
  auto t = table(1);
  BOOST_REQUIRE(t);
  BOOST_TEST(t->blocks == again->table.blocks);
  BOOST_TEST(used_blocks() == 1u);
  auto after = stats();
  BOOST_REQUIRE(after);
  BOOST_TEST(after->host_free_blocks == before->host_free_blocks);
  BOOST_TEST(value_or(free(1), 0u) == 1u);
}

BOOST_FIXTURE_TEST_CASE(a_swap_whose_request_ended_and_whose_copy_failed_says_both,
                        slow_fixture) {
  // Freed mid-copy and its id admitted again; then the copy fails. Its
  // blocks went back all the same: "undone, the request is where it was"
  // would send the caller to the newer incarnation.
  BOOST_REQUIRE(allocate(1, 10));
  auto before = stats();
  BOOST_REQUIRE(before);
  caf::scoped_actor swapper{sys};
  swapper->send(mgr, swap_out_atom::value, request_id{1});
  run();
  BOOST_TEST(value_or(free(1), 99u) == 0u);
  auto again = allocate(1, 4);
  BOOST_REQUIRE(again);
  store->fail();
  sched.trigger_timeouts();
  run();
  auto got = swap_reply(swapper);
  BOOST_TEST(got.rfind("kvactor: device_failure (request 1 ended before its "
                       "swap-out was answered, and the device copy failed: ",
                       0)
               == 0u,
             got);
  auto t = table(1);
  BOOST_REQUIRE(t);
  BOOST_TEST(t->blocks == again->table.blocks);
  BOOST_TEST(used_blocks() == 1u);
  auto after = stats();
  BOOST_REQUIRE(after);
  BOOST_TEST(after->host_free_blocks == before->host_free_blocks);
  BOOST_TEST(value_or(free(1), 0u) == 1u);
}

BOOST_FIXTURE_TEST_CASE(a_fault_during_a_step_fails_only_the_copied_extend,
                        slow_fixture) {
  // 3 forks 1 (10 tokens: its last block of 4 is shared and half full), so
  // extending 3 copies that block first.
  BOOST_REQUIRE(allocate(1, 10));
  BOOST_REQUIRE(allocate(2, 4));
  BOOST_REQUIRE(fork(1, 3));
  step_request req;
  req.frees = {2};
  req.extends = {extend_op{3, 1}};
  req.admits = {make_request(cfg, 4, 4)};
  self->send(mgr, step_atom::value, std::move(req));
  run();
  BOOST_TEST(store->pending() == 1u); // the copy-on-write copy
  store->fail();
  sched.trigger_timeouts();
  run();
  step_result res;
  bool got = false;
  self->receive([&](step_result& r) { res = std::move(r); got = true; },
                [&](caf::error& err) { BOOST_FAIL("step failed whole: " << render(err)); },
                caf::after(std::chrono::seconds(0)) >> [] {});
  BOOST_REQUIRE(got);
  // What the pool did stands, and is reported: 2 freed, 4 admitted; only
  // the extend whose copy failed fails.
  BOOST_TEST(res.freed == std::vector<request_id>{2});
  BOOST_REQUIRE(res.admitted.size() == 1u);
  BOOST_TEST(res.admitted[0].id == 4u);
  BOOST_TEST(res.changed.empty());
  BOOST_TEST(res.copies.empty());
  BOOST_REQUIRE(res.failed.size() == 1u);
  BOOST_TEST(res.failed[0].id == 3u);
  BOOST_TEST(outcome(res.failed[0].error) == "device_failure");
  // Naming the request and that its extend was undone (the device's error
  // alone names neither).
  auto why = render(res.failed[0].error);
  BOOST_TEST(why.rfind("kvactor: device_failure (extend of request 3 undone, "
                       "the request is as it was: its copy-on-write copy "
                       "failed: ",
                       0)
               == 0u,
             why);
  // The manager's registry follows the pool: 2 is gone, 4 has a handle.
  BOOST_TEST(outcome(lookup(2)) == "unknown_request");
  BOOST_TEST(outcome(lookup(4)) == "ok");
  // The failed extend was undone: 3 shares 1's blocks and tokens again,
  // and the copy's block is free (the fixture checks the invariant).
  auto t1 = table(1);
  auto t3 = table(3);
  BOOST_REQUIRE(t1);
  BOOST_REQUIRE(t3);
  BOOST_TEST(t3->blocks == t1->blocks);
  BOOST_TEST(t3->num_tokens == 10u);
  auto st = stats();
  BOOST_REQUIRE(st);
  // 1's three (shared with 3) and 4's one are used.
  BOOST_TEST(st->total_blocks - st->free_blocks == 3u + 1u);
}

BOOST_FIXTURE_TEST_CASE(a_fault_during_a_copy_on_write_undoes_the_extend,
                        slow_fixture) {
  // 2 forks 1 (10 tokens, its last block half full): extending 2 copies
  // that block, and the device fails the copy.
  auto h = forked_pair().first;
  auto before = stats();
  BOOST_REQUIRE(before);
  self->send(h, extend_atom::value, std::uint64_t{7}); // the copy, a new block
  run();
  BOOST_TEST(store->pending() == 1u);
  // The pool handles nothing else until the copy settles: this extend of 2
  // waits behind it (it would otherwise append into the copy that never
  // came and succeed), and so does this free of 1.
  self->send(h, extend_atom::value, std::uint64_t{1});
  self->send(mgr, free_atom::value, request_id{1});
  run();
  store->fail();
  sched.trigger_timeouts();
  run();
  // The second extend found 2 as before the first: it copied again, and
  // the device failed at once. Each failure names the request and that its
  // extend was undone.
  std::vector<std::string> got;
  for (bool more = true; more;)
    self->receive([&](std::uint32_t n) { got.push_back(std::to_string(n)); },
                  [&](caf::error& err) { got.push_back(render(err)); },
                  caf::after(std::chrono::seconds(0)) >> [&] { more = false; });
  BOOST_REQUIRE(got.size() == 3u);
  for (std::size_t i = 0; i < 2; ++i)
    BOOST_TEST(got[i].rfind("kvactor: device_failure (extend of request 2 "
                            "undone, the request is as it was: ",
                            0)
                 == 0u,
               got[i]);
  BOOST_TEST(got[2] == "0");
  // 2 is as before the extend: 1's blocks (now its alone), 10 tokens.
  auto t = table(2);
  BOOST_REQUIRE(t);
  BOOST_TEST(t->num_tokens == 10u);
  BOOST_TEST(t->blocks.size() == 3u);
  auto after = stats();
  BOOST_REQUIRE(after);
  BOOST_TEST(after->free_blocks == before->free_blocks);
  BOOST_TEST(after->blocks_allocated == before->blocks_allocated);
  BOOST_TEST(value_or(free(2), 0u) == 3u);
}

BOOST_FIXTURE_TEST_CASE(a_shutdown_with_a_copy_in_flight_answers_and_ends,
                        slow_fixture) {
  // The pool awaits its copy-on-write copy and skips every other message
  // meanwhile, its exit included: the device, stopping with the copy still
  // running, must answer it, or the pool never ends.
  copy_in_flight();
  self->monitor(cache.pool);
  self->monitor(cache.device);
  shutdown(); // the manager stops its pool and device
  strings got;
  int downs = 0;
  for (bool more = true; more;)
    self->receive([&](extension&) { got.push_back("extension"); },
                  [&](caf::error& err) { got.push_back(outcome(err)); },
                  [&](caf::down_msg&) { ++downs; },
                  caf::after(std::chrono::seconds(0)) >> [&] { more = false; });
  BOOST_TEST(got == strings{"shutting_down"});
  BOOST_TEST(downs == 2); // both ended
  // Answered once the copy was done: told "not made", the pool gives the
  // destination back, and a copy still running would write into it.
  BOOST_TEST(store->pending() == 0u);
}

BOOST_FIXTURE_TEST_CASE(a_device_killed_with_a_copy_in_flight_still_answers,
                        slow_fixture) {
  // Killed (or crashed), the device runs no exit handler: the copy's
  // promise would be dropped, and the pool, awaiting it, would take no
  // message again - the whole cache stuck.
  copy_in_flight();
  check_on_exit = false;
  self->monitor(cache.pool);
  caf::anon_send_exit(cache.device, caf::exit_reason::kill);
  run();
  // The extend fails (shutting_down, through the pool's copy failure): the
  // pool took messages again, so it could stop with the cache (the manager
  // stops it: without its device actor the cache cannot go on).
  std::vector<std::string> got;
  std::size_t downs = 0;
  for (bool more = true; more;)
    self->receive([&](std::uint32_t n) { got.push_back(std::to_string(n)); },
                  [&](caf::error& err) { got.push_back(outcome(err)); },
                  [&](caf::down_msg&) { ++downs; },
                  caf::after(std::chrono::seconds(0)) >> [&] { more = false; });
  BOOST_REQUIRE_EQUAL(got.size(), 1u);
  BOOST_TEST((got[0] == "shutting_down" || got[0] == "device_failure"), got[0]);
  BOOST_TEST(downs == 1u);
  BOOST_TEST(store->pending() == 0u); // waited for before the answer
}

BOOST_FIXTURE_TEST_CASE(a_storage_whose_waits_throw_still_answers_the_work_in_flight,
                        slow_fixture) {
  // Killed, the device actor's state answers its work in flight once it
  // is done; a wait that throws there (in a destructor: std::terminate)
  // is taken for a stall - the work answered without more waiting, the
  // storage told not to wait at teardown either.
  copy_in_flight();
  check_on_exit = false;
  self->monitor(mgr);
  store->throw_waits();
  caf::anon_send_exit(cache.device, caf::exit_reason::kill);
  run();
  strings got;
  std::string why = "running";
  for (bool more = true; more;)
    self->receive([&](extension&) { got.push_back("extension"); },
                  [&](caf::error& err) { got.push_back(outcome(err)); },
                  [&](caf::down_msg& dm) { why = render(dm.reason); },
                  caf::after(std::chrono::seconds(0)) >> [&] { more = false; });
  BOOST_REQUIRE_EQUAL(got.size(), 1u);
  BOOST_TEST((got[0] == "shutting_down" || got[0] == "device_failure"), got[0]);
  BOOST_TEST(*store->told_stalled);
  BOOST_TEST(why.find("the device actor was killed") != std::string::npos, why);
}

BOOST_FIXTURE_TEST_CASE(a_swap_waiting_when_the_device_dies_is_told_why,
                        slow_fixture) {
  // The manager's swap-out waits on the device; killed, the device stops
  // the cache, and the swap's answer names it (not only "the manager
  // exited"), as later calls are told.
  check_on_exit = false;
  BOOST_REQUIRE(allocate(1, 10));
  self->send(mgr, swap_out_atom::value, request_id{1});
  run();
  BOOST_REQUIRE_EQUAL(store->pending(), 1u);
  caf::anon_send_exit(cache.device, caf::exit_reason::kill);
  run();
  std::vector<std::string> got;
  for (bool more = true; more;)
    self->receive([&](std::uint32_t) { got.push_back("swapped"); },
                  [&](caf::error& err) { got.push_back(render(err)); },
                  caf::after(std::chrono::seconds(0)) >> [&] { more = false; });
  BOOST_REQUIRE_EQUAL(got.size(), 1u);
  BOOST_TEST(got[0].find("shutting_down (the manager exited before it answered "
                         "swap-out of request 1: the cache stopped: its "
                         "device actor ended (")
               != std::string::npos,
             got[0]);
  BOOST_TEST(store->pending() == 0u);
}

BOOST_AUTO_TEST_CASE(a_storage_of_another_shape_is_refused_at_start) {
  system_config_holder holder;
  caf::actor_system sys{holder.sys_cfg};
  auto cfg = host_tier_config();
  auto other = cfg;
  other.model.head_dim = 16;
  spawn_options opts;
  opts.detached_device = false;
  opts.store = make_slow(other);
  auto started = spawn_kv_cache(sys, cfg, opts);
  BOOST_REQUIRE(!started);
  BOOST_TEST(outcome(started.error()) == "invalid_config");
  BOOST_TEST(render(started.error()).find("x 16 fp16") != std::string::npos,
             render(started.error()));
}

BOOST_AUTO_TEST_SUITE_END()
