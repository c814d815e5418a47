// scale: cost per operation and memory per live request as the number of
// live requests (one handle actor each) grows 1,000 -> 10,000 -> 100,000 over
// a pool of 1,000,000 blocks. Operations go to the manager actor from a
// client actor with a window of requests in flight, on one cache that grows
// through the sizes. Prints one JSON line per size; memory per live request
// is measured afterwards, each size on a fresh cache: malloc's growth in
// bytes in use (and the RSS's, which misses memory reused from a smaller
// size), the tables' growth included. A handle actor
// starts (and takes its memory) after the allocate's reply, and ends after
// the free's: each phase waits for its handles - answered an info request,
// or gone - so that no phase's actor work spills into another's figures.
// allocate_max_us is the slowest allocate while growing to the size (a
// stall inside one allocate, such as a table's growth, shows there);
// allocate_us_per_request the allocates alone, handle_start_us_per_request
// the info round trip after them that waits for the handle actors' start.
// The "minus 8 bytes per block" figures take the memory phase's own blocks
// per request (memory_blocks_per_request: 4), not the timing phase's.
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
#include "bench_options.hpp"

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
/// in flight from a new event-based actor, which goes into `owners`: it
/// owns the requests it allocated, and an owner whose last reference goes
/// ends - its requests reclaimed (the manager keeps an owner's address
/// only). Returns the wall time.
double run_window(caf::actor_system& sys, std::vector<caf::actor>& owners,
                  std::size_t total,
                  std::function<void(caf::event_based_actor*, std::size_t,
                                     std::function<void()>)>
                    issue) {
  std::promise<void> finished;
  auto fut = finished.get_future();
  auto t0 = clock_type::now();
  owners.push_back(sys.spawn([&, total](caf::event_based_actor* self)
                               -> caf::behavior {
    auto next = std::make_shared<std::size_t>(0);
    auto done = std::make_shared<std::size_t>(0);
    auto pump = std::make_shared<std::function<void()>>();
    *pump = [=, &finished] {
      if (*next >= total)
        return;
      auto i = (*next)++;
      issue(self, i, [=, &finished] {
        // The actor stays (`owners`): it owns the requests it allocated.
        if (++*done == total) {
          *pump = nullptr; // it held itself (LeakSanitizer)
          finished.set_value();
          return;
        }
        (*pump)();
      });
    };
    for (std::size_t k = 0; k < window && k < total; ++k)
      (*pump)();
    return {[](caf::unit_t) {}}; // stay alive for the replies
  }));
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
  using kvactor::bench::count;
  if (!kvactor::bench::parse_options(
        argc, argv,
        "usage: scale [--sizes A,B,C] [--blocks N] [--ops N] [--rounds R] "
        "[--churn-percent P] [--scheduler-threads T]\n",
        [&](const std::string& arg, const std::string& v) {
          if (arg == "--sizes") {
            sizes.clear();
            std::stringstream in{v};
            for (std::string tok; std::getline(in, tok, ',');)
              sizes.push_back(count(tok));
          } else if (arg == "--blocks") {
            blocks = count(v, UINT64_MAX);
          } else if (arg == "--ops") {
            ops = count(v);
          } else if (arg == "--rounds") {
            rounds = std::max<std::size_t>(1, count(v));
          } else if (arg == "--churn-percent") {
            churn_percent = static_cast<std::uint32_t>(count(v));
          } else if (arg == "--scheduler-threads") {
            threads = static_cast<std::uint32_t>(count(v));
          } else {
            return false;
          }
          return true;
        }))
    return 2;
  for (auto n : sizes)
    if (n <= window) {
      // An operation takes a slot no churn holds: at most `window` do.
      std::cerr << "scale: --sizes: " << n << " live requests; more than "
                << window << " (the operations in flight) needed\n";
      return 2;
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
  // The client actors (run_window), each owning what it allocated: kept
  // until their requests were freed (empty_cache), and let go before the
  // cache stops - declared after it, so gone first on every return.
  std::vector<caf::actor> owners;
  // Timing: every size on this one cache, grown from the last, as a
  // long-running server's cache grows. Memory: afterwards, each size on a
  // cache of its own (fresh_cache): a cache's tables (the pool's sequences,
  // the registries, the prefix index) keep their capacity after their
  // requests end, so on a cache that held as many before, the table memory
  // a live request costs would not show in the heap's growth. (Each size on
  // a fresh cache for the timing too was 10-15 % slower at 100k, the same
  // for a second fresh 100k: the new pools' first-touched memory, which a
  // long-running cache has long paid for.)
  auto fresh_cache = [&]() -> bool {
    owners.clear();              // their requests were freed (empty_cache)
    cache.reset();               // stops the cache...
    sys.await_all_actors_done(); // ...and its actors are gone, tables freed
    auto made = kv_cache_manager::start(sys, cfg);
    if (!made) {
      std::cerr << "scale: cannot start the cache: " << render(made.error())
                << '\n';
      return false;
    }
    cache.emplace(std::move(*made));
    mgr = cache->actor();
    return true;
  };
  std::mt19937_64 rng{42};
  request_id next_id = 1;
  // n new live requests: allocated, then each handle actor asked once (it
  // starts after the allocate's reply: its start is part of the allocation
  // and its memory part of the live request).
  struct grown_to {
    std::vector<request_handle_actor> handles;
    request_id first = 0;
    double alloc_seconds = 0; ///< the allocates' round trips alone
    /// Then one info request per handle: waits for each handle actor's
    /// start (after the allocate's reply), a second round trip.
    double start_seconds = 0;
    /// The slowest allocate's round trip (32 in flight, so it includes the
    /// wait behind the others): a stall - a table growing inside one
    /// allocate - shows here, not in the mean.
    double alloc_max_s = 0;
  };
  auto grow = [&](std::size_t n) {
    grown_to g;
    g.first = next_id;
    next_id += n;
    g.handles.resize(n);
    g.alloc_seconds = run_window(sys, owners, n, [&](caf::event_based_actor* self,
                                       std::size_t i, std::function<void()> k) {
      auto sent = clock_type::now();
      self->request(mgr, caf::infinite, allocate_atom::value, make_req(g.first + i))
        .then([k, &g, i, sent](request_handle_actor& h, block_table&) {
                std::chrono::duration<double> took = clock_type::now() - sent;
                g.alloc_max_s = std::max(g.alloc_max_s, took.count());
                g.handles[i] = h;
                k();
              },
              fail);
    });
    g.start_seconds = run_window(sys, owners, n, [&](caf::event_based_actor* self,
                                        std::size_t i, std::function<void()> k) {
      self->request(g.handles[i], caf::infinite, info_atom::value)
        .then([k](request_info&) { k(); }, fail);
    });
    return g;
  };
  // Frees every live request and waits until their handle actors are gone
  // (those of requests churned out ended long before: at their free).
  auto empty_cache = [&]() -> bool {
    std::vector<handle_entry> live;
    run_window(sys, owners, 1, [&](caf::event_based_actor* self, std::size_t,
                           std::function<void()> k) {
      self->request(mgr, caf::infinite, list_atom::value)
        .then(
          [k, &live](std::vector<handle_entry>& entries) {
            live = std::move(entries);
            k();
          },
          fail);
    });
    run_window(sys, owners, live.size(), [&](caf::event_based_actor* self, std::size_t i,
                                     std::function<void()> k) {
      self->request(mgr, caf::infinite, free_atom::value, live[i].id)
        .then([k](std::uint32_t) { k(); }, [k](caf::error&) { k(); });
    });
    std::vector<request_handle_actor> gone;
    for (auto& e : live)
      gone.push_back(e.handle);
    await_gone(sys, gone);
    owners.clear(); // they own nothing now
    if (auto left = cache->stats().active_caches; left != 0) {
      std::cerr << "scale: " << left << " requests still live after emptying\n";
      return false;
    }
    return true;
  };
  // Warm up: the first requests pay for one-time allocations (CAF's memory
  // caches, the pool's lazily touched pages, the handle actors' slab) that
  // are not per-request cost.
  grow(std::min<std::size_t>(sizes.empty() ? 0 : sizes.back(), 10000));
  if (!empty_cache())
    return 1;
  std::vector<nlohmann::json> lines;
  for (auto n : sizes) {
    auto g = grow(n);
    // The registry keeps the live handles; a reference held here would
    // keep each churned-out actor's memory until the size ends.
    std::vector<request_id> live;
    for (std::size_t i = 0; i < n; ++i)
      live.push_back(g.first + i);
    g.handles.clear();
    g.handles.shrink_to_fit();
    // At that size: extends of random live requests, and churn (free one,
    // allocate a new one) for one in ten operations, in `rounds` rounds
    // timed apart: the median round is the figure (a 2-core VM has spells
    // of noise that one long run would average in).
    std::vector<request_id> ids = live;
    std::vector<double> round_us;
    std::size_t failed_ops = 0;
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
      // A slot whose churn is in flight is neither churned again (its new
      // request's free could overtake the allocate and leave that request
      // live and unlisted) nor extended (its request is not allocated yet,
      // or freed): the op takes the next slot not busy (at most `window`
      // are). Only the client actor touches `churning`.
      std::vector<std::uint8_t> churning(ids.size(), 0);
      auto* busy = churning.data();
      // Operations that failed: none should, and a round of failures is
      // no measure of anything - counted, printed, and the run fails.
      auto failures = std::make_shared<std::size_t>(0);
      auto t_round = run_window(sys, owners, per_round, [&](caf::event_based_actor* self,
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
        auto slot = pick[i];
        while (busy[slot] != 0)
          slot = (slot + 1) % ids.size();
        if (kind[i] == 0) {
          self->request(mgr, caf::infinite, extend_atom::value, ids[slot],
                        std::uint64_t{1})
            .then([k](block_table&) { k(); },
                  [k, failures](caf::error& err) {
                    if (++*failures == 1)
                      std::cerr << "scale: an extend failed: " << render(err)
                                << '\n';
                    k();
                  });
        } else {
          auto fresh = churn_base + i;
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
      failed_ops += *failures;
    }
    auto sorted = round_us;
    std::sort(sorted.begin(), sorted.end());
    auto median_us = sorted[sorted.size() / 2];
    auto st = cache->stats();
    auto held_blocks = st.total_blocks - st.free_blocks;
    lines.push_back(nlohmann::json{
      {"bench", "scale"},
      {"live_requests", n},
      {"pool_blocks", blocks},
      {"allocate_us_per_request", 1e6 * g.alloc_seconds / n},
      {"handle_start_us_per_request", 1e6 * g.start_seconds / n},
      {"allocate_max_us", 1e6 * g.alloc_max_s},
      {"operations", per_round * rounds},
      {"failed_operations", failed_ops},
      {"churn_percent", churn_percent},
      {"rounds", rounds},
      {"us_per_operation", median_us},
      {"us_per_operation_rounds", round_us},
      {"ops_per_sec", 1e6 / median_us},
      {"blocks_per_request", double(held_blocks) / double(st.active_caches)},
    });
    if (failed_ops > 0) {
      // The line shows the count; its times are no figure.
      std::cout << lines.back().dump() << std::endl;
      std::cerr << "scale: " << failed_ops << " of " << per_round * rounds
                << " operations failed at " << n << " live requests\n";
      return 1;
    }
    if (!empty_cache())
      return 1;
  }
  // Memory per live request, each size on a fresh cache: the heap's growth
  // as it grows to n (and the RSS's, which misses memory reused from an
  // earlier size).
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    auto n = sizes[k];
    if (!fresh_cache())
      return 1;
    auto base = rss_bytes();
    auto heap_base = heap_in_use();
    auto g = grow(n);
    auto grown = rss_bytes();
    auto heap_grown = heap_in_use();
    // This phase's own requests (tokens_per_request each, never extended),
    // not the timing phase's, which extends grew.
    auto st = cache->stats();
    double blocks_per_req =
      st.active_caches == 0
        ? 0.0
        : double(st.total_blocks - st.free_blocks) / double(st.active_caches);
    g.handles.clear();
    if (!empty_cache())
      return 1;
    auto& out = lines[k];
    out["memory_blocks_per_request"] = blocks_per_req;
    // Signed: the RSS may shrink while it grows (memory given back).
    auto rss_delta = double(grown) - double(base);
    double per_req = n ? rss_delta / double(n) : 0.0;
    double heap_per_req =
      n ? (double(heap_grown) - double(heap_base)) / double(n) : 0.0;
    out["heap_delta_bytes"] = double(heap_grown) - double(heap_base);
    out["heap_bytes_per_live_request"] = heap_per_req;
    out["rss_delta_bytes"] = rss_delta;
    out["bytes_per_live_request"] = per_req;
    out["heap_bytes_per_request_minus_8_per_block"] = heap_per_req - 8.0 * blocks_per_req;
    out["bytes_per_request_minus_8_per_block"] = per_req - 8.0 * blocks_per_req;
  }
  for (auto& out : lines)
    std::cout << out.dump() << std::endl;
  return 0;
}
