// block_pool_core's tenant policy under heavy pressure: seeded random runs of
// every operation (allocations with expected growth, extends, appends, forks,
// releases, preemptions, swaps whose device copy succeeds or fails and which
// stay in flight while other operations run, pins and their expiry, victims
// chosen and preempted, scheduler steps) with three tenants, against
// pool_reference_model. After every operation: the core's invariant, the whole
// state against the model, no reservation broken, and the KV events replayed
// into an index equal to the core's.
#include <chrono>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/actors/block_pool_core.hpp"
#include "kvactor/messages/error.hpp"

#include "model_checks.hpp"
#include "soak.hpp"
#include "pool_reference_model.hpp"

using namespace kvactor;
using kvactor::detail::block_pool_core;
using kvactor::detail::residency;
using namespace kvactor::test; // the model and model_checks.hpp

/// Builds the message only on failure (Boost would build it every time).
#define POLICY_REQUIRE(cond, msg)                                                \
  do {                                                                           \
    if (!(cond))                                                                 \
      BOOST_FAIL(where() << msg);                                                \
  } while (false)

namespace {

struct run_params {
  std::uint64_t seed;
  std::uint32_t num_blocks;
  std::size_t ops;
  std::string policy; ///< admission.policy
  double watermark;
};

class harness {
public:
  explicit harness(const run_params& p)
    : p_(p), cfg_(make_config(p)), core_(cfg_, p.num_blocks),
      model_(cfg_, p.num_blocks), rng_(p.seed) {
    core_.record_events(true);
    for (std::size_t len : {8u, 13u, 16u, 6u}) {
      std::vector<token_id> sp;
      for (std::size_t i = 0; i < len; ++i)
        sp.push_back(static_cast<token_id>(rng_() % 1000));
      system_prompts_.push_back(sp);
    }
  }

  void run() {
    for (op_ = 0; op_ < p_.ops; ++op_) {
      now_ms_ += below(20);
      auto r = below(100);
      auto pinned = core_.pinned_blocks();
      if (r < 20)
        do_allocate();
      else if (r < 32)
        do_extend(false);
      else if (r < 42)
        do_extend(true);
      else if (r < 46)
        do_fork();
      else if (r < 54)
        do_release();
      else if (r < 56)
        do_preempt();
      else if (r < 68)
        do_swap();
      else if (r < 72)
        do_pin();
      else if (r < 75)
        do_expire();
      else if (r < 79)
        do_victims();
      else if (r < 82)
        do_can_allocate();
      else if (r < 83)
        do_evict();
      else
        do_step();
      compare();
      // Only expiry and reservations (give_way) take pins away.
      if (core_.pinned_blocks() < pinned && (r < 72 || r >= 75))
        ++cov["pin gave way"];
    }
  }

  std::map<std::string, std::size_t> cov;

private:
  static cache_config make_config(const run_params& p) {
    cache_config cfg;
    cfg.block_size = 4;
    cfg.model = model_config{2, 2, 8, dtype::fp16};
    cfg.storage = "none";
    cfg.num_gpu_blocks = p.num_blocks;
    cfg.num_host_blocks = p.num_blocks / 2;
    cfg.max_pinned_blocks = p.num_blocks / 4;
    cfg.admission.policy = p.policy;
    cfg.admission.watermark = p.watermark;
    cfg.admission.default_expected_output = 8;
    auto n = p.num_blocks;
    tenant_config alpha; // quota and a small reservation, shares "team"
    alpha.name = "alpha";
    alpha.max_blocks = n / 2;
    alpha.reserved_blocks = n / 8;
    alpha.prefix_namespace = "team";
    tenant_config beta; // a larger reservation, high priority, shares "team"
    beta.name = "beta";
    beta.reserved_blocks = n / 4;
    beta.priority = priority::high;
    beta.prefix_namespace = "team";
    tenant_config gamma; // quota, low priority, its own namespace
    gamma.name = "gamma";
    gamma.max_blocks = n / 3;
    gamma.priority = priority::low;
    cfg.tenants = {alpha, beta, gamma};
    return cfg;
  }

