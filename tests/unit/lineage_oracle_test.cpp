// The prefix index never offers K/V computed over K/V nobody wrote, checked
// against a brute-force lineage oracle (lineage_oracle.hpp). A request's
// blocks are indexed before its pass writes them; when it is discarded or
// reclaimed (its pass failed, its owner died) - resident, moving or away
// on the host - its own K/V were never written, so every indexed block
// computed over them - by whoever hit, forked or shared them,
// transitively, however those ended since - must leave the index, and
// whoever still holds such K/V indexes nothing more. Nor may the index
// offer rejected drafts or the destination of a copy the device failed to
// make.
//
// Seeded random runs, in two mixes. The plain mix (a reviewer's
// lineage_fuzz, operation for operation): allocate, extend, fork, release,
// discard, reclaim, evict, preempt, two-phase swaps and their ghosts. The
// extended mix adds what the pool does around them: extends with held
// copies settled made or failed, drafts settled by settle_drafts or a
// step's verdicts, chunked prefill, cache_salt, run_step (verdicts, frees,
// discards, extends, admissions), draining preemptions and their ends,
// pins - run over a few profiles (operation weights; see profiles()), each
// on fixed seeds and with minimum counts of what it reached, so that it
// cannot pass by never getting there. The scenarios that escaped before
// are in lineage_scenarios_test.cpp.
//
// KVACTOR_SOAK=N runs N more seeds of the plain mix and of each profile,
// from KVACTOR_SOAK_FROM (default: the first seed past the fixed ones), with
// no coverage checks; a failing seed prints its operations - rerun one alone
// with KVACTOR_SOAK=1 KVACTOR_SOAK_FROM=<seed> (and --run_test= its case).
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/actors/block_pool_core.hpp"
#include "lineage_oracle.hpp"
#include "pool_fixture.hpp"
#include "soak.hpp"

using namespace kvactor;
using namespace kvactor::test;

namespace {

using detail::residency;

/// 40 blocks of 4 tokens, 24 host blocks: with prompts of a few token
/// values, requests hit each other's blocks, and blocks are evicted and
/// taken again, all the time.
cache_config random_config() {
  auto cfg = small_config();
  cfg.num_host_blocks = 24;
  return cfg;
}

constexpr std::uint32_t random_blocks = 40;

/// Seeds `seeds` of `run` (a seed's failure, "" if none; its log in `log`);
/// each failing seed is an error, the first few with their operations.
/// Returns the failing seeds.
template <class Run>
std::vector<std::uint64_t> run_seeds(const std::vector<std::uint64_t>& seeds,
                                     Run run) {
  std::vector<std::uint64_t> failed;
  for (auto seed : seeds) {
    std::string log;
    auto failure = run(seed, log);
    if (failure.empty())
      continue;
    failed.push_back(seed);
    if (failed.size() <= 3)
      BOOST_ERROR("seed " << seed << ", " << failure << "\noperations:\n" << log);
    else if (failed.size() <= 10)
      BOOST_ERROR("seed " << seed << ", " << failure);
  }
  return failed;
}

std::vector<std::uint64_t> seed_range(std::uint64_t from, std::uint64_t n) {
  std::vector<std::uint64_t> out;
  for (std::uint64_t i = 0; i < n; ++i)
    out.push_back(from + i);
  return out;
}

std::string str(const std::vector<std::uint64_t>& xs) {
  std::string out;
  for (auto x : xs)
    out += (out.empty() ? "" : " ") + std::to_string(x);
  return out;
}

std::string str(const lineage_reach& r) {
  std::ostringstream out;
  out << r.bad_ends << " discards/reclaims of live requests ("
      << r.bad_ends_swapping_out << " being swapped out, " << r.bad_ends_away
      << " away), "
      << r.bad_ends_built_on << " with indexed blocks others built on ("
      << r.built_on_taken_out << " such blocks taken out, "
      << r.built_on_by_ended << " of them by ended writers), "
      << r.writes_over_bad << " writes over unwritten K/V, "
      << r.drafts_rejected << " draft slots rejected, " << r.copies_failed
      << " copies failed (" << r.copies_undone << " extends undone), "
      << r.steps << " steps, " << r.swaps_with_drafts
      << " swap-outs with drafts, " << r.drafts_indexed_after_swap_in
      << " draft verdicts indexing after a swap-in";
  return out.str();
}

long long ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           std::chrono::steady_clock::now() - start)
    .count();
}

