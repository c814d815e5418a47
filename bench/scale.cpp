// scale: cost per operation and memory per live request as the number of
// live requests (one handle actor each) grows 1,000 -> 10,000 -> 100,000 over
// a pool of 1,000,000 blocks. Operations go to the manager actor from a
// client actor with a window of requests in flight. Prints one JSON line per
// size; memory per live request is malloc's growth in bytes in use (and the
// RSS's, which misses memory reused from a smaller size). A handle actor
// starts (and takes its memory) after the allocate's reply, and ends after
// the free's: each phase waits for its handles - answered an info request,
// or gone - so that no phase's actor work spills into another's figures.
// allocate_max_us is the slowest allocate while growing to the size (a
// stall inside one allocate, such as a table's growth, shows there).
//
//   scale [--sizes 1000,10000,100000] [--blocks 1000000] [--ops 200000]
//         [--rounds 5] [--churn-percent 10] [--scheduler-threads T]
//
// The operations at each size run in `rounds` rounds timed apart; the
// figure is the median round's cost (each round's is printed too). An
// operation is a one-token extend of a random live request, or - for
// `churn-percent` of them - a churn: free one, allocate a new one (0 and
// 100 split the two costs).
#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <future>
#include <iostream>
#include <random>
#include <sstream>
#include <malloc.h>
#include <unistd.h>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <nlohmann/json.hpp>

#include "kvactor/actors/kv_cache_manager.hpp"
#include "kvactor/actors/request_handle.hpp"
#include "kvactor/messages/error.hpp"
#include "bench_cache.hpp"

using namespace kvactor;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr std::size_t window = 32; // requests in flight
constexpr std::size_t lookahead = 8; // operations whose slots are prefetched
constexpr std::uint64_t tokens_per_request = 64; // 4 blocks of 16

/// Bytes malloc has handed out and not taken back, over every arena (mmap'd
/// chunks included), less the handle actors' memory cached for reuse (free,
/// though malloc counts it handed out). Unlike the RSS it also sees memory
/// reused from an earlier size, so it measures what the live requests hold.
std::size_t heap_in_use() {
  auto mi = mallinfo2();
  auto slab = handle_slab_counts();
  return mi.uordblks + mi.hblkhd - slab.cached * slab.block_bytes;
}

