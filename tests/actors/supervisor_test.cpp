// The supervisor: pressure levels with hysteresis and their broadcast,
// eviction at high pressure, GC on the timer and on demand; the pool actor's
// own messages (reclaim of dead handles and owners:
// supervisor_reclaim_test.cpp; shutdown: shutdown_test.cpp).
#include "fixture.hpp"

#include <caf/all.hpp>

using namespace kvactor;
using namespace kvactor::test;

namespace {

using lvl = memory_pressure;

struct level_change {
  lvl level;
  lvl previous;
  std::uint64_t used;
};

bool operator==(const level_change& x, const level_change& y) {
  return x.level == y.level && x.previous == y.previous && x.used == y.used;
}

std::ostream& operator<<(std::ostream& os, const level_change& x) {
  return os << to_string(x.previous) << "->" << to_string(x.level) << "@"
            << x.used;
}

std::vector<level_change> changes(const std::vector<pressure_event>& evs) {
  std::vector<level_change> out;
  for (auto& ev : evs)
    out.push_back(level_change{ev.level, ev.previous, ev.used_blocks});
  return out;
}

} // namespace

BOOST_TEST_DONT_PRINT_LOG_VALUE(level_change)

BOOST_FIXTURE_TEST_SUITE(supervisor, cache_fixture)

// -- pressure -------------------------------------------------------------------------

// 64 blocks, marks 0.6 / 0.8 / 0.95 with hysteresis 0.05: medium is entered
// at 39 blocks in use and left below 36, high at 52 / below 48, critical at
// 61 / below 58.
BOOST_AUTO_TEST_CASE(pressure_levels_rise_and_fall_with_hysteresis) {
  caf::scoped_actor sub{sys};
  subscribe(topic::pressure, sub);
  std::vector<level_change> seen;
  auto collect = [&] {
    for (auto& c : changes(pressure_events(sub)))
      seen.push_back(c);
  };
  for (request_id id = 1; id <= 64; ++id) {
    BOOST_REQUIRE(allocate(id, 4)); // one block each
    collect();
  }
  std::vector<level_change> up{{lvl::medium, lvl::low, 39},
                               {lvl::high, lvl::medium, 52},
                               {lvl::critical, lvl::high, 61}};
  BOOST_TEST(seen == up, boost::test_tools::per_element());
  auto s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->pressure == lvl::critical);
  seen.clear();
  for (request_id id = 64; id >= 1; --id) {
    BOOST_REQUIRE(free(id));
    collect();
  }
  std::vector<level_change> down{{lvl::high, lvl::critical, 57},
                                 {lvl::medium, lvl::high, 47},
                                 {lvl::low, lvl::medium, 35}};
  BOOST_TEST(seen == down, boost::test_tools::per_element());
  s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->pressure == lvl::low);
  BOOST_TEST(value_or(ask<memory_pressure>(sup, pressure_atom::value), lvl::critical)
             == lvl::low);
}

BOOST_AUTO_TEST_CASE(a_pressure_subscriber_joining_above_low_hears_the_level_first) {
  caf::scoped_actor early{sys};
  subscribe(topic::pressure, early);
  for (request_id id = 1; id <= 52; ++id) // high
    BOOST_REQUIRE(allocate(id, 4));
  BOOST_TEST(changes(pressure_events(early)).size() == 2u);
  // Through the manager, the supervisor's reply (which carries the level)
  // goes to the manager: the subscriber hears the level as an event.
  caf::scoped_actor late{sys};
  subscribe(topic::pressure, late);
  std::vector<level_change> first{{lvl::high, lvl::high, 52}};
  BOOST_TEST(changes(pressure_events(late)) == first, boost::test_tools::per_element());
  BOOST_TEST(pressure_events(early).empty()); // no change: no event
  // Subscribed again: nothing new. Then each change, in order.
  subscribe(topic::pressure, late);
  BOOST_TEST(pressure_events(late).empty());
  for (request_id id = 53; id <= 61; ++id)
    BOOST_REQUIRE(allocate(id, 4));
  std::vector<level_change> up{{lvl::critical, lvl::high, 61}};
  BOOST_TEST(changes(pressure_events(late)) == up, boost::test_tools::per_element());
  // At low, a new subscriber hears nothing until a change.
  for (request_id id = 61; id >= 1; --id)
    BOOST_REQUIRE(free(id));
  caf::scoped_actor calm{sys};
  subscribe(topic::pressure, calm);
  BOOST_TEST(pressure_events(calm).empty());
}

