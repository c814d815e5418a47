// The batched step message: frees, extends with vLLM's preempt-the-newest
// policy, first-come-first-served admissions (the preempt message and the
// lifecycle notifications: preempt_test.cpp).
#include "fixture.hpp"
#include "step_ops.hpp"

#include <caf/all.hpp>

using namespace kvactor;
using namespace kvactor::test;

BOOST_FIXTURE_TEST_SUITE(step, cache_fixture)

BOOST_AUTO_TEST_CASE(step_frees_extends_and_admits_in_one_message) {
  auto r1 = allocate(1, 4);
  auto r2 = allocate(2, 5);
  auto r3 = allocate(3, 8);
  BOOST_REQUIRE(r1 && r2 && r3);
  self->monitor(r3->handle);
  step_request req;
  req.frees = {3};
  req.extends = {grow(1, 1), grow(2, 3)};
  req.admits = {make_request(cfg, 4, 6),
                make_prompt_request(cfg, 5, make_tokens(9, 1))};
  auto res = step(req);
  BOOST_REQUIRE_MESSAGE(res, outcome(res));
  BOOST_TEST(res->freed == std::vector<request_id>{3});
  BOOST_TEST(res->preempted.empty());
  BOOST_TEST(res->failed.empty());
  BOOST_TEST(res->copies.empty());
  // Only request 1 changed blocks: 4 -> 5 tokens takes a second block.
  BOOST_REQUIRE(res->changed.size() == 1u);
  auto& d = res->changed[0];
  BOOST_TEST(d.id == 1u);
  BOOST_TEST(d.first == 1u);
  BOOST_TEST(d.blocks.size() == 1u);
  BOOST_TEST(d.num_tokens == 5u);
  BOOST_REQUIRE(res->admitted.size() == 2u);
  BOOST_TEST(res->admitted[0].id == 4u);
  BOOST_TEST(res->admitted[0].table.num_blocks() == 2u);
  BOOST_TEST(res->admitted[0].table.num_tokens == 6u);
  BOOST_TEST(res->admitted[1].id == 5u);
  BOOST_TEST(res->admitted[1].table.num_blocks() == 3u);
  BOOST_TEST(!res->admission_blocked);
  BOOST_TEST(res->blocked == 0u);
  // 1: 2 blocks, 2: 2, 4: 2, 5: 3.
  BOOST_TEST(res->used_blocks == 9u);
  BOOST_TEST(res->free_blocks == 55u);
  BOOST_TEST(used_blocks() == 9u);
  // The registry followed: tables, handles, the freed handle's end.
  auto t1 = table(1);
  BOOST_REQUIRE(t1);
  BOOST_TEST(t1->num_tokens == 5u);
  BOOST_TEST(t1->blocks[1] == d.blocks[0]);
  BOOST_TEST(value_or(table(2), block_table{}).num_tokens == 8u);
  BOOST_TEST(outcome(lookup(3)) == "unknown_request");
  BOOST_TEST(received_down(self, r3->handle.address()));
  for (request_id id : {4, 5}) {
    auto found = lookup(id);
    BOOST_REQUIRE(found);
    auto t = handle_table(found->first);
    BOOST_REQUIRE(t);
    BOOST_TEST(*t == res->admitted[id - 4].table);
    BOOST_TEST(found->second.cache_id == res->admitted[id - 4].cache_id);
  }
  auto s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->active_caches == 4u);
}

