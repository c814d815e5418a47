// drafts: the verifier's draw and the draft figures.
#include "drafts.hpp"

#include <algorithm>

namespace kvactor::sim {

void draft_figures::add(const draft_figures& x) noexcept {
  decode_steps += x.decode_steps;
  decode_tokens += x.decode_tokens;
  draft_tokens += x.draft_tokens;
  accepted += x.accepted;
  rejected += x.rejected;
  dropped += x.dropped;
}

double draft_figures::acceptance() const noexcept {
  auto settled = accepted + rejected;
  return settled == 0 ? 0.0 : double(accepted) / double(settled);
}

double draft_figures::tokens_per_step() const noexcept {
  return decode_steps == 0 ? 0.0 : double(decode_tokens) / double(decode_steps);
}

draft_verifier::draft_verifier(std::uint64_t seed, std::uint32_t k, double p)
  : k_(k), accept_one_(p) {
  // A stream of its own (seed_seq keeps 32 bits of each value): turning
  // drafts on changes no arrival, length or token of the workloads.
  std::seed_seq seq{seed & 0xffffffffu, seed >> 32, std::uint64_t{0x64726166}};
  rng_.seed(seq);
}

std::uint32_t draft_verifier::drafts_for(std::uint64_t remaining) const noexcept {
  return static_cast<std::uint32_t>(
    std::min<std::uint64_t>(k_, remaining == 0 ? 0 : remaining - 1));
}

std::uint32_t draft_verifier::accept(std::uint32_t n) {
  std::uint32_t kept = 0;
  while (kept < n && accept_one_(rng_))
    ++kept;
  return kept;
}

token_id draft_verifier::rejected_id(token_id real, std::uint32_t vocab) noexcept {
  return static_cast<token_id>((static_cast<std::uint64_t>(real) + 1) % vocab);
}

} // namespace kvactor::sim
