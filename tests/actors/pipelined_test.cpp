// A client that sends its next message for a request without waiting for
// the reply to the last: the manager's registry follows the pool by a round
// trip, but each answer is what the pool - which has the messages in their
// order - makes of them. A free right after an allocate frees what it
// admitted; an allocate right after a free is no duplicate; a preempt, a
// fork or a table right after an allocate find the request, a lookup right
// after a free does not.
#include "fixture.hpp"

#include <caf/all.hpp>

using namespace kvactor;
using namespace kvactor::test;

namespace {

using admitted_reply = caf::expected<std::tuple<request_handle_actor, block_table>>;

struct pipelined_fixture : cache_fixture {
  /// The reply to an allocate or fork sent earlier (the next in self's
  /// mailbox of that shape, or an error).
  admitted_reply admitted() {
    return reply_to<request_handle_actor, block_table>(self);
  }
  caf::expected<std::uint32_t> count() {
    auto r = reply_to<std::uint32_t>(self);
    if (!r)
      return std::move(r.error());
    return std::get<0>(*r);
  }
};

} // namespace

BOOST_FIXTURE_TEST_SUITE(pipelined, pipelined_fixture)

BOOST_AUTO_TEST_CASE(a_free_right_after_an_allocate_frees_what_it_admitted) {
  self->send(mgr, allocate_atom::value, make_request(cfg, 5, 9));
  self->send(mgr, free_atom::value, request_id{5});
  run();
  BOOST_TEST(outcome(admitted()) == "ok");
  BOOST_TEST(value_or(count(), 0u) == 3u);
  BOOST_TEST(outcome(lookup(5)) == "unknown_request");
  BOOST_TEST(used_blocks() == 0u);
}

BOOST_AUTO_TEST_CASE(a_discard_right_after_an_allocate_discards_it) {
  self->send(mgr, allocate_atom::value, make_request(cfg, 5, 9));
  self->send(mgr, discard_atom::value, request_id{5});
  run();
  BOOST_TEST(outcome(admitted()) == "ok");
  BOOST_TEST(value_or(count(), 0u) == 3u);
  BOOST_TEST(outcome(lookup(5)) == "unknown_request");
  BOOST_TEST(used_blocks() == 0u);
}

BOOST_AUTO_TEST_CASE(an_allocate_right_after_a_free_is_no_duplicate) {
  BOOST_REQUIRE(allocate(5, 9));
  auto first = lookup(5);
  BOOST_REQUIRE(first);
  self->send(mgr, free_atom::value, request_id{5});
  self->send(mgr, allocate_atom::value, make_request(cfg, 5, 4));
  run();
  BOOST_TEST(value_or(count(), 0u) == 3u);
  auto second = admitted();
  BOOST_REQUIRE(second);
  // The registry holds the new incarnation, which the old one's end left
  // alone.
  auto looked = lookup(5);
  BOOST_REQUIRE(looked);
  BOOST_TEST((looked->first == std::get<0>(*second)));
  BOOST_TEST(looked->second.cache_id != first->second.cache_id);
  BOOST_TEST(value_or(table(5), block_table{}).num_tokens == 4u);
  BOOST_TEST(used_blocks() == 1u);
}

BOOST_AUTO_TEST_CASE(allocate_free_allocate_free_back_to_back) {
  self->send(mgr, allocate_atom::value, make_request(cfg, 5, 9));
  self->send(mgr, free_atom::value, request_id{5});
  self->send(mgr, allocate_atom::value, make_request(cfg, 5, 4));
  self->send(mgr, free_atom::value, request_id{5});
  run();
  BOOST_TEST(outcome(admitted()) == "ok");
  BOOST_TEST(value_or(count(), 0u) == 3u);
  BOOST_TEST(outcome(admitted()) == "ok");
  BOOST_TEST(value_or(count(), 0u) == 1u);
  BOOST_TEST(outcome(lookup(5)) == "unknown_request");
  BOOST_TEST(used_blocks() == 0u);
}

