// replay: REPLAY.md's bookkeeping benchmark. Replays a trace through the
// cache in the two modes issue 5 asks for - through the blocking facade, one
// call per operation, and through the batched step message sent by a
// scheduler that is itself an actor - and a third, `core`, the pool's
// CAF-free core called directly (the floor under both); prints one JSON
// line per mode. Every mode makes the same decisions
// (bench/replay_scheduler.hpp), so their hit rates and preemption counts
// agree; only the cost of reaching the cache differs. Without --mode it
// runs step, then facade ("both").
//
// The pool is the trace header's num_blocks (or --num-blocks) less one,
// which vLLM's BlockPool keeps back as its null block: REPLAY.md's
// reference figures come from vLLM, and with the same usable blocks the
// same policy makes the same decisions (432 preemptions on the default
// trace; with all 20000 blocks usable, 434 - --all-blocks).
//
//   replay --trace FILE [--mode facade|step|core|both] [--num-blocks N]
//          [--all-blocks] [--max-admits K] [--scheduler-threads N]
//          [--repeat N]
//
// --repeat N replays each mode N times in one process (the trace is parsed
// once) and prints the median run's line, with every run's bookkeeping
// time beside it: on a noisy machine one run says little.
//
// Ctrl-C (SIGINT) or SIGTERM stops the run at its next step and prints its
// line for the steps that ran, with "interrupted": true (false on every
// complete run); no further mode or repetition runs, and the exit status
// is 130 (143 for SIGTERM).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <iostream>
#include <memory>
#include <new>
#include <stdexcept>
#include <unordered_map>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <nlohmann/json.hpp>

#include "cli/interrupt.hpp"
#include "bench/replay_report.hpp"
#include "bench/replay_scheduler.hpp"
#include "bench/trace.hpp"
#include "kvactor/actors/block_pool_core.hpp"
#include "kvactor/actors/kv_cache_manager.hpp"
#include "kvactor/config/cache_limits.hpp"
#include "kvactor/messages/error.hpp"

using namespace kvactor;
using namespace kvactor::bench;
using kvactor::cli::install_interrupt_handler;
using kvactor::cli::interrupted;

namespace {

/// Admissions a step message had the pool try, as facade mode counts its
/// allocate calls: the admitted and the one that did not fit (none after a
/// preemption: then it tried none).
std::size_t admissions_tried(const step_result& res) {
  return res.admitted.size()
         + (res.admission_blocked && res.preempted.empty() ? 1 : 0);
}

// -- facade mode ---------------------------------------------------------------------

using handle_map = std::unordered_map<request_id, std::shared_ptr<kv_cache_handle>>;

/// The manager's stats, or an exception naming why there are none:
/// stats() answers zeros when the manager does not, which would print a
/// run's figures as zeros and exit 0.
cache_manager_stats checked(const kv_cache_manager& mgr) {
  auto st = mgr.checked_stats();
  if (!st)
    throw std::runtime_error("the cache's stats: " + render(st.error()));
  return std::move(*st);
}

/// Executes one step's work with one blocking call per operation, with the
/// step message's semantics (messages/step.hpp).
step_result run_through_facade(kv_cache_manager& mgr, const step_request& step,
                               handle_map& live, run_figures& fig) {
  step_result r;
  auto timed = [&](latencies& lat, auto&& call) {
    auto t0 = clock_type::now();
    auto res = call();
    auto dt = clock_type::now() - t0;
    ++lat.calls;
    lat.add(ms(dt) * 1000.0);
    fig.bookkeeping_ms += ms(dt);
    return res;
  };
  for (auto id : step.frees) {
    if (auto err = timed(fig.free, [&] { return mgr.deallocate(id); }))
      r.failed.push_back(op_failure{id, err});
    live.erase(id);
  }
  auto& ops = step.extends;
  std::vector<bool> gone(ops.size(), false);
  auto last = ops.size();
  std::vector<token_id> tok(1);
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (gone[i])
      continue;
    tok[0] = step.tokens[i];
    // Looked up outside the timed call: the harness's map is not the
    // cache's bookkeeping.
    auto& handle = *live.at(ops[i].id);
    for (;;) {
      auto err = timed(fig.extend, [&] { return mgr.append(handle, tok); });
      if (!err)
        break;
      if (!has_code(err, errc::out_of_blocks)) {
        r.failed.push_back(op_failure{ops[i].id, err});
        break;
      }
      while (last > i && gone[last - 1])
        --last;
      auto victim = last - 1;
      gone[victim] = true;
      auto vid = ops[victim].id;
      if (auto perr = timed(fig.preempt, [&] { return mgr.preempt(vid); }))
        r.failed.push_back(op_failure{vid, perr});
      r.preempted.push_back(vid);
      live.erase(vid);
      if (victim == i)
        break;
    }
  }
  if (r.preempted.empty()) {
    for (auto& req : step.admits) {
      auto h = timed(fig.alloc, [&] { return mgr.allocate(req); });
      if (!h) {
        if (has_code(h.error(), errc::out_of_blocks))
          break;
        r.failed.push_back(op_failure{req.id, h.error()});
        continue;
      }
      live[req.id] = *h;
      r.admitted.push_back(admission{req.id, 0, 0,
                                     block_table{{}, req.prompt.size(), 0}});
    }
  }
  // Not bookkeeping (usage figures only), but timed apart: the handle
  // actors' work the step's calls queued may run while it waits.
  auto t0 = clock_type::now();
  auto st = checked(mgr);
  auto dt = clock_type::now() - t0;
  ++fig.stats.calls;
  fig.stats.add(ms(dt) * 1000.0);
  fig.stats_ms += ms(dt);
  r.used_blocks = st.total_blocks - st.free_blocks;
  r.free_blocks = st.free_blocks;
  return r;
}

