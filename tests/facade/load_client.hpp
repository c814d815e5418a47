// A load client for facade_tests: an event-based actor doing a seeded
// random walk over allocate / extend / append / fork / free / step / stats
// against the manager, one request at a time, checking every reply, and a
// report that gathers what the clients saw (asserted on the main thread).
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <caf/event_based_actor.hpp>
#include <caf/sec.hpp>

#include "fixture.hpp"

namespace kvtest {

/// Results gathered from actors and threads; asserted on the main thread.
struct report {
  std::atomic<std::uint64_t> ops{0};
  std::atomic<std::uint64_t> refused{0}; ///< expected errors (shortage etc.)
  /// Requests the cache preempted on its own (at critical pressure): owners
  /// are told by message, operations in flight fail. Bounded at the end by
  /// the cache's preemption count.
  std::atomic<std::uint64_t> lost{0};
  std::atomic<std::uint64_t> notices{0};
  std::atomic<std::uint64_t> step_preempted{0};
  std::mutex mtx;
  std::vector<std::string> failures;
  std::condition_variable cv;
  int running = 0;

  void fail(std::string what) {
    std::lock_guard<std::mutex> guard{mtx};
    if (failures.size() < 20)
      failures.push_back(std::move(what));
  }

  void done() {
    std::lock_guard<std::mutex> guard{mtx};
    --running;
    cv.notify_all();
  }

  bool wait_all(std::chrono::seconds limit) {
    std::unique_lock<std::mutex> lock{mtx};
    return cv.wait_for(lock, limit, [this] { return running == 0; });
  }
};

inline std::size_t blocks_for(std::uint64_t tokens) {
  return static_cast<std::size_t>((tokens + test_block_size - 1)
                                  / test_block_size);
}

/// Prompts that several clients share (prefix reuse under concurrency).
inline std::vector<std::vector<token_id>> shared_prompts() {
  return {iota_tokens(1, 9), iota_tokens(1, 13), iota_tokens(500, 17),
          iota_tokens(900, 6)};
}

constexpr std::uint64_t client_max_len = 64;

/// One client: a seeded random walk over allocate / extend / append / fork /
/// free / step / stats, one request at a time, then it frees what it holds.
struct client {
  struct live_req {
    request_id id;
    block_table table;
  };

  caf::event_based_actor* self;
  kv_cache_manager_actor mgr;
  cache_config cfg;
  std::shared_ptr<report> rep;
  std::mt19937 rng;
  request_id next_id;
  int ops_left;
  std::vector<live_req> live;
  std::vector<std::vector<token_id>> prompts = shared_prompts();

  std::string who() const {
    return "client " + std::to_string(next_id / 1000000) + ": ";
  }

  std::uint64_t pick(std::uint64_t lo, std::uint64_t hi) {
    return std::uniform_int_distribution<std::uint64_t>{lo, hi}(rng);
  }

  void check(bool ok, const std::string& what) {
    if (!ok)
      rep->fail(who() + what);
  }

  /// What an operation on a request the cache preempted meanwhile gets.
  static bool lost_to_preemption(const caf::error& err) {
    return has_code(err, errc::unknown_request)
           || has_code(err, errc::invalid_handle)
           || err == caf::sec::request_receiver_down;
  }

  /// Shortages are part of the game; so is losing request `id` to a
  /// preemption by the cache; anything else is a failure.
  void on_error(const caf::error& err, const char* op,
                std::initializer_list<errc> allowed, request_id id = 0) {
    if (id != 0 && lost_to_preemption(err)) {
      drop(id);
      ++rep->lost;
      return;
    }
    for (auto code : allowed)
      if (has_code(err, code)) {
        ++rep->refused;
        return;
      }
    rep->fail(who() + op + ": " + render(err));
  }

  void check_table(const block_table& t, std::uint64_t tokens,
                   const char* op) {
    check(t.num_tokens == tokens && t.blocks.size() == blocks_for(tokens)
            && t.block_size == test_block_size,
          std::string{op} + ": table of " + std::to_string(t.num_tokens)
            + " tokens in " + std::to_string(t.blocks.size())
            + " blocks, expected " + std::to_string(tokens));
  }