// -- the plain mix ---------------------------------------------------------------

constexpr int plain_ops = 300;

/// Seed `seed`'s run of `plain_ops` random operations on live requests
/// (a reviewer's lineage_fuzz, operation for operation); returns its
/// failure ("" if none) and its log, and adds what it reached to `r`.
std::string plain_run(std::uint64_t seed, lineage_reach& r, std::string& log) {
  std::mt19937_64 rng(seed);
  lineage_oracle o(random_config(), random_blocks);
  request_id next_id = 1;
  auto token = [&] { return static_cast<token_id>(rng() % 3); };
  auto where = [&](request_id id) { return o.pool().find(id)->where; };
  for (int op = 0; op < plain_ops && o.failure().empty() && o.writers_left();
       ++op) {
    auto k = rng() % 12;
    auto ids = o.live();
    request_id pick = ids.empty() ? 0 : ids[rng() % ids.size()];
    if (k <= 1 || ids.empty()) {
      std::vector<token_id> prompt(1 + rng() % 13);
      for (auto& t : prompt)
        t = token();
      o.allocate(next_id++, prompt);
    } else if (k <= 3) {
      if (where(pick) == residency::resident) {
        std::vector<token_id> more(1 + rng() % 5);
        for (auto& t : more)
          t = token();
        o.extend(pick, more);
      }
    } else if (k == 4) {
      if (where(pick) == residency::resident)
        o.fork(pick, next_id++);
    } else if (k == 5) {
      o.release(pick);
    } else if (k == 6) {
      if (rng() % 2 != 0)
        o.reclaim(pick);
      else
        o.discard(pick);
    } else if (k == 7) {
      o.evict(static_cast<std::uint32_t>(1 + rng() % 4));
    } else if (k == 8) {
      if (where(pick) == residency::resident)
        o.swap_out_begin(pick);
      else if (where(pick) == residency::swapping_out)
        o.swap_out_done(pick, rng() % 4 != 0);
    } else if (k == 9) {
      if (where(pick) == residency::swapped)
        o.swap_in_begin(pick);
      else if (where(pick) == residency::swapping_in)
        o.swap_in_done(pick, rng() % 4 != 0);
    } else if (k == 10) {
      if (o.num_ghosts() != 0) {
        auto i = rng() % o.num_ghosts();
        o.end_ghost(i, rng() % 2 != 0);
      }
    } else {
      o.preempt(pick, rng() % 2 != 0);
    }
  }
  r.add(o.reached());
  log = o.log();
  return o.failure();
}

/// The plain mix's fixed seeds: 0 to this, exclusive.
constexpr std::uint64_t plain_seeds = 4000;

// -- the extended mix ------------------------------------------------------------

/// The extended mix's operations, in the order of a profile's weights.
enum op_kind : std::size_t {
  op_allocate,
  op_extend,
  op_fork,
  op_release,
  op_discard, ///< or reclaim
  op_evict,
  op_swap_out, ///< begin, or end one under way
  op_swap_in,  ///< begin, or end one under way
  op_end_ghost,
  op_preempt,
  op_settle_drafts,
  op_held_copies, ///< a few extends holding their copies, then the settle
  op_drain,       ///< a draining preemption, or the end of drains
  op_pin,         ///< pin, unpin, or time passing
  op_step,
  num_op_kinds
};

