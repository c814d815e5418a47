// Swaps racing everything else, through the actors, seeded: allocate,
// extend, free, discard, steps and GC interleave with swap-outs and
// swap-ins whose device copies finish late, in any order (a slow storage
// completes them one by one or all at once). Requests are freed or
// discarded mid-swap and their ids admitted again before the copy ends.
// After every operation the pool's invariant holds and every outcome is
// one the contract allows; at the end every swap was answered, and once
// the live requests are freed every device and host block is free again.
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "fixture.hpp"
#include "slow_storage.hpp"
#include "soak.hpp"

using namespace kvactor;
using namespace kvactor::test;

namespace {

/// A cache with a host tier of 8 blocks on a slow_storage, driven at random.
struct churn : cache_fixture {
  std::shared_ptr<slow_storage> store;
  std::mt19937_64 rng;
  std::map<std::string, std::size_t> cov;

  /// A swap sent and not yet answered: its own actor, so replies match.
  /// `ended`: its request was freed since (its copy was in flight then: a
  /// swap refused in its first phase is answered within the same run).
  struct swap_call {
    std::unique_ptr<caf::scoped_actor> from;
    request_id id;
    bool out;
    bool ended = false;
  };
  std::vector<swap_call> calls;
  std::set<request_id> freed_mid_swap; ///< freed while a swap of it was out

  explicit churn(std::uint64_t seed,
                 std::shared_ptr<slow_storage> s = make_slow(host_tier_config()))
    : cache_fixture(host_tier_config(), s), store(std::move(s)), rng(seed) {
  }

  std::uint64_t below(std::uint64_t n) {
    return rng() % n;
  }
  request_id any_id() {
    return 1 + below(16);
  }
  /// Marks the swaps in flight of `id` as outliving their request.
  void ended(request_id id) {
    for (auto& c : calls)
      c.ended |= c.id == id;
  }
  std::size_t swaps_of(request_id id) const {
    std::size_t n = 0;
    for (auto& c : calls)
      n += c.id == id;
    return n;
  }

  void expect(const std::string& op, const std::string& got,
              std::set<std::string> allowed) {
    ++cov[op + ":" + got];
    BOOST_REQUIRE_MESSAGE(allowed.count(got) > 0, op << " gave " << got);
  }

  /// Half the time one of `ids` (if any), else any id.
  request_id one_of(const std::vector<request_id>& ids) {
    return ids.empty() || below(2) == 0 ? any_id() : ids[below(ids.size())];
  }

  void op_allocate() {
    // Often an id freed while its swap is still out.
    auto id = one_of({freed_mid_swap.begin(), freed_mid_swap.end()});
    auto pending = swaps_of(id) > 0 && freed_mid_swap.count(id) > 0;
    auto res = allocate(id, 1 + below(40), 64);
    expect("allocate", outcome(res), {"ok", "duplicate_request", "out_of_blocks"});
    if (res && pending)
      ++cov["admitted again mid-swap"];
  }
  void op_free() {
    // Often one whose swap is out.
    std::vector<request_id> swapping;
    for (auto& c : calls)
      swapping.push_back(c.id);
    auto id = one_of(swapping);
    // A third of them as a failed pass's discard: one that lands during a
    // swap-out takes the request's blocks out of the index at once, its
    // ghost freeing them when the copy ends.
    bool discard = below(3) == 0;
    auto res = discard ? ask<std::uint32_t>(mgr, discard_atom::value, id)
                       : free(id);
    expect(discard ? "discard" : "free", outcome(res), {"ok", "unknown_request"});
    if (res && swaps_of(id) > 0) {
      freed_mid_swap.insert(id);
      ended(id);
      ++cov[discard ? "discarded mid-swap" : "freed mid-swap"];
    }
  }
  /// A step through the manager that frees one request and admits one:
  /// often one whose swap is out, and an id freed while its swap is out
  /// (the step path's release and admission meet the same ghosts).
  void op_step() {
    std::vector<request_id> swapping;
    for (auto& c : calls)
      swapping.push_back(c.id);
    step_request req;
    auto gone = one_of(swapping);
    bool discard = below(3) == 0;
    (discard ? req.discards : req.frees) = {gone};
    auto id = one_of({freed_mid_swap.begin(), freed_mid_swap.end()});
    auto pending = swaps_of(id) > 0 && freed_mid_swap.count(id) > 0;
    req.admits = {make_request(cfg, id, 1 + below(40), 64)};
    auto res = step(std::move(req));
    BOOST_REQUIRE_MESSAGE(res, "step failed whole: " << outcome(res));
    for (auto& f : res->failed)
      expect("step", outcome(f.error), {"unknown_request", "duplicate_request"});
    if (!res->freed.empty() && swaps_of(gone) > 0) {
      freed_mid_swap.insert(gone);
      ended(gone);
      ++cov[discard ? "step discarded mid-swap" : "step freed mid-swap"];
    }
    if (!res->admitted.empty() && (pending || (gone == id && swaps_of(id) > 0)))
      ++cov["step admitted again mid-swap"];
  }
  void op_extend() {
    auto res = extend(any_id(), 1 + below(6));
    expect("extend", outcome(res),
           {"ok", "unknown_request", "invalid_request", "out_of_blocks",
            "exceeds_max_sequence_length"});
  }
  void op_swap(bool out) {
    swap_call c{std::make_unique<caf::scoped_actor>(sys), any_id(), out, false};
    if (out)
      (*c.from)->send(mgr, swap_out_atom::value, c.id);
    else
      (*c.from)->send(mgr, swap_in_atom::value, c.id);
    calls.push_back(std::move(c));
  }
  void op_complete() {
    auto open = store->incomplete();
    if (open.empty())
      return;
    if (below(4) == 0)
      store->complete();
    else
      store->complete_one(open[below(open.size())]);
  }

