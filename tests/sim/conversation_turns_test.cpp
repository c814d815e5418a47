// Conversations' turns as the workload generator sends them: a follow-up's
// prompt is its previous turn's prompt and output and fresh user tokens, it
// arrives think steps after that turn finished, and its content is the
// session's whenever that was; a follow-up turned away ends its session;
// first turns are the requests the workload sends without conversation,
// and a scenario without one sends what it sent before the feature.
#include <algorithm>

#include "sim_support.hpp"
#include "workload.hpp"

using namespace kvactor;
using namespace kvactor::sim;
using namespace kvactor::sim::test;

namespace {

/// Every request a generator sends over s.steps, none finishing.
std::vector<sim_request> first_turns(const scenario& s) {
  workload_generator gen{s};
  std::vector<sim_request> out;
  for (std::uint64_t step = 0; step < s.steps; ++step)
    for (auto& r : gen.arrivals(step))
      out.push_back(std::move(r));
  return out;
}

bool same_request(const sim_request& x, const sim_request& y) {
  return x.id == y.id && x.workload == y.workload && x.arrival == y.arrival
         && x.priority == y.priority && x.system_prompt == y.system_prompt
         && x.prompt == y.prompt && x.output == y.output;
}

/// FNV-1a over every request of `s` (arrivals(step) over its steps), field
/// by field: computed by the code before conversations existed.
std::uint64_t fingerprint(const scenario& s, std::uint64_t& count) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&](std::uint64_t x) {
    for (int i = 0; i < 8; ++i) {
      h ^= (x >> (8 * i)) & 0xff;
      h *= 0x100000001b3ull;
    }
  };
  count = 0;
  for (auto& r : first_turns(s)) {
    ++count;
    mix(r.id);
    mix(r.workload);
    mix(r.arrival);
    mix(static_cast<std::uint64_t>(r.priority));
    mix(static_cast<std::uint64_t>(static_cast<std::int64_t>(r.system_prompt)));
    mix(r.prompt.size());
    for (auto t : r.prompt)
      mix(static_cast<std::uint64_t>(t));
    mix(r.output.size());
    for (auto t : r.output)
      mix(static_cast<std::uint64_t>(t));
  }
  return h;
}

/// Steps `gen` from `step` on until workload `w`'s first request of a
/// session of at least `min_turns` turns arrives; returns it.
sim_request next_session(workload_generator& gen, std::uint64_t& step,
                         std::uint32_t w, std::uint32_t min_turns) {
  for (; step < 10000; ++step)
    for (auto& r : gen.arrivals(step))
      if (r.workload == w && r.conv.turns >= min_turns) {
        ++step;
        return r;
      }
  BOOST_FAIL("no session of " << min_turns << " turns");
  return {};
}

/// Steps `gen` from `step` on until a follow-up arrives; returns it.
sim_request next_follow_up(workload_generator& gen, std::uint64_t& step) {
  for (; step < 10000; ++step)
    for (auto& r : gen.arrivals(step))
      if (r.conv.follow_up()) {
        ++step;
        return r;
      }
  BOOST_FAIL("no follow-up arrived");
  return {};
}

} // namespace

BOOST_AUTO_TEST_SUITE(conversation_turns)

BOOST_AUTO_TEST_CASE(a_follow_up_resends_its_previous_turn_and_adds_user_tokens) {
  auto s = parse_json(conv_scenario());
  auto& w = s.workloads[0];
  workload_generator gen{s};
  std::uint64_t step = 0;
  auto first = next_session(gen, step, 0, 3);
  BOOST_TEST(first.conv.session == first.id);
  BOOST_TEST(first.conv.turn == 0u);
  BOOST_TEST(first.conv.history == 0u);
  auto finished_at = step + 2;
  for (; step <= finished_at; ++step)
    for (auto& r : gen.arrivals(step))
      BOOST_TEST(!r.conv.follow_up());
  BOOST_TEST(gen.finished(first, finished_at));
  BOOST_TEST(gen.pending_follow_ups() == 1u);
  auto next = next_follow_up(gen, step);
  BOOST_TEST(gen.pending_follow_ups() == 0u);
  // Think steps after the step its previous turn finished in.
  BOOST_TEST(next.arrival >= finished_at + 1 + w.conversation.think_steps.min);
  BOOST_TEST(next.arrival <= finished_at + 1 + w.conversation.think_steps.max);
  BOOST_TEST(next.id > first.id);
  BOOST_TEST(next.workload == first.workload);
  BOOST_TEST((next.priority == first.priority));
  BOOST_TEST(next.system_prompt == first.system_prompt);
  BOOST_TEST(next.conv.session == first.id);
  BOOST_TEST(next.conv.turn == 1u);
  BOOST_TEST(next.conv.turns == first.conv.turns);
  // The prompt: the previous prompt, its whole output, then the user's.
  auto history = first.prompt;
  history.insert(history.end(), first.output.begin(), first.output.end());
  BOOST_TEST(next.conv.history == history.size());
  BOOST_REQUIRE_GT(next.prompt.size(), history.size());
  BOOST_TEST(std::equal(history.begin(), history.end(), next.prompt.begin()));
  auto user = next.prompt.size() - history.size();
  BOOST_TEST(user >= w.conversation.user_len.min);
  BOOST_TEST(user <= w.conversation.user_len.max);
  BOOST_TEST(next.output.size() >= w.output_len.min);
  BOOST_TEST(next.output.size() <= w.output_len.max);
  // The third turn builds on the second in turn.
  BOOST_TEST(gen.finished(next, step));
  auto third = next_follow_up(gen, step);
  BOOST_TEST(third.conv.turn == 2u);
  BOOST_TEST(third.conv.history == next.prompt.size() + next.output.size());
  BOOST_TEST(std::equal(next.prompt.begin(), next.prompt.end(),
                        third.prompt.begin()));
  // A session's last turn schedules nothing.
  third.conv.turn = third.conv.turns - 1;
  BOOST_TEST(!gen.finished(third, step));
  BOOST_TEST(gen.pending_follow_ups() == 0u);
}

