// core_driver: runs the simulator's batcher against a block_pool_core
// directly - the way scheduler.cpp runs it against the manager actor, one
// step at a time (start_step, the step message and its follow-ups, swaps,
// the read-back pick, record, end_step; idle gaps skipped if asked) - and
// checks the pool and the batcher's messages as it goes. A "supervisor" may
// preempt requests at the points where the real one's notices can arrive.
// It keeps what each K/V slot would hold - the batcher's computed tokens
// written, copy-on-write copies and swaps applied - and checks every
// running request's slots after each step: the read-back of a run on host
// storage, for every request and step. CAF-free.
#pragma once

#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "batcher.hpp"
#include "kvactor/actors/block_pool_core.hpp"
#include "scenario.hpp"

namespace kvactor::sim::test {

class core_driver {
public:
  /// `supervisor_rate`: the chance, at each point where it may act, that the
  /// supervisor preempts requests (drawn from `chaos_seed`). `series_cap`:
  /// the batcher's time series rows at most (step_series).
  core_driver(const scenario& s, std::uint64_t chaos_seed,
              double supervisor_rate = 0,
              std::size_t series_cap = default_series_cap);

  /// Runs one step; every check failure is a Boost.Test error.
  void step();

  /// Steps until the batcher is done or `max_steps` ran (skipped idle steps
  /// not counted); returns whether it is done.
  bool run(std::uint64_t max_steps);

  /// From now on, run() skips idle gaps of at least `min_gap` steps between
  /// steps (batcher::skip_idle), as the scheduler actor does; by default
  /// it steps through every one.
  void skip_idle_gaps(std::uint64_t min_gap) noexcept {
    skip_min_gap_ = min_gap;
  }

  batcher& b() noexcept {
    return b_;
  }
  const detail::block_pool_core& core() const noexcept {
    return core_;
  }

  std::uint64_t supervisor_preemptions() const noexcept {
    return supervisor_victims_.size();
  }
  std::uint64_t step_messages() const noexcept {
    return messages_;
  }
  std::uint64_t swap_out_failures() const noexcept {
    return swap_out_failures_;
  }
  /// Of those, swap-outs of requests the supervisor had preempted (what
  /// the manager answers unknown_request).
  std::uint64_t swap_outs_of_preempted() const noexcept {
    return swap_outs_of_preempted_;
  }
  /// The most requests that ran at once.
  std::uint64_t peak_running() const noexcept {
    return peak_running_;
  }
  /// Requests preempted by a step, or swapped out, while the pool held
  /// only part of their prompt (chunked prefill).
  std::uint64_t preempted_mid_prefill() const noexcept {
    return preempted_mid_prefill_;
  }
  std::uint64_t swapped_mid_prefill() const noexcept {
    return swapped_mid_prefill_;
  }
  /// Requests that left the pool holding draft tokens no verdict settled
  /// (preempted by the supervisor, or freed to make room), and requests
  /// swapped out holding some.
  std::uint64_t left_with_drafts() const noexcept {
    return left_with_drafts_;
  }
  std::uint64_t swapped_with_drafts() const noexcept {
    return swapped_with_drafts_;
  }
  /// Tokens whose K/V slot was checked, and of those found wrong.
  std::uint64_t kv_checked() const noexcept {
    return kv_checked_;
  }
  std::uint64_t kv_wrong() const noexcept {
    return kv_wrong_;
  }

private:
  /// Checks a step message before it is sent.
  void check_request(const step_request& req);
  /// Runs one step message and applies the reply; false: nothing follows.
  bool send(const step_request& req, bool first);
  void swap_phase();
  /// Every running request (as pick_verify names them) is resident in the
  /// pool with the table the batcher thinks it has.
  void check_running();
  cache_manager_stats stats() const;
  void check_invariant(const char* where);
  /// With probability supervisor_rate: preempt what choose_victims names;
  /// the batcher hears of it in the next step reply's `ended` (as the pool
  /// reports it) and by the manager's notice, before or after that reply.
  void maybe_supervise();

  /// What one slot holds: the K/V of `token` at `pos`, if ever written.
  struct kv_row {
    token_id token = 0;
    std::uint32_t pos = 0;
    bool written = false;
  };
  /// Whether the pool holds `id` with part of its admission's prompt.
  bool mid_prefill(request_id id) const;
  /// Copies block `src` of `from` over block `dst` of `to`.
  void copy_block(const std::vector<kv_row>& from, block_id src,
                  std::vector<kv_row>& to, block_id dst);
  /// The step's computed tokens land in their slots (the batcher's order:
  /// the last named for a slot wins).
  void write_computed();

  const scenario& s_;
  cache_config cfg_;
  detail::block_pool_core core_;
  batcher b_;
  std::mt19937_64 rng_;
  double supervisor_rate_;
  std::set<request_id> supervisor_victims_;
  std::vector<request_ended> owed_; ///< for the next step reply
  std::vector<std::pair<request_id, std::uint64_t>> late_; ///< notices
  std::uint64_t messages_ = 0;
  std::uint64_t skip_min_gap_ = 0; ///< 0: no skipping
  std::uint64_t swap_out_failures_ = 0;
  std::uint64_t swap_outs_of_preempted_ = 0;
  std::uint64_t peak_running_ = 0;
  std::unordered_map<request_id, std::uint64_t> prompt_len_; ///< as admitted
  std::uint64_t preempted_mid_prefill_ = 0;
  std::uint64_t swapped_mid_prefill_ = 0;
  std::uint64_t left_with_drafts_ = 0;
  std::uint64_t swapped_with_drafts_ = 0;
  std::vector<kv_row> device_kv_; ///< [num_gpu_blocks * block_size]
  std::vector<kv_row> host_kv_;   ///< [num_host_blocks * block_size]
  std::uint64_t kv_checked_ = 0;
  std::uint64_t kv_wrong_ = 0;
};

} // namespace kvactor::sim::test
