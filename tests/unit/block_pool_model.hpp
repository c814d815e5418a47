// The block pool model test's harness (block_pool_model_test.cpp): a
// block_pool_core and pool_reference_model side by side, the seeded random
// inputs and the choice of operation. The operations, each run on both and
// their answers compared, are in block_pool_model_ops.cpp; settling the
// copy-on-write copies that extends and steps hold is in
// block_pool_model_held.cpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
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
#include "pool_reference_model.hpp"

/// BOOST_REQUIRE_MESSAGE, but the message is built only on failure (Boost
/// builds it every time, which dominated this test's run time).
#define MODEL_REQUIRE(cond, msg)                                                 \
  do {                                                                           \
    if (!(cond))                                                                 \
      BOOST_FAIL(msg);                                                           \
  } while (false)

namespace kvactor::test::block_pool_model {

using kvactor::detail::block_pool_core;

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
      if (!in_flight_.empty())
        settle_or_end(); // the copies first: only an end may come between
      else if (r < 22)
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
      else if (r < 75)
        do_can_allocate();
      else if (r < 76)
        do_cached_prefix();
      else
        do_step();
      compare();
    }
    for (auto& [why, n] : model_.copy_reasons())
      cov_.n[why] += n;
    cov_.n["discard took what was built on it"] += model_.built_on().first;
    cov_.n["discard stopped a holder's indexing"] += model_.built_on().second;
    cov_.n["one scan for a step's discards"] += model_.batched_scans();
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

  /// The other live requests whose partly filled last block is `id`'s.
  std::vector<request_id> tail_sharers(request_id id) const {
    std::vector<request_id> out;
    auto& seqs = model_.sequences();
    auto it = seqs.find(id);
    if (it == seqs.end() || it->second.blocks.empty()
        || it->second.num_tokens % p_.block_size == 0)
      return out;
    for (auto& [other, seq] : seqs)
      if (other != id && !seq.blocks.empty()
          && seq.blocks.back() == it->second.blocks.back()
          && seq.num_tokens % p_.block_size != 0)
        out.push_back(other);
    return out;
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

  void expect_code(const char* op, maybe_errc core, maybe_errc model);
  void do_allocate();
  void do_can_allocate();
  void do_cached_prefix();
  void do_extend();
  /// Settles `id`'s `drafts` draft tokens, keeping a random number of them
  /// (now and then one more than it has: invalid_request).
  void do_settle(request_id id, std::uint64_t drafts);
  void expect_release(const char* op, const caf::expected<std::uint32_t>& got,
                      const test::model_release& want);
  void do_release();
  void do_reclaim();
  void do_preempt();
  /// Ends drains: the oldest (its grace ran out) or a stepper's.
  void end_drains();
  void do_fork();
  void do_evict();
  void do_step();

  // -- copies in flight (block_pool_model_held.cpp) ---------------------------------

  /// With copies in flight: settles them (all, or now and then a part),
  /// made or failed at random - or first ends a request.
  void settle_or_end();
  /// The live request that took a copy in flight, 0 if none is left.
  request_id copier() const;
  /// Ends (releases, discards, preempts or reclaims) a copy's request, now
  /// and then another.
  void end_copier();
  void settle(const std::vector<block_copy>& copies, bool made);
  /// Whether another request holds `id`'s partly filled last block with
  /// more tokens in it (it wrote there while `id`'s copy was in flight).
  bool written_past(request_id id) const;

  // -- comparison ------------------------------------------------------------------

  std::string where() const {
    return "seed " + std::to_string(p_.seed) + " op " + std::to_string(op_) + ": ";
  }

  void compare();

  run_params p_;
  cache_config cfg_;
  block_pool_core core_;
  pool_model model_;
  std::mt19937_64 rng_;
  std::vector<std::vector<token_id>> system_prompts_;
  std::size_t op_ = 0;
  coverage cov_;
  test::event_checker events_{p_.block_size};
  /// Copies the last extend or step holds, to settle before anything else.
  std::vector<block_copy> in_flight_;
};

} // namespace kvactor::test::block_pool_model