/// How a random run of the extended mix picks its operations.
struct profile {
  const char* name = "";
  std::array<std::uint64_t, num_op_kinds> weights{};
  /// A step discards a live request one time in this many (0: never).
  std::uint64_t step_discard = 4;
  /// Prompts often begin with one of three 16-token stems (else they are
  /// random): requests hit each other's blocks far more.
  bool stems = false;
  /// Token values 0 to this, exclusive.
  std::uint64_t alphabet = 3;
  int ops = 300;
  /// Swap-outs, swap-ins, settles, extends and discards pick among the
  /// requests they apply to (swap-outs among those holding drafts) rather
  /// than among all live ones: the swapped draft blocks a discard must
  /// find come up hundreds of times as often.
  bool focused = false;
  /// Its fixed seeds: 0 to this, exclusive.
  std::uint64_t seeds = 0;
  /// Seeds beyond the fixed ones that once found a bug, run every time.
  std::vector<std::uint64_t> regressions;
  /// What its fixed seeds must reach, at least (lineage_reach's fields).
  lineage_reach floor;
};

/// The extended mix's config: the plain one, and room for a few pins.
cache_config extended_config() {
  auto cfg = random_config();
  cfg.max_pinned_blocks = 6;
  return cfg;
}

/// Seed `seed`'s run of profile `p` (the random runs of the review that
/// found the swap-in hole, operation for operation - its seeds replay here
/// - with `focused` picks added); returns its failure ("" if none) and its
/// log, and adds what it reached to `r`.
std::string extended_run(const profile& p, std::uint64_t seed,
                         lineage_reach& r, std::string& log) {
  std::mt19937_64 rng(seed);
  lineage_oracle o(extended_config(), random_blocks);
  request_id next_id = 1;
  auto token = [&] { return static_cast<token_id>(rng() % p.alphabet); };
  std::vector<std::vector<token_id>> stems(3);
  for (auto& st : stems) {
    st.resize(16);
    for (auto& t : st)
      t = token();
  }
  auto prompt = [&] {
    std::vector<token_id> out(1 + rng() % 13);
    if (p.stems && rng() % 3 != 0) {
      auto& st = stems[rng() % stems.size()];
      auto n = static_cast<std::ptrdiff_t>(rng() % 17);
      out.assign(st.begin(), st.begin() + n);
      auto extra = rng() % 4;
      for (std::uint64_t i = 0; i < extra || out.empty(); ++i)
        out.push_back(token());
      return out;
    }
    for (auto& t : out)
      t = token();
    return out;
  };
  auto where = [&](request_id id) { return o.pool().find(id)->where; };
  auto drafts_of = [&](request_id id) { return o.pool().find(id)->drafts; };
  auto cow_pending = [&](request_id id) {
    return o.pool().find(id)->cow_pending;
  };
  // Up to `n` tokens to extend `id` by: the rest of its prompt first, if
  // admitted in chunks.
  auto more_tokens = [&](request_id id, std::size_t n) {
    std::vector<token_id> more;
    if (auto rest = o.remaining(id)) {
      auto k = static_cast<std::ptrdiff_t>(std::min(n, rest->size()));
      more.assign(rest->begin(), rest->begin() + k);
      return more;
    }
    more.resize(n);
    for (auto& t : more)
      t = token();
    return more;
  };
  // Drafts for an extend by `more`: a third of the time, none while a
  // prompt is being extended.
  auto drafts_for = [&](request_id id, const std::vector<token_id>& more,
                        std::uint64_t one_in) -> std::uint64_t {
    return !o.remaining(id) && rng() % one_in == 0 ? rng() % (more.size() + 1)
                                                   : 0;
  };
  auto applies = [&](std::size_t kind, request_id id) {
    auto w = where(id);
    switch (kind) {
      case op_swap_out:
        return (w == residency::resident && drafts_of(id) != 0)
               || w == residency::swapping_out;
      case op_swap_in:
        return w == residency::swapped || w == residency::swapping_in;
      case op_settle_drafts:
        return w == residency::resident && drafts_of(id) != 0;
      case op_extend:
      case op_discard:
        return w == residency::resident;
      default:
        return true;
    }
  };
  std::uint64_t total = 0;
  for (auto w : p.weights)
    total += w;
  for (int op = 0; op < p.ops && o.failure().empty() && o.writers_left();
       ++op) {
    auto x = rng() % total;
    std::size_t kind = 0;
    while (x >= p.weights[kind])
      x -= p.weights[kind++];
    auto ids = o.live();
    request_id pick = ids.empty() ? 0 : ids[rng() % ids.size()];
    if (p.focused && !ids.empty()) {
      std::vector<request_id> those;
      for (auto id : ids)
        if (applies(kind, id))
          those.push_back(id);
      if (!those.empty())
        pick = those[rng() % those.size()];
    }
    if (kind == op_allocate || ids.empty()) {
      std::uint64_t chunk = rng() % 3 == 0 ? 1 + rng() % 6 : 0;
      std::uint64_t salt = rng() % 6 == 0 ? 1 : 0;
      o.allocate(next_id++, prompt(), chunk, salt);
    } else if (kind == op_extend) {
      if (where(pick) == residency::resident) {
        auto more = more_tokens(pick, 1 + rng() % 5);
        o.extend(pick, more, drafts_for(pick, more, 3));
      }
    } else if (kind == op_fork) {
      if (where(pick) == residency::resident)
        o.fork(pick, next_id++);
    } else if (kind == op_release) {
      o.release(pick);
    } else if (kind == op_discard) {
      if (rng() % 2 != 0)
        o.reclaim(pick);
      else
        o.discard(pick);
    } else if (kind == op_evict) {
      o.evict(static_cast<std::uint32_t>(1 + rng() % 4));
    } else if (kind == op_swap_out) {
      if (where(pick) == residency::resident)
        o.swap_out_begin(pick);
      else if (where(pick) == residency::swapping_out)
        o.swap_out_done(pick, rng() % 4 != 0);
    } else if (kind == op_swap_in) {
      if (where(pick) == residency::swapped)
        o.swap_in_begin(pick);
      else if (where(pick) == residency::swapping_in)
        o.swap_in_done(pick, rng() % 4 != 0);
    } else if (kind == op_end_ghost) {
      if (o.num_ghosts() != 0) {
        auto i = rng() % o.num_ghosts();
        o.end_ghost(i, rng() % 2 != 0);
      }
    } else if (kind == op_preempt) {
      o.preempt(pick, rng() % 2 != 0);
    } else if (kind == op_settle_drafts) {
      if (where(pick) == residency::resident && drafts_of(pick) != 0)
        o.settle_drafts(pick, rng() % (drafts_of(pick) + 1u));
    } else if (kind == op_held_copies) {
      // A step's worth of held copies: extends, maybe an admission and a
      // release of another request, then the settle.
      auto n = 1 + rng() % 3;
      for (std::uint64_t i = 0; i < n; ++i) {
        auto now = o.live();
        if (now.empty())
          break;
        auto id = now[rng() % now.size()];
        if (where(id) == residency::resident) {
          auto more = more_tokens(id, 1 + rng() % 5);
          o.extend(id, more, drafts_for(id, more, 4), true);
        }
        if (rng() % 4 == 0)
          o.allocate(next_id++, prompt());
        if (rng() % 5 == 0) {
          auto then = o.live();
          auto other = then.empty() ? 0 : then[rng() % then.size()];
          if (other != 0 && !cow_pending(other))
            o.release(other);
        }
      }
      if (o.copies_pending() || rng() % 2 == 0)
        o.settle(rng() % 2 == 0);
    } else if (kind == op_drain) {
      if (rng() % 2 == 0) {
        o.preempt_draining(pick, 1 + rng() % 2);
      } else {
        auto drains = o.drains();
        if (!drains.empty() && rng() % 2 == 0)
          o.end_drain(drains[rng() % drains.size()]);
        else
          o.end_drains(1 + rng() % 2);
      }
    } else if (kind == op_pin) {
      auto what = rng() % 3;
      auto tokens = prompt();
      if (what == 0) {
        // Drawn in the order that review's g++ build drew them (as
        // arguments, evaluated right to left), so that its seeds replay.
        std::uint64_t salt = rng() % 6 == 0 ? 1 : 0;
        std::uint64_t ttl = 1 + rng() % 50;
        o.pin(tokens, ttl, salt);
      }
      else if (what == 1)
        o.unpin(tokens, 0);
      else
        o.tick(1 + rng() % 20);
    } else {
      lineage_oracle::step_ops s;
      std::set<request_id> used;
      for (auto id : ids)
        if (where(id) == residency::resident && drafts_of(id) != 0
            && rng() % 2 == 0) {
          s.verdicts.push_back(
            {id, static_cast<std::uint32_t>(rng() % (drafts_of(id) + 1u))});
          used.insert(id);
        }
      if (rng() % 3 == 0 && used.count(pick) == 0) {
        s.frees.push_back(pick);
        used.insert(pick);
      }
      auto victim = ids[rng() % ids.size()];
      if (p.step_discard != 0 && rng() % p.step_discard == 0
          && used.count(victim) == 0) {
        s.discards.push_back(victim);
        used.insert(victim);
      }
      auto has_verdict = [&](request_id id) {
        for (auto& v : s.verdicts)
          if (v.id == id)
            return true;
        return false;
      };
      std::set<request_id> extended;
      auto n = rng() % 4;
      for (std::uint64_t i = 0; i < n; ++i) {
        auto id = ids[rng() % ids.size()];
        if ((used.count(id) != 0 && !has_verdict(id)) || extended.count(id) != 0)
          continue;
        extended.insert(id);
        auto more = more_tokens(id, 1 + rng() % 5);
        auto drafts = static_cast<std::uint32_t>(drafts_for(id, more, 3));
        s.extends.push_back({id, more, drafts});
      }
      auto admits = rng() % 3;
      for (std::uint64_t i = 0; i < admits; ++i) {
        lineage_oracle::step_admit a;
        a.id = next_id++;
        a.prompt = prompt();
        a.chunk = rng() % 3 == 0 ? 1 + rng() % 6 : 0;
        a.salt = rng() % 6 == 0 ? 1 : 0;
        s.admits.push_back(a);
      }
      bool hold = rng() % 2 == 0;
      s.admit_after_preemption = rng() % 2 == 0;
      o.step(s, hold);
      if (hold)
        o.settle(rng() % 3 != 0);
    }
  }
  r.add(o.reached());
  log = o.log();
  return o.failure();
}

