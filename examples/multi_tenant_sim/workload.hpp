// workload: the requests a scenario's tenants send, step by step - Poisson
// arrivals (with bursts), prompt and output lengths, shared system prompts,
// and conversations' follow-up turns. Deterministic for a scenario and seed
// (follow-ups' arrival steps: for when their previous turns finish).
// CAF-free.
#pragma once

#include <cstdint>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include "conversation.hpp"
#include "scenario.hpp"

namespace kvactor::sim {

/// One request as the client sends it; its output is decided up front, so
/// a request preempted and recomputed generates the same tokens again.
struct sim_request {
  request_id id = 0;
  std::uint32_t workload = 0; ///< index into scenario::workloads
  std::uint64_t arrival = 0;  ///< step
  kvactor::priority priority = kvactor::priority::normal;
  std::int32_t system_prompt = -1; ///< which one it starts with, -1 = none
  std::vector<token_id> prompt;    ///< system prompt (if any) + its own
  std::vector<token_id> output;
  turn_info conv; ///< its session (a workload without conversation: its own)
};

class workload_generator {
public:
  explicit workload_generator(const scenario& s);

  /// The requests arriving at `step`, in id order: per workload, the
  /// follow-up turns due (in the order they were scheduled), then the new
  /// arrivals (none from s.steps on; follow-ups come on).
  /// REQUIRES: called once per step, steps increasing.
  std::vector<sim_request> arrivals(std::uint64_t step);

  /// As arrivals(step), but at most room[w] of workload w's, follow-ups
  /// first: the rest are turned away and counted in turned_away[w]
  /// (resized to the workloads) - new ones drawn but never generated (no
  /// tokens, no id), follow-ups dropped, ending their sessions, and counted
  /// in (*follow_ups_turned_away)[w] too if given (resized likewise).
  /// REQUIRES: one room per workload.
  std::vector<sim_request>
  arrivals(std::uint64_t step, const std::vector<std::uint64_t>& room,
           std::vector<std::uint64_t>& turned_away,
           std::vector<std::uint64_t>* follow_ups_turned_away = nullptr);

  /// `r` finished: its last output token was sampled in `step`. Unless it
  /// was its session's last turn, the next turn is scheduled to arrive in
  /// step + 1 + think (think drawn from the workload's think_steps): its
  /// prompt is r's prompt and output and fresh user tokens. Returns whether
  /// one was scheduled. A turn that never finishes ends its session.
  bool finished(sim_request r, std::uint64_t step);

  /// The first step in [from, limit) in which a request arrives - a
  /// follow-up turn due, or a new one drawn - else `limit`: how long an
  /// idle run has nothing to do. The new arrivals of the steps looked at
  /// are drawn as arrivals() would draw them and kept for it (those of the
  /// step returned; none came before it), so a run that skips steps gets
  /// the requests of one that steps through, and a look followed by
  /// arrivals() of the same steps draws nothing twice. Draws at most
  /// limit - from steps' worth (the caller bounds the work per call).
  /// REQUIRES: `from` is the next step arrivals() is called for, or after
  /// it if none arrives in between.
  std::uint64_t next_arrival(std::uint64_t from, std::uint64_t limit);

  /// Follow-up turns scheduled that have not arrived yet.
  std::size_t pending_follow_ups() const noexcept {
    return follow_ups_.size();
  }

  /// Requests generated so far.
  std::uint64_t generated() const noexcept {
    return next_id_ - 1;
  }

private:
  struct source {
    std::mt19937_64 rng;
    /// The sessions' lengths and seeds (conversation): a stream apart, so
    /// that `rng` draws what it draws without conversation.
    std::mt19937_64 conv_rng;
    std::vector<std::vector<token_id>> system_prompts;
  };

  /// A new request of workload `w` arriving at `step` (no id yet).
  sim_request make_request(std::size_t w, std::uint64_t step);
  /// How many new requests of workload `w` arrive at `step` (drawn from its
  /// stream; none from s.steps on).
  std::uint32_t draw_count(std::size_t w, std::uint64_t step);

  const scenario& scenario_;
  std::vector<source> sources_; ///< per workload
  request_id next_id_ = 1;
  /// Follow-up turns by (arrival step, order scheduled), without ids.
  std::map<std::pair<std::uint64_t, std::uint64_t>, sim_request> follow_ups_;
  std::uint64_t scheduled_ = 0;
  /// What next_arrival drew ahead: no new arrival in the steps before
  /// quiet_until_ (from the next arrivals() step on), and the counts of
  /// drawn_step_ (no_step: none kept) per workload, until arrivals() takes
  /// them.
  static constexpr std::uint64_t no_step = ~std::uint64_t{0};
  std::uint64_t quiet_until_ = 0;
  std::uint64_t drawn_step_ = no_step;
  std::vector<std::uint32_t> drawn_;
};

} // namespace kvactor::sim
