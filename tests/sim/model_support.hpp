// model_support: the pieces of the seeded random model tests of the
// batcher (batcher_model_test) and of conversations
// (conversation_model_test): random small scenarios tight enough to
// preempt, and a run against the pool core to the end of its drain with
// what must hold then checked.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "conversation.hpp"
#include "drafts.hpp"
#include "scenario.hpp"

namespace kvactor::sim::test {

/// A random scenario of 2-3 tenants on a pool of 32-96 blocks: tight, so
/// that requests preempt each other; every request fits on its own. With
/// `chunked`, a prefill chunk of 1 to 2 blocks and a bit (any size, prompts
/// being up to 9 blocks); with `drafts`, 1 to 6 draft tokens per decode
/// step, accepted with a chance of 0 to 1; with `conversation`, sessions
/// of 1 to 2-4 turns on about two workloads of three.
nlohmann::json random_scenario(std::uint64_t seed, bool swap,
                               bool chunked = false, bool drafts = false,
                               bool conversation = false);

/// Parses `j`; when a request could not fit (a random quota too small after
/// all), grows the pool and the quotas until it does.
scenario fitting(nlohmann::json j);

/// What a series of runs went through, summed.
struct run_summary {
  std::uint64_t preempted_in_step = 0, by_quota = 0, by_cache = 0, swaps = 0,
                swap_ins = 0, swap_out_failures = 0, readmitted = 0, hits = 0,
                chunk_extends = 0, preempted_mid_prefill = 0,
                swapped_mid_prefill = 0, kv_checked = 0;
  draft_figures drafts;
  conversation_figures conv;
};

/// Runs `s` to the end of its drain and checks what must hold then.
void run_and_check(const scenario& s, std::uint64_t chaos_seed,
                   double supervisor_rate, run_summary& sum);

} // namespace kvactor::sim::test