/// The extended mix's profiles: three of that review's soak profiles, on
/// fewer fixed seeds, and one focused on swapped drafts.
std::vector<profile> profiles() {
  std::vector<profile> out;
  {
    // Every operation, steps the most often; random prompts of three
    // token values.
    profile p;
    p.name = "every operation";
    p.weights = {2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 4};
    p.seeds = 1200;
    p.floor.bad_ends_swapping_out = 2500;
    p.floor.bad_ends_away = 300;
    p.floor.bad_ends_built_on = 400;
    p.floor.built_on_taken_out = 550;
    p.floor.built_on_by_ended = 80;
    p.floor.writes_over_bad = 1200;
    p.floor.drafts_rejected = 8000;
    p.floor.copies_failed = 600;
    p.floor.copies_undone = 600;
    p.floor.steps = 35000;
    p.floor.swaps_with_drafts = 500;
    out.push_back(p);
  }
  {
    // Forks and held copies, stems of two token values: copy-on-write
    // copies over other requests' blocks, made or failed.
    profile p;
    p.name = "forks and held copies";
    p.weights = {2, 3, 5, 1, 1, 1, 1, 1, 1, 1, 2, 4, 1, 1, 3};
    p.step_discard = 6;
    p.stems = true;
    p.alphabet = 2;
    p.seeds = 1200;
    p.floor.bad_ends_swapping_out = 1300;
    p.floor.bad_ends_away = 90;
    p.floor.bad_ends_built_on = 600;
    p.floor.built_on_taken_out = 1100;
    p.floor.built_on_by_ended = 200;
    p.floor.writes_over_bad = 4000;
    p.floor.drafts_rejected = 7500;
    p.floor.copies_failed = 3300;
    p.floor.copies_undone = 3300;
    p.floor.steps = 19000;
    p.floor.swaps_with_drafts = 350;
    out.push_back(p);
  }
  {
    // Swaps and drafts, stems of two token values, no step discards: the
    // draft blocks a swap-in brings back as fresh copies.
    profile p;
    p.name = "swaps and drafts";
    p.weights = {3, 5, 0, 1, 1, 0, 4, 4, 0, 0, 3, 0, 0, 0, 1};
    p.step_discard = 0;
    p.stems = true;
    p.alphabet = 2;
    p.seeds = 1200;
    // A block a swap-in brought back lost what it was computed over, and
    // settle_drafts indexed it (swap_in_done records its copies now).
    p.regressions = {34599};
    p.floor.bad_ends_swapping_out = 2200;
    p.floor.bad_ends_away = 1800;
    p.floor.bad_ends_built_on = 220;
    p.floor.built_on_taken_out = 400;
    p.floor.built_on_by_ended = 70;
    p.floor.writes_over_bad = 350;
    p.floor.drafts_rejected = 3500;
    p.floor.steps = 8000;
    p.floor.swaps_with_drafts = 800;
    p.floor.drafts_indexed_after_swap_in = 45;
    out.push_back(p);
  }
  {
    // The same, focused: swap-outs take requests holding drafts (so those
    // whose blocks they hit stay resident, unwritten - a swap-out would
    // have written them), and only steps release requests. Without the
    // swap-in fix about one seed in 170 fails here, one in 60000 above.
    profile p;
    p.name = "swapped drafts, focused";
    p.weights = {3, 5, 0, 0, 1, 0, 4, 4, 0, 0, 3, 0, 0, 0, 1};
    p.step_discard = 0;
    p.stems = true;
    p.alphabet = 2;
    p.focused = true;
    p.seeds = 1200;
    p.floor.bad_ends_swapping_out = 100;
    p.floor.bad_ends_away = 100;
    p.floor.bad_ends_built_on = 450;
    p.floor.built_on_taken_out = 1000;
    p.floor.built_on_by_ended = 30;
    p.floor.writes_over_bad = 1300;
    p.floor.drafts_rejected = 6000;
    p.floor.steps = 8500;
    p.floor.swaps_with_drafts = 4000;
    p.floor.drafts_indexed_after_swap_in = 500;
    out.push_back(p);
  }
  return out;
}

