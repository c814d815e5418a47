// conversation: the session figures' sums and rates.
#include "conversation.hpp"

namespace kvactor::sim {

namespace {

double ratio(std::uint64_t x, std::uint64_t of) noexcept {
  return of == 0 ? 0.0 : double(x) / double(of);
}

} // namespace

void conversation_figures::add(const conversation_figures& x) noexcept {
  first_turns += x.first_turns;
  follow_ups += x.follow_ups;
  follow_ups_turned_away += x.follow_ups_turned_away;
  sessions_completed += x.sessions_completed;
  first_prompt_tokens += x.first_prompt_tokens;
  first_hit_tokens += x.first_hit_tokens;
  follow_up_prompt_tokens += x.follow_up_prompt_tokens;
  follow_up_hit_tokens += x.follow_up_hit_tokens;
  history_tokens += x.history_tokens;
}

double conversation_figures::first_hit_rate() const noexcept {
  return ratio(first_hit_tokens, first_prompt_tokens);
}

double conversation_figures::follow_up_hit_rate() const noexcept {
  return ratio(follow_up_hit_tokens, follow_up_prompt_tokens);
}

double conversation_figures::history_kept() const noexcept {
  return ratio(follow_up_hit_tokens, history_tokens);
}

} // namespace kvactor::sim