  void next() {
    if (ops_left-- <= 0) {
      finish();
      return;
    }
    ++rep->ops;
    auto r = pick(0, 99);
    if (live.empty() || (r < 22 && live.size() < 8))
      allocate();
    else if (r < 40)
      extend();
    else if (r < 52)
      append();
    else if (r < 60 && live.size() < 8)
      fork();
    else if (r < 78)
      free();
    else if (r < 90)
      step();
    else
      stats();
  }

  allocation_request make(request_id id) {
    auto req = make_request(cfg, id, pick(0, 24), client_max_len);
    if (pick(0, 3) == 0) {
      req.prompt = prompts[pick(0, prompts.size() - 1)];
      req.initial_tokens = req.prompt.size();
    }
    return req;
  }

  void allocate() {
    auto req = make(next_id++);
    auto n = req.initial_tokens;
    self->request(mgr, caf::infinite, allocate_atom::value, req)
      .then(
        [this, id = req.id, n](request_handle_actor& h, block_table& t) {
          check(static_cast<bool>(h), "allocate: null handle");
          check_table(t, n, "allocate");
          live.push_back(live_req{id, std::move(t)});
          next();
        },
        [this](caf::error& err) {
          on_error(err, "allocate", {errc::out_of_blocks});
          next();
        });
  }

  live_req& any_live() {
    return live[pick(0, live.size() - 1)];
  }

  /// After growth: the old blocks stay, except a shared partial last block
  /// replaced by its copy.
  void check_growth(const block_table& before, const block_table& after,
                    const char* op) {
    auto keep = before.blocks.size();
    if (before.num_tokens % test_block_size != 0 && keep > 0)
      --keep;
    check(after.blocks.size() >= keep
            && std::equal(before.blocks.begin(), before.blocks.begin() + keep,
                          after.blocks.begin()),
          std::string{op} + ": existing blocks moved");
  }

  void grow(bool named) {
    auto& lr = any_live();
    auto id = lr.id;
    auto before = lr.table;
    // Now and then deliberately past the limit.
    bool too_far = pick(0, 19) == 0;
    auto room = client_max_len - before.num_tokens;
    std::uint64_t k = too_far ? room + 1 : std::min<std::uint64_t>(pick(1, 8), room);
    auto on_table = [this, id, before, k, named](block_table& t) {
      check_table(t, before.num_tokens + k, named ? "append" : "extend");
      check_growth(before, t, named ? "append" : "extend");
      for (auto& x : live)
        if (x.id == id)
          x.table = std::move(t);
      next();
    };
    auto on_err = [this, id, too_far, named](caf::error& err) {
      if (too_far && !lost_to_preemption(err))
        check(has_code(err, errc::exceeds_max_sequence_length),
              "growth past the limit gave " + render(err));
      else
        on_error(err, named ? "append" : "extend", {errc::out_of_blocks}, id);
      next();
    };
    if (named) {
      std::vector<token_id> tokens(k);
      for (auto& t : tokens)
        t = static_cast<token_id>(pick(0, 50));
      self->request(mgr, caf::infinite, append_atom::value, id, tokens)
        .then(on_table, on_err);
    } else {
      self->request(mgr, caf::infinite, extend_atom::value, id, k)
        .then(on_table, on_err);
    }
  }

  void extend() {
    grow(false);
  }

  void append() {
    grow(true);
  }

  void fork() {
    auto& parent = any_live();
    auto child = next_id++;
    self->request(mgr, caf::infinite, fork_atom::value, parent.id, child)
      .then(
        [this, child, want = parent.table](request_handle_actor&,
                                           block_table& t) {
          check(t == want, "fork: child's table differs from the parent's");
          live.push_back(live_req{child, std::move(t)});
          next();
        },
        [this, parent = parent.id](caf::error& err) {
          on_error(err, "fork", {}, parent);
          next();
        });
  }

  void drop(request_id id) {
    live.erase(std::remove_if(live.begin(), live.end(),
                              [id](auto& x) { return x.id == id; }),
               live.end());
  }

  void free() {
    auto id = any_live().id;
    self->request(mgr, caf::infinite, free_atom::value, id)
      .then(
        [this, id](std::uint32_t) {
          drop(id);
          next();
        },
        [this, id](caf::error& err) {
          on_error(err, "free", {}, id);
          next();
        });
  }