BOOST_AUTO_TEST_CASE(pressure_hovering_at_a_threshold_does_not_flap) {
  caf::scoped_actor sub{sys};
  subscribe(topic::pressure, sub);
  request_id next = 1;
  for (; next <= 39; ++next)
    BOOST_REQUIRE(allocate(next, 4));
  auto evs = changes(pressure_events(sub));
  BOOST_REQUIRE(evs.size() == 1u);
  BOOST_TEST(evs[0].level == lvl::medium);
  // Down to 36 and back up to 39, three times: no change of level.
  for (int round = 0; round < 3; ++round) {
    for (request_id id = next - 1; id >= next - 3; --id)
      BOOST_REQUIRE(free(id));
    for (request_id id = next - 3; id < next; ++id)
      BOOST_REQUIRE(allocate(id, 4));
  }
  BOOST_TEST(pressure_events(sub).empty());
  // Up to 52 (high), then between 48 and 52 a few times: still high.
  for (; next <= 52; ++next)
    BOOST_REQUIRE(allocate(next, 4));
  evs = changes(pressure_events(sub));
  BOOST_REQUIRE(evs.size() == 1u);
  BOOST_TEST(evs[0].level == lvl::high);
  for (int round = 0; round < 3; ++round) {
    for (request_id id = next - 1; id >= next - 4; --id)
      BOOST_REQUIRE(free(id));
    for (request_id id = next - 4; id < next; ++id)
      BOOST_REQUIRE(allocate(id, 4));
  }
  BOOST_TEST(pressure_events(sub).empty());
  // One more block down past the mark: 47 is medium.
  for (request_id id = next - 1; id >= next - 5; --id)
    BOOST_REQUIRE(free(id));
  evs = changes(pressure_events(sub));
  BOOST_REQUIRE(evs.size() == 1u);
  BOOST_TEST((evs[0] == level_change{lvl::medium, lvl::high, 47}));
}

BOOST_AUTO_TEST_CASE(pressure_jumps_are_one_event_and_every_subscriber_gets_it) {
  caf::scoped_actor a{sys};
  caf::scoped_actor b{sys};
  subscribe(topic::pressure, a);
  subscribe(topic::pressure, b);
  // Directly at the supervisor, too: it answers with the current level.
  caf::scoped_actor c{sys};
  auto now = ask<memory_pressure>(sup, subscribe_atom::value,
                                  caf::actor_cast<caf::actor>(c));
  BOOST_TEST(value_or(now, lvl::critical) == lvl::low);
  BOOST_REQUIRE(allocate(1, 4 * 62)); // 62 blocks at once
  std::vector<level_change> want{{lvl::critical, lvl::low, 62}};
  auto evs = pressure_events(a);
  BOOST_REQUIRE(evs.size() == 1u);
  BOOST_TEST(evs[0].total_blocks == 64u);
  BOOST_TEST(changes(evs) == want, boost::test_tools::per_element());
  BOOST_TEST(changes(pressure_events(b)) == want, boost::test_tools::per_element());
  BOOST_TEST(changes(pressure_events(c)) == want, boost::test_tools::per_element());
  unsubscribe(topic::pressure, b);
  self->send(sup, unsubscribe_atom::value, caf::actor_cast<caf::actor>(c));
  BOOST_REQUIRE(free(1));
  BOOST_TEST(pressure_events(a).size() == 1u);
  BOOST_TEST(pressure_events(b).empty());
  BOOST_TEST(pressure_events(c).empty());
}

