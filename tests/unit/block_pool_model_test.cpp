// block_pool_core against pool_reference_model: seeded random runs of mixed
// operations (shared system prompts, several tenants with quotas,
// reservations and a shared namespace, forks, reclaims, evictions, steps with
// preemption), comparing every answer and the whole state after each one.
#include <chrono>
#include <string>

#include <boost/test/unit_test.hpp>

#include "block_pool_model.hpp"
#include "soak.hpp"

using namespace kvactor;
using kvactor::detail::block_pool_core;
using namespace kvactor::test; // the model and model_checks.hpp
using namespace kvactor::test::block_pool_model;

namespace {

/// Runs `p` (the harness fails the test at the first difference from the
/// model) and prints what it covered.
coverage run_and_report(const run_params& p) {
  auto start = std::chrono::steady_clock::now();
  harness h(p);
  h.run();
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
              std::chrono::steady_clock::now() - start)
              .count();
  BOOST_TEST_MESSAGE("seed " << p.seed << ", " << p.ops << " ops, " << ms
                             << " ms: " << h.cov().report());
  return h.cov();
}

/// Runs `p`, prints what it covered, and checks the pressure was real.
void run_and_check_coverage(const run_params& p) {
  auto cov = run_and_report(p);
  auto& n = cov.n;
  auto has = [&](const std::string& k) { return n.count(k) && n.at(k) > 0; };
  for (auto k : {"allocate:ok", "allocate:out_of_blocks", "allocate:quota_exceeded",
                 "allocate:duplicate_request", "allocate:invalid_request",
                 "allocate:unknown_tenant", "allocate:exceeds_max_sequence_length",
                 "extend:ok", "extend:out_of_blocks", "extend:unknown_request",
                 "extend:exceeds_max_sequence_length", "extend:invalid_request",
                 "fork:ok", "fork:duplicate_request", "release:ok",
                 "reclaim:live", "reclaim:stale", "preempt:ok",
                 "step preempted", "step admitted", "step admission blocked",
                 "step repeats an id", "settle:ok", "settle:invalid_request",
                 "drafts rejected", "drafts all accepted", "step verdict cut a table", "discard:ok",
                 "can_allocate:yes", "can_allocate:no", "chunk admitted",
                 "cached_prefix:ok", "preempt draining:ok", "drain begun",
                 "drain ended by time", "drain ended by its stepper"})
    BOOST_TEST(has(k), "seed " << p.seed << " never reached " << k);
  if (p.block_size > 1) { // with one token per block, no block is partly full
    BOOST_TEST(has("copy on write"), "seed " << p.seed << " never copied on write");
    // Copies held until the device answers: made, failed, and either after
    // their request ended; a failed one handing back a block its sharer
    // wrote past meanwhile.
    for (auto k : {"held copy committed", "held copy undone",
                   "held copy's request ended", "held commit after free",
                   "held undo after free",
                   "held undo hands back a block written past"})
      BOOST_TEST(has(k), "seed " << p.seed << " never reached " << k);
    // Two copies in flight at once take a step with two: a few times in
    // 20,000 operations, when at all - required of the long runs only.
    if (p.ops >= 100000)
      BOOST_TEST(has("held copies settled in parts"),
                 "seed " << p.seed << " never settled held copies in parts");
  }
  if (p.prefix_caching)
    for (auto k : {"prefix hit", "event:stored", "event:removed",
                   "chunk admitted after a hit", "salted prefix hit",
                   "cached_prefix hit", "discard took what was built on it",
                   "discard stopped a holder's indexing",
                   "one scan for a step's discards"})
      BOOST_TEST(has(k), "seed " << p.seed << " never reached " << k);
}

} // namespace

BOOST_AUTO_TEST_SUITE(block_pool_model_suite)

BOOST_AUTO_TEST_CASE(core_matches_the_reference_model_on_random_operations) {
  // Three fixed seeds, each a different pool size, 100k operations each.
  run_and_check_coverage({1, 64, 4, true, 100000});
  run_and_check_coverage({2, 128, 4, true, 100000});
  run_and_check_coverage({3, 256, 4, true, 100000});
  // KVACTOR_SOAK: more seeds, each with its own pool and block size.
  for (auto seed : test::soak_seeds()) {
    static const std::uint32_t blocks[] = {32, 48, 64, 96, 128, 256};
    static const std::uint32_t sizes[] = {1, 3, 4, 16};
    run_and_report({seed, blocks[seed % 6], sizes[(seed / 6) % 4],
                    seed % 5 != 0, 100000});
  }
}

BOOST_AUTO_TEST_CASE(core_matches_the_reference_model_with_odd_block_sizes) {
  run_and_check_coverage({7, 96, 3, true, 20000});
  run_and_check_coverage({5, 48, 1, true, 20000});
}

BOOST_AUTO_TEST_CASE(core_matches_the_reference_model_without_prefix_caching) {
  run_and_check_coverage({6, 64, 4, false, 20000});
}

BOOST_AUTO_TEST_SUITE_END()
