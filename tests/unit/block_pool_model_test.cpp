// block_pool_core against pool_reference_model: seeded random runs of mixed
// operations (shared system prompts, several tenants with quotas,
// reservations and a shared namespace, forks, reclaims, evictions, steps with
// preemption), comparing every answer and the whole state after each one.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <sstream>
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
using namespace kvactor::test; // the model and model_checks.hpp

/// BOOST_REQUIRE_MESSAGE, but the message is built only on failure (Boost
/// builds it every time, which dominated this test's run time).
#define MODEL_REQUIRE(cond, msg)                                                 \
  do {                                                                           \
    if (!(cond))                                                                 \
      BOOST_FAIL(msg);                                                           \
  } while (false)

namespace {

/// Model-test parameters: one pool and its traffic.
struct run_params {
  std::uint64_t seed;
  std::uint32_t num_blocks;
  std::uint32_t block_size;
  bool prefix_caching;
  std::size_t ops;
};

/// What a run exercised (to assert that pressure really happened).
struct coverage {
  std::map<std::string, std::size_t> n;
  void operator()(const std::string& what) {
    ++n[what];
  }
  std::string report() const {
    std::string out;
    for (auto& [k, v] : n)
      out += k + "=" + std::to_string(v) + " ";
    return out;
  }
};

class harness {
public:
  explicit harness(const run_params& p)
    : p_(p), cfg_(make_config(p)), core_(cfg_, p.num_blocks),
      model_(cfg_, p.num_blocks), rng_(p.seed) {
    core_.record_events(true);
    for (std::size_t len : {8u, 11u, 16u, 5u}) {
      std::vector<token_id> sp;
      for (std::size_t i = 0; i < len; ++i)
        sp.push_back(static_cast<token_id>(rng_() % 50000));
      system_prompts_.push_back(sp);
    }
    system_prompts_[0][0] = 0;
    system_prompts_[1][3] = std::numeric_limits<token_id>::max();
  }

  void run() {
    for (op_ = 0; op_ < p_.ops; ++op_) {
      auto r = rng_() % 100;
      if (r < 22)
        do_allocate();
      else if (r < 48)
        do_extend();
      else if (r < 58)
        do_release();
      else if (r < 63)
        do_fork();
      else if (r < 68)
        do_reclaim();
      else if (r < 71)
        do_preempt();
      else if (r < 73)
        do_evict();
      else if (r < 76)
        do_can_allocate();
      else
        do_step();
      compare();
    }
  }

  const coverage& cov() const {
    return cov_;
  }

private:
  static cache_config make_config(const run_params& p) {
    cache_config cfg;
    cfg.block_size = p.block_size;
    cfg.model = model_config{2, 2, 8, dtype::fp16};
    cfg.storage = "none";
    cfg.num_gpu_blocks = p.num_blocks;
    cfg.prefix_caching = p.prefix_caching;
    auto n = p.num_blocks;
    tenant_config def; // "default": no limits, own namespace
    tenant_config alpha;
    alpha.name = "alpha";
    alpha.max_blocks = n / 4;
    alpha.prefix_namespace = "shared";
    tenant_config beta;
    beta.name = "beta";
    beta.reserved_blocks = n / 8;
    beta.prefix_namespace = "shared";
    tenant_config gamma;
    gamma.name = "gamma";
    gamma.max_blocks = n / 3;
    gamma.reserved_blocks = n / 16;
    cfg.tenants = {def, alpha, beta, gamma};
    return cfg;
  }

  // -- random inputs ---------------------------------------------------------------

  std::uint64_t below(std::uint64_t n) {
    return rng_() % n;
  }
  bool chance(unsigned percent) {
    return below(100) < percent;
  }

  /// Tokens from a tiny alphabet, so that suffixes repeat and hit.
  token_id small_token() {
    return static_cast<token_id>(below(3));
  }

  std::vector<token_id> random_tokens(std::size_t n) {
    std::vector<token_id> out;
    for (std::size_t i = 0; i < n; ++i)
      out.push_back(chance(80) ? small_token()
                               : static_cast<token_id>(below(1u << 31)));
    if (n > 0 && chance(1))
      out[below(n)] = -1 - static_cast<token_id>(below(5));
    return out;
  }

  /// Ids from a range that grows with the pool, so that live requests
  /// outgrow it, and small enough that ids collide.
  request_id any_id() {
    return 1 + below(std::max<std::uint32_t>(32, p_.num_blocks * 3 / 4));
  }