/// Each of `floor`'s non-zero fields is reached.
void require_reach(const std::string& name, const lineage_reach& r,
                   const lineage_reach& floor) {
  auto at_least = [&](const char* what, std::uint64_t got, std::uint64_t min) {
    BOOST_TEST(got >= min, name << ": " << what << " " << got << " < " << min);
  };
  at_least("bad_ends", r.bad_ends, floor.bad_ends);
  at_least("bad_ends_swapping_out", r.bad_ends_swapping_out,
           floor.bad_ends_swapping_out);
  at_least("bad_ends_away", r.bad_ends_away, floor.bad_ends_away);
  at_least("bad_ends_built_on", r.bad_ends_built_on, floor.bad_ends_built_on);
  at_least("built_on_taken_out", r.built_on_taken_out,
           floor.built_on_taken_out);
  at_least("built_on_by_ended", r.built_on_by_ended, floor.built_on_by_ended);
  at_least("writes_over_bad", r.writes_over_bad, floor.writes_over_bad);
  at_least("drafts_rejected", r.drafts_rejected, floor.drafts_rejected);
  at_least("copies_failed", r.copies_failed, floor.copies_failed);
  at_least("copies_undone", r.copies_undone, floor.copies_undone);
  at_least("steps", r.steps, floor.steps);
  at_least("swaps_with_drafts", r.swaps_with_drafts, floor.swaps_with_drafts);
  at_least("drafts_indexed_after_swap_in", r.drafts_indexed_after_swap_in,
           floor.drafts_indexed_after_swap_in);
}

} // namespace

