// The random actor model (random_model_test.cpp): a small reference model
// of what must hold for requests driven through the actors, and the
// operations that drive them, each checked against it. The step operation's
// simulation is in random_model_step.cpp.
#pragma once

#include "fixture.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <tuple>

#include <caf/all.hpp>

namespace kvactor::test::model {

constexpr std::uint64_t bs = 4;
constexpr std::uint64_t total_blocks = 64;

struct model_request {
  std::uint64_t tokens = 0;
  std::uint64_t max_len = 0;
  std::vector<block_id> blocks;
  std::optional<request_handle_actor> handle; ///< looked up when needed
  int doc = -1;         ///< follows this document while its tokens are named
  std::uint64_t pos = 0; ///< how much of the document it holds
  /// Its cache id if a step admitted it (0 otherwise): the next step's
  /// reply names it in `ended` if something else ends it.
  std::uint64_t stepped = 0;
};

class random_model : public cache_fixture {
public:
  explicit random_model(std::uint64_t seed) : rng_(seed), seed_(seed) {
    for (int d = 0; d < 4; ++d)
      docs_.push_back(make_tokens(48, 1000 + d));
    auto lane = ask<step_actor>(mgr, step_atom::value);
    BOOST_REQUIRE_MESSAGE(lane, outcome(lane));
    lane_ = *lane;
  }

  void run_ops(std::size_t n);

  std::size_t checks = 0;
  std::map<std::string, std::size_t> tally; ///< "op:outcome" -> count

private:
  // -- the model ------------------------------------------------------------------

  using ref_counts = std::vector<int>; ///< per block id

  ref_counts refs() const {
    ref_counts out(total_blocks, 0);
    for (auto& [id, r] : live_)
      for (auto b : r.blocks)
        ++out.at(b);
    for (auto& [id, t] : orphans_)
      for (auto b : t.blocks)
        ++out.at(b);
    return out;
  }
  static std::uint64_t held(const ref_counts& r) {
    return static_cast<std::uint64_t>(
      std::count_if(r.begin(), r.end(), [](int n) { return n > 0; }));
  }
  std::uint64_t used() const {
    return held(refs());
  }
  std::uint64_t free_blocks() const {
    return total_blocks - used();
  }
  /// Blocks released when `blocks` lose one reference each.
  std::uint32_t released_by(const std::vector<block_id>& blocks) const {
    auto r = refs();
    std::uint32_t n = 0;
    for (auto b : blocks)
      if (r[b] == 1)
        ++n;
    return n;
  }

  // -- checking -----------------------------------------------------------------------

  void expect(bool ok, const std::string& what) {
    ++checks;
    if (!ok)
      BOOST_FAIL("seed " << seed_ << ", op " << op_ << " (" << op_name_
                         << "): " << what);
  }
  template <class T>
  void expect_outcome(const caf::expected<T>& x, const std::string& want) {
    auto got = outcome(x);
    tally[op_name_ + ":" + got]++;
    expect(got == want, "outcome " + got + ", expected " + want);
  }
  /// A table just handed out for `tokens` tokens: size, and `fresh_from`
  /// onwards held by nobody else (before the operation).
  void expect_table(const block_table& t, std::uint64_t tokens,
                    std::size_t fresh_from, const ref_counts& before) {
    expect(t.num_tokens == tokens, "table holds " + std::to_string(t.num_tokens)
                                     + " tokens, expected "
                                     + std::to_string(tokens));
    expect(t.block_size == bs, "block size");
    expect(t.blocks.size() == blocks_for(tokens, bs),
           "table of " + std::to_string(t.blocks.size()) + " blocks for "
             + std::to_string(tokens) + " tokens");
    std::set<block_id> distinct(t.blocks.begin(), t.blocks.end());
    expect(distinct.size() == t.blocks.size(), "a block twice in one table");
    for (std::size_t i = fresh_from; i < t.blocks.size(); ++i) {
      expect(t.blocks[i] < total_blocks, "block id out of range");
      expect(before.at(t.blocks[i]) == 0,
             "block " + std::to_string(t.blocks[i]) + " at " + std::to_string(i)
               + " is still held by another request");
    }
  }

  // -- picking ----------------------------------------------------------------------------

  std::uint64_t pick(std::uint64_t lo, std::uint64_t hi) {
    return std::uniform_int_distribution<std::uint64_t>{lo, hi}(rng_);
  }
  bool chance(double p) {
    return std::bernoulli_distribution{p}(rng_);
  }
  request_id any_id() {
    return pick(1, 48);
  }
  /// A live id most of the time, some other id otherwise.
  request_id some_id() {
    if (live_.empty() || chance(0.1))
      return any_id();
    auto i = live_.begin();
    std::advance(i, pick(0, live_.size() - 1));
    return i->first;
  }
  std::optional<request_handle_actor> handle_of(request_id id) {
    auto& r = live_.at(id);
    if (!r.handle) {
      auto found = lookup(id);
      expect(static_cast<bool>(found), "lookup of live request "
                                         + std::to_string(id) + ": "
                                         + outcome(found));
      r.handle = found->first;
    }
    return r.handle;
  }

  // -- operations -------------------------------------------------------------------------

  void op_allocate();
  void op_allocate_prompt();
  void op_extend(bool named);
  void op_fork();
  void op_free(bool preempting);
  void op_kill();
  void op_orphan();
  void op_gc();
  void op_step();
  void op_queries();
  void full_check();

  /// A request a step admitted ended by another operation.
  void ended_elsewhere(request_id id, const model_request& r, end_reason why) {
    if (r.stepped != 0)
      ended_elsewhere_.emplace_back(id, r.stepped, why);
  }

  std::vector<std::tuple<request_id, std::uint64_t, end_reason>> ended_elsewhere_;
  std::mt19937_64 rng_;
  std::uint64_t seed_;
  step_actor lane_; ///< where the manager says steps may go
  std::vector<std::vector<token_id>> docs_;
  std::map<request_id, model_request> live_;
  std::map<request_id, block_table> orphans_;
  request_id next_orphan_ = 10000;
  std::size_t op_ = 0;
  std::string op_name_;
};

} // namespace kvactor::test::model