BOOST_AUTO_TEST_CASE(high_pressure_evicts_cached_blocks_toward_the_medium_mark) {
  // Eight cached single-block prefixes.
  for (request_id id = 1; id <= 8; ++id) {
    BOOST_REQUIRE(allocate(make_prompt_request(cfg, id, make_tokens(4, id))));
    BOOST_REQUIRE(free(id));
  }
  auto s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->cached_blocks == 8u);
  // 51 blocks in use (medium): the cached blocks stay.
  BOOST_REQUIRE(allocate(100, 4 * 51));
  s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->cached_blocks == 8u);
  BOOST_TEST(s->eviction_count == 0u);
  // 52 (high): used + cached is above the medium mark (39) by more than the
  // cached blocks, so all of them go.
  BOOST_REQUIRE(allocate(101, 4));
  s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->pressure == lvl::high);
  BOOST_TEST(s->cached_blocks == 0u);
  BOOST_TEST(s->eviction_count == 8u);
  BOOST_TEST(s->free_blocks == 12u);
  // The evicted prefixes are not found any more.
  auto again = allocate(make_prompt_request(cfg, 1, make_tokens(5, 1)));
  BOOST_REQUIRE(again);
  BOOST_TEST(must(stats()).prefix_hit_tokens == 0u);
}

BOOST_FIXTURE_TEST_CASE(without_eager_eviction_high_pressure_keeps_cached_blocks,
                        lazy_fixture) {
  for (request_id id = 1; id <= 8; ++id) {
    BOOST_REQUIRE(allocate(make_prompt_request(cfg, id, make_tokens(4, id))));
    BOOST_REQUIRE(free(id));
  }
  BOOST_REQUIRE(allocate(100, 4 * 53));
  auto g = gc();
  BOOST_REQUIRE(g);
  BOOST_TEST(g->blocks_reclaimed == 0u);
  auto s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->pressure == lvl::high);
  BOOST_TEST(s->cached_blocks == 8u);
  // Allocation takes them only when the free ones ran out: 3 free + 2.
  BOOST_REQUIRE(allocate(101, 4 * 5));
  s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->cached_blocks == 6u);
  BOOST_TEST(s->eviction_count == 2u);
}

BOOST_AUTO_TEST_CASE(gc_under_high_pressure_evicts_blocks_cached_since_the_last_mark) {
  BOOST_REQUIRE(allocate(1, 4 * 52)); // high
  BOOST_REQUIRE(allocate(make_prompt_request(cfg, 2, make_tokens(12, 2))));
  BOOST_REQUIRE(free(2)); // back to 52: three cached blocks, no mark crossed
  auto s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->pressure == lvl::high);
  BOOST_TEST(s->cached_blocks == 3u);
  auto g = gc();
  BOOST_REQUIRE(g);
  BOOST_TEST(g->blocks_reclaimed == 3u);
  BOOST_TEST(g->memory_freed == 3 * bytes_per_block);
  BOOST_TEST(g->caches_freed == 0u);
  s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->cached_blocks == 0u);
  BOOST_TEST(s->eviction_count == 3u);
}

// -- GC -------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(gc_counts_an_orphans_blocks_once_under_high_pressure) {
  // An orphan's full prompt blocks go to the cache when the sweep takes
  // them back; at high pressure the same pass evicts cached blocks. Each
  // block counts once: 3 reclaimed, not 3 returned + 3 evicted.
  BOOST_REQUIRE(allocate(1, 4 * 52)); // high
  auto o = orphan(make_prompt_request(cfg, 7, make_tokens(12, 7)));
  BOOST_REQUIRE(o);
  auto before = stats();
  BOOST_REQUIRE(before);
  BOOST_TEST(before->pressure == lvl::high);
  auto g = gc();
  BOOST_REQUIRE(g);
  BOOST_TEST(g->caches_freed == 1u);
  BOOST_TEST(g->blocks_reclaimed == 3u);
  BOOST_TEST(g->memory_freed == 3 * bytes_per_block);
  auto after = stats();
  BOOST_REQUIRE(after);
  BOOST_TEST(after->active_caches == 1u);
  BOOST_TEST(after->free_blocks == before->free_blocks + 3);
  // The next pass evicts them (still high, cached before it): counted then.
  g = gc();
  BOOST_REQUIRE(g);
  auto evicted = after->cached_blocks;
  BOOST_TEST(g->caches_freed == 0u);
  BOOST_TEST(g->blocks_reclaimed == evicted);
  auto last = stats();
  BOOST_REQUIRE(last);
  BOOST_TEST(last->eviction_count == after->eviction_count + evicted);
}