/// Resident set size in bytes.
std::size_t rss_bytes() {
  std::ifstream in{"/proc/self/statm"};
  std::size_t pages = 0, resident = 0;
  in >> pages >> resident;
  return resident * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

allocation_request make_req(request_id id) {
  allocation_request req;
  req.id = id;
  req.initial_tokens = tokens_per_request;
  req.max_sequence_length = 1 << 16;
  req.num_layers = 1;
  req.num_heads = 1;
  req.head_dim = 8;
  return req;
}

/// Runs `total` operations produced by `issue(self, i, done)` with `window`
/// in flight from a new event-based actor (kept alive: it owns what it
/// allocated); returns the wall time.
double run_window(caf::actor_system& sys, std::size_t total,
                  std::function<void(caf::event_based_actor*, std::size_t,
                                     std::function<void()>)>
                    issue) {
  std::promise<void> finished;
  auto fut = finished.get_future();
  auto t0 = clock_type::now();
  sys.spawn([&, total](caf::event_based_actor* self) -> caf::behavior {
    auto next = std::make_shared<std::size_t>(0);
    auto done = std::make_shared<std::size_t>(0);
    auto pump = std::make_shared<std::function<void()>>();
    *pump = [=, &finished] {
      if (*next >= total)
        return;
      auto i = (*next)++;
      issue(self, i, [=, &finished] {
        // The actor stays: it owns the requests it allocated, and a request
        // is reclaimed when its owner terminates.
        if (++*done == total) {
          finished.set_value();
          return;
        }
        (*pump)();
      });
    };
    for (std::size_t k = 0; k < window && k < total; ++k)
      (*pump)();
    return {[](caf::unit_t) {}}; // stay alive for the replies
  });
  fut.get();
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

void fail(caf::error& err) {
  std::cerr << "scale: " << render(err) << '\n';
  std::exit(1);
}

/// Waits until every handle of `handles` (null ones skipped) is gone.
void await_gone(caf::actor_system& sys,
                const std::vector<request_handle_actor>& handles) {
  std::promise<void> gone;
  auto fut = gone.get_future();
  std::size_t n = 0;
  for (auto& h : handles)
    n += h ? 1 : 0;
  if (n == 0)
    return;
  // Held until the last down: a monitor does not keep its observer alive,
  // and an actor nobody references ends (CAF's `unreachable`) once its
  // mailbox is empty - with more than one worker, before later downs came.
  auto watcher = sys.spawn([&, n](caf::event_based_actor* self) -> caf::behavior {
    auto left = std::make_shared<std::size_t>(n);
    self->set_down_handler([=, &gone](caf::down_msg&) {
      if (--*left == 0) {
        gone.set_value();
        self->quit();
      }
    });
    for (auto& h : handles)
      if (h)
        self->monitor(h); // a dead one: its down message comes at once
    return {[](caf::unit_t) {}};
  });
  fut.get();
}

} // namespace

int main(int argc, char** argv) {
  std::vector<std::size_t> sizes{1000, 10000, 100000};
  std::uint64_t blocks = 1000000;
  std::size_t ops = 200000;
  std::size_t rounds = 5;
  std::uint32_t churn_percent = 10;
  std::uint32_t threads = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string arg = argv[i];
    if (arg == "--sizes") {
      sizes.clear();
      std::stringstream in{argv[i + 1]};
      for (std::string tok; std::getline(in, tok, ',');)
        sizes.push_back(std::stoul(tok));
    } else if (arg == "--blocks") {
      blocks = std::stoull(argv[i + 1]);
    } else if (arg == "--ops") {
      ops = std::stoul(argv[i + 1]);
    } else if (arg == "--rounds") {
      rounds = std::max<std::size_t>(1, std::stoul(argv[i + 1]));
    } else if (arg == "--churn-percent") {
      churn_percent = static_cast<std::uint32_t>(std::stoul(argv[i + 1]));
    } else if (arg == "--scheduler-threads") {
      threads = static_cast<std::uint32_t>(std::stoul(argv[i + 1]));
    } else {
      std::cerr << "usage: scale [--sizes A,B,C] [--blocks N] [--ops N] "
                   "[--rounds R] [--churn-percent P] [--scheduler-threads T]\n";
      return 2;
    }
  }
  if (churn_percent > 100) {
    std::cerr << "scale: --churn-percent " << churn_percent
              << " is more than 100\n";
    return 2;
  }
  cache_config cfg;
  cfg.storage = "none";
  cfg.num_gpu_blocks = blocks;
  cfg.model = model_config{1, 1, 8, dtype::fp16};
  cfg.gc_interval_ms = 0;
  cfg.pressure.preempt_at_critical = false;
  cfg.scheduler_threads = threads;
  kvactor::bench::bench_cache started{"scale", cfg};
  if (!started.mgr)
    return 1;
  auto& sys = started.sys;
  auto& cache = started.mgr;
  auto mgr = cache->actor();
  std::mt19937_64 rng{42};
  request_id next_id = 1;
  // Warm up: the first requests pay for one-time allocations (CAF's memory
  // caches, the pool's lazily touched pages) that are not per-request cost.
  {
    std::size_t warm = std::min<std::size_t>(sizes.empty() ? 0 : sizes.back(), 10000);
    auto first = next_id;
    next_id += warm;
    std::vector<request_handle_actor> warm_handles(warm);
    run_window(sys, warm, [&](caf::event_based_actor* self, std::size_t i,
                              std::function<void()> k) {
      self->request(mgr, caf::infinite, allocate_atom::value, make_req(first + i))
        .then([k, &warm_handles, i](request_handle_actor& h, block_table&) {
                warm_handles[i] = h;
                k();
              },
              fail);
    });
    run_window(sys, warm, [&](caf::event_based_actor* self, std::size_t i,
                              std::function<void()> k) {
      self->request(mgr, caf::infinite, free_atom::value, first + i)
        .then([k](std::uint32_t) { k(); }, fail);
    });
    // Their handle actors end after the frees' replies: not in the first
    // size's figures.
    await_gone(sys, warm_handles);
  }
  for (auto n : sizes) {
    // Grow to n live requests; the memory they cost is the heap's growth
    // (and the RSS's, which misses memory reused from an earlier size).
    std::vector<request_id> live;
    auto base = rss_bytes();
    auto heap_base = heap_in_use();
    auto first = next_id;
    next_id += n;
    std::vector<request_handle_actor> handles(n);
    // The slowest allocate's round trip (32 in flight, so it includes the
    // wait behind the others): a stall - a table growing inside one
    // allocate - shows here, not in the mean.
    double alloc_max_s = 0;
    auto t_alloc = run_window(sys, n, [&](caf::event_based_actor* self,
                                          std::size_t i, std::function<void()> k) {
      auto sent = clock_type::now();
      self->request(mgr, caf::infinite, allocate_atom::value, make_req(first + i))
        .then([k, &handles, &alloc_max_s, i, sent](request_handle_actor& h,
                                                   block_table&) {
                std::chrono::duration<double> took = clock_type::now() - sent;
                alloc_max_s = std::max(alloc_max_s, took.count());
                handles[i] = h;
                k();
              },
              fail);
    });
    // Each handle actor answers once it runs: its start is part of the
    // allocation (timed with it) and its memory part of the live request.
    t_alloc += run_window(sys, n, [&](caf::event_based_actor* self,
                                      std::size_t i, std::function<void()> k) {
      self->request(handles[i], caf::infinite, info_atom::value)
        .then([k](request_info&) { k(); }, fail);
    });
    auto grown = rss_bytes();
    auto heap_grown = heap_in_use();
    // The registry keeps the live handles; a reference held here would
    // keep each churned-out actor's memory until the size ends.
    handles.clear();
    handles.shrink_to_fit();
    for (std::size_t i = 0; i < n; ++i)
      live.push_back(first + i);
    // At that size: extends of random live requests, and churn (free one,
    // allocate a new one) for one in ten operations, in `rounds` rounds
    // timed apart: the median round is the figure (a 2-core VM has spells
    // of noise that one long run would average in).
    std::vector<request_id> ids = live;
    std::vector<double> round_us;
    auto per_round = std::max<std::size_t>(1, ops / rounds);
    for (std::size_t round = 0; round < rounds; ++round) {
      std::vector<std::uint8_t> kind(per_round);
      std::vector<std::size_t> pick(per_round);
      for (std::size_t i = 0; i < per_round; ++i) {
        kind[i] = rng() % 100 < churn_percent;
        pick[i] = rng() % ids.size();
      }
      auto churn_base = next_id;
      next_id += per_round;
      // A slot whose churn is in flight is not churned again until it
      // landed (its new request's free could overtake the allocate and
      // leave that request live and unlisted): such an op extends instead.
      // Only the client actor touches `churning`.
      std::vector<std::uint8_t> churning(ids.size(), 0);
      auto* busy = churning.data();
      auto t_round = run_window(sys, per_round, [&](caf::event_based_actor* self,
                                                    std::size_t i,
                                                    std::function<void()> k) {
        // The client's own lookups (a random slot of `ids` and `busy`)
        // miss the cache at 100,000 live requests as the cache's do: they
        // are fetched some operations ahead, so that the figure is the
        // cache's cost, not the harness's.
        if (i + lookahead < per_round) {
          __builtin_prefetch(&ids[pick[i + lookahead]]);
          __builtin_prefetch(&busy[pick[i + lookahead]]);
        }
        if (kind[i] == 0 || busy[pick[i]] != 0) {
          self->request(mgr, caf::infinite, extend_atom::value, ids[pick[i]],
                        std::uint64_t{1})
            .then([k](block_table&) { k(); },
                  [k](caf::error&) { k(); }); // a request freed by churn meanwhile
        } else {
          auto fresh = churn_base + i;
          auto slot = pick[i];
          auto old = ids[slot];
          ids[slot] = fresh;
          busy[slot] = 1;
          self->request(mgr, caf::infinite, free_atom::value, old)
            .then(
              [=](std::uint32_t) {
                self->request(mgr, caf::infinite, allocate_atom::value,
                              make_req(fresh))
                  .then(
                    [k, busy, slot](request_handle_actor&, block_table&) {
                      busy[slot] = 0;
                      k();
                    },
                    fail);
              },
              fail);
        }
      });
      round_us.push_back(1e6 * t_round / per_round);
    }
    auto sorted = round_us;
    std::sort(sorted.begin(), sorted.end());
    auto median_us = sorted[sorted.size() / 2];
    auto st = cache->stats();
    auto held_blocks = st.total_blocks - st.free_blocks;
    double per_req = n ? double(grown - base) / n : 0.0;
    double heap_per_req =
      n ? (double(heap_grown) - double(heap_base)) / double(n) : 0.0;
    double blocks_per_req = double(held_blocks) / double(st.active_caches);
    nlohmann::json out{
      {"bench", "scale"},
      {"live_requests", n},
      {"pool_blocks", blocks},
      {"allocate_us_per_request", 1e6 * t_alloc / n},
      {"allocate_max_us", 1e6 * alloc_max_s},
      {"operations", per_round * rounds},
      {"churn_percent", churn_percent},
      {"rounds", rounds},
      {"us_per_operation", median_us},
      {"us_per_operation_rounds", round_us},
      {"ops_per_sec", 1e6 / median_us},
      {"heap_delta_bytes", double(heap_grown) - double(heap_base)},
      {"heap_bytes_per_live_request", heap_per_req},
      {"rss_delta_bytes", grown - base},
      {"bytes_per_live_request", per_req},
      {"blocks_per_request", blocks_per_req},
      {"heap_bytes_per_request_minus_8_per_block",
       heap_per_req - 8.0 * blocks_per_req},
      {"bytes_per_request_minus_8_per_block", per_req - 8.0 * blocks_per_req},
    };
    std::cout << out.dump() << std::endl;
    // Back to empty for the next size, every handle actor gone (those of
    // requests churned out ended long before: at their free).
    std::vector<request_handle_actor> last;
    run_window(sys, 1, [&](caf::event_based_actor* self, std::size_t,
                           std::function<void()> k) {
      self->request(mgr, caf::infinite, list_atom::value)
        .then(
          [k, &last](std::vector<handle_entry>& live) {
            for (auto& e : live)
              last.push_back(e.handle);
            k();
          },
          fail);
    });
    run_window(sys, ids.size(), [&](caf::event_based_actor* self, std::size_t i,
                                    std::function<void()> k) {
      self->request(mgr, caf::infinite, free_atom::value, ids[i])
        .then([k](std::uint32_t) { k(); }, [k](caf::error&) { k(); });
    });
    await_gone(sys, last);
    if (auto left = cache->stats().active_caches; left != 0) {
      std::cerr << "scale: " << left << " requests still live after size " << n
                << '\n';
      return 1;
    }
  }
  return 0;
}
