// conversation: multi-turn sessions in the simulator (a workload's
// "conversation") - where a request stands in its session, and the figures
// a run keeps of the turns: how much of a session's history the prefix
// cache still held when its next turn came. CAF-free.
#pragma once

#include <cstdint>

#include "kvactor/messages/types.hpp"

namespace kvactor::sim {

/// A request's place in its session. A workload without conversation sends
/// sessions of one turn.
struct turn_info {
  request_id session = 0;  ///< the id of the session's first turn
  std::uint32_t turn = 0;  ///< 0: the first; k: the k-th follow-up
  std::uint32_t turns = 1; ///< the session's, drawn at its first turn
  /// Leading prompt tokens resent from the previous turn (its prompt and
  /// output); 0 for a first turn.
  std::uint64_t history = 0;
  /// The session's own stream: its follow-ups' draws (think steps, user
  /// tokens, output), so they are the same whenever the turns finish.
  std::uint64_t seed = 0;

  bool follow_up() const noexcept {
    return turn > 0;
  }
  bool last() const noexcept {
    return turn + 1 >= turns;
  }
};

/// What a tenant's sessions came to. Arrivals count those turned away;
/// the prompt and hit tokens count first admissions only (a re-admission
/// after a preemption finds its own blocks, not its history).
struct conversation_figures {
  std::uint64_t first_turns = 0; ///< arrived (turned away included)
  std::uint64_t follow_ups = 0;  ///< arrived (turned away included)
  std::uint64_t follow_ups_turned_away = 0; ///< each ended its session
  std::uint64_t sessions_completed = 0;     ///< their last turn finished
  std::uint64_t first_prompt_tokens = 0;    ///< first turns' prompts
  std::uint64_t first_hit_tokens = 0;       ///< of those, in the cache
  std::uint64_t follow_up_prompt_tokens = 0;
  std::uint64_t follow_up_hit_tokens = 0;
  /// Of follow_up_prompt_tokens, the history part (the previous turn's
  /// prompt and output); at most all but its last token can be cached
  /// (the last output token is sampled, never computed), and only whole
  /// blocks.
  std::uint64_t history_tokens = 0;

  void add(const conversation_figures& x) noexcept;
  /// hits / prompt tokens; 0 when there were none.
  double first_hit_rate() const noexcept;
  double follow_up_hit_rate() const noexcept;
  /// follow_up_hit_tokens / history_tokens: the history the cache kept.
  double history_kept() const noexcept;
};

} // namespace kvactor::sim
