// Seeded random steps the way the pool actor runs them: copies held until
// the device answers, over forked requests that share partly filled
// blocks, with draft tokens and the verdicts on them in later steps. Each
// step's copies are made or fail at random. The invariant (copy-on-write
// flags included) holds after every step and every settle, and once every
// request ends no block is left owned.
#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/actors/block_pool_core.hpp"
#include "kvactor/messages/step.hpp"
#include "pool_fixture.hpp"

using namespace kvactor;
using namespace kvactor::test;

namespace {

struct tally {
  std::uint64_t made = 0, failed = 0, rejected_after_failure = 0;
};

void random_held_steps(std::uint64_t seed, tally& t) {
  std::mt19937_64 rng{seed};
  auto pick = [&](std::size_t n) {
    return static_cast<std::size_t>(rng() % n);
  };
  pool_fixture f;
  f.make(40);
  auto& pool = f.pool();
  std::vector<request_id> live;
  std::set<request_id> after_failure; // drafted in a step whose copy failed
  request_id next = 1;
  for (int iter = 0; iter < 3000; ++iter) {
    auto op = pick(8);
    if (live.size() < 2 || op == 0) {
      auto prompt = run(static_cast<token_id>(pick(3) * 100), 1 + pick(9));
      if (pool.allocate(prompt_req(next, prompt)))
        live.push_back(next);
      ++next;
    } else if (op <= 2) {
      if (pool.fork(live[pick(live.size())], next)) // refused with drafts
        live.push_back(next);
      ++next;
    } else if (op == 3) {
      auto i = pick(live.size());
      BOOST_REQUIRE(pool.release(live[i]));
      after_failure.erase(live[i]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      step_request step;
      for (auto id : live)
        if (f.drafts(id) != 0 && pick(2) == 0) {
          auto accepted = static_cast<std::uint32_t>(pick(f.drafts(id) + 1));
          step.verdicts.push_back(draft_verdict{id, accepted});
          if (accepted < f.drafts(id) && after_failure.count(id))
            ++t.rejected_after_failure;
        }
      std::set<request_id> chosen;
      for (auto k = 1 + pick(4); k > 0; --k)
        chosen.insert(live[pick(live.size())]);
      for (auto id : chosen) {
        auto n = static_cast<std::uint32_t>(1 + pick(3));
        auto d = pick(2) == 0 ? static_cast<std::uint32_t>(pick(n + 1)) : 0u;
        step.extends.push_back(extend_op{id, n, d});
        for (std::uint32_t i = 0; i < n; ++i)
          step.tokens.push_back(static_cast<token_id>(pick(4)));
      }
      step.preempt_on_shortage = pick(4) != 0;
      auto res = pool.run_step(step, true);
      for (auto id : res.preempted) {
        live.erase(std::find(live.begin(), live.end(), id));
        after_failure.erase(id);
      }
      BOOST_REQUIRE_MESSAGE(invariant(pool) == "ok", "seed " << seed << " step " << iter);
      if (!res.copies.empty()) {
        bool made = pick(2) == 0;
        pool.settle_copies(res.copies, made);
        ++(made ? t.made : t.failed);
        if (!made)
          for (auto& e : step.extends)
            if (e.num_draft != 0)
              after_failure.insert(e.id);
      }
    }
    BOOST_REQUIRE_MESSAGE(invariant(pool) == "ok", "seed " << seed << " op " << iter);
    BOOST_REQUIRE(pool.copies_in_flight() == 0u);
    // Busy but not stuck: requests only grow, and a full pool takes no copy.
    while (live.size() > 10 || (live.size() > 2 && pool.free_blocks() < 4)) {
      BOOST_REQUIRE(pool.release(live.front()));
      after_failure.erase(live.front());
      live.erase(live.begin());
    }
  }
  for (auto id : live)
    BOOST_REQUIRE(pool.release(id));
  BOOST_TEST(pool.used_blocks() == 0u);
}

} // namespace

BOOST_AUTO_TEST_CASE(random_held_copy_steps_with_drafts_keep_the_invariant) {
  tally t;
  for (std::uint64_t seed : {20261203u, 7u, 1234567u})
    random_held_steps(seed, t);
  BOOST_TEST_MESSAGE("copies made " << t.made << ", failed " << t.failed
                     << ", drafts rejected after a failed copy "
                     << t.rejected_after_failure);
  // Every path ran.
  BOOST_TEST(t.made > 100u);
  BOOST_TEST(t.failed > 100u);
  BOOST_TEST(t.rejected_after_failure > 20u);
}
