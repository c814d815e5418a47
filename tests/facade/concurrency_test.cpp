// Concurrency on the threaded scheduler: 32 event-based client actors
// hammering one manager with every kind of message, plain threads sharing
// one facade, and races on one request id. At the end every request is
// freed, all blocks are free (cached allowed) and GC's invariant check holds.
#include <algorithm>
#include <random>

#include <caf/event_based_actor.hpp>

#include "fixture.hpp"
#include "load_client.hpp"
#include "spawn_fn.hpp"

using namespace kvtest;

namespace {

struct long_watchdog : watchdog {
  long_watchdog() : watchdog(std::chrono::seconds{240}) {
  }
};

} // namespace

BOOST_FIXTURE_TEST_SUITE(facade_concurrency, long_watchdog)

BOOST_AUTO_TEST_CASE(thirty_two_client_actors_hammer_one_manager) {
  constexpr int num_clients = 32;
  constexpr int ops_per_client = 2500;
  cache_fixture f{small_config(1024)};
  auto rep = std::make_shared<report>();
  rep->running = num_clients;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < num_clients; ++i) {
    auto c = std::make_shared<client>();
    c->mgr = f.m().actor();
    c->cfg = f.cfg;
    c->rep = rep;
    c->rng.seed(static_cast<unsigned>(i + 1));
    c->next_id = static_cast<request_id>(i + 1) * 1000000;
    c->ops_left = ops_per_client;
    spawn_fn(*f.sys, [c](caf::event_based_actor* self) -> caf::behavior {
      c->self = self;
      // Keep c alive as long as the actor: its continuations capture `this`.
      self->attach_functor([c](const caf::error&) { c->self = nullptr; });
      c->next();
      return {
        // The cache preempted one of its requests (at critical pressure).
        [c](preempt_atom, const request_ended& ev) {
          ++c->rep->notices;
          c->drop(ev.id);
        },
      };
    });
  }
  BOOST_REQUIRE_MESSAGE(rep->wait_all(std::chrono::seconds{200}),
                        "clients did not finish");
  std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
  BOOST_TEST_MESSAGE(rep->ops.load()
                     << " ops (" << rep->refused.load()
                     << " refused as expected, " << rep->step_preempted.load()
                     << " preempted by steps, " << rep->lost.load()
                     << " lost to the cache's own preemptions, "
                     << rep->notices.load() << " preemption notices) in "
                     << dt.count() << " s");
  {
    std::lock_guard<std::mutex> guard{rep->mtx};
    for (auto& msg : rep->failures)
      BOOST_ERROR(msg);
  }
  BOOST_TEST(rep->ops.load() == std::uint64_t{num_clients} * ops_per_client);
  auto s = f.checked_stats();
  BOOST_TEST(s.active_caches == 0u);
  BOOST_TEST(s.free_blocks == s.total_blocks);
  BOOST_TEST(s.used_memory_bytes == 0u);
  BOOST_TEST(s.cached_blocks <= s.free_blocks);
  BOOST_TEST(s.allocation_count > 0u);
  BOOST_TEST(s.prefix_hit_tokens > 0u);
  BOOST_TEST(rep->lost.load() + rep->step_preempted.load()
             <= s.preemption_count);
  BOOST_TEST(f.m().list_handles().empty());
  auto g = f.m().gc();
  BOOST_REQUIRE_MESSAGE(g, why(g));
  BOOST_TEST(g->caches_freed == 0u);
}

