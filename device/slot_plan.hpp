// slot_planner: the host work the cuda backend's write_slots does on a slot
// mapping before it launches, in one pass. CUDA-free, so it is unit-tested
// and timed (bench/slot_plan_bench) on machines without a GPU.
//  - the distinct blocks the mapping writes, each once: the cross-stream
//    hazards are checked and recorded per block, not per token;
//  - whether some slot is named twice, and then a copy of the mapping in
//    which only the last token naming each slot writes it (the kernel gives
//    each token's K and V rows to a warp of their own, which would otherwise
//    race on the slot; the host backend's in-order copies make the last
//    token win too).
// Per token: a shift, a stamp and a bit; per distinct block: the hazards.
// The stamps need no clearing between calls and the bits are cleared per
// block, so a call costs O(tokens + blocks written), not O(pool).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kvactor/messages/types.hpp"

namespace kvactor::detail {

class slot_planner {
public:
  /// REQUIRES: block_size is a power of two (validate() ensures it).
  slot_planner(std::uint32_t num_blocks, std::uint32_t block_size);

  /// Plans `slots[0..n)`. REQUIRES: each slot is -1 (skip) or below
  /// num_blocks * block_size (check_write ensures it).
  void plan(const std::int64_t* slots, std::size_t n);

  /// Whether `slots[0..n)` equals the mapping the last plan() planned: its
  /// plan (and its range check) still hold. A forward pass writes every
  /// layer with the same mapping, so the cuda backend validates and plans
  /// once per step, not once per layer (one memcmp instead: about 1 us
  /// for 4096 tokens, against 20-35 us). REQUIRES: slots non-null if n > 0.
  bool same_as_last(const std::int64_t* slots, std::size_t n) const noexcept {
    return planned_ && n == last_.size()
           && (n == 0
               || std::memcmp(slots, last_.data(), n * sizeof(std::int64_t))
                    == 0);
  }

  /// How many times plan() was called: a caller that keeps work derived
  /// from one plan (cuda_storage: the mapping's upload, the blocks' hazard
  /// group) notes this count and checks it still holds.
  std::uint64_t plans() const noexcept {
    return plans_;
  }

  /// The blocks the last plan writes, each once, in no particular order.
  struct block_span {
    const block_id* first;
    const block_id* last;
    const block_id* begin() const noexcept {
      return first;
    }
    const block_id* end() const noexcept {
      return last;
    }
    std::size_t size() const noexcept {
      return static_cast<std::size_t>(last - first);
    }
  };
  block_span blocks() const noexcept {
    return {blocks_.data(), blocks_.data() + count_};
  }

  /// Whether the last plan named some slot more than once.
  bool repeats() const noexcept {
    return repeats_;
  }

  /// The mapping to launch with: `slots` itself, or (repeats) the copy in
  /// which every token but a slot's last one is -1.
  const std::int64_t* mapping(const std::int64_t* slots) const noexcept {
    return repeats_ ? dedup_.data() : slots;
  }

private:
  std::uint32_t shift_ = 0;          // log2(block_size)
  std::uint32_t block_size_ = 0;
  std::uint32_t stamp_ = 0;          // this plan's mark in seen_block_
  std::vector<std::uint32_t> seen_block_; // [num_blocks]: last plan's stamp
  std::vector<std::uint64_t> seen_slot_;  // bit per slot, clear between plans
  std::vector<block_id> blocks_; // [count_) are the last plan's; grows only
  std::size_t count_ = 0;
  std::vector<std::int64_t> dedup_;
  std::vector<std::int64_t> last_; // the mapping the last plan() planned
  std::uint64_t plans_ = 0;
  bool planned_ = false;
  bool repeats_ = false;
};

} // namespace kvactor::detail