  /// A live request's id (or, now and then or if none, any id).
  request_id live_id() {
    auto& seqs = model_.sequences();
    if (seqs.empty() || chance(8))
      return any_id();
    auto it = seqs.begin();
    std::advance(it, below(seqs.size()));
    return it->first;
  }

  allocation_request random_request() {
    allocation_request req;
    req.id = any_id();
    req.num_layers = 2;
    req.num_heads = 2;
    req.head_dim = 8;
    req.dtype = dtype::fp16;
    req.priority = static_cast<priority>(below(4));
    static const char* names[] = {"", "default", "alpha", "beta", "gamma"};
    req.tenant = chance(1) ? "nobody" : names[below(5)];
    std::uint64_t n;
    if (chance(75)) {
      if (chance(75)) {
        req.prompt = system_prompts_[below(system_prompts_.size())];
        auto suffix = random_tokens(below(11));
        req.prompt.insert(req.prompt.end(), suffix.begin(), suffix.end());
      } else {
        req.prompt = random_tokens(1 + below(24));
      }
      n = req.prompt.size();
      req.initial_tokens = chance(50) ? n : 0;
      if (chance(2))
        req.initial_tokens = n + 1;
      if (chance(20))
        req.cache_salt = 1 + below(2); // an adapter's id, say
      if (chance(25))
        req.prefill_chunk = chance(5) ? ~std::uint64_t{0} - below(40)
                                      : 1 + below(20); // chunked prefill
    } else {
      n = below(25);
      req.initial_tokens = n;
      if (chance(1))
        req.prefill_chunk = 1 + below(8); // without a prompt: refused
    }
    req.max_sequence_length = n + below(33);
    if (chance(3) && n > 0)
      req.max_sequence_length = n - 1;
    if (chance(1))
      req.max_sequence_length = 0;
    if (chance(1)) {
      switch (below(4)) {
        case 0: req.num_layers = 3; break;
        case 1: req.num_heads = 1; break;
        case 2: req.head_dim = 16; break;
        default: req.dtype = dtype::bf16;
      }
    }
    return req;
  }

  // -- operations ------------------------------------------------------------------

  void expect_code(const char* op, maybe_errc core, maybe_errc model) {
    MODEL_REQUIRE(core == model, where() << op << ": core " << name(core)
                                                 << ", model " << name(model));
    cov_(std::string(op) + ":" + name(core));
  }

  void do_allocate() {
    auto req = random_request();
    auto want = model_.allocate(req);
    auto got = core_.allocate(req);
    expect_code("allocate", code_of(got ? caf::error{} : got.error()), want.err);
    if (got) {
      MODEL_REQUIRE(got->cache_id == want.cache_id, where() << "cache_id");
      MODEL_REQUIRE(got->hit_tokens == want.hit_tokens,
                            where() << "hit_tokens " << got->hit_tokens << " vs "
                                    << want.hit_tokens);
      if (got->hit_tokens > 0)
        cov_(req.cache_salt != 0 ? "salted prefix hit" : "prefix hit");
      auto seq = core_.find(req.id);
      MODEL_REQUIRE(seq != nullptr
                      && seq->num_tokens == model_.sequences().at(req.id).num_tokens,
                    where() << "tokens admitted");
      if (seq->num_tokens < req.prompt.size())
        cov_(got->hit_tokens > 0 ? "chunk admitted after a hit" : "chunk admitted");
    }
  }

  void do_can_allocate() {
    auto req = random_request();
    auto want = model_.can_allocate(req);
    MODEL_REQUIRE(core_.can_allocate(req) == want,
                          where() << "can_allocate, model says " << want);
    cov_(want ? "can_allocate:yes" : "can_allocate:no");
  }

  void do_extend() {
    auto id = live_id();
    auto it = model_.sequences().find(id);
    if (it != model_.sequences().end() && it->second.drafts != 0
        && chance(85))
      return do_settle(id, it->second.drafts);
    std::uint64_t n = chance(60) ? 1 : below(10);
    bool named = chance(65);
    auto tokens = random_tokens(n);
    // Speculative decoding: some extends end in drafts (a few too many).
    std::uint64_t drafts = chance(20) ? below(n + 2) : 0;
    auto want = model_.extend(id, n, named ? &tokens : nullptr, drafts);
    auto got = core_.extend(id, n, named ? tokens.data() : nullptr, false,
                            drafts);
    expect_code("extend", code_of(got ? caf::error{} : got.error()), want.err);
    if (got) {
      MODEL_REQUIRE(got->changed == want.changed, where() << "changed");
      MODEL_REQUIRE(got->first_changed == want.first_changed,
                            where() << "first_changed");
      MODEL_REQUIRE(str(got->copies) == str(want.copies),
                            where() << "copies " << str(got->copies) << " vs "
                                    << str(want.copies));
      if (!got->copies.empty())
        cov_("copy on write");
    }
  }

