// The replay's step loop (bench/replay_scheduler.cpp) driven straight into
// the pool core, as `replay --mode core` does: what it counts - steps, usage
// samples, messages - on traces small enough to follow by hand.
#include <cstdint>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "bench/replay_report.hpp"
#include "bench/replay_scheduler.hpp"
#include "bench/trace.hpp"
#include "kvactor/actors/block_pool_core.hpp"

using namespace kvactor;
using namespace kvactor::bench;

namespace {

/// A trace of 4-token blocks in a pool of 8, vocabulary 100.
trace small_trace() {
  trace tr;
  tr.path = "test.jsonl";
  tr.block_size = 4;
  tr.num_blocks = 8;
  tr.max_model_len = 64;
  tr.vocab = 100;
  return tr;
}

void add(trace& tr, std::uint64_t id, std::uint64_t arrival,
         std::vector<token_id> prompt, std::vector<token_id> output) {
  trace_request r;
  r.line = tr.requests.size() + 2;
  r.id = id;
  r.arrival_step = arrival;
  r.prompt = std::move(prompt);
  r.output = std::move(output);
  tr.requests.push_back(std::move(r));
}

struct replayed {
  std::uint64_t steps = 0;
  std::uint64_t messages = 0;
  std::uint64_t peak = 0;
  double avg = 0;
  std::uint64_t finished = 0;
  std::uint64_t blocks_freed = 0;
};

/// Replays `tr` through a pool core of all its blocks, one run_step per
/// message.
replayed replay(const trace& tr) {
  auto cfg = config_for(tr, tr.num_blocks);
  detail::block_pool_core pool{cfg, tr.num_blocks};
  replay_scheduler sched{tr, cfg};
  replayed out;
  while (!sched.done()) {
    auto step = sched.begin_step();
    ++out.messages;
    while (sched.apply(pool.run_step(step))) {
      step = sched.more_admits();
      ++out.messages;
    }
    sched.end_step();
  }
  out.steps = sched.steps();
  out.peak = sched.peak_blocks_used();
  out.avg = sched.avg_blocks_used();
  out.finished = sched.finished();
  out.blocks_freed = pool.counters().blocks_freed;
  return out;
}

} // namespace

BOOST_AUTO_TEST_SUITE(replay_scheduler_suite)

BOOST_AUTO_TEST_CASE(the_loop_ends_in_the_step_where_the_last_request_finishes) {
  // One token of prompt, one of output: admitted, computed and finished in
  // step 0 - REPLAY.md's loop frees it there (item 5) and ends. Its free
  // rides on a second message, which closes the replay and is no step.
  auto tr = small_trace();
  add(tr, 1, 0, {1}, {2});
  auto r = replay(tr);
  BOOST_TEST(r.finished == 1u);
  BOOST_TEST(r.steps == 1u);
  BOOST_TEST(r.avg == 1.0);
  BOOST_TEST(r.peak == 1u);
  BOOST_TEST(r.messages == 2u);
  BOOST_TEST(r.blocks_freed == 1u); // the closing message did free it
}

BOOST_AUTO_TEST_CASE(idle_steps_before_an_arrival_count_but_are_not_sent) {
  // a (arrives at 0): 5 prompt tokens (2 blocks), 2 output tokens - admitted
  // in step 0, extended in step 1, where it finishes; its free goes with
  // step 2, which is idle but for it, as are steps 3-9. b (arrives at 10):
  // 1 token, done in step 10, the last. Usage per step: 2, 2, eight 0s, 1.
  auto tr = small_trace();
  add(tr, 1, 0, {1, 2, 3, 4, 5}, {6, 7});
  add(tr, 2, 10, {8}, {9});
  auto r = replay(tr);
  BOOST_TEST(r.finished == 2u);
  BOOST_TEST(r.steps == 11u);
  BOOST_TEST(r.avg == 5.0 / 11.0);
  BOOST_TEST(r.peak == 2u);
  BOOST_TEST(r.blocks_freed == 3u);
  // Steps 0, 1, 2 and 10, and the closing free: the seven idle steps 3-9
  // are counted, not sent.
  BOOST_TEST(r.messages == 5u);
}

BOOST_AUTO_TEST_CASE(a_gap_of_a_trillion_steps_costs_nothing) {
  // Walked step by step this ran for hours and grew without bound.
  auto tr = small_trace();
  add(tr, 1, 3, {1, 2, 3, 4, 5}, {6, 7});
  add(tr, 2, 1000000000000, {8}, {9});
  auto r = replay(tr);
  BOOST_TEST(r.finished == 2u);
  BOOST_TEST(r.steps == 1000000000001u);
  BOOST_TEST(r.avg == 5.0 / 1000000000001.0);
  BOOST_TEST(r.messages == 5u);
}

BOOST_AUTO_TEST_SUITE_END()
