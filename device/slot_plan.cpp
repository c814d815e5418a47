// One pass over a write_slots mapping (slot_plan.hpp).
#include "kvactor/device/slot_plan.hpp"

#include <algorithm>
#include <cassert>

namespace kvactor::detail {

slot_planner::slot_planner(std::uint32_t num_blocks, std::uint32_t block_size)
  : block_size_(block_size),
    seen_block_(num_blocks, 0),
    seen_slot_((std::uint64_t{num_blocks} * block_size + 63) / 64, 0) {
  assert(block_size > 0 && (block_size & (block_size - 1)) == 0);
  while ((std::uint32_t{1} << shift_) < block_size)
    ++shift_;
}

void slot_planner::plan(const std::int64_t* slots, std::size_t n) {
  planned_ = false; // until this plan is whole (an allocation may throw)
  ++plans_;
  // Every allocation before the first slot bit is set: a throw after it
  // would leave bits set, and the next plan - on this storage, maybe a
  // restarted device actor's - would take those slots for repeats and
  // drop their tokens. With the capacity there, the assigns below cannot
  // throw. (Grows only, as blocks_: at most what the largest batch needs.)
  if (blocks_.size() < n)
    blocks_.resize(n); // room for every token's block
  dedup_.reserve(n);
  last_.reserve(n);
  std::size_t count = 0;
  repeats_ = false;
  if (++stamp_ == 0) { // wrapped after 2^32 plans: old stamps would match
    std::fill(seen_block_.begin(), seen_block_.end(), 0);
    stamp_ = 1;
  }
  // From the back, so the first time a slot is met is its last writer.
  for (auto i = n; i-- > 0;) {
    auto s = slots[i];
    if (s < 0)
      continue;
    auto u = static_cast<std::uint64_t>(s);
    auto b = static_cast<block_id>(u >> shift_);
    // Without a branch: whether a random token's block was seen before is
    // a coin flip the predictor would lose.
    auto fresh = seen_block_[b] != stamp_;
    seen_block_[b] = stamp_;
    blocks_[count] = b;
    count += fresh;
    auto& word = seen_slot_[u >> 6];
    auto bit = std::uint64_t{1} << (u & 63);
    if ((word & bit) == 0) {
      word |= bit;
      continue;
    }
    if (!repeats_) {
      repeats_ = true;
      dedup_.assign(slots, slots + n);
    }
    dedup_[i] = -1;
  }
  count_ = count;
  last_.assign(slots, slots + n);
  planned_ = true;
  // Clear the slot bits again, block by block: a block's slots are one run
  // of bits, within one word when the block is smaller than a word.
  for (auto b : blocks()) {
    auto first = std::uint64_t{b} << shift_;
    if (block_size_ >= 64) {
      auto w = seen_slot_.begin() + static_cast<std::ptrdiff_t>(first >> 6);
      std::fill(w, w + block_size_ / 64, 0);
    } else {
      auto mask = ((std::uint64_t{1} << block_size_) - 1) << (first & 63);
      seen_slot_[first >> 6] &= ~mask;
    }
  }
}

} // namespace kvactor::detail
