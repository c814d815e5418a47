// What the core-against-model tests (block_pool_model_test.cpp,
// policy_model_test.cpp) share: error codes and vectors as text, and the
// comparisons of block_pool_core's requests, usage, counters, tenants and
// KV events with pool_reference_model's. Each comparison returns what differs, empty when
// nothing does; the harness calling it adds the seed and operation.
#pragma once

#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "kvactor/actors/block_pool_core.hpp"
#include "pool_reference_model.hpp"

namespace kvactor::test {

/// The errc a caf::error carries; none for success; invariant_violation
/// stands in for an error of another category (never expected).
maybe_errc code_of(const caf::error& err);

template <class T>
maybe_errc code_of(const caf::expected<T>& x) {
  return x ? std::nullopt : code_of(x.error());
}

/// The code's name, "ok" for none.
std::string name(maybe_errc e);

/// A vector as text, one-to-one (tests compare outcomes by it).
template <class T>
std::string str(const std::vector<T>& xs) {
  std::ostringstream out;
  out << '[';
  for (auto& x : xs)
    out << x << ' ';
  out << ']';
  return out.str();
}
std::string str(const std::vector<block_copy>& xs);
std::string str(const std::vector<block_move>& xs);

/// A step's outcome as text, one-to-one: the core's (all but `ended`,
/// which the pool actor fills) and the model's, for comparing them.
std::string str(const step_result& r);
std::string str(const model_step_result& r);

/// Every request's state, core against model: blocks and residency, token
/// counts, identity, tenant, priority, promise, hashing state, table() and
/// find().
std::string sequences_diff(const detail::block_pool_core& core,
                           const pool_model& model);

/// Used, cached, free, pinned and free host blocks, drains and copies in
/// flight, core against model.
std::string usage_diff(const detail::block_pool_core& core,
                       const pool_model& model);

/// Every block's references (its holders' tables and copies in flight) and
/// of them the copies' holds, core against model: a block the contract
/// keeps held is in use on both sides, counted the same.
std::string references_diff(detail::block_pool_core& core,
                            const pool_model& model);

/// Every lifetime counter, core against model.
std::string counters_diff(const detail::pool_counters& core,
                          const detail::pool_counters& model);

/// Every tenant's usage and tallies, core against model.
std::string tenants_diff(const std::vector<detail::tenant_state>& core,
                         const std::vector<model_tenant>& model);

class event_checker;

/// From the core's own answers: the blocks others may take (free, or cached
/// off the pinned list) cover every tenant's shortfall, and both figures
/// match the model's; counts "reservation binding" in `cov` when they are
/// exactly enough.
std::string reservations_diff(const detail::block_pool_core& core,
                              const pool_model& model,
                              std::map<std::string, std::size_t>& cov);

/// Everything the model tests compare after each operation, in this order:
/// requests, usage, counters, tenants, then the events since the last call.
std::string state_diff(detail::block_pool_core& core, pool_model& model,
                       event_checker& events,
                       std::map<std::string, std::size_t>& cov);

/// Checks the KV events of a run as a subscriber would see them. Each call
/// takes both sides' events since the last and requires: the same kinds,
/// blocks and tenants in the same order; one hash per prefix and one prefix
/// per hash, for the whole run; a block's parent hash its prefix's
/// predecessor's (0 for a chain's first block); and, replayed in order, each
/// stored hash new and its block unindexed, each removed one indexed on its
/// block, and the replayed index equal to the core's (in full after events
/// and every 64th call, its size on every call).
class event_checker {
public:
  explicit event_checker(std::uint32_t block_size) : block_size_(block_size) {
  }

  /// What differs, empty if nothing; counts "event:stored" and
  /// "event:removed" in `cov`.
  std::string check(detail::block_pool_core& core, pool_model& model,
                    std::map<std::string, std::size_t>& cov);

private:
  std::uint32_t block_size_;
  std::size_t quiet_calls_ = 0;
  std::map<std::uint64_t, block_id> replay_;
  std::map<block_id, std::uint64_t> block_hash_;
  std::map<prefix_key, std::uint64_t> hash_of_;
  std::map<std::uint64_t, prefix_key> key_of_;
};

} // namespace kvactor::test