  /// Settles `id`'s `drafts` draft tokens, keeping a random number of them
  /// (now and then one more than it has: invalid_request).
  void do_settle(request_id id, std::uint64_t drafts) {
    auto accepted = chance(5) ? drafts + 1 : below(drafts + 1);
    auto want = model_.settle_drafts(id, accepted);
    auto got = core_.settle_drafts(id, accepted);
    expect_code("settle", code_of(got ? caf::error{} : got.error()), want.err);
    if (got) {
      MODEL_REQUIRE(got->changed == want.changed
                      && got->first_changed == want.first_changed,
                    where() << "settle cut " << got->first_changed << " vs "
                            << want.first_changed);
      cov_(accepted == drafts ? "drafts all accepted" : "drafts rejected");
    }
  }

  void expect_release(const char* op, const caf::expected<std::uint32_t>& got,
                      const test::model_release& want) {
    expect_code(op, code_of(got ? caf::error{} : got.error()), want.err);
    if (got)
      MODEL_REQUIRE(*got == want.freed,
                            where() << op << " freed " << *got << " vs "
                                    << want.freed);
  }

  void do_release() {
    auto id = live_id();
    if (chance(15)) { // its forward pass failed: cache nothing it held
      auto want = model_.discard(id);
      expect_release("discard", core_.discard(id), want);
      return;
    }
    auto want = model_.release(id);
    expect_release("release", core_.release(id), want);
  }

  void do_reclaim() {
    auto id = live_id();
    auto it = model_.sequences().find(id);
    std::uint64_t cache_id = it == model_.sequences().end() ? below(1000)
                                                           : it->second.cache_id;
    if (chance(40))
      cache_id += 1 + below(3); // a stale or future incarnation
    if (it != model_.sequences().end())
      cov_(cache_id == it->second.cache_id ? "reclaim:live" : "reclaim:stale");
    auto want = model_.reclaim(id, cache_id);
    expect_release("reclaim", core_.reclaim(id, cache_id), want);
  }

  void do_preempt() {
    auto id = live_id();
    auto want = model_.preempt(id);
    expect_release("preempt", core_.preempt(id), want);
  }

  void do_fork() {
    auto parent = live_id();
    auto child = chance(20) ? live_id() : any_id();
    auto want = model_.fork(parent, child);
    auto got = core_.fork(parent, child);
    expect_code("fork", code_of(got ? caf::error{} : got.error()), want.err);
    if (got)
      MODEL_REQUIRE(got->cache_id == want.cache_id, where() << "cache_id");
  }

  void do_evict() {
    auto n = static_cast<std::uint32_t>(below(12));
    auto want = model_.evict(n);
    MODEL_REQUIRE(core_.evict(n) == want, where() << "evict");
  }

