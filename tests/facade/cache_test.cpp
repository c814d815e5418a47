// The facade's cache-level operations on the threaded scheduler: gc,
// pressure callbacks, fork with copy-on-write (bytes included), preempt, the
// batched step, and actor() reaching the same cache (swapping:
// swap_test.cpp).
#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <caf/scoped_actor.hpp>

#include "block_bytes.hpp"
#include "fixture.hpp"

using namespace kvtest;

namespace {

/// Thread-safe record of pressure callbacks.
struct pressure_log {
  std::mutex mtx;
  std::vector<memory_pressure> levels;

  std::function<void(memory_pressure)> callback() {
    return [this](memory_pressure lvl) {
      std::lock_guard<std::mutex> guard{mtx};
      levels.push_back(lvl);
    };
  }
  std::vector<memory_pressure> get() {
    std::lock_guard<std::mutex> guard{mtx};
    return levels;
  }
  std::size_t size() {
    return get().size();
  }
};

} // namespace

BOOST_FIXTURE_TEST_SUITE(facade_cache, watchdog)

BOOST_AUTO_TEST_CASE(gc_on_an_idle_cache_reclaims_nothing_and_checks_the_invariant) {
  cache_fixture f;
  auto h = f.alloc(f.req(1, 9));
  auto g = f.m().gc();
  BOOST_REQUIRE_MESSAGE(g, why(g));
  BOOST_TEST(g->caches_freed == 0u);
  BOOST_TEST(g->blocks_reclaimed == 0u);
  BOOST_TEST(g->memory_freed == 0u);
  BOOST_TEST(g->gc_time_ms >= 0.0);
  BOOST_TEST(h->is_valid());
  BOOST_TEST(f.used_blocks() == 3u);
}

BOOST_AUTO_TEST_CASE(gc_under_high_pressure_evicts_cached_blocks_and_says_so) {
  // 64 blocks: medium at 39 used, high at 52 (left below 48), critical at 61.
  cache_fixture f;
  auto bulk = f.alloc(f.req(1, 50 * 4));
  // A 37-token prompt: 10 blocks, 9 of them full and hashed. 60 used: high.
  auto p = f.alloc(f.req(2, 0, 256, iota_tokens(10, 37)));
  BOOST_TEST(f.used_blocks() == 60u);
  BOOST_TEST(eventually([&] {
    return f.m().stats().pressure == memory_pressure::high;
  }));
  // Its end leaves 9 cached blocks at 50 used: still high.
  BOOST_REQUIRE(!f.m().deallocate(2));
  auto s = f.m().stats();
  BOOST_TEST(s.cached_blocks == 9u);
  BOOST_TEST(s.free_blocks == 14u);
  // GC evicts the cached blocks toward the medium mark (38 held).
  auto g = f.m().gc();
  BOOST_REQUIRE_MESSAGE(g, why(g));
  BOOST_TEST(g->caches_freed == 0u);
  BOOST_TEST(g->blocks_reclaimed == 9u);
  BOOST_TEST(g->memory_freed == 9u * test_bytes_per_block);
  auto after = f.m().stats();
  BOOST_TEST(after.cached_blocks == 0u);
  BOOST_TEST(after.eviction_count == 9u);
  BOOST_TEST(after.free_blocks == 14u);
  BOOST_TEST(bulk->is_valid());
  // Evicted means not findable: the same prompt now hits nothing.
  auto again = f.alloc(f.req(3, 0, 256, iota_tokens(10, 5)));
  BOOST_TEST(f.m().stats().prefix_hit_tokens == 0u);
  BOOST_TEST(static_cast<bool>(f.m().gc()));
}