  /// Takes in every swap reply that arrived; each must be allowed.
  void collect() {
    for (auto i = calls.begin(); i != calls.end();) {
      std::string got;
      bool told_ended = false;
      (*i->from)->receive([&](std::uint32_t) { got = "ok"; },
                          [&](block_table&) { got = "ok"; },
                          [&](caf::error& err) {
                            got = outcome(err);
                            told_ended = render(err).find(
                                           "ended before its swap")
                                         != std::string::npos;
                          },
                          caf::after(std::chrono::seconds(0)) >> [] {});
      if (got.empty()) {
        ++i;
        continue;
      }
      // A swap whose request was freed while its copy ran is told so;
      // no other is.
      BOOST_REQUIRE_MESSAGE(told_ended == i->ended,
                            "swap of request " << i->id << ": " << got
                              << (i->ended ? ", not told it ended"
                                           : ", told it ended"));
      if (told_ended)
        ++cov["told it ended mid-swap"];
      expect(i->out ? "swap out" : "swap in", got,
             {"ok", "unknown_request", "invalid_request", "out_of_blocks",
              "quota_exceeded"});
      auto id = i->id;
      i = calls.erase(i);
      if (swaps_of(id) == 0)
        freed_mid_swap.erase(id);
    }
  }

  void check() {
    auto ok = ask<bool>(pool, check_atom::value);
    BOOST_REQUIRE_MESSAGE(ok && *ok, "invariant: " << outcome(ok));
  }

  void one_op() {
    switch (below(11)) {
      case 0: case 1: op_allocate(); break;
      case 2: op_free(); break;
      case 10: op_step(); break;
      case 3: op_extend(); break;
      case 4: case 5: op_swap(true); break;
      case 6: op_swap(false); break;
      case 7: case 8: op_complete(); break;
      default: BOOST_REQUIRE(gc()); break;
    }
    run();
    collect();
    check();
  }

  void finish() {
    store->complete();
    run();
    collect();
    BOOST_REQUIRE_MESSAGE(calls.empty(), calls.size() << " swaps never answered");
    auto live = list();
    BOOST_REQUIRE(live);
    for (auto& e : *live)
      BOOST_REQUIRE(free(e.id));
    run();
    check();
    auto s = stats();
    BOOST_REQUIRE(s);
    BOOST_TEST(s->free_blocks == s->total_blocks);
    BOOST_TEST(s->host_free_blocks == s->host_total_blocks);
  }
};

} // namespace

BOOST_AUTO_TEST_SUITE(swap_churn_suite)

BOOST_AUTO_TEST_CASE(swaps_racing_frees_and_readmissions_keep_every_block) {
  auto run = [](std::uint64_t seed) {
    churn c{seed};
    for (int i = 0; i < 3000; ++i) {
      // A failure names its seed and operation: rerun that seed to see it.
      BOOST_TEST_CONTEXT("seed " << seed << ", operation " << i)
      c.one_op();
    }
    BOOST_TEST_CONTEXT("seed " << seed << ", the final drain")
    c.finish();
    std::string report;
    for (auto& [k, v] : c.cov)
      report += k + "=" + std::to_string(v) + " ";
    BOOST_TEST_MESSAGE("seed " << seed << ": " << report);
    return c.cov;
  };
  for (std::uint64_t seed : {1, 2, 3}) {
    auto cov = run(seed);
    for (auto k : {"swap out:ok", "swap in:ok", "swap out:out_of_blocks",
                   "swap in:invalid_request", "freed mid-swap",
                   "admitted again mid-swap", "told it ended mid-swap",
                   "step freed mid-swap", "step admitted again mid-swap",
                   "discarded mid-swap", "step discarded mid-swap",
                   "extend:invalid_request",
                   "allocate:out_of_blocks"})
      BOOST_TEST(cov.count(k) > 0, "seed " << seed << " never reached " << k);
  }
  for (auto seed : soak_seeds()) // KVACTOR_SOAK: more seeds
    run(seed);
}

BOOST_AUTO_TEST_SUITE_END()
