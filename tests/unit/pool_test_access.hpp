// block_pool_test_access: the tests' way into block_pool_core's private
// state (a friend of block_pool_core and lru_lists), to corrupt it on
// purpose and show that check_invariant notices. Defined here only; no
// library code uses it.
#pragma once

#include <cstdint>

#include "kvactor/actors/block_pool_core.hpp"

namespace kvactor::detail {

struct block_pool_test_access {
  using core = block_pool_core;

  // -- requests ---------------------------------------------------------------------

  /// The live request `id`. REQUIRES: it is live.
  static sequence& seq(core& p, request_id id) {
    return *p.find_mut(id);
  }
  /// Its slot in the request table, or flat_index::npos.
  static std::uint32_t slot_of(const core& p, request_id id) {
    return p.seq_index_.find(id);
  }
  static core::sequence_store& seqs(core& p) {
    return p.seqs_;
  }
  static flat_index& seq_index(core& p) {
    return p.seq_index_;
  }
  static std::vector<std::uint32_t>& ghosts(core& p) {
    return p.ghosts_;
  }
  static std::vector<std::uint32_t>& free_slots(core& p) {
    return p.free_seq_slots_;
  }

  // -- blocks and lists -------------------------------------------------------------

  /// Block `b`'s metadata (ref_count, tenant, level, indexed, pinned,
  /// holds, hash).
  static auto& meta(core& p, block_id b) {
    return p.blocks_[b];
  }
  static std::vector<std::uint64_t>& parent(core& p) {
    return p.parent_;
  }
  static free_stack& free_blocks(core& p) {
    return p.free_;
  }
  static free_stack& free_host_blocks(core& p) {
    return p.host_free_;
  }
  static std::vector<block_id>& lru_prev(core& p) {
    return p.lru_.prev_;
  }
  static std::size_t& lru_size(core& p, std::size_t level) {
    return p.lru_.sizes_[level];
  }
  static std::size_t& lru_total(core& p) {
    return p.lru_.total_;
  }
  static std::vector<block_id>& pinned(core& p) {
    return p.pinned_;
  }
  static std::vector<std::uint32_t>& pin_pos(core& p) {
    return p.pin_pos_;
  }
  /// The drains (preempt_draining), oldest first, and their block count.
  static auto& drains(core& p) {
    return p.drains_;
  }
  static std::uint64_t& draining(core& p) {
    return p.draining_;
  }
  /// Which pins end at each pinned block (parallel to pinned), and each
  /// block's pin deadline.
  static auto& pin_ends(core& p) {
    return p.pin_ends_;
  }
  static std::vector<std::uint64_t>& pin_until(core& p) {
    return p.pin_until_;
  }
  /// The blocks' lineage (write_lineage.hpp), and the epoch of `s`.
  static write_lineage& lineage(core& p) {
    return p.lineage_;
  }
  static write_lineage::token epoch(const core& p, const sequence& s) {
    return p.epoch_of(s);
  }
  /// The copies in flight (pending_cow records).
  static auto& copies(core& p) {
    return p.pending_cows_;
  }

  // -- totals -----------------------------------------------------------------------

  static std::vector<tenant_state>& tenants(core& p) {
    return p.tenants_;
  }
  static std::uint64_t& used(core& p) {
    return p.used_;
  }
  /// What the free and cached blocks hold back for reservations.
  static std::uint64_t& held(core& p) {
    return p.held_total_;
  }
  static std::uint64_t& shortfall(core& p) {
    return p.shortfall_total_;
  }
  /// The default tenant's promised growth.
  static std::uint64_t& promised(core& p) {
    return p.tenants_[p.default_tenant_].promised;
  }
};

} // namespace kvactor::detail