  // -- random inputs ---------------------------------------------------------------

  std::uint64_t below(std::uint64_t n) {
    return rng_() % n;
  }
  bool chance(unsigned percent) {
    return below(100) < percent;
  }

  std::vector<token_id> random_tokens(std::size_t n) {
    std::vector<token_id> out;
    for (std::size_t i = 0; i < n; ++i)
      out.push_back(static_cast<token_id>(chance(80) ? below(3) : below(1u << 30)));
    return out;
  }

  request_id any_id() {
    return 1 + below(p_.num_blocks);
  }

  /// A live request's id in residency `state` (-1: any), now and then one
  /// in any state, or any id at all.
  request_id live_id(int state = -1) {
    if (chance(5))
      state = -1;
    std::vector<request_id> ids;
    for (auto& [id, s] : model_.sequences())
      if (state < 0 || static_cast<int>(s.where) == state)
        ids.push_back(id);
    if (ids.empty() || chance(5))
      return any_id();
    return ids[below(ids.size())];
  }

  allocation_request random_request() {
    allocation_request req;
    req.id = any_id();
    req.num_layers = 2;
    req.num_heads = 2;
    req.head_dim = 8;
    req.dtype = dtype::fp16;
    req.priority = static_cast<priority>(below(4));
    static const char* names[] = {"", "alpha", "beta", "gamma", "gamma"};
    req.tenant = chance(1) ? "delta" : names[below(5)];
    if (chance(80)) {
      req.prompt = system_prompts_[below(system_prompts_.size())];
      auto suffix = random_tokens(below(12));
      req.prompt.insert(req.prompt.end(), suffix.begin(), suffix.end());
      if (req.tenant == "gamma")
        gamma_prompts_[below(gamma_prompts_.size())] = req.prompt;
    } else {
      req.initial_tokens = below(20);
    }
    auto n = req.prompt.empty() ? req.initial_tokens : req.prompt.size();
    req.max_sequence_length = n + below(40) + (n == 0);
    req.expected_output_tokens = chance(30) ? 0 : below(32);
    if (chance(10))
      req.cache_salt = 7; // pins below use it as often
    return req;
  }

  // -- operations ------------------------------------------------------------------

  void expect(const char* op, maybe_errc core, maybe_errc model) {
    POLICY_REQUIRE(core == model,
                   op << ": core " << name(core) << ", model " << name(model));
    ++cov[std::string(op) + ":" + name(core)];
  }

  void do_allocate() {
    auto req = random_request();
    auto want = model_.allocate(req);
    auto got = core_.allocate(req);
    expect("allocate", code_of(got), want.err);
    if (got)
      POLICY_REQUIRE(got->cache_id == want.cache_id
                       && got->hit_tokens == want.hit_tokens,
                     "allocate hits " << got->hit_tokens << " vs " << want.hit_tokens);
    else if (render(got.error()).find("headroom") != std::string::npos)
      ++cov["headroom refused"];
  }

  void do_can_allocate() {
    auto req = random_request();
    auto want = model_.can_allocate(req);
    POLICY_REQUIRE(core_.can_allocate(req) == want, "can_allocate");
  }

  void do_extend(bool named) {
    auto id = live_id();
    auto it = model_.sequences().find(id);
    if (it != model_.sequences().end() && it->second.drafts != 0
        && chance(80)) {
      // Settle its drafts (a request may hold them across swaps).
      auto accepted = below(it->second.drafts + 1);
      auto want = model_.settle_drafts(id, accepted);
      auto got = core_.settle_drafts(id, accepted);
      expect("settle", code_of(got), want.err);
      if (got)
        POLICY_REQUIRE(got->changed == want.changed
                         && got->first_changed == want.first_changed,
                       "settle outcome");
      return;
    }
    std::uint64_t n = chance(60) ? 1 : below(9);
    auto tokens = random_tokens(n);
    std::uint64_t drafts = chance(15) ? below(n + 1) : 0;
    auto want = model_.extend(id, n, named ? &tokens : nullptr, drafts);
    auto got = core_.extend(id, n, named ? tokens.data() : nullptr, false,
                            drafts);
    expect(named ? "append" : "extend", code_of(got), want.err);
    if (got)
      POLICY_REQUIRE(got->changed == want.changed
                       && got->first_changed == want.first_changed
                       && str(got->copies) == str(want.copies),
                     "extend outcome " << str(got->copies));
  }