nlohmann::json replay_facade(caf::actor_system& sys, const trace& tr,
                             const replay_options& opt) {
  auto& cfg = opt.cache;
  auto started = kv_cache_manager::start(sys, cfg);
  if (!started)
    throw std::runtime_error(render(started.error()));
  auto& mgr = *started;
  replay_scheduler sched{tr, cfg, opt.max_admits};
  run_figures fig;
  handle_map live;
  auto t0 = clock_type::now();
  while (!sched.done() && !interrupted()) {
    auto step = sched.begin_step();
    while (sched.apply(run_through_facade(mgr, step, live, fig)))
      step = sched.more_admits();
    sched.end_step();
  }
  fig.wall_ms = ms(clock_type::now() - t0);
  return report("facade", tr, opt, sched, checked(mgr), fig);
}

// -- core mode: the same steps straight into the pool core, no actors ------------------

/// The pool core of `cfg`. A block count whose bookkeeping this machine
/// cannot hold is refused as the other modes' start refuses it (naming the
/// count), not as "std::bad_alloc".
std::unique_ptr<detail::block_pool_core> make_pool_core(const cache_config& cfg) {
  try {
    return std::make_unique<detail::block_pool_core>(
      cfg, static_cast<std::uint32_t>(cfg.num_gpu_blocks));
  } catch (const std::bad_alloc&) {
    throw std::runtime_error(render(make_error(
      errc::invalid_config, "num_gpu_blocks: no host memory for the block "
                            "pool's bookkeeping of "
                              + std::to_string(cfg.num_gpu_blocks)
                              + " device and "
                              + std::to_string(cfg.num_host_blocks)
                              + " host blocks")));
  }
}

/// What the actors add is measured against this: the block pool core driven
/// by a plain loop (REPLAY.md's "plain single-threaded C++ loop").
nlohmann::json replay_core(const trace& tr, const replay_options& opt) {
  auto& cfg = opt.cache;
  auto owned = make_pool_core(cfg);
  auto& pool = *owned;
  replay_scheduler sched{tr, cfg, opt.max_admits};
  run_figures fig;
  auto run_one = [&](const step_request& req) {
    auto t0 = clock_type::now();
    auto res = pool.run_step(req);
    auto dt = ms(clock_type::now() - t0);
    fig.bookkeeping_ms += dt;
    ++fig.message.calls;
    fig.message.add(dt * 1000.0);
    fig.alloc.calls += admissions_tried(res);
    fig.extend.calls += req.extends.size();
    fig.free.calls += req.frees.size();
    return res;
  };
  auto t0 = clock_type::now();
  while (!sched.done() && !interrupted()) {
    auto step = sched.begin_step();
    while (sched.apply(run_one(step)))
      step = sched.more_admits();
    sched.end_step();
  }
  fig.wall_ms = ms(clock_type::now() - t0);
  auto& c = pool.counters();
  cache_manager_stats st;
  st.blocks_allocated = c.blocks_allocated;
  st.prefix_hit_blocks = c.prefix_hit_blocks;
  st.blocks_freed = c.blocks_freed;
  st.blocks_cached = c.blocks_cached;
  st.eviction_count = c.evictions;
  st.cache_hit_rate = c.query_tokens == 0 ? 0.0
                                          : double(c.hit_tokens) / double(c.query_tokens);
  auto out = report("core", tr, opt, sched, st, fig);
  out["latency"] = "per_step";
  out["messages"] = fig.message.to_json();
  return out;
}

