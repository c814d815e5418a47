// The facade's cache-level operations on the threaded scheduler: fork with
// copy-on-write (bytes included), preempt, the batched step, and actor()
// reaching the same cache (gc and pressure callbacks: pressure_test.cpp; the
// cache as started: startup_test.cpp; swapping: swap_test.cpp).
#include <chrono>
#include <future>
#include <string>
#include <vector>

#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include "block_bytes.hpp"
#include "fixture.hpp"

using namespace kvtest;

BOOST_FIXTURE_TEST_SUITE(facade_cache, watchdog)

BOOST_AUTO_TEST_CASE(fork_shares_every_block_and_copies_on_append) {
  cache_fixture f;
  auto a = f.alloc(f.req(1, 6)); // 2 blocks, the last one half full
  auto ta = a->table();
  BOOST_REQUIRE_EQUAL(ta.blocks.size(), 2u);
  fill_block(*a, ta.blocks[0], 1.0f);
  fill_block(*a, ta.blocks[1], 5.0f);
  auto c = f.m().fork(1, 2);
  BOOST_REQUIRE_MESSAGE(c, why(c));
  auto& child = **c;
  BOOST_TEST(child.id() == 2u);
  BOOST_TEST(child.is_valid());
  BOOST_TEST(child.cache_id() != a->cache_id());
  BOOST_TEST(child.table() == ta);
  BOOST_TEST(child.num_tokens() == 6u);
  BOOST_TEST(f.used_blocks() == 2u);
  // Appending into the shared last block copies it first, bytes and all.
  BOOST_TEST(!f.m().append(child, {7, 8}));
  auto tc = child.table();
  BOOST_REQUIRE_EQUAL(tc.blocks.size(), 2u);
  BOOST_TEST(tc.num_tokens == 8u);
  BOOST_TEST(tc.blocks[0] == ta.blocks[0]);
  BOOST_TEST(tc.blocks[1] != ta.blocks[1]);
  BOOST_TEST(same_block(child, tc.blocks[1], ta.blocks[1]));
  BOOST_TEST(a->table() == ta);
  BOOST_TEST(f.used_blocks() == 3u);
  // The copy is private: writing it leaves the parent's block alone.
  fill_block(child, tc.blocks[1], 77.0f);
  BOOST_TEST(!same_block(child, tc.blocks[1], ta.blocks[1]));
  // The parent's last block is no longer shared: its append copies nothing.
  BOOST_TEST(!f.m().extend(*a, 1));
  BOOST_TEST(a->table().blocks == ta.blocks);
  BOOST_TEST(f.used_blocks() == 3u);
  // The parent extending into a block a second child shares copies too.
  auto d = f.m().fork(1, 3);
  BOOST_REQUIRE_MESSAGE(d, why(d));
  BOOST_TEST(!f.m().extend(*a, 1));
  auto ta2 = a->table();
  BOOST_TEST(ta2.blocks[1] != ta.blocks[1]);
  BOOST_TEST((*d)->table().blocks == ta.blocks);
  BOOST_TEST(same_block(*a, ta2.blocks[1], ta.blocks[1]));
  BOOST_TEST(f.used_blocks() == 4u);
  auto s = f.checked_stats();
  BOOST_TEST(s.active_caches == 3u);
}

BOOST_AUTO_TEST_CASE(fork_of_full_blocks_appends_without_copying) {
  cache_fixture f;
  auto a = f.alloc(f.req(1, 8));
  auto ta = a->table();
  auto c = f.m().fork(1, 2);
  BOOST_REQUIRE_MESSAGE(c, why(c));
  BOOST_TEST(!f.m().extend(**c, 1));
  auto tc = (*c)->table();
  BOOST_REQUIRE_EQUAL(tc.blocks.size(), 3u);
  BOOST_TEST(tc.blocks[0] == ta.blocks[0]);
  BOOST_TEST(tc.blocks[1] == ta.blocks[1]);
  BOOST_TEST(f.used_blocks() == 3u);
  // Ending the parent keeps the shared blocks for the child.
  BOOST_REQUIRE(!f.m().deallocate(1));
  BOOST_TEST(f.used_blocks() == 3u);
  BOOST_TEST((*c)->table() == tc);
  BOOST_REQUIRE(!f.m().deallocate(2));
  BOOST_TEST(f.used_blocks() == 0u);
}