BOOST_AUTO_TEST_SUITE(lineage_oracle_suite)

BOOST_AUTO_TEST_CASE(random_operations_never_index_what_was_computed_over_unwritten_kv) {
  auto start = std::chrono::steady_clock::now();
  lineage_reach r;
  auto run = [&](std::uint64_t seed, std::string& log) {
    return plain_run(seed, r, log);
  };
  auto failed = run_seeds(seed_range(0, plain_seeds), run);
  BOOST_TEST_MESSAGE("plain mix: " << plain_seeds << " seeds of " << plain_ops
                     << " ops, " << ms_since(start) << " ms: " << str(r));
  BOOST_TEST(failed.empty(), failed.size() << " of " << plain_seeds
                                           << " seeds failed: " << str(failed));
  // The runs reached the case the oracle is for, often: indexed blocks
  // others computed over a request's K/V when it went bad, taken out of
  // the index, some written by requests that had ended, and writes
  // computed over unwritten K/V afterwards; and ends during a swap-out and
  // away on the host.
  lineage_reach floor;
  floor.bad_ends_swapping_out = 12000;
  floor.bad_ends_away = 3000;
  floor.bad_ends_built_on = 1100;
  floor.built_on_taken_out = 1500;
  floor.built_on_by_ended = 300;
  floor.writes_over_bad = 2500;
  require_reach("plain mix", r, floor);
  // KVACTOR_SOAK=N: N more seeds (soak.hpp), no coverage checks; here
  // KVACTOR_SOAK_FROM defaults to the first seed past the fixed ones.
  auto n = soak_env("KVACTOR_SOAK", 0);
  auto more = seed_range(soak_env("KVACTOR_SOAK_FROM", plain_seeds), n);
  auto soak_failed = run_seeds(more, run);
  BOOST_TEST(soak_failed.empty(), soak_failed.size() << " of " << n
                                  << " soak seeds failed: " << str(soak_failed));
}