// -- step mode: a scheduler actor, one message per step --------------------------------

/// Drives `sched` with one step message per step to `lane` (the pool's
/// step lane, as the manager hands it out), then fulfils `done`.
caf::behavior step_driver(caf::event_based_actor* self, replay_scheduler* sched,
                          step_actor lane, run_figures* fig,
                          std::promise<void>* done) {
  // The two steps of the loop call each other: they live as long as the
  // actor (held by a functor attached to it), and refer to each other by
  // a plain pointer - held by each other, they would never be freed.
  struct step_loop {
    std::function<void(step_request)> issue;
    std::function<void()> next;
  };
  auto owned = std::make_shared<step_loop>();
  self->attach_functor([owned](const caf::error&) {});
  auto* loop = owned.get();
  loop->next = [=] {
    if (sched->done() || interrupted()) {
      done->set_value();
      self->quit();
      return;
    }
    loop->issue(sched->begin_step());
  };
  loop->issue = [=](step_request req) {
    auto n_ext = req.extends.size();
    auto n_free = req.frees.size();
    auto t0 = clock_type::now();
    self->request(lane, caf::infinite, step_atom::value, std::move(req))
      .then(
        [=](step_result& res) {
          auto dt = ms(clock_type::now() - t0);
          auto n_alloc = admissions_tried(res);
          fig->bookkeeping_ms += dt;
          ++fig->message.calls;
          fig->message.add(dt * 1000.0);
          auto ops = n_alloc + n_ext + n_free;
          auto per_op = ops == 0 ? 0.0 : dt * 1000.0 / ops;
          auto note = [&](latencies& lat, std::size_t n) {
            lat.calls += n;
            lat.add(per_op, n);
          };
          note(fig->alloc, n_alloc);
          note(fig->extend, n_ext);
          note(fig->free, n_free);
          try {
            if (sched->apply(res)) {
              loop->issue(sched->more_admits());
              return;
            }
          } catch (...) {
            done->set_exception(std::current_exception());
            self->quit();
            return;
          }
          sched->end_step();
          loop->next();
        },
        [=](caf::error& err) {
          done->set_exception(
            std::make_exception_ptr(std::runtime_error(render(err))));
          self->quit();
        });
  };
  loop->next();
  return {[](caf::unit_t) {}};
}

nlohmann::json replay_step(caf::actor_system& sys, const trace& tr,
                           const replay_options& opt) {
  auto& cfg = opt.cache;
  auto started = kv_cache_manager::start(sys, cfg);
  if (!started)
    throw std::runtime_error(render(started.error()));
  auto& mgr = *started;
  replay_scheduler sched{tr, cfg, opt.max_admits};
  run_figures fig;
  std::promise<void> done;
  auto finished = done.get_future();
  // The scheduler asks the manager once where to send its steps.
  step_actor lane;
  {
    caf::scoped_actor self{sys};
    self->request(mgr.actor(), caf::infinite, step_atom::value)
      .receive([&](step_actor& x) { lane = std::move(x); },
               [](caf::error& err) { throw std::runtime_error(render(err)); });
  }
  auto t0 = clock_type::now();
  sys.spawn(step_driver, &sched, lane, &fig, &done);
  finished.get();
  // The manager takes in each step's effects (spawning and ending handle
  // actors) behind the steps - with one worker, after the driver's last
  // step. Its mailbox is in order: this stats reply comes after all of
  // them, so the wall clock covers that work too.
  auto t1 = clock_type::now();
  auto stats = checked(mgr);
  auto t2 = clock_type::now();
  fig.registry_tail_ms = ms(t2 - t1);
  fig.wall_ms = ms(t2 - t0);
  return report("step", tr, opt, sched, stats, fig);
}

int usage() {
  std::cerr << "usage: replay --trace FILE [--mode facade|step|core|both] "
               "[--num-blocks N] [--all-blocks] [--max-admits K]\n"
               "              [--scheduler-threads N] [--repeat N]\n";
  return 2;
}

} // namespace