BOOST_AUTO_TEST_CASE(plain_threads_share_one_facade) {
  constexpr int num_threads = 8;
  constexpr int ops_per_thread = 300;
  cache_fixture f{small_config(2048)}; // never critical: no preemptions
  auto& m = f.m();
  report rep;
  auto worker = [&](int t) {
    std::mt19937 rng(static_cast<unsigned>(100 + t));
    auto pick = [&](std::uint64_t lo, std::uint64_t hi) {
      return std::uniform_int_distribution<std::uint64_t>{lo, hi}(rng);
    };
    auto prompts = shared_prompts();
    request_id next = static_cast<request_id>(t + 1) * 1000000;
    std::vector<std::pair<std::shared_ptr<kv_cache_handle>, std::uint64_t>> mine;
    auto fail = [&](const std::string& what) {
      rep.fail("thread " + std::to_string(t) + ": " + what);
    };
    for (int i = 0; i < ops_per_thread; ++i) {
      ++rep.ops;
      auto r = pick(0, 99);
      if (mine.empty() || (r < 25 && mine.size() < 6)) {
        auto req = make_request(f.cfg, next++, pick(1, 20), 64);
        if (pick(0, 2) == 0) {
          req.prompt = prompts[pick(0, prompts.size() - 1)];
          req.initial_tokens = req.prompt.size();
        }
        auto h = m.allocate(req);
        if (!h) {
          if (has_code(h.error(), errc::out_of_blocks))
            ++rep.refused;
          else
            fail("allocate: " + render(h.error()));
          continue;
        }
        if ((*h)->num_tokens() != req.initial_tokens)
          fail("allocate: wrong token count");
        mine.emplace_back(*h, req.initial_tokens);
      } else if (r < 50) {
        auto& [h, n] = mine[pick(0, mine.size() - 1)];
        auto k = std::min<std::uint64_t>(pick(1, 6), 64 - n);
        caf::error err;
        if (pick(0, 1) == 0)
          err = m.extend(*h, k);
        else
          err = m.append(*h, iota_tokens(static_cast<token_id>(pick(0, 9)), k));
        if (err) {
          if (has_code(err, errc::out_of_blocks))
            ++rep.refused;
          else
            fail("extend: " + render(err));
          continue;
        }
        n += k;
        if (h->num_tokens() != n)
          fail("extend: handle reports " + std::to_string(h->num_tokens())
               + " tokens, expected " + std::to_string(n));
      } else if (r < 60 && mine.size() < 6) {
        auto parent = mine[pick(0, mine.size() - 1)];
        auto c = m.fork(parent.first->id(), next++);
        if (!c) {
          fail("fork: " + render(c.error()));
          continue;
        }
        if ((*c)->table().blocks != parent.first->table().blocks)
          fail("fork: child's blocks differ");
        mine.emplace_back(*c, parent.second);
      } else if (r < 80) {
        auto i = pick(0, mine.size() - 1);
        auto h = mine[i].first;
        auto clone = h->clone_handle();
        if (auto err = m.deallocate(h->id()))
          fail("deallocate: " + render(err));
        if (h->is_valid() || clone->is_valid())
          fail("deallocate: a reference stayed valid");
        mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(i));
      } else if (r < 88) {
        auto& [h, n] = mine[pick(0, mine.size() - 1)];
        auto g = m.get_handle(h->id());
        if (!g || g->cache_id() != h->cache_id() || g->num_tokens() != n)
          fail("get_handle: not the same request");
      } else if (r < 94) {
        step_request s;
        auto& [h, n] = mine[pick(0, mine.size() - 1)];
        if (n < 64)
          s.extends.push_back(extend_op{h->id(), 1});
        s.preempt_on_shortage = false;
        auto res = m.step(s);
        if (!res) {
          fail("step: " + render(res.error()));
          continue;
        }
        if (res->failed.empty() && n < 64)
          ++n;
        else
          for (auto& x : res->failed)
            if (!has_code(x.error, errc::out_of_blocks))
              fail("step: " + render(x.error));
      } else {
        auto s = m.stats();
        if (s.total_blocks != 2048 || s.free_blocks > s.total_blocks)
          fail("stats: inconsistent");
        m.can_allocate(make_request(f.cfg, next, 8, 64));
      }
    }
    for (auto& [h, n] : mine)
      if (auto err = m.deallocate(h->id()))
        fail("final deallocate: " + render(err));
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < num_threads; ++t)
    threads.emplace_back(worker, t);
  for (auto& th : threads)
    th.join();
  for (auto& msg : rep.failures)
    BOOST_ERROR(msg);
  BOOST_TEST_MESSAGE(rep.ops.load() << " facade calls, " << rep.refused.load()
                                    << " refused as expected");
  auto s = f.checked_stats();
  BOOST_TEST(s.active_caches == 0u);
  BOOST_TEST(s.free_blocks == s.total_blocks);
  BOOST_TEST(m.list_handles().empty());
  auto g = m.gc();
  BOOST_REQUIRE_MESSAGE(g, why(g));
  BOOST_TEST(g->caches_freed == 0u);
}

BOOST_AUTO_TEST_CASE(racing_on_one_id_has_exactly_one_winner) {
  cache_fixture f;
  auto& m = f.m();
  for (int round = 0; round < 20; ++round) {
    std::atomic<int> allocated{0}, duplicates{0}, freed{0}, unknown{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&] {
        auto h = m.allocate(f.req(5, 6));
        if (h)
          ++allocated;
        else if (has_code(h.error(), errc::duplicate_request))
          ++duplicates;
      });
    for (auto& th : threads)
      th.join();
    threads.clear();
    BOOST_TEST(allocated.load() == 1);
    BOOST_TEST(duplicates.load() == 3);
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&] {
        auto err = m.deallocate(5);
        if (!err)
          ++freed;
        else if (has_code(err, errc::unknown_request))
          ++unknown;
      });
    for (auto& th : threads)
      th.join();
    BOOST_TEST(freed.load() == 1);
    BOOST_TEST(unknown.load() == 3);
  }
  BOOST_TEST(f.used_blocks() == 0u);
  BOOST_TEST(static_cast<bool>(m.gc()));
}

BOOST_AUTO_TEST_SUITE_END()