BOOST_AUTO_TEST_CASE(step_preempts_the_newest_request_first_when_blocks_run_out) {
  for (request_id id = 1; id <= 3; ++id)
    BOOST_REQUIRE(allocate(id, 80, 1000)); // 20 blocks each
  BOOST_REQUIRE(allocate(4, 16, 1000));    // the last 4 blocks
  std::vector<request_handle_actor> handles;
  for (request_id id = 1; id <= 4; ++id) {
    auto found = lookup(id);
    BOOST_REQUIRE(found);
    handles.push_back(found->first);
    self->monitor(found->first);
  }
  caf::scoped_actor sub{sys};
  subscribe(topic::lifecycle, sub);
  // 1 needs a block: 3, the newest of the list, goes; 2 then fits.
  step_request req;
  req.extends = {grow(1, 4), grow(2, 4), grow(3, 4)};
  auto res = step(req);
  BOOST_REQUIRE(res);
  BOOST_TEST(res->preempted == std::vector<request_id>{3});
  BOOST_TEST(res->failed.empty());
  BOOST_REQUIRE(res->changed.size() == 2u);
  BOOST_TEST(res->changed[0].id == 1u);
  BOOST_TEST(res->changed[1].id == 2u);
  BOOST_TEST(res->used_blocks == 46u);
  BOOST_TEST(outcome(lookup(3)) == "unknown_request");
  BOOST_TEST(received_down(self, handles[2].address()));
  auto ended = ended_events(sub);
  BOOST_REQUIRE(ended.size() == 1u);
  BOOST_TEST(ended[0].id == 3u);
  BOOST_TEST(ended[0].reason == end_reason::preempted);
  BOOST_TEST(ended[0].blocks_released == 20u);
  // 1 needs 43 blocks with 18 free: 2 goes, then (still short) 1 itself.
  req.extends = {grow(1, 100 + 72), grow(2, 4)};
  res = step(req);
  BOOST_REQUIRE(res);
  BOOST_TEST(res->preempted == (std::vector<request_id>{2, 1}));
  BOOST_TEST(res->changed.empty());
  BOOST_TEST(used_blocks() == 4u);
  ended = ended_events(sub);
  BOOST_REQUIRE(ended.size() == 2u);
  BOOST_TEST(ended[0].id == 2u);
  BOOST_TEST(ended[0].blocks_released == 21u); // 84 tokens
  BOOST_TEST(ended[1].id == 1u);
  BOOST_TEST(ended[1].blocks_released == 21u);
  auto s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->preemption_count == 3u);
  BOOST_TEST(s->active_caches == 1u);
  // Request 4 was not in the step: untouched.
  BOOST_TEST(value_or(table(4), block_table{}).num_tokens == 16u);
  // A step whose newest request has what is missing preempts it for an
  // older one and frees exactly enough.
  BOOST_REQUIRE(allocate(5, 200, 1000)); // 50 blocks, 10 free
  req.extends = {grow(5, 44), grow(4, 1)}; // 5 needs 11, 4 holds 4
  res = step(req);
  BOOST_REQUIRE(res);
  BOOST_TEST(res->preempted == std::vector<request_id>{4});
  BOOST_TEST(value_or(table(5), block_table{}).num_blocks() == 61u);
}

BOOST_AUTO_TEST_CASE(step_skips_admissions_after_a_preemption_unless_asked) {
  BOOST_REQUIRE(allocate(1, 4 * 62, 1000)); // 62 blocks
  BOOST_REQUIRE(allocate(2, 8, 1000));      // 2 blocks: the pool is full
  step_request req;
  req.extends = {grow(1, 4), grow(2, 1)};
  req.admits = {make_request(cfg, 3, 1)};
  auto res = step(req);
  BOOST_REQUIRE(res);
  BOOST_TEST(res->preempted == std::vector<request_id>{2});
  BOOST_TEST(res->admitted.empty());
  BOOST_TEST(res->admission_blocked);
  BOOST_TEST(res->blocked == 3u);
  BOOST_TEST(outcome(lookup(3)) == "unknown_request");
  BOOST_TEST(used_blocks() == 63u);
  // The same, allowed to admit after preempting.
  BOOST_REQUIRE(free(1));
  BOOST_REQUIRE(allocate(1, 4 * 60, 1000)); // 60 blocks
  BOOST_REQUIRE(allocate(2, 16, 1000));     // 4 blocks: full again
  req.extends = {grow(1, 4), grow(2, 1)};
  req.admits = {make_request(cfg, 3, 8)};   // 2 of the 3 left after 2 goes
  req.admit_after_preemption = true;
  res = step(req);
  BOOST_REQUIRE(res);
  BOOST_TEST(res->preempted == std::vector<request_id>{2});
  BOOST_REQUIRE(res->admitted.size() == 1u);
  BOOST_TEST(res->admitted[0].id == 3u);
  BOOST_TEST(!res->admission_blocked);
  BOOST_TEST(outcome(lookup(3)) == "ok");
}

BOOST_AUTO_TEST_CASE(step_admission_stops_at_the_first_request_that_does_not_fit) {
  BOOST_REQUIRE(allocate(1, 4 * 54, 1000)); // 10 blocks left
  step_request req;
  auto bad = make_request(cfg, 11, 4);
  bad.num_heads = 3;
  req.admits = {make_request(cfg, 10, 16), bad, make_request(cfg, 12, 80),
                make_request(cfg, 13, 4)};
  auto res = step(req);
  BOOST_REQUIRE(res);
  BOOST_REQUIRE(res->admitted.size() == 1u);
  BOOST_TEST(res->admitted[0].id == 10u);
  // The malformed one fails alone; 12 does not fit and stops admission, so
  // 13 (which would fit) waits its turn.
  auto f = failure_of(*res, 11);
  BOOST_REQUIRE(f);
  BOOST_TEST(outcome(f->error) == "invalid_request");
  BOOST_TEST(res->admission_blocked);
  BOOST_TEST(res->blocked == 12u);
  BOOST_TEST(failure_of(*res, 13) == nullptr);
  BOOST_TEST(outcome(lookup(12)) == "unknown_request");
  BOOST_TEST(outcome(lookup(13)) == "unknown_request");
  BOOST_TEST(used_blocks() == 58u);
}