  void do_fork() {
    auto parent = live_id();
    auto child = any_id();
    auto want = model_.fork(parent, child);
    auto got = core_.fork(parent, child);
    expect("fork", code_of(got), want.err);
    if (got)
      POLICY_REQUIRE(got->cache_id == want.cache_id, "fork cache_id");
  }

  void expect_release(const char* op, const caf::expected<std::uint32_t>& got,
                      const test::model_release& want) {
    expect(op, code_of(got), want.err);
    if (got)
      POLICY_REQUIRE(*got == want.freed, op << " freed " << *got << " vs " << want.freed);
  }

  void do_release() {
    auto id = live_id();
    auto it = model_.sequences().find(id);
    if (it != model_.sequences().end()
        && (it->second.where == residency::swapping_out
            || it->second.where == residency::swapping_in))
      ++cov["release during swap"];
    if (chance(20)) // a failed forward pass: cache nothing it held
      expect_release("discard", core_.discard(id), model_.discard(id));
    else
      expect_release("release", core_.release(id), model_.release(id));
  }

  void do_preempt() {
    auto id = live_id();
    auto it = model_.sequences().find(id);
    if (it != model_.sequences().end()
        && it->second.where != residency::resident)
      ++cov["preempt while not resident"];
    expect_release("preempt", core_.preempt(id), model_.preempt(id));
  }

  /// One phase of a swap: begin one way or the other, or end one in flight
  /// (the device's copy succeeding or failing); a begun swap may end at once.
  void do_swap() {
    auto r = below(4);
    auto state = static_cast<int>(r == 0   ? residency::resident
                                  : r == 1 ? residency::swapped
                                  : r == 2 ? residency::swapping_out
                                           : residency::swapping_in);
    auto id = live_id(state);
    if (r < 2) {
      auto want = r == 0 ? model_.swap_out_begin(id) : model_.swap_in_begin(id);
      auto got = r == 0 ? core_.swap_out_begin(id) : core_.swap_in_begin(id);
      expect(r == 0 ? "swap_out_begin" : "swap_in_begin", code_of(got), want.err);
      if (got)
        POLICY_REQUIRE(str(*got) == str(want.moves),
                       "moves " << str(*got) << " vs " << str(want.moves));
      else if (r == 1 && render(got.error()).find("headroom") != std::string::npos)
        ++cov["swap_in headroom refused"];
      if (!got || chance(50))
        return; // stays in flight
      r += 2;
    }
    // The end of a swap names its incarnation: the live one, or one
    // released during the move (a ghost), maybe with its id live again.
    auto live = model_.sequences().find(id);
    auto cache_id = live == model_.sequences().end() ? 0 : live->second.cache_id;
    std::vector<const test::model_sequence*> ghosts;
    for (auto& [cid, g] : model_.ghosts())
      if (static_cast<int>(g.where) == state)
        ghosts.push_back(&g);
    if (!ghosts.empty() && chance(50)) {
      auto& g = *ghosts[below(ghosts.size())];
      id = g.id;
      cache_id = g.cache_id;
      ++cov[model_.sequences().count(id) ? "ghost's swap ends, id live again"
                                         : "ghost's swap ends"];
    }
    bool ok = chance(75);
    auto shared_before = core_.counters().swap_in_shared;
    auto want = r == 2 ? model_.swap_out_done(id, cache_id, ok)
                       : model_.swap_in_done(id, cache_id, ok);
    auto got = r == 2 ? core_.swap_out_done(id, cache_id, ok)
                      : core_.swap_in_done(id, cache_id, ok);
    expect_release(r == 2 ? (ok ? "swap_out_done:ok" : "swap_out_done:failed")
                          : (ok ? "swap_in_done:ok" : "swap_in_done:failed"),
                   got, want);
    if (core_.counters().swap_in_shared > shared_before)
      ++cov["swap_in shared its prefix"];
  }