BOOST_AUTO_TEST_CASE(a_pressure_callback_may_replace_itself) {
  cache_fixture f;
  pressure_log log;
  auto first_calls = std::make_shared<std::atomic<int>>(0);
  auto& m = f.m();
  m.set_pressure_callback([&m, &log, first_calls](memory_pressure lvl) {
    ++*first_calls;
    m.set_pressure_callback(log.callback()); // from inside: no deadlock
    log.callback()(lvl);
  });
  for (request_id id = 1; id <= 52; ++id) // medium, then high
    f.alloc(f.req(id, 4));
  BOOST_TEST(eventually([&] { return log.size() >= 2; }));
  BOOST_TEST(first_calls->load() == 1);
  BOOST_TEST((log.get() == std::vector<memory_pressure>{memory_pressure::medium,
                                                        memory_pressure::high}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_throwing_pressure_callback_stops_no_later_level) {
  // The exception once left the relay's handler: CAF stopped the relay,
  // and no callback, however often replaced, heard of pressure again.
  cache_fixture f;
  pressure_log log;
  auto& m = f.m();
  auto thrown = std::make_shared<std::atomic<int>>(0);
  m.set_pressure_callback([&log, thrown](memory_pressure lvl) {
    log.callback()(lvl);
    ++*thrown;
    throw std::runtime_error("a throwing pressure callback");
  });
  for (request_id id = 1; id <= 52; ++id) // medium, then high: both heard
    f.alloc(f.req(id, 4));
  BOOST_TEST(eventually([&] { return log.size() >= 2; }));
  BOOST_TEST(thrown->load() == 2);
  pressure_log second;
  m.set_pressure_callback(second.callback());
  for (request_id id = 53; id <= 61; ++id) // critical
    f.alloc(f.req(id, 4));
  BOOST_TEST(eventually([&] { return second.size() >= 1; }));
  BOOST_TEST(second.get().front() == memory_pressure::critical);
}

BOOST_AUTO_TEST_CASE(pressure_callback_gets_each_level_once_in_order) {
  cache_fixture f;
  pressure_log log;
  f.m().set_pressure_callback(log.callback());
  // One block per request, up to 61 of 64: medium (39), high (52),
  // critical (61).
  for (request_id id = 1; id <= 61; ++id)
    f.alloc(f.req(id, 4));
  BOOST_TEST(eventually([&] { return log.size() >= 3; }));
  std::vector<memory_pressure> rising{memory_pressure::medium,
                                      memory_pressure::high,
                                      memory_pressure::critical};
  auto seen = log.get();
  seen.resize(std::min<std::size_t>(seen.size(), 3));
  BOOST_TEST(seen == rising, boost::test_tools::per_element());
  // Falling with hysteresis: below 58 high, below 48 medium, below 36 low.
  // (At critical the cache may preempt requests itself: free what is left.)
  auto live = f.m().list_handles();
  for (auto i = live.rbegin(); i != live.rend(); ++i) {
    auto err = f.m().deallocate(i->first);
    BOOST_TEST((!err || has_code(err, errc::unknown_request)), render(err));
  }
  BOOST_TEST(eventually([&] { return log.size() >= 6; }));
  std::this_thread::sleep_for(std::chrono::milliseconds{50});
  std::vector<memory_pressure> all{
    memory_pressure::medium, memory_pressure::high, memory_pressure::critical,
    memory_pressure::high,   memory_pressure::medium, memory_pressure::low};
  BOOST_TEST(log.get() == all, boost::test_tools::per_element());
  BOOST_TEST(eventually([&] {
    return f.m().stats().pressure == memory_pressure::low;
  }));
  // A new callback replaces the old one.
  pressure_log second;
  f.m().set_pressure_callback(second.callback());
  for (request_id id = 100; id < 140; ++id)
    f.alloc(f.req(id, 4));
  BOOST_TEST(eventually([&] { return second.size() >= 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds{50});
  BOOST_TEST(second.get() == std::vector<memory_pressure>{memory_pressure::medium},
             boost::test_tools::per_element());
  BOOST_TEST(log.size() == 6u);
}

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
  auto s = f.m().stats();
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
  BOOST_TEST(f.m().stats().active_caches == 2u);
  BOOST_TEST(b->table().num_tokens == 5u);
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
  auto s = f.m().stats();
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
  BOOST_TEST(f.m().stats().preemption_count == 1u);
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

BOOST_AUTO_TEST_CASE(config_and_timeout_are_as_started) {
  cache_fixture f;
  auto& c = f.m().config();
  BOOST_TEST(c.num_gpu_blocks == 64u);
  BOOST_TEST(c.block_size == test_block_size);
  BOOST_TEST(c.storage == "host");
  BOOST_TEST(c.model.head_dim == 8u);
  f.m().set_timeout(std::chrono::seconds{5});
  auto h = f.alloc(f.req(1, 4));
  BOOST_TEST(h->num_tokens() == 4u);
}

#ifdef __linux__
namespace {

/// The nice value of each thread of this process named `name`.
std::vector<std::string> nice_values_of(const std::string& name) {
  std::vector<std::string> out;
  for (auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm{task.path() / "comm"};
    std::string comm_name;
    std::getline(comm, comm_name);
    if (comm_name != name)
      continue;
    std::ifstream stat{task.path() / "stat"};
    std::string line;
    std::getline(stat, line);
    // Field 19 is the nice value; the name field (2) ends at the last ')'.
    std::istringstream rest{line.substr(line.rfind(')') + 2)};
    std::string field;
    for (int k = 3; k <= 19; ++k)
      rest >> field;
    out.push_back(field);
  }
  return out;
}

} // namespace

BOOST_AUTO_TEST_CASE(configure_runs_cafs_clock_thread_at_the_lowest_priority) {
  // Every actor exit wakes CAF's clock thread; at normal priority it
  // preempts the worker or the waiting caller (see tune_for_latency). The
  // thread names itself once running: look until it has.
  cache_fixture f;
  std::vector<std::string> nice;
  for (int tries = 0; tries < 500; ++tries) {
    nice = nice_values_of("caf.clock");
    if (!nice.empty() && nice.front() == "19")
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds{10});
  }
  BOOST_REQUIRE(!nice.empty());
  for (auto& n : nice)
    BOOST_TEST(n == "19");
}
#endif

BOOST_AUTO_TEST_CASE(storage_says_where_the_blocks_live) {
  cache_fixture f;
  auto s = f.m().storage();
  BOOST_TEST(s.kind == "host");
  BOOST_TEST((s.device == kvactor::device{}));
  BOOST_TEST(s.num_blocks == 64u);
  BOOST_TEST(s.num_host_blocks == 0u);
  // 2 layers x (K, V) x 4 tokens x 2 heads x 8 dims x 4 bytes.
  BOOST_TEST(s.bytes_per_block == 2u * 2u * test_block_size * 2u * 8u * 4u);
}

BOOST_AUTO_TEST_CASE(storage_auto_is_reported_as_what_it_picked) {
  auto cfg = small_config(64, "auto");
  cache_fixture f{cfg};
  auto s = f.m().storage();
  BOOST_TEST((s.kind == "host" || s.kind == "cuda"), "picked " << s.kind);
  BOOST_TEST(f.m().config().storage == s.kind);
  // A request naming the device the cache reports is accepted.
  auto req = f.req(1, 4);
  req.device = s.device;
  BOOST_TEST(static_cast<bool>(f.m().allocate(req)));
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
  BOOST_TEST(eventually([&] { return f.m().stats().active_caches == 1u; }));
  BOOST_TEST(eventually([&] { return !g->is_valid(); }));
  BOOST_TEST(!f.m().get_handle(2));
  BOOST_TEST(f.used_blocks() == 2u);
  BOOST_TEST(h->is_valid());
}

BOOST_AUTO_TEST_SUITE_END()
