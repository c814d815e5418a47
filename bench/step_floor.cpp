// step_floor: what reaching the pool by message costs before any work. Times
// --steps empty steps sent through the step lane by an event-based scheduler
// actor (each one a full pass through the pool's step handler: the foreign-
// device check, run_step on nothing, the stepper ledger, a step_result
// reply), and as many request/responses of an int between two trivial
// event-based actors, in the same actor system, alternating in rounds of
// 1000 so a noisy spell hits both. Prints one JSON line with both summaries.
//
// The replay's step mode costs its core's time plus about one such floor per
// step message: what is left over is what the message's content costs.
//
//   step_floor [--steps N] [--scheduler-threads T]
#include <chrono>
#include <functional>
#include <future>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <nlohmann/json.hpp>

#include "kvactor/actors/kv_cache_manager.hpp"
#include "kvactor/messages/error.hpp"
#include "kvactor/messages/interfaces.hpp"
#include "bench_cache.hpp"
#include "bench_options.hpp"
#include "bookkeeping_config.hpp"
#include "latency_summary.hpp"

using namespace kvactor;
using kvactor::bench::latency_summary;
using clock_type = std::chrono::steady_clock;

namespace {

/// Sends `n` requests made by `ask` one after another from an event-based
/// actor, each when the last one's reply (a `Reply`) came, and returns their
/// round trips in microseconds.
template <class Reply, class Ask>
std::vector<double> round_trips(caf::actor_system& sys, std::size_t n, Ask ask) {
  auto out = std::make_shared<std::vector<double>>();
  out->reserve(n);
  std::promise<void> done;
  auto finished = done.get_future();
  sys.spawn([&, out, n](caf::event_based_actor* self) {
    auto next = std::make_shared<std::function<void()>>();
    *next = [=, &done] {
      if (out->size() == n) {
        done.set_value();
        self->quit();
        return;
      }
      auto t0 = clock_type::now();
      ask(self).then(
        [=](Reply&) {
          out->push_back(std::chrono::duration<double, std::micro>(
                           clock_type::now() - t0)
                           .count());
          (*next)();
        },
        [=, &done](caf::error& err) {
          std::cerr << "step_floor: " << render(err) << '\n';
          done.set_value();
          self->quit();
        });
    };
    (*next)();
    return caf::behavior{[](caf::unit_t) {}};
  });
  finished.get();
  return std::move(*out);
}

/// Spawned with an unused argument: CAF 0.17 binds a reference to a null
/// argument tuple for a function spawned with none (UBSan reports it).
caf::behavior echo(caf::event_based_actor*, int) {
  return {[](int x) { return x; }};
}

} // namespace

int main(int argc, char** argv) {
  std::size_t steps = 200000;
  std::uint32_t threads = 0;
  using kvactor::bench::count;
  if (!kvactor::bench::parse_options(
        argc, argv,
        "usage: step_floor [--steps N >= 1] [--scheduler-threads T]\n",
        [&](const std::string& arg, const std::string& v) {
          if (arg == "--steps")
            steps = count(v, UINT32_MAX, 1);
          else if (arg == "--scheduler-threads")
            threads = static_cast<std::uint32_t>(count(v));
          else
            return false;
          return true;
        }))
    return 2;
  auto cfg = kvactor::bench::bookkeeping_config(1024, threads);
  kvactor::bench::bench_cache cache{"step_floor", cfg};
  if (!cache.mgr)
    return 1;
  auto& sys = cache.sys;
  auto& mgr = cache.mgr;
  step_actor lane;
  {
    caf::scoped_actor self{sys};
    bool ok = false;
    self->request(mgr->actor(), caf::infinite, step_atom::value)
      .receive(
        [&](step_actor& x) {
          lane = std::move(x);
          ok = true;
        },
        [](caf::error& err) { std::cerr << render(err) << '\n'; });
    if (!ok)
      return 1;
  }
  auto peer = sys.spawn(echo, 0);
  std::vector<double> step_us, echo_us;
  constexpr std::size_t round = 1000;
  auto warmup = round;
  for (std::size_t done = 0; done < steps + warmup; done += round) {
    auto s = round_trips<step_result>(sys, round, [&](caf::event_based_actor* self) {
      return self->request(lane, caf::infinite, step_atom::value, step_request{});
    });
    auto e = round_trips<int>(sys, round, [&](caf::event_based_actor* self) {
      return self->request(peer, caf::infinite, 1);
    });
    if (s.size() != round || e.size() != round)
      return 1;
    if (done < warmup)
      continue;
    step_us.insert(step_us.end(), s.begin(), s.end());
    echo_us.insert(echo_us.end(), e.begin(), e.end());
  }
  nlohmann::json out{{"bench", "step_floor"},
                     {"scheduler_threads", threads},
                     {"empty_step", latency_summary(step_us)},
                     {"actor_request_response", latency_summary(echo_us)}};
  std::cout << out.dump() << std::endl;
  return 0;
}