BOOST_AUTO_TEST_CASE(no_one_can_unsubscribe_the_manager_from_pressure) {
  // The manager refuses to drop its own subscription; the supervisor, whose
  // address any gc reply gives away, must refuse too - or the manager's
  // stats would keep the level of that moment for good.
  caf::scoped_actor client{sys};
  client->send(mgr, gc_atom::value);
  run();
  caf::actor answered_by;
  client->receive(
    [&](const cache_gc_stats&) {
      answered_by = caf::actor_cast<caf::actor>(client->current_sender());
    },
    [&](caf::error&) {});
  BOOST_REQUIRE(answered_by);
  BOOST_REQUIRE(answered_by.address() == sup.address());
  client->send(answered_by, unsubscribe_atom::value,
               caf::actor_cast<caf::actor>(mgr));
  run();
  BOOST_REQUIRE(allocate(1, 4 * 52)); // high
  auto s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->pressure == lvl::high);
}

BOOST_AUTO_TEST_CASE(gc_on_demand_reclaims_orphans_with_real_figures) {
  BOOST_REQUIRE(allocate(1, 4));
  auto g = gc();
  BOOST_REQUIRE(g);
  BOOST_TEST(g->caches_freed == 0u);
  BOOST_TEST(g->blocks_reclaimed == 0u);
  BOOST_TEST(g->memory_freed == 0u);
  BOOST_TEST(g->gc_time_ms > 0.0); // timed: it ran
  // Orphans: the pool holds them, the manager never heard of them.
  auto o1 = orphan(make_request(cfg, 7, 10));
  auto o2 = orphan(make_request(cfg, 8, 1));
  BOOST_REQUIRE(o1 && o2);
  BOOST_TEST(o1->table.num_blocks() == 3u);
  auto s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->active_caches == 3u);
  BOOST_TEST(value_or(list(), std::vector<handle_entry>{}).size() == 1u);
  g = gc();
  BOOST_REQUIRE(g);
  BOOST_TEST(g->caches_freed == 2u);
  BOOST_TEST(g->blocks_reclaimed == 4u);
  BOOST_TEST(g->memory_freed == 4 * bytes_per_block);
  s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->active_caches == 1u);
  BOOST_TEST(s->free_blocks == 63u);
  BOOST_TEST(outcome(lookup(1)) == "ok");
  // Nothing left to do.
  g = gc();
  BOOST_REQUIRE(g);
  BOOST_TEST(g->caches_freed == 0u);
  BOOST_TEST(g->blocks_reclaimed == 0u);
}

BOOST_FIXTURE_TEST_CASE(gc_on_the_timer_reclaims_orphans, timer_fixture) {
  BOOST_REQUIRE(allocate(1, 4));
  for (request_id id : {7, 8}) {
    auto o = orphan(make_request(cfg, id, 10));
    BOOST_REQUIRE(o);
    BOOST_TEST(used_blocks() == 4u);
    // Each tick runs one GC pass and arms the next.
    BOOST_TEST(sched.trigger_timeouts() >= 1u);
    run();
    auto s = stats();
    BOOST_REQUIRE(s);
    BOOST_TEST(s->active_caches == 1u);
    BOOST_TEST(s->free_blocks == 63u);
  }
  BOOST_TEST(outcome(lookup(1)) == "ok");
}

// -- the pool's own messages ------------------------------------------------------------

