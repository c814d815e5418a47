// The device actor's queue, alone (bare_device.hpp): each reply waits for
// its own work to complete (heard through the storage's wake), not for
// unrelated earlier work (answered in completion order); a slot write into
// a block a swap-out reads is refused until the copy failed or the cache's
// pool settled it; and a fault - after which CUDA calls no host callback at
// all - still answers every waiting requester with device_failure (the
// watchdog's poll notices it) and fails later work at once. How the cache
// around the device lives through the same faults: device_fault_test.cpp.
#include <algorithm>
#include <string>
#include <vector>

#include <caf/send.hpp>

#include "bare_device.hpp"

using namespace kvactor;
using namespace kvactor::test;

namespace {

using strings = std::vector<std::string>;

} // namespace

BOOST_AUTO_TEST_SUITE(device_queue_suite)

BOOST_FIXTURE_TEST_CASE(replies_wait_for_the_work_and_come_with_the_wake,
                        bare_device) {
  self->send(dev, copy_atom::value, std::vector<block_copy>{{0, 1}, {2, 3}});
  self->send(dev, swap_out_atom::value, std::vector<block_move>{{4, 0}});
  run();
  BOOST_TEST(store->pending() == 2u);
  BOOST_TEST(replies() == strings{}); // nothing answers before the work is done
  store->complete();
  run();
  BOOST_TEST(replies() == (strings{"2", "1"}));
}

BOOST_FIXTURE_TEST_CASE(a_later_op_that_completes_first_is_answered_first,
                        bare_device) {
  // A long swap (ticket 1) must not hold back a copy (ticket 2) that finished
  // on another stream: each reply waits for its own work only.
  self->send(dev, swap_out_atom::value, std::vector<block_move>{{4, 0}, {5, 1}});
  self->send(dev, copy_atom::value, std::vector<block_copy>{{0, 1}});
  run();
  BOOST_TEST(store->pending() == 2u);
  store->complete_one(2);
  run();
  BOOST_TEST(replies() == strings{"1"});
  BOOST_TEST(store->pending() == 1u);
  store->complete_one(1);
  run();
  BOOST_TEST(replies() == strings{"2"});
}

BOOST_FIXTURE_TEST_CASE(a_write_waits_for_its_own_work_only, bare_device) {
  self->send(dev, swap_out_atom::value, std::vector<block_move>{{4, 0}, {5, 1}});
  run();
  self->send(dev, write_atom::value, one_slot_in(8));
  run();
  BOOST_TEST(replies() == strings{"1"}); // the write, not the swap before it
  BOOST_TEST(store->pending() == 1u);
  store->complete();
  run();
  BOOST_TEST(replies() == strings{"2"});
}

BOOST_FIXTURE_TEST_CASE(a_write_into_a_block_being_swapped_out_is_refused,
                        bare_device) {
  // Ordered after the swap's read, it would miss the host copy and be lost
  // at swap-in: refused, nothing submitted, while the copy runs - and after
  // it, until the pool says the request let the block go.
  stand_in_for_cache(); // the test's actor is the manager, which swaps
  self->send(dev, swap_out_atom::value, std::vector<block_move>{{4, 0}});
  run();
  auto w = one_slot_in(4);
  self->send(dev, write_atom::value, w);
  run();
  BOOST_TEST(replies() == strings{"invalid_request"});
  BOOST_TEST(store->pending() == 1u);
  store->complete();
  run();
  BOOST_TEST(replies() == strings{"1"});
  self->send(dev, write_atom::value, w);
  run();
  BOOST_TEST(replies() == strings{"invalid_request"}); // copied, not settled
  // Only the cache's pool knows when the request let the block go: a
  // settle from anyone else - the manager too - changes nothing.
  self->send(dev, swap_out_atom::value, settle_atom::value,
             std::vector<block_id>{4});
  self->send(dev, write_atom::value, w);
  run();
  BOOST_TEST(replies() == strings{"invalid_request"});
  caf::send_as(pool_stand_in, dev, swap_out_atom::value, settle_atom::value,
               std::vector<block_id>{4});
  self->send(dev, write_atom::value, w);
  run();
  BOOST_TEST(replies() == strings{"1"});
  BOOST_TEST(store->pending() == 0u);
}

BOOST_FIXTURE_TEST_CASE(a_swap_out_whose_copy_failed_takes_writes_again,
                        bare_device) {
  self->send(dev, swap_out_atom::value, std::vector<block_move>{{4, 0}});
  run();
  store->fail();
  sched.trigger_timeouts();
  run();
  BOOST_TEST(replies() == strings{"device_failure"});
  // Open again (the request stays in its blocks), and the write reaches the
  // storage, which reports the fault - not the swap's refusal.
  self->send(dev, write_atom::value, one_slot_in(4));
  run();
  BOOST_TEST(replies() == strings{"device_failure"});
}

BOOST_FIXTURE_TEST_CASE(a_fault_answers_every_waiting_request_without_a_wake,
                        bare_device) {
  self->send(dev, copy_atom::value, std::vector<block_copy>{{0, 1}});
  self->send(dev, swap_out_atom::value, std::vector<block_move>{{4, 0}});
  run();
  store->fail();
  run();
  BOOST_TEST(replies() == strings{}); // no wake comes after a fault...
  sched.trigger_timeouts();            // ...but the watchdog polls
  run();
  BOOST_TEST(replies() == (strings{"device_failure", "device_failure"}));
  // Later work fails at once (the fault is sticky, as CUDA's are).
  self->send(dev, copy_atom::value, std::vector<block_copy>{{5, 6}});
  run();
  BOOST_TEST(replies() == strings{"device_failure"});
}

BOOST_FIXTURE_TEST_CASE(a_storage_that_throws_while_polled_leaves_no_one_waiting,
                        bare_device) {
  // A copy (ticket 1) completed, and polling the next work (ticket 2)
  // throws: the copy is answered, the crash ends the device actor, and the
  // work still queued is answered as it goes. (An entry taken from the
  // queue before the throw and not yet answered was lost, and its empty
  // slot in the queue made the state's destructor throw: std::terminate.)
  self->send(dev, copy_atom::value, std::vector<block_copy>{{0, 1}});
  self->send(dev, copy_atom::value, std::vector<block_copy>{{5, 6}});
  run();
  BOOST_REQUIRE_EQUAL(store->pending(), 2u);
  store->throw_in_finished(2); // ticket 1's poll answers, ticket 2's throws
  store->complete_one(1);
  run();
  auto got = replies();
  std::sort(got.begin(), got.end());
  // The first copy, made, and the second, stopped in flight.
  BOOST_TEST(got == (strings{"1", "shutting_down"}));
  auto why = device_end();
  BOOST_TEST(why.find("device actor: crashed: slow_storage: finished() threw")
               != std::string::npos,
             why);
}

BOOST_AUTO_TEST_SUITE_END()