  /// Pins a prefix: gamma one it computed (its namespace is its own),
  /// alpha or beta a system prompt (their shared namespace's). A reserved
  /// tenant pinning blocks it uses itself is what makes pins give way.
  void do_pin() {
    auto t = static_cast<std::uint16_t>(below(3));
    auto& prompt = t == 2 ? gamma_prompts_[below(gamma_prompts_.size())]
                          : system_prompts_[below(system_prompts_.size())];
    auto ttl = below(300);
    std::uint64_t salt = chance(10) ? 7 : 0;
    auto want = model_.pin(t, prompt, ttl, now_ms_, salt);
    auto got = core_.pin(t, prompt, ttl, now_ms_, salt);
    expect("pin", code_of(got), want.first);
    if (got) {
      POLICY_REQUIRE(*got == want.second, "pinned " << *got << " vs " << want.second);
      if (*got > 0)
        ++cov["pinned some"];
    }
  }

  void do_expire() {
    auto want = model_.expire_pins(now_ms_);
    POLICY_REQUIRE(core_.expire_pins(now_ms_) == want, "expire_pins");
    if (want > 0)
      ++cov["expired"];
  }

  /// The supervisor at critical pressure: choose victims, preempt them.
  void do_victims() {
    auto blocks = 1 + below(p_.num_blocks / 4);
    auto want = model_.choose_victims(blocks);
    auto got = core_.choose_victims(blocks);
    POLICY_REQUIRE(got == want, "victims " << str(got) << " vs " << str(want));
    for (auto id : got) {
      auto& s = *core_.find(id);
      auto& t = core_.tenants()[s.tenant];
      // Chosen first, it was above its reservation when chosen.
      if (id == got.front())
        POLICY_REQUIRE(t.used > t.config.reserved_blocks, "victim at reservation");
      expect_release("victim preempted", core_.preempt(id), model_.preempt(id));
    }
    ++cov[got.empty() ? "no victims" : "victims"];
  }

  void do_evict() {
    auto n = static_cast<std::uint32_t>(below(6));
    POLICY_REQUIRE(core_.evict(n) == model_.evict(n), "evict");
  }

  void do_step() {
    step_request step;
    for (auto k = below(3); k > 0; --k)
      step.frees.push_back(live_id());
    std::set<request_id> seen;
    for (auto k = below(6); k > 0; --k) {
      auto id = live_id();
      // An id twice is rare; the second entry fails (at most once a step).
      if (seen.insert(id).second || chance(3))
        step.extends.push_back(extend_op{id, static_cast<std::uint32_t>(
                                               chance(70) ? 1 : below(6))});
    }
    if (chance(60))
      for (auto& op : step.extends) {
        auto t = random_tokens(op.num_tokens);
        step.tokens.insert(step.tokens.end(), t.begin(), t.end());
      }
    for (auto k = below(3); k > 0; --k)
      step.admits.push_back(random_request());
    step.preempt_on_shortage = chance(85);
    step.admit_after_preemption = chance(30);
    auto w = model_.run_step(step);
    auto g = core_.run_step(step);
    auto gs = str(g);
    auto ws = str(w);
    POLICY_REQUIRE(gs == ws, "step\n core  " << gs << "\n model " << ws);
    if (!g.preempted.empty())
      ++cov["step preempted"];
    if (!g.admitted.empty())
      ++cov["step admitted"];
  }

  // -- checks ----------------------------------------------------------------------

  std::string where() const {
    return "seed " + std::to_string(p_.seed) + " op " + std::to_string(op_) + ": ";
  }

  void compare() {
    auto inv = core_.check_invariant();
    POLICY_REQUIRE(!inv, render(inv));
    auto d = test::state_diff(core_, model_, events_, cov);
    POLICY_REQUIRE(d.empty(), d);
    auto r = test::reservations_diff(core_, model_, cov);
    POLICY_REQUIRE(r.empty(), r);
  }