BOOST_AUTO_TEST_CASE(a_second_allocate_of_the_same_id_is_still_a_duplicate) {
  self->send(mgr, allocate_atom::value, make_request(cfg, 5, 9));
  self->send(mgr, allocate_atom::value, make_request(cfg, 5, 4));
  run();
  BOOST_TEST(outcome(admitted()) == "ok");
  BOOST_TEST(outcome(admitted()) == "duplicate_request");
  BOOST_TEST(value_or(table(5), block_table{}).num_tokens == 9u);
}

BOOST_AUTO_TEST_CASE(a_free_after_a_failed_allocate_finds_nothing) {
  BOOST_REQUIRE(allocate(1, 4 * 60));
  self->send(mgr, allocate_atom::value, make_request(cfg, 5, 4 * 8));
  self->send(mgr, free_atom::value, request_id{5});
  run();
  BOOST_TEST(outcome(admitted()) == "out_of_blocks");
  BOOST_TEST(outcome(count()) == "unknown_request");
  BOOST_TEST(used_blocks() == 60u);
}

BOOST_AUTO_TEST_CASE(a_preempt_right_after_an_allocate_preempts_it) {
  self->send(mgr, allocate_atom::value, make_request(cfg, 5, 9));
  self->send(mgr, preempt_atom::value, request_id{5});
  run();
  BOOST_TEST(outcome(admitted()) == "ok");
  BOOST_TEST(value_or(count(), 0u) == 3u);
  // The owner asked: it is not told again.
  BOOST_TEST(preempt_notices(self).empty());
  BOOST_TEST(outcome(lookup(5)) == "unknown_request");
  BOOST_TEST(must(stats()).preemption_count == 1u);
}

BOOST_AUTO_TEST_CASE(a_fork_right_after_an_allocate_forks_it) {
  self->send(mgr, allocate_atom::value, make_request(cfg, 5, 9));
  self->send(mgr, fork_atom::value, request_id{5}, request_id{6});
  self->send(mgr, table_atom::value, request_id{5});
  run();
  auto parent = admitted();
  BOOST_REQUIRE(parent);
  auto child = admitted();
  BOOST_REQUIRE(child);
  BOOST_TEST(std::get<1>(*child).blocks == std::get<1>(*parent).blocks);
  BOOST_TEST(std::get<1>(*child).num_tokens == 9u);
  auto t = reply_to<block_table>(self);
  BOOST_REQUIRE(t);
  BOOST_TEST(std::get<0>(*t).num_tokens == 9u);
  auto looked = lookup(6);
  BOOST_REQUIRE(looked);
  BOOST_TEST(looked->second.request.max_sequence_length == 256u);
  BOOST_TEST(used_blocks() == 3u);
}

BOOST_AUTO_TEST_CASE(a_fork_into_an_id_just_freed_is_no_duplicate) {
  BOOST_REQUIRE(allocate(5, 9));
  BOOST_REQUIRE(allocate(6, 4));
  self->send(mgr, free_atom::value, request_id{6});
  self->send(mgr, fork_atom::value, request_id{5}, request_id{6});
  run();
  BOOST_TEST(value_or(count(), 0u) == 1u);
  auto child = admitted();
  BOOST_REQUIRE(child);
  BOOST_TEST(std::get<1>(*child).num_tokens == 9u);
  BOOST_TEST(value_or(table(6), block_table{}).num_tokens == 9u);
}

BOOST_AUTO_TEST_CASE(a_lookup_right_after_a_free_finds_nothing) {
  // The free has gone to the pool: the request is live no more, though the
  // registry holds its entry until the reply (nor does list name it).
  BOOST_REQUIRE(allocate(5, 9));
  BOOST_REQUIRE(allocate(6, 4));
  self->send(mgr, free_atom::value, request_id{5});
  self->send(mgr, lookup_atom::value, request_id{5});
  self->send(mgr, list_atom::value);
  run();
  // Answered at once, ahead of the free's reply (a pool round trip).
  BOOST_TEST(outcome(reply_to<request_handle_actor, request_info>(self))
             == "unknown_request");
  auto listed = reply_to<std::vector<handle_entry>>(self);
  BOOST_REQUIRE(listed);
  BOOST_REQUIRE(std::get<0>(*listed).size() == 1u);
  BOOST_TEST(std::get<0>(*listed)[0].id == 6u);
  BOOST_TEST(value_or(count(), 0u) == 3u);
}

BOOST_AUTO_TEST_SUITE_END()
