// The policy model test's harness (policy_model_test.cpp): block_pool_core
// and pool_reference_model side by side with three tenants, the seeded random
// inputs and the choice of operation. The operations, each run on both and
// their answers compared, are in policy_model_ops.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/actors/block_pool_core.hpp"
#include "kvactor/messages/error.hpp"

#include "model_checks.hpp"
#include "pool_reference_model.hpp"

/// Builds the message only on failure (Boost would build it every time).
#define POLICY_REQUIRE(cond, msg)                                                \
  do {                                                                           \
    if (!(cond))                                                                 \
      BOOST_FAIL(where() << msg);                                                \
  } while (false)

namespace kvactor::test::policy_model {

using kvactor::detail::block_pool_core;
using kvactor::detail::residency;

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
      else if (r < 74)
        do_unpin();
      else if (r < 77)
        do_expire();
      else if (r < 81)
        do_victims();
      else if (r < 84)
        do_can_allocate();
      else if (r < 85)
        do_evict();
      else
        do_step();
      compare();
      // Only unpin, expiry and reservations (give_way) take pins away.
      if (core_.pinned_blocks() < pinned && (r < 72 || r >= 77))
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

  void expect(const char* op, maybe_errc core, maybe_errc model);
  void do_allocate();
  void do_can_allocate();
  void do_extend(bool named);
  void do_fork();
  void expect_release(const char* op, const caf::expected<std::uint32_t>& got,
                      const test::model_release& want);
  void do_release();
  void do_preempt();
  /// One phase of a swap: begin one way or the other, or end one in flight
  /// (the device's copy succeeding or failing); a begun swap may end at once.
  void do_swap();
  /// Pins a prefix: gamma one it computed (its namespace is its own),
  /// alpha or beta a system prompt (their shared namespace's). A reserved
  /// tenant pinning blocks it uses itself is what makes pins give way.
  void do_pin();
  /// Lets a pin go early: do_pin's prefixes, now and then cut short or
  /// grown longer, or under the other salt or tenant.
  void do_unpin();
  void do_expire();
  /// The supervisor at critical pressure: choose victims, preempt them.
  void do_victims();
  void do_evict();
  void do_step();

  // -- checks ----------------------------------------------------------------------

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
  std::vector<std::vector<token_id>> gamma_prompts_ = std::vector<std::vector<token_id>>(6);
  std::uint64_t now_ms_ = 0;
  std::size_t op_ = 0;
  test::event_checker events_{cfg_.block_size};
};

} // namespace kvactor::test::policy_model