int main(int argc, char** argv) {
  std::string path;
  std::string mode = "both";
  replay_options opt;
  std::uint32_t threads = 0;
  std::size_t repeat = 1;
  for (int i = 1; i < argc; ++i) {
    auto arg = std::string{argv[i]};
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        throw std::invalid_argument(arg + " needs a value");
      return argv[++i];
    };
    // A whole decimal number in [min, max]: no sign, no trailing junk, no
    // silent truncation (stoul takes "-1" and "12abc").
    auto number = [&](std::uint64_t max, std::uint64_t min = 1) -> std::uint64_t {
      auto text = value();
      std::size_t used = 0;
      if (text.empty() || text[0] < '0' || text[0] > '9')
        throw std::invalid_argument(arg + ": expected a number, got '" + text + "'");
      std::uint64_t x = 0;
      try {
        x = std::stoull(text, &used);
      } catch (const std::out_of_range&) {
        used = 0; // past 2^64: out of range below
      }
      if (used != text.size() || x < min || x > max)
        throw std::invalid_argument(arg + ": expected a number in ["
                                    + std::to_string(min) + ", "
                                    + std::to_string(max) + "], got '" + text
                                    + "'");
      return x;
    };
    try {
      if (arg == "--trace")
        path = value();
      else if (arg == "--mode")
        mode = value();
      else if (arg == "--num-blocks")
        opt.pool_blocks = static_cast<std::uint32_t>(number(max_num_blocks));
      else if (arg == "--all-blocks")
        opt.reserved_blocks = 0;
      else if (arg == "--max-admits")
        opt.max_admits = number(1u << 20);
      else if (arg == "--scheduler-threads")
        threads = static_cast<std::uint32_t>(number(256, 0)); // 0: CAF's default
      else if (arg == "--repeat")
        repeat = number(1000);
      else
        throw std::invalid_argument("unknown argument " + arg);
    } catch (std::exception& e) {
      std::cerr << "replay: " << e.what() << '\n';
      return usage();
    }
  }
  auto refuse = [&](const std::string& why) {
    std::cerr << "replay: " << why << '\n';
    return usage();
  };
  if (path.empty())
    return refuse("--trace FILE is required");
  if (mode != "facade" && mode != "step" && mode != "core" && mode != "both")
    return refuse("--mode: expected facade, step, core or both, got '" + mode + "'");
  auto tr = load_trace(path);
  if (!tr) {
    std::cerr << "replay: " << render(tr.error()) << '\n';
    return 1;
  }
  // A header alone loads (its account may say 0 requests), but a replay of
  // nothing prints figures of nothing, as if it had measured something.
  if (tr->requests.empty()) {
    std::cerr << "replay: " << path << ":" << tr->header_line
              << ": no requests after the header: nothing to replay\n";
    return 1;
  }
  // Where the pool's size came from, for messages.
  auto pool_source = opt.pool_blocks == 0
                       ? path + ":" + std::to_string(tr->header_line) + ": num_blocks"
                       : std::string{"--num-blocks"};
  if (opt.pool_blocks == 0)
    opt.pool_blocks = tr->num_blocks;
  if (opt.pool_blocks <= opt.reserved_blocks) {
    std::cerr << "replay: " << pool_source << ": a pool of " << opt.pool_blocks
              << " blocks leaves none usable (one is held back as vLLM's null "
                 "block; --all-blocks uses all)\n";
    return 1;
  }
  opt.cache = config_for(*tr, opt.pool_blocks - opt.reserved_blocks);
  // Before any mode: core mode builds the pool without the actors, so it
  // must not run on a config they would refuse (load_trace checked the
  // header against the same limits; this covers what the options made).
  if (auto err = validate(opt.cache)) {
    std::cerr << "replay: " << render(err) << '\n';
    return 1;
  }
  if (auto err = check_fits(*tr, opt.cache.num_gpu_blocks)) {
    std::cerr << "replay: " << render(err) << " (the pool's size from "
              << pool_source
              << (opt.reserved_blocks ? ", less vLLM's null block" : "") << ")\n";
    return 1;
  }
  opt.cache.scheduler_threads = threads;
  caf::actor_system_config sys_cfg;
  configure(sys_cfg, opt.cache);
  caf::actor_system sys{sys_cfg};
  // From here Ctrl-C stops the run at its next step; its line is printed,
  // marked "interrupted", and no further mode runs.
  install_interrupt_handler();
  // A line that did not reach stdout (a full disk) fails the run: exit 0
  // would claim figures nobody got.
  auto print = [](const nlohmann::json& line) {
    std::cout << line.dump() << std::endl;
    if (!std::cout)
      throw std::runtime_error("cannot write to stdout");
  };
  try {
    if (mode == "core")
      print(repeated(repeat, [&] { return replay_core(*tr, opt); }));
    if ((mode == "step" || mode == "both") && !interrupted())
      print(repeated(repeat, [&] { return replay_step(sys, *tr, opt); }));
    if ((mode == "facade" || mode == "both") && !interrupted())
      print(repeated(repeat, [&] { return replay_facade(sys, *tr, opt); }));
  } catch (std::exception& e) {
    std::cerr << "replay: " << e.what() << '\n';
    return 1;
  }
  return interrupted() ? cli::interrupted_exit_status() : 0;
}