BOOST_AUTO_TEST_CASE(fork_errors_name_the_request) {
  cache_fixture f;
  auto a = f.alloc(f.req(1, 5));
  auto b = f.alloc(f.req(2, 5));
  auto used = f.used_blocks();
  KV_CHECK_ERROR(error_of(f.m().fork(9, 10)), errc::unknown_request, "request 9");
  KV_CHECK_ERROR(error_of(f.m().fork(1, 2)), errc::duplicate_request,
                 "request 2");
  BOOST_TEST(f.used_blocks() == used);
  BOOST_TEST(f.checked_stats().active_caches == 2u);
  BOOST_TEST(b->table().num_tokens == 5u);
}

BOOST_AUTO_TEST_CASE(a_fork_whose_child_ended_before_its_handle_was_made_leaves_nothing) {
  // Another thread frees the child while the fork is in flight (the manager
  // takes a free of an id it is admitting; the pool has the two in order):
  // the fork's reply and the child's end come back to back, so the fork's
  // lookup of the child finds it gone - the fork fails, naming why, and
  // has freed what it made. (Should the lookup win the race, the fork
  // returns a handle that its end invalidates: 1 or 2 in 10 here.) A probe
  // of a cached long prompt keeps the pool busy, so the free - retried
  // until the manager has the fork - is in before the fork is done.
  auto cfg = small_config(100000);
  cache_fixture f{cfg};
  auto prompt = iota_tokens(1, 8000);
  BOOST_REQUIRE(!f.m().deallocate(f.alloc(f.req(1, 0, 8192, prompt))->id()));
  std::vector<allocation_request> busy;
  for (request_id k = 0; k < 200; ++k)
    busy.push_back(f.req(1000 + k, 0, 8192, prompt));
  auto parent = f.alloc(f.req(2, 6));
  std::size_t failed = 0;
  for (request_id child = 3; child < 13; ++child) {
    caf::anon_send(f.m().actor(), probe_atom::value, busy);
    auto forked = std::async(std::launch::async,
                             [&] { return f.m().fork(2, child); });
    caf::error freed;
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds{30};
    while (has_code(freed = f.m().deallocate(child), errc::unknown_request))
      BOOST_REQUIRE(std::chrono::steady_clock::now() < until);
    BOOST_REQUIRE_MESSAGE(!freed, render(freed));
    auto res = forked.get();
    if (res) {
      BOOST_TEST(eventually([&] { return !(*res)->is_valid(); }));
    } else {
      ++failed;
      KV_CHECK_ERROR(res.error(), errc::unknown_request,
                     "fork of request 2 as");
    }
    BOOST_TEST(!f.m().get_handle(child));
    BOOST_TEST(f.checked_stats().active_caches == 1u);
  }
  BOOST_TEST_MESSAGE(failed << " of 10 forks found their child gone");
  BOOST_TEST(parent->is_valid());
  BOOST_TEST(parent->table().num_tokens == 6u);
}

BOOST_AUTO_TEST_CASE(preempt_frees_the_blocks_and_invalidates_the_handle) {
  cache_fixture f;
  auto h = f.alloc(f.req(1, 8));
  auto clone = h->clone_handle();
  auto other = f.alloc(f.req(2, 4));
  BOOST_REQUIRE(!f.m().preempt(1));
  BOOST_TEST(!h->is_valid());
  BOOST_TEST(!clone->is_valid());
  BOOST_TEST(other->is_valid());
  BOOST_TEST(f.used_blocks() == 1u);
  auto s = f.checked_stats();
  BOOST_TEST(s.preemption_count == 1u);
  BOOST_TEST(s.active_caches == 1u);
  BOOST_TEST(!f.m().get_handle(1));
  KV_CHECK_ERROR(f.m().preempt(1), errc::unknown_request, "request 1");
  KV_CHECK_ERROR(f.m().deallocate(1), errc::unknown_request, "request 1");
  KV_CHECK_ERROR(f.m().extend(*h, 1), errc::invalid_handle, "request 1");
}