BOOST_AUTO_TEST_CASE(random_steps_drafts_and_held_copies_never_index_what_was_computed_over_unwritten_kv) {
  for (auto& p : profiles()) {
    BOOST_TEST_CONTEXT("profile " << p.name) {
      auto start = std::chrono::steady_clock::now();
      lineage_reach r;
      auto run = [&](std::uint64_t seed, std::string& log) {
        return extended_run(p, seed, r, log);
      };
      auto failed = run_seeds(seed_range(0, p.seeds), run);
      BOOST_TEST_MESSAGE(p.name << ": " << p.seeds << " seeds of " << p.ops
                         << " ops, " << ms_since(start) << " ms: " << str(r));
      BOOST_TEST(failed.empty(), failed.size() << " of " << p.seeds
                                               << " seeds failed: " << str(failed));
      require_reach(p.name, r, p.floor);
      auto regressions_failed = run_seeds(p.regressions, run);
      BOOST_TEST(regressions_failed.empty(),
                 "regression seeds failed: " << str(regressions_failed));
      auto n = soak_env("KVACTOR_SOAK", 0);
      auto more = seed_range(soak_env("KVACTOR_SOAK_FROM", p.seeds), n);
      auto soak_failed = run_seeds(more, run);
      BOOST_TEST(soak_failed.empty(), soak_failed.size() << " of " << n
                                      << " soak seeds failed: " << str(soak_failed));
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