BOOST_AUTO_TEST_CASE(step_without_preemption_fails_the_short_extend_alone) {
  BOOST_REQUIRE(allocate(1, 4 * 63, 1000));
  BOOST_REQUIRE(allocate(2, 3, 1000));
  step_request req;
  req.extends = {grow(1, 4), grow(2, 1), grow(1, 4)};
  req.preempt_on_shortage = false;
  auto res = step(req);
  BOOST_REQUIRE(res);
  BOOST_TEST(res->preempted.empty());
  BOOST_REQUIRE(res->failed.size() == 2u);
  BOOST_TEST(res->failed[0].id == 1u);
  BOOST_TEST(outcome(res->failed[0].error) == "out_of_blocks");
  BOOST_TEST(res->failed[1].id == 1u);
  // 1's second entry: a request is extended at most once per step.
  BOOST_TEST(outcome(res->failed[1].error) == "invalid_request");
  BOOST_TEST(value_or(table(1), block_table{}).num_tokens == 4u * 63);
  BOOST_TEST(value_or(table(2), block_table{}).num_tokens == 4u);
}

BOOST_AUTO_TEST_CASE(step_extends_a_request_at_most_once_and_never_preempts_one_it_extended) {
  for (request_id id = 1; id <= 3; ++id)
    BOOST_REQUIRE(allocate(id, 80, 1000)); // 20 full blocks each
  BOOST_REQUIRE(allocate(4, 12, 1000));    // 3 blocks: one left free
  // 1 takes the free block; 2 runs short. The entry after it names 1,
  // which the step already extended: no victim (its blocks would go to 2
  // while `changed` names one as 1's). 2 preempts itself; 1's repeat fails.
  step_request req;
  req.extends = {grow(1, 1), grow(2, 1), grow(1, 1)};
  auto res = step(req);
  BOOST_REQUIRE_MESSAGE(res, outcome(res));
  BOOST_REQUIRE(res->changed.size() == 1u);
  BOOST_TEST(res->changed[0].id == 1u);
  BOOST_TEST(res->changed[0].num_tokens == 81u);
  BOOST_TEST(res->preempted == std::vector<request_id>{2});
  BOOST_REQUIRE(res->failed.size() == 1u);
  BOOST_TEST(res->failed[0].id == 1u);
  BOOST_TEST(outcome(res->failed[0].error) == "invalid_request");
  auto msg = render(res->failed[0].error);
  BOOST_TEST(msg.find("request 1 appears twice in the step's extends")
               != std::string::npos, msg);
  auto t1 = table(1);
  BOOST_REQUIRE(t1);
  BOOST_TEST(t1->num_tokens == 81u);
  BOOST_TEST(t1->blocks.back() == res->changed[0].blocks.back());
  BOOST_TEST(outcome(lookup(2)) == "unknown_request");
  // Nothing free again; 3 named twice: its repeat is no victim, so 3
  // preempts itself and the repeat fails (it used to be preempted by its
  // own second entry and then fail as unknown).
  BOOST_REQUIRE(allocate(5, 80, 1000)); // the 20 blocks 2 left
  req.extends = {grow(3, 1), grow(3, 1)};
  res = step(req);
  BOOST_REQUIRE_MESSAGE(res, outcome(res));
  BOOST_TEST(res->preempted == std::vector<request_id>{3});
  BOOST_REQUIRE(res->failed.size() == 1u);
  BOOST_TEST(res->failed[0].id == 3u);
  BOOST_TEST(outcome(res->failed[0].error) == "invalid_request");
  BOOST_TEST(res->changed.empty());
  BOOST_TEST(outcome(lookup(3)) == "unknown_request");
  BOOST_TEST(value_or(table(1), block_table{}).num_tokens == 81u);
}