  run_params p_;
  cache_config cfg_;
  block_pool_core core_;
  pool_model model_;
  std::mt19937_64 rng_;
  std::vector<std::vector<token_id>> system_prompts_;
  std::vector<std::vector<token_id>> gamma_prompts_ = std::vector<std::vector<token_id>>(6);
  std::uint64_t now_ms_ = 0;
  std::size_t op_ = 0;
  test::event_checker events_{cfg_.block_size};
};

/// Runs `p` (the harness fails the test at the first difference from the
/// model) and prints what it covered.
std::map<std::string, std::size_t> run_and_report(const run_params& p) {
  auto start = std::chrono::steady_clock::now();
  harness h(p);
  h.run();
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
              std::chrono::steady_clock::now() - start)
              .count();
  std::string report;
  for (auto& [k, v] : h.cov)
    report += k + "=" + std::to_string(v) + " ";
  BOOST_TEST_MESSAGE("seed " << p.seed << ", " << p.ops << " ops, " << ms
                             << " ms: " << report);
  return h.cov;
}

void run_and_check_coverage(const run_params& p,
                            std::vector<std::string> must_reach) {
  auto cov = run_and_report(p);
  for (auto k : {"allocate:ok", "allocate:out_of_blocks", "allocate:quota_exceeded",
                 "allocate:unknown_tenant", "extend:ok", "extend:invalid_request",
                 "append:ok", "fork:ok", "fork:invalid_request", "release:ok",
                 "settle:ok", "settle:invalid_request", "discard:ok",
                 "release during swap", "preempt:ok",
                 "preempt while not resident", "swap_out_begin:ok",
                 "swap_out_begin:out_of_blocks", "swap_out_begin:invalid_request",
                 "swap_in_begin:ok", "swap_in_begin:quota_exceeded",
                 "swap_out_done:ok:ok", "swap_out_done:failed:ok",
                 "swap_in_done:ok:ok", "swap_in_done:failed:ok",
                 "swap_in shared its prefix", "ghost's swap ends",
                 "ghost's swap ends, id live again", "pin:ok",
                 "pinned some", "pin:quota_exceeded", "pin:invalid_request",
                 "expired", "victims", "victim preempted:ok", "step admitted",
                 "event:stored", "event:removed"})
    must_reach.push_back(k);
  for (auto& k : must_reach)
    BOOST_TEST(cov.count(k) > 0, "seed " << p.seed << " never reached " << k);
}

} // namespace

BOOST_AUTO_TEST_SUITE(policy_model_suite)

BOOST_AUTO_TEST_CASE(three_tenants_under_pressure_keep_every_promise) {
  // Headroom for expected growth: admissions wait, so extends rarely
  // preempt.
  run_and_check_coverage({11, 48, 100000, "reserve_expected", 0.0},
                         {"headroom refused", "swap_in headroom refused"});
}

BOOST_AUTO_TEST_CASE(three_tenants_under_pressure_with_a_watermark) {
  // The watermark keeps room for extends: a step almost never runs short
  // here (once in 100,000 operations before revived prefixes kept their
  // level, none since), so step preemption is the next case's to reach.
  run_and_check_coverage({12, 64, 100000, "immediate", 0.05},
                         {"headroom refused", "swap_in headroom refused",
                          "reservation binding"});
}

BOOST_AUTO_TEST_CASE(three_tenants_under_pressure_admitted_immediately) {
  run_and_check_coverage({13, 32, 100000, "immediate", 0.0},
                         {"step preempted", "reservation binding",
                          "swap_in_begin:out_of_blocks", "pin gave way"});
  // KVACTOR_SOAK: more seeds, with the three cases' settings in turn.
  static const run_params settings[] = {{0, 48, 100000, "reserve_expected", 0.0},
                                        {0, 64, 100000, "immediate", 0.05},
                                        {0, 32, 100000, "immediate", 0.0}};
  for (auto seed : test::soak_seeds()) {
    auto p = settings[seed % 3];
    p.seed = seed;
    run_and_report(p);
  }
}

BOOST_AUTO_TEST_SUITE_END()