  void do_step() {
    step_request step;
    std::set<request_id> used;
    for (auto& [id, seq] : model_.sequences())
      if (seq.drafts != 0 && chance(70))
        step.verdicts.push_back(draft_verdict{
          id, static_cast<std::uint32_t>(chance(3) ? seq.drafts + 1
                                                   : below(seq.drafts + 1))});
    for (auto k = below(3); k > 0; --k)
      step.frees.push_back(live_id());
    if (chance(10))
      step.discards.push_back(live_id());
    for (auto k = below(7); k > 0; --k) {
      extend_op op;
      op.id = live_id();
      if (used.count(op.id)) {
        if (!chance(5))
          continue; // an id twice in one step is rare (and fails)
        cov_("step repeats an id");
      }
      used.insert(op.id);
      op.num_tokens = static_cast<std::uint32_t>(chance(60) ? 1 : below(6));
      if (chance(20))
        op.num_draft = static_cast<std::uint32_t>(below(op.num_tokens + 1));
      step.extends.push_back(op);
    }
    if (chance(60)) {
      for (auto& op : step.extends) {
        auto t = random_tokens(op.num_tokens);
        step.tokens.insert(step.tokens.end(), t.begin(), t.end());
      }
      if (chance(3))
        step.tokens.push_back(1); // one token id too many
    }
    for (auto k = below(4); k > 0; --k)
      step.admits.push_back(random_request());
    step.preempt_on_shortage = chance(85);
    step.admit_after_preemption = chance(25);
    auto want = model_.run_step(step);
    auto got = core_.run_step(step);
    auto& w = want;
    auto& g = got;
    MODEL_REQUIRE(g.freed == w.freed, where() << "step freed");
    MODEL_REQUIRE(g.changed.size() == w.changed.size(),
                          where() << "step changed count " << g.changed.size()
                                  << " vs " << w.changed.size());
    for (std::size_t i = 0; i < g.changed.size(); ++i) {
      auto& a = g.changed[i];
      auto& b = w.changed[i];
      MODEL_REQUIRE(a.id == b.id && a.first == b.first
                              && a.blocks == b.blocks
                              && a.num_tokens == b.num_tokens,
                            where() << "step delta " << i << ": " << a.id << "@"
                                    << a.first << str(a.blocks) << " vs " << b.id
                                    << "@" << b.first << str(b.blocks));
    }
    MODEL_REQUIRE(str(g.copies) == str(w.copies), where() << "step copies");
    MODEL_REQUIRE(g.preempted == w.preempted,
                          where() << "step preempted " << str(g.preempted) << " vs "
                                  << str(w.preempted));
    MODEL_REQUIRE(g.admitted.size() == w.admitted.size(),
                          where() << "step admitted count");
    for (std::size_t i = 0; i < g.admitted.size(); ++i) {
      auto& a = g.admitted[i];
      auto& b = w.admitted[i];
      MODEL_REQUIRE(a.id == b.id && a.cache_id == b.cache_id
                              && a.hit_tokens == b.hit_tokens && a.table == b.table,
                            where() << "step admission " << i);
    }
    MODEL_REQUIRE(g.failed.size() == w.failed.size(),
                          where() << "step failed count " << g.failed.size()
                                  << " vs " << w.failed.size());
    for (std::size_t i = 0; i < g.failed.size(); ++i) {
      MODEL_REQUIRE(g.failed[i].id == w.failed[i].first
                              && code_of(g.failed[i].error) == w.failed[i].second,
                            where() << "step failure " << i << ": "
                                    << render(g.failed[i].error) << " vs "
                                    << to_string(w.failed[i].second));
      cov_(std::string("step failed:") + to_string(w.failed[i].second));
    }
    MODEL_REQUIRE(g.blocked == w.blocked
                            && g.admission_blocked == w.admission_blocked,
                          where() << "step blocked");
    MODEL_REQUIRE(g.free_blocks == w.free_blocks
                            && g.used_blocks == w.used_blocks,
                          where() << "step block counts");
    if (!g.preempted.empty())
      cov_("step preempted");
    if (g.admission_blocked)
      cov_("step admission blocked");
    if (!g.admitted.empty())
      cov_("step admitted");
    if (!g.copies.empty())
      cov_("step copy on write");
    for (auto& d : g.changed)
      if (d.blocks.empty())
        cov_("step verdict cut a table");
  }

  // -- comparison ------------------------------------------------------------------

  std::string where() const {
    return "seed " + std::to_string(p_.seed) + " op " + std::to_string(op_) + ": ";
  }

  void compare() {
    auto inv = core_.check_invariant();
    MODEL_REQUIRE(!inv, where() << render(inv));
    auto d = test::state_diff(core_, model_, events_, cov_.n);
    MODEL_REQUIRE(d.empty(), where() << d);
  }

  run_params p_;
  cache_config cfg_;
  block_pool_core core_;
  pool_model model_;
  std::mt19937_64 rng_;
  std::vector<std::vector<token_id>> system_prompts_;
  std::size_t op_ = 0;
  coverage cov_;
  test::event_checker events_{p_.block_size};
};

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
                 "can_allocate:yes", "can_allocate:no", "chunk admitted"})
    BOOST_TEST(has(k), "seed " << p.seed << " never reached " << k);
  if (p.block_size > 1) // with one token per block, no block is partly full
    BOOST_TEST(has("copy on write"), "seed " << p.seed << " never copied on write");
  if (p.prefix_caching)
    for (auto k : {"prefix hit", "event:stored", "event:removed",
                   "chunk admitted after a hit", "salted prefix hit"})
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
  run_and_check_coverage({4, 96, 3, true, 20000});
  run_and_check_coverage({5, 48, 1, true, 20000});
}

BOOST_AUTO_TEST_CASE(core_matches_the_reference_model_without_prefix_caching) {
  run_and_check_coverage({6, 64, 4, false, 20000});
}

BOOST_AUTO_TEST_SUITE_END()