BOOST_AUTO_TEST_CASE(the_pool_actor_answers_its_own_messages) {
  auto a = allocate(1, 9);
  BOOST_REQUIRE(a);
  BOOST_TEST(value_or(ask<bool>(pool, check_atom::value), false));
  BOOST_TEST(value_or(ask<block_table>(pool, table_atom::value, request_id{1}),
                      block_table{})
             == a->table);
  BOOST_TEST(outcome(ask<block_table>(pool, table_atom::value, request_id{2}))
             == "unknown_request");
  using live_list = std::vector<std::pair<request_id, std::uint64_t>>;
  auto live = ask<live_list>(pool, list_atom::value);
  BOOST_REQUIRE(live);
  BOOST_REQUIRE(live->size() == 1u);
  auto cache_id = (*live)[0].second;
  BOOST_TEST(cache_id == value_or(lookup(1), std::make_pair(request_handle_actor{}, request_info{})).second.cache_id);
  auto ps = ask<pool_stats>(pool, stats_atom::value);
  BOOST_REQUIRE(ps);
  BOOST_TEST(ps->used_blocks == 3u);
  BOOST_TEST(ps->total_blocks == 64u);
  BOOST_TEST(ps->active_requests == 1u);
  BOOST_TEST(value_or(ask<bool>(pool, can_alloc_atom::value, make_request(cfg, 2, 244)), false));
  BOOST_TEST(!value_or(ask<bool>(pool, can_alloc_atom::value, make_request(cfg, 2, 245)), true));
  // Ending a request is the manager's to ask (step_lane_test covers a
  // reclaim naming an old incarnation).
  auto r = ask_from<bool, std::uint32_t>(self, pool, reclaim_atom::value,
                                         request_id{1}, cache_id);
  BOOST_TEST(outcome(r) == "invalid_request");
  BOOST_TEST(ps->used_blocks == value_or(ask<pool_stats>(pool, stats_atom::value),
                                         pool_stats{}).used_blocks);
  // evict: nothing cached yet, then two cached blocks.
  BOOST_TEST(value_or(ask<std::uint32_t>(pool, evict_atom::value, std::uint32_t{5}), 9u) == 0u);
  BOOST_REQUIRE(allocate(make_prompt_request(cfg, 3, make_tokens(8, 3))));
  BOOST_REQUIRE(free(3));
  BOOST_TEST(value_or(ask<std::uint32_t>(pool, evict_atom::value, std::uint32_t{5}), 9u) == 2u);
  auto s = stats();
  BOOST_REQUIRE(s);
  BOOST_TEST(s->cached_blocks == 0u);
  BOOST_TEST(s->eviction_count == 2u);
  // The pool's extend checks its token ids against the count.
  BOOST_TEST(outcome(ask<extension>(pool, extend_atom::value, request_id{1},
                                    cache_id, std::uint64_t{2},
                                    std::vector<token_id>{1}))
             == "invalid_request");
  BOOST_TEST(value_or(table(1), block_table{}) == a->table);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(supervisor_timer)

BOOST_AUTO_TEST_CASE(a_tick_while_a_timer_gc_pass_waits_starts_no_second_pass) {
  // A pool held up (by a slow device copy, say) kept one GC pass waiting
  // per interval, each to run a full stats-evict-sweep-check back to back
  // once the pool was free. The timer keeps ticking; a pass waiting makes
  // the next tick start none.
  cache_fixture f{timer_config()};
  // The messages waiting at the pool, each run on its own (its replies
  // wait at their receivers; CAF's mailbox has no size to read from here).
  auto pool_messages = [&] {
    std::size_t n = 0;
    while (f.sched.prioritize(f.pool)) {
      f.sched.run_once();
      ++n;
    }
    return n;
  };
  f.run();
  auto held = f.pool.address();
  f.sched.trigger_timeouts(); // tick 1: its pass asks the pool (held)
  f.run_except(held);
  f.sched.trigger_timeouts(); // tick 2, the pass still waiting: none
  f.run_except(held);
  BOOST_TEST(pool_messages() == 1u); // tick 1's stats request alone
  f.run(); // the pass ends
  f.sched.trigger_timeouts(); // tick 3: a pass again
  f.run_except(held);
  BOOST_TEST(pool_messages() == 1u);
  f.run();
}

BOOST_AUTO_TEST_SUITE_END()