  void step() {
    step_request s;
    std::vector<request_id> freeing;
    if (live.size() > 2 && pick(0, 1) == 0) {
      freeing.push_back(live.front().id);
      s.frees.push_back(live.front().id);
    }
    std::vector<std::pair<request_id, std::uint64_t>> growing;
    for (auto& lr : live) {
      if (!freeing.empty() && lr.id == freeing.front())
        continue;
      if (pick(0, 2) != 0 || lr.table.num_tokens >= client_max_len)
        continue;
      auto k = std::min<std::uint64_t>(pick(1, 6),
                                       client_max_len - lr.table.num_tokens);
      s.extends.push_back(extend_op{lr.id, static_cast<std::uint32_t>(k)});
      growing.emplace_back(lr.id, k);
    }
    std::vector<allocation_request> admits;
    if (live.size() < 7 && pick(0, 1) == 0)
      s.admits.push_back(make(next_id++));
    admits = s.admits;
    self->request(mgr, caf::infinite, step_atom::value, std::move(s))
      .then(
        [this, freeing, growing, admits](step_result& r) {
          for (auto id : r.freed) {
            check(std::count(freeing.begin(), freeing.end(), id) == 1,
                  "step: freed a request it was not asked to");
            drop(id);
          }
          rep->step_preempted += r.preempted.size();
          for (auto id : r.preempted)
            drop(id);
          std::vector<request_id> failed;
          for (auto& f : r.failed) {
            on_error(f.error, "step op", {errc::out_of_blocks}, f.id);
            failed.push_back(f.id);
          }
          for (auto id : freeing)
            check(std::count(r.freed.begin(), r.freed.end(), id)
                      + std::count(failed.begin(), failed.end(), id)
                    == 1,
                  "step: a free neither done nor failed");
          for (auto& [id, k] : growing) {
            auto gone = std::count(r.preempted.begin(), r.preempted.end(), id)
                        + std::count(failed.begin(), failed.end(), id);
            if (gone != 0)
              continue;
            for (auto& lr : live) {
              if (lr.id != id)
                continue;
              auto before = lr.table;
              lr.table.num_tokens += k;
              for (auto& d : r.changed)
                if (d.id == id) {
                  check(d.num_tokens == lr.table.num_tokens,
                        "step: delta's token count");
                  lr.table.blocks.resize(d.first);
                  lr.table.blocks.insert(lr.table.blocks.end(),
                                         d.blocks.begin(), d.blocks.end());
                }
              check_table(lr.table, before.num_tokens + k, "step extend");
            }
          }
          for (auto& a : r.admitted) {
            auto i = std::find_if(admits.begin(), admits.end(),
                                  [&](auto& q) { return q.id == a.id; });
            check(i != admits.end(), "step: admitted an unknown request");
            if (i != admits.end())
              check_table(a.table, i->initial_tokens, "step admit");
            live.push_back(live_req{a.id, a.table});
          }
          check(r.free_blocks + r.used_blocks > 0, "step: empty figures");
          next();
        },
        [this](caf::error& err) {
          on_error(err, "step", {});
          next();
        });
  }

  void stats() {
    self->request(mgr, caf::infinite, stats_atom::value)
      .then(
        [this](cache_manager_stats& s) {
          check(s.free_blocks <= s.total_blocks
                  && s.cached_blocks <= s.free_blocks
                  && s.used_memory_bytes
                       == (s.total_blocks - s.free_blocks)
                            * test_bytes_per_block,
                "stats: inconsistent figures");
          next();
        },
        [this](caf::error& err) {
          on_error(err, "stats", {});
          next();
        });
  }

  /// Frees what is left, one by one, then reports and quits.
  void finish() {
    if (live.empty()) {
      rep->done();
      self->quit();
      return;
    }
    auto id = live.back().id;
    live.pop_back();
    self->request(mgr, caf::infinite, free_atom::value, id)
      .then([this](std::uint32_t) { finish(); },
            [this, id](caf::error& err) {
              on_error(err, "final free", {}, id);
              finish();
            });
  }
};

} // namespace kvtest
