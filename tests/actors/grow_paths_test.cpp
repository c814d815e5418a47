// The three ways a request grows - its handle actor, the manager by id (which
// the pool answers directly), a step - meet in the pool: each stamps the
// request's last_access, which the handle's stats report; the manager's
// path names the registry's incarnation, so it never grows a newer one.
#include "fixture.hpp"

#include <chrono>
#include <thread>

#include <caf/all.hpp>

using namespace kvactor;
using namespace kvactor::test;

namespace {

/// Past the system clock's resolution: the next stamp is strictly later.
void tick() {
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

std::uint64_t last_access(cache_fixture& f, const request_handle_actor& h) {
  auto s = f.handle_stats(h);
  BOOST_REQUIRE(s);
  return s->last_access;
}

} // namespace

BOOST_FIXTURE_TEST_SUITE(grow_paths, cache_fixture)

BOOST_AUTO_TEST_CASE(every_path_that_grows_a_request_stamps_its_last_access) {
  auto a = allocate(1, 3);
  BOOST_REQUIRE(a);
  auto& h = a->handle;
  auto admitted = last_access(*this, h);
  BOOST_TEST(admitted > 0u);
  // Reading does not count as access.
  tick();
  BOOST_REQUIRE(handle_table(h));
  BOOST_TEST(last_access(*this, h) == admitted);
  // Through the manager (straight to the pool).
  BOOST_REQUIRE(extend(1, 1));
  auto by_manager = last_access(*this, h);
  BOOST_TEST(by_manager > admitted);
  tick();
  BOOST_REQUIRE(append(1, make_tokens(2, 7)));
  auto by_append = last_access(*this, h);
  BOOST_TEST(by_append > by_manager);
  // Through the handle.
  tick();
  BOOST_REQUIRE(handle_extend(h, 1));
  auto by_handle = last_access(*this, h);
  BOOST_TEST(by_handle > by_append);
  // Through a step: in place (7 -> 8 tokens, no block taken) and into a new
  // block (8 -> 20).
  tick();
  step_request in_place;
  in_place.extends.push_back(extend_op{1, 1});
  auto r = step(in_place);
  BOOST_REQUIRE(r);
  BOOST_TEST(r->failed.empty());
  auto by_step = last_access(*this, h);
  BOOST_TEST(by_step > by_handle);
  tick();
  step_request grows;
  grows.extends.push_back(extend_op{1, 12});
  r = step(grows);
  BOOST_REQUIRE(r);
  BOOST_REQUIRE(r->changed.size() == 1u);
  BOOST_TEST(last_access(*this, h) > by_step);
  // A failed extend changes nothing, its stamp included.
  auto before = last_access(*this, h);
  tick();
  BOOST_TEST(outcome(extend(1, 1000)) == "exceeds_max_sequence_length");
  BOOST_TEST(last_access(*this, h) == before);
  auto s = handle_stats(h);
  BOOST_REQUIRE(s);
  BOOST_TEST(s->tokens_stored == 20u);
  BOOST_TEST(s->blocks_allocated == 5u);
  BOOST_TEST(s->memory_bytes == 5 * bytes_per_block);
}

BOOST_AUTO_TEST_CASE(the_managers_grow_message_names_one_incarnation) {
  auto a = allocate(1, 3);
  BOOST_REQUIRE(a);
  auto info = handle_info(a->handle);
  BOOST_REQUIRE(info);
  auto old_cache_id = info->cache_id;
  BOOST_REQUIRE(free(1));
  auto b = allocate(1, 3);
  BOOST_REQUIRE(b);
  // What the manager sends when its registry still names the ended
  // incarnation: refused, the new one untouched.
  auto t = ask<block_table>(pool, extend_atom::value, request_id{1},
                            old_cache_id, std::uint64_t{5});
  BOOST_TEST(outcome(t) == "unknown_request");
  auto tokens = make_tokens(2, 1);
  t = ask<block_table>(pool, append_atom::value, request_id{1}, old_cache_id,
                       tokens);
  BOOST_TEST(outcome(t) == "unknown_request");
  BOOST_TEST(value_or(table(1), block_table{}) == b->table);
  // The live incarnation grows.
  auto now = handle_info(b->handle);
  BOOST_REQUIRE(now);
  t = ask<block_table>(pool, extend_atom::value, request_id{1}, now->cache_id,
                       std::uint64_t{5});
  BOOST_REQUIRE(t);
  BOOST_TEST(t->num_tokens == 8u);
  // Token ids must match the count, and be token ids.
  t = ask<block_table>(pool, append_atom::value, request_id{1}, now->cache_id,
                       std::vector<token_id>{1, -3});
  BOOST_TEST(outcome(t) == "invalid_request");
  BOOST_TEST(value_or(table(1), block_table{}).num_tokens == 8u);
  // The stats message names its incarnation too.
  auto s = ask<cache_handle_stats>(pool, stats_atom::value, request_id{1},
                                   old_cache_id);
  BOOST_TEST(outcome(s) == "invalid_handle");
  // It says which incarnation ended and which is live: the request is.
  BOOST_REQUIRE(!s);
  auto live = std::to_string(now->cache_id);
  BOOST_TEST(render(s.error()).find("request 1's incarnation "
                                    + std::to_string(old_cache_id)
                                    + " has ended (incarnation " + live
                                    + " is live)")
               != std::string::npos,
             render(s.error()));
  // A newer one than the live one was never given: bad input.
  s = ask<cache_handle_stats>(pool, stats_atom::value, request_id{1},
                              now->cache_id + 7);
  BOOST_TEST(outcome(s) == "invalid_request");
  BOOST_REQUIRE(!s);
  BOOST_TEST(render(s.error()).find("has no incarnation") != std::string::npos,
             render(s.error()));
  // The manager's handle form says the same, in its own words: its
  // registry may lag the pool's steps, so not "no incarnation".
  auto f = ask<std::uint32_t>(mgr, free_atom::value, request_id{1},
                              now->cache_id + 7);
  BOOST_TEST(outcome(f) == "invalid_handle");
  BOOST_REQUIRE(!f);
  BOOST_TEST(render(f.error()).find("incarnation " + std::to_string(now->cache_id + 7)
                                    + " is not live (incarnation " + live
                                    + " is live)")
               != std::string::npos,
             render(f.error()));
  // What the manager's extend and append by id send: current_incarnation,
  // whichever is live - here the new one; an id not live is refused.
  t = ask<block_table>(pool, extend_atom::value, request_id{1},
                       current_incarnation, std::uint64_t{1});
  BOOST_REQUIRE(t);
  BOOST_TEST(t->num_tokens == 9u);
  t = ask<block_table>(pool, append_atom::value, request_id{1},
                       current_incarnation, make_tokens(2, 1));
  BOOST_REQUIRE(t);
  BOOST_TEST(t->num_tokens == 11u);
  t = ask<block_table>(pool, extend_atom::value, request_id{99},
                       current_incarnation, std::uint64_t{1});
  BOOST_TEST(outcome(t) == "unknown_request");
  // A handle's form always names its own incarnation: 0 names none, and
  // is refused as such (not as an ended request: it is live).
  auto e = ask<extension>(pool, extend_atom::value, request_id{1},
                          current_incarnation, std::uint64_t{1},
                          std::vector<token_id>{});
  BOOST_TEST(outcome(e) == "invalid_request");
  BOOST_REQUIRE(!e);
  BOOST_TEST(render(e.error()).find("not current_incarnation") != std::string::npos);
  BOOST_TEST(value_or(table(1), block_table{}).num_tokens == 11u);
}

BOOST_AUTO_TEST_SUITE_END()