BOOST_AUTO_TEST_CASE(a_request_ended_by_an_actor_client_invalidates_at_once) {
  // Not through this facade: an actor preempts, another frees. The handles
  // turn invalid before those clients get their replies (the lifecycle
  // event reaches the facade first), not only once the handle actors quit.
  cache_fixture f;
  auto h1 = f.alloc(f.req(1, 8));
  auto h2 = f.alloc(f.req(2, 4));
  auto h3 = f.alloc(f.req(3, 4));
  caf::scoped_actor client{*f.sys};
  auto mgr = f.m().actor();
  client->request(mgr, std::chrono::seconds{10}, preempt_atom::value,
                  request_id{1})
    .receive([&](std::uint32_t released) { BOOST_TEST(released == 2u); },
             [&](caf::error& err) { BOOST_FAIL(render(err)); });
  BOOST_TEST(!h1->is_valid());
  client->request(mgr, std::chrono::seconds{10}, free_atom::value,
                  request_id{2})
    .receive([&](std::uint32_t released) { BOOST_TEST(released == 1u); },
             [&](caf::error& err) { BOOST_FAIL(render(err)); });
  BOOST_TEST(!h2->is_valid());
  BOOST_TEST(h3->is_valid());
  KV_CHECK_ERROR(f.m().extend(*h1, 1), errc::invalid_handle, "request 1");
  // The ids can start again; the new handles are valid.
  auto again = f.alloc(f.req(1, 4));
  BOOST_TEST(again->is_valid());
  BOOST_TEST(!h1->is_valid());
}

BOOST_AUTO_TEST_CASE(step_runs_frees_extends_and_admits_in_one_round_trip) {
  cache_fixture f;
  auto h1 = f.alloc(f.req(1, 4));
  auto h2 = f.alloc(f.req(2, 5));
  auto h3 = f.alloc(f.req(3, 3));
  auto t1 = h1->table();
  step_request step;
  step.frees = {3, 999};
  step.extends = {extend_op{1, 1}, extend_op{2, 3}};
  step.admits = {f.req(10, 6)};
  auto r = f.m().step(step);
  BOOST_REQUIRE_MESSAGE(r, why(r));
  BOOST_TEST(r->freed == std::vector<request_id>{3},
             boost::test_tools::per_element());
  BOOST_REQUIRE_EQUAL(r->failed.size(), 1u);
  BOOST_TEST(r->failed[0].id == 999u);
  KV_CHECK_ERROR(r->failed[0].error, errc::unknown_request, "request 999");
  // Request 1 got a block (its table from index 1 on); request 2 did not.
  BOOST_REQUIRE_EQUAL(r->changed.size(), 1u);
  BOOST_TEST(r->changed[0].id == 1u);
  BOOST_TEST(r->changed[0].first == 1u);
  BOOST_TEST(r->changed[0].num_tokens == 5u);
  BOOST_REQUIRE_EQUAL(r->changed[0].blocks.size(), 1u);
  auto nt1 = h1->table();
  BOOST_TEST(nt1.num_tokens == 5u);
  BOOST_TEST(nt1.blocks[0] == t1.blocks[0]);
  BOOST_TEST(nt1.blocks[1] == r->changed[0].blocks[0]);
  BOOST_TEST(h2->num_tokens() == 8u);
  BOOST_TEST(r->copies.empty());
  BOOST_TEST(r->preempted.empty());
  BOOST_REQUIRE_EQUAL(r->admitted.size(), 1u);
  BOOST_TEST(r->admitted[0].id == 10u);
  BOOST_TEST(r->admitted[0].table.num_tokens == 6u);
  BOOST_TEST(!r->admission_blocked);
  BOOST_TEST(!h3->is_valid());
  auto h10 = f.m().get_handle(10);
  BOOST_REQUIRE(h10);
  BOOST_TEST(h10->table() == r->admitted[0].table);
  BOOST_TEST(r->used_blocks == 2u + 2u + 2u);
  BOOST_TEST(r->free_blocks == 64u - r->used_blocks);
  BOOST_TEST(f.used_blocks() == r->used_blocks);
}

