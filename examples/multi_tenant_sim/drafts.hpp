// drafts: speculative decoding in the simulator - the verifier's verdict on
// a step's draft tokens (a seeded draw: each draft accepted with the
// scenario's draft_acceptance until the first rejection), the ids the
// drafts carry, and the figures a run keeps of them. CAF-free.
#pragma once

#include <cstdint>
#include <random>

#include "kvactor/messages/types.hpp"

namespace kvactor::sim {

/// What a tenant's draft tokens came to. A draft the cache held is settled
/// by a verdict (accepted or rejected) or dropped unsettled, when its
/// request left the cache first (preempted, swapped out and recomputed,
/// freed to make room): draft_tokens = accepted + rejected + dropped once a
/// run has drained.
struct draft_figures {
  /// Decode steps: extends of a request past its prefill that computed and
  /// sampled (a request's prefill sampling its first token is none).
  std::uint64_t decode_steps = 0;
  /// Output tokens those sampled: the drafts the verifier accepted, and one
  /// more each (the token the verifier samples).
  std::uint64_t decode_tokens = 0;
  std::uint64_t draft_tokens = 0; ///< in extends that went through (the
                                  ///< cache's draft_tokens counts these)
  std::uint64_t accepted = 0;     ///< kept by a verdict
  std::uint64_t rejected = 0;     ///< dropped by a verdict (the cache's
                                  ///< draft_tokens_rejected)
  std::uint64_t dropped = 0;      ///< unsettled when their request left

  void add(const draft_figures& x) noexcept;
  /// accepted / (accepted + rejected); 0 when nothing was settled.
  double acceptance() const noexcept;
  /// decode_tokens / decode_steps; 0 without a decode step.
  double tokens_per_step() const noexcept;
};

/// The verifier of a run: how many of a step's drafts it accepts.
/// Deterministic for a seed and a sequence of calls.
class draft_verifier {
public:
  /// `k`: drafts per step (0: none); `p`: each one's chance, in [0, 1].
  draft_verifier(std::uint64_t seed, std::uint32_t k, double p);

  std::uint32_t k() const noexcept {
    return k_;
  }

  /// Drafts a request with `remaining` output tokens still to sample sends
  /// with its pending token: min(k, remaining - 1), so that the step's
  /// tokens never run past its output. REQUIRES: remaining >= 1.
  std::uint32_t drafts_for(std::uint64_t remaining) const noexcept;

  /// The leading drafts of `n` the verifier accepts.
  std::uint32_t accept(std::uint32_t n);

  /// The id a rejected draft carries: never `real` (the token the verifier
  /// samples there), so that K/V written for it differ from the real
  /// token's. REQUIRES: vocab >= 2, 0 <= real < vocab.
  static token_id rejected_id(token_id real, std::uint32_t vocab) noexcept;

private:
  std::uint32_t k_;
  std::bernoulli_distribution accept_one_;
  std::mt19937_64 rng_;
};

} // namespace kvactor::sim