BOOST_AUTO_TEST_CASE(step_reports_bad_operations_and_changes_nothing_for_them) {
  BOOST_REQUIRE(allocate(1, 4, 8));
  BOOST_REQUIRE(allocate(2, 4));
  auto before = stats();
  step_request req;
  req.frees = {9};
  req.extends = {grow(8, 1), grow(1, 5)};
  auto on_gpu = make_request(cfg, 3, 4);
  on_gpu.device = device{device_kind::cuda, 0};
  req.admits = {on_gpu, make_request(cfg, 2, 4)};
  auto res = step(req);
  BOOST_REQUIRE(res);
  auto code = [&](request_id id) {
    auto f = failure_of(*res, id);
    return f ? outcome(f->error) : std::string{"none"};
  };
  BOOST_TEST(code(9) == "unknown_request");
  BOOST_TEST(code(8) == "unknown_request");
  BOOST_TEST(code(1) == "exceeds_max_sequence_length");
  BOOST_TEST(code(3) == "invalid_request");
  BOOST_TEST(code(2) == "duplicate_request");
  BOOST_TEST(res->freed.empty());
  BOOST_TEST(res->admitted.empty());
  BOOST_TEST(res->changed.empty());
  auto after = stats();
  BOOST_REQUIRE(before && after);
  BOOST_TEST(after->free_blocks == before->free_blocks);
  BOOST_TEST(after->active_caches == before->active_caches);
  // Token ids that do not add up fail every extend of the step.
  req = step_request{};
  req.extends = {grow(1, 1), grow(2, 2)};
  req.tokens = {1, 2};
  res = step(req);
  BOOST_REQUIRE(res);
  BOOST_TEST(code(1) == "invalid_request");
  BOOST_TEST(code(2) == "invalid_request");
  BOOST_TEST(value_or(table(1), block_table{}).num_tokens == 4u);
  BOOST_TEST(value_or(table(2), block_table{}).num_tokens == 4u);
}

BOOST_AUTO_TEST_CASE(step_with_token_ids_fills_blocks_that_a_later_prompt_hits) {
  auto prompt = make_tokens(4, 30);
  BOOST_REQUIRE(allocate(make_prompt_request(cfg, 1, prompt)));
  BOOST_REQUIRE(allocate(make_prompt_request(cfg, 2, make_tokens(2, 31))));
  auto more1 = make_tokens(4, 32);
  auto more2 = make_tokens(2, 33);
  step_request req;
  req.extends = {grow(1, 4), grow(2, 2)};
  req.tokens = more1;
  req.tokens.insert(req.tokens.end(), more2.begin(), more2.end());
  auto res = step(req);
  BOOST_REQUIRE(res);
  BOOST_TEST(res->failed.empty());
  auto all = prompt;
  all.insert(all.end(), more1.begin(), more1.end());
  all.push_back(7);
  auto a = allocate(make_prompt_request(cfg, 3, all));
  BOOST_REQUIRE(a);
  auto t1 = table(1);
  BOOST_REQUIRE(t1);
  BOOST_TEST(a->table.blocks[0] == t1->blocks[0]);
  BOOST_TEST(a->table.blocks[1] == t1->blocks[1]);
  auto two = make_tokens(2, 31);
  two.insert(two.end(), more2.begin(), more2.end());
  two.push_back(7);
  auto b = allocate(make_prompt_request(cfg, 4, two));
  BOOST_REQUIRE(b);
  BOOST_TEST(b->table.blocks[0] == value_or(table(2), block_table{}).blocks.at(0));
}

BOOST_AUTO_TEST_CASE(step_extend_into_a_forked_block_copies_it_before_the_reply) {
  auto a = allocate(1, 6);
  BOOST_REQUIRE(a);
  for (std::uint32_t layer = 0; layer < 2; ++layer)
    BOOST_REQUIRE(write_tokens(a->table, layer, 0, 6, 5));
  BOOST_REQUIRE(fork(1, 2));
  step_request req;
  req.extends = {grow(2, 1)};
  auto res = step(req);
  BOOST_REQUIRE(res);
  BOOST_REQUIRE(res->copies.size() == 1u);
  BOOST_TEST(res->copies[0].src == a->table.blocks[1]);
  BOOST_REQUIRE(res->changed.size() == 1u);
  BOOST_TEST(res->changed[0].first == 1u);
  BOOST_REQUIRE(res->changed[0].blocks.size() == 1u);
  BOOST_TEST(res->changed[0].blocks[0] == res->copies[0].dst);
  BOOST_TEST(res->changed[0].num_tokens == 7u);
  auto t2 = table(2);
  BOOST_REQUIRE(t2);
  t2->num_tokens = 6;
  for (std::uint32_t layer = 0; layer < 2; ++layer) {
    auto p = gather(layer, a->table);
    auto c = gather(layer, *t2);
    BOOST_REQUIRE(p && c);
    BOOST_TEST(p->keys == c->keys);
    BOOST_TEST(p->values == c->values);
  }
}

BOOST_AUTO_TEST_SUITE_END()