BOOST_AUTO_TEST_CASE(step_preempts_the_newest_request_on_shortage) {
  auto cfg = small_config(8);
  cfg.pressure.preempt_at_critical = false; // steps preempt here, alone
  cache_fixture f{cfg};
  auto h1 = f.alloc(f.req(1, 16)); // 4 blocks
  auto h2 = f.alloc(f.req(2, 12)); // 3 blocks; 1 left
  step_request step;
  step.extends = {extend_op{1, 8}, extend_op{2, 1}}; // 1 needs 2 blocks
  step.admits = {f.req(20, 4)};
  auto r = f.m().step(step);
  BOOST_REQUIRE_MESSAGE(r, why(r));
  BOOST_TEST(r->preempted == std::vector<request_id>{2},
             boost::test_tools::per_element());
  BOOST_REQUIRE_EQUAL(r->changed.size(), 1u);
  BOOST_TEST(r->changed[0].id == 1u);
  BOOST_TEST(h1->num_tokens() == 24u);
  BOOST_TEST(!h2->is_valid());
  BOOST_TEST(!f.m().get_handle(2));
  // Admission waits for a step without preemption.
  BOOST_TEST(r->admitted.empty());
  BOOST_TEST(r->admission_blocked);
  BOOST_TEST(r->blocked == 20u);
  BOOST_TEST(!f.m().get_handle(20));
  BOOST_TEST(f.checked_stats().preemption_count == 1u);
  // Without preemption, the shortage fails the extend alone. (With 7 of
  // 8 blocks in use after this one, 1 can grow to 8 blocks - all of them,
  // no supervisor preempting at critical pressure here.)
  auto h30 = f.alloc(f.req(30, 4));
  step_request strict;
  strict.extends = {extend_op{1, 8}};
  strict.preempt_on_shortage = false;
  auto r2 = f.m().step(strict);
  BOOST_REQUIRE_MESSAGE(r2, why(r2));
  BOOST_REQUIRE_EQUAL(r2->failed.size(), 1u);
  KV_CHECK_ERROR(r2->failed[0].error, errc::out_of_blocks);
  BOOST_TEST(h1->num_tokens() == 24u);
  BOOST_TEST(h30->is_valid());
  // Past the pool, it could never fit.
  strict.extends = {extend_op{1, 16}};
  r2 = f.m().step(strict);
  BOOST_REQUIRE_MESSAGE(r2, why(r2));
  BOOST_REQUIRE_EQUAL(r2->failed.size(), 1u);
  KV_CHECK_ERROR(r2->failed[0].error, errc::exceeds_capacity, "the pool's 8");
  BOOST_TEST(h1->is_valid());
}

BOOST_AUTO_TEST_CASE(actor_serves_the_same_cache_as_the_facade) {
  cache_fixture f;
  auto h = f.alloc(f.req(1, 5));
  auto mgr = f.m().actor();
  BOOST_REQUIRE(static_cast<bool>(mgr));
  std::shared_ptr<kv_cache_handle> g;
  {
    caf::scoped_actor self{*f.sys};
    self->request(mgr, caf::infinite, stats_atom::value)
      .receive([&](const cache_manager_stats& s) {
                 BOOST_TEST(s.active_caches == 1u);
                 BOOST_TEST(s.total_blocks == 64u);
               },
               [&](caf::error& err) { BOOST_FAIL(render(err)); });
    self->request(mgr, caf::infinite, table_atom::value, request_id{1})
      .receive([&](const block_table& t) { BOOST_TEST(t == h->table()); },
               [&](caf::error& err) { BOOST_FAIL(render(err)); });
    // A request the scoped actor allocates is visible through the facade...
    self->request(mgr, caf::infinite, allocate_atom::value, f.req(2, 9))
      .receive([&](request_handle_actor&, block_table& t) {
                 BOOST_TEST(t.num_tokens == 9u);
               },
               [&](caf::error& err) { BOOST_FAIL(render(err)); });
    g = f.m().get_handle(2);
    BOOST_REQUIRE(g);
    BOOST_TEST(g->is_valid());
    BOOST_TEST(g->num_tokens() == 9u);
  }
  // ...and owned by it: it is reclaimed once its owner is gone.
  BOOST_TEST(eventually([&] { return f.checked_stats().active_caches == 1u; }));
  BOOST_TEST(eventually([&] { return !g->is_valid(); }));
  BOOST_TEST(!f.m().get_handle(2));
  BOOST_TEST(f.used_blocks() == 2u);
  BOOST_TEST(h->is_valid());
}

BOOST_AUTO_TEST_SUITE_END()