BOOST_AUTO_TEST_CASE(a_sessions_turns_are_the_same_whenever_they_finish) {
  auto s = parse_json(conv_scenario());
  auto follow_up_of = [&](std::uint64_t delay) {
    workload_generator gen{s};
    std::uint64_t step = 0;
    auto first = next_session(gen, step, 0, 2);
    auto finished_at = step + delay;
    for (; step <= finished_at; ++step)
      gen.arrivals(step);
    gen.finished(first, finished_at);
    auto next = next_follow_up(gen, step);
    next.arrival -= finished_at; // think steps + 1
    return next;
  };
  auto x = follow_up_of(0);
  auto y = follow_up_of(0);
  auto z = follow_up_of(37); // other first turns arrived meanwhile
  for (auto* other : {&y, &z}) {
    BOOST_TEST(other->prompt == x.prompt);
    BOOST_TEST(other->output == x.output);
    BOOST_TEST(other->arrival == x.arrival);
    BOOST_TEST(other->conv.session == x.conv.session);
  }
}

BOOST_AUTO_TEST_CASE(a_follow_up_turned_away_ends_its_session) {
  auto s = parse_json(conv_scenario());
  workload_generator gen{s};
  std::uint64_t step = 0;
  auto first = next_session(gen, step, 0, 3);
  gen.finished(first, step);
  // The chat queue full from here on: the follow-up is dropped when due.
  std::vector<std::uint64_t> room{0, 1000};
  std::vector<std::uint64_t> away;
  std::vector<std::uint64_t> follow_ups_away;
  std::uint64_t dropped = 0;
  for (std::uint64_t end = step + 20; step < end; ++step) {
    for (auto& r : gen.arrivals(++step, room, away, &follow_ups_away))
      BOOST_TEST(r.workload == 1u);
    BOOST_TEST(follow_ups_away[1] == 0u);
    BOOST_TEST(away[0] >= follow_ups_away[0]);
    dropped += follow_ups_away[0];
  }
  BOOST_TEST(dropped == 1u);
  // Nothing of the session is left to come.
  BOOST_TEST(gen.pending_follow_ups() == 0u);
  for (std::uint64_t end = step + 50; step < end; ++step)
    for (auto& r : gen.arrivals(step))
      BOOST_TEST(!r.conv.follow_up());
}

BOOST_AUTO_TEST_CASE(first_turns_are_the_requests_sent_without_conversation) {
  auto j = conv_scenario();
  auto with = parse_json(j);
  j["workloads"]["chat"].erase("conversation");
  auto without = parse_json(j);
  auto xs = first_turns(with);
  auto ys = first_turns(without);
  BOOST_REQUIRE_GT(xs.size(), 20u);
  BOOST_REQUIRE_EQUAL(xs.size(), ys.size());
  std::uint64_t sessions = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    BOOST_TEST(same_request(xs[i], ys[i]), "request " << i);
    BOOST_TEST(ys[i].conv.turns == 1u);
    BOOST_TEST(xs[i].conv.session == xs[i].id);
    if (xs[i].workload == 0) {
      ++sessions;
      BOOST_TEST(xs[i].conv.turns >= 2u);
      BOOST_TEST(xs[i].conv.turns <= 5u);
    } else {
      BOOST_TEST(xs[i].conv.turns == 1u);
    }
  }
  BOOST_TEST(sessions > 10u);
}

// The figures were computed with the generator before conversations were
// added (commit 638197c): a scenario without them sends the same requests,
// token for token.
BOOST_AUTO_TEST_CASE(without_conversation_the_requests_are_those_sent_before) {
  auto d = parse_scenario(default_scenario_json(), "default.json");
  BOOST_REQUIRE(d);
  std::uint64_t n = 0;
  auto h = fingerprint(*d, n);
  BOOST_TEST(n == 4925u);
  BOOST_TEST(h == 0x5a2466280d89d006ull);
  auto small = parse_json(small_scenario());
  h = fingerprint(small, n);
  BOOST_TEST(n == 165u);
  BOOST_TEST(h == 0x5f93d6d81f68ffe2ull);
}

BOOST_AUTO_TEST_SUITE_END()
