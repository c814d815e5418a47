// The two lists the block pool keeps its unowned blocks in: a stack of free
// blocks (no content worth keeping) and a least-recently-used list, per
// retention level, of cached blocks (free, but still holding a findable
// prefix). Both intrusive over block ids: O(1) push, pop and remove. CAF-free.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kvactor/messages/types.hpp"

namespace kvactor::detail {

/// Free blocks; the most recently freed is handed out first.
class free_stack {
public:
  void reserve(std::size_t n) {
    ids_.reserve(n);
  }
  bool empty() const noexcept {
    return ids_.empty();
  }
  std::size_t size() const noexcept {
    return ids_.size();
  }
  void push(block_id b) {
    ids_.push_back(b);
  }
  /// REQUIRES: !empty().
  block_id pop() noexcept {
    auto b = ids_.back();
    ids_.pop_back();
    return b;
  }
  const std::vector<block_id>& ids() const noexcept {
    return ids_;
  }

private:
  std::vector<block_id> ids_;
};

/// Cached blocks in eviction order. Level 0 is evicted first; within a level
/// the least recently released block goes first. A block is on at most one
/// level; the caller tracks membership.
class lru_lists {
public:
  static constexpr std::size_t num_levels = 16;

  explicit lru_lists(std::size_t num_blocks = 0)
    : prev_(num_blocks, no_block), next_(num_blocks, no_block) {
    heads_.fill(no_block);
    tails_.fill(no_block);
    sizes_.fill(0);
  }

  std::size_t size() const noexcept {
    return total_;
  }
  std::size_t size(std::size_t level) const noexcept {
    return sizes_[level];
  }

  /// Appends `b` as the most recently used block of `level`.
  void push_back(block_id b, std::size_t level) noexcept {
    prev_[b] = tails_[level];
    next_[b] = no_block;
    if (tails_[level] != no_block)
      next_[tails_[level]] = b;
    else
      heads_[level] = b;
    tails_[level] = b;
    ++sizes_[level];
    ++total_;
  }

  /// Unlinks `b`. REQUIRES: `b` is on `level`.
  void remove(block_id b, std::size_t level) noexcept {
    auto p = prev_[b];
    auto n = next_[b];
    if (p != no_block)
      next_[p] = n;
    else
      heads_[level] = n;
    if (n != no_block)
      prev_[n] = p;
    else
      tails_[level] = p;
    prev_[b] = next_[b] = no_block;
    --sizes_[level];
    --total_;
  }

  /// The next block to evict and its level, or no_block if none.
  block_id front(std::size_t& level) const noexcept {
    for (std::size_t i = 0; i < num_levels; ++i)
      if (heads_[i] != no_block) {
        level = i;
        return heads_[i];
      }
    return no_block;
  }

  /// The block after `b` on its level (evicted after it), or no_block.
  block_id next(block_id b) const noexcept {
    return next_[b];
  }

  /// Brings `b`'s links toward the cache (before unlinking or appending it).
  void prefetch(block_id b) const noexcept {
    __builtin_prefetch(&prev_[b], 1);
    __builtin_prefetch(&next_[b], 1);
  }

  /// What is wrong with the lists, or "" if nothing: on each level the
  /// walk from the head ends at the tail after size(level) blocks, each
  /// block's prev link names the block before it, and the levels' sizes sum
  /// to size(). Stops at a cycle. O(blocks listed). (check_invariant.)
  std::string broken_links() const {
    std::size_t total = 0;
    for (std::size_t i = 0; i < num_levels; ++i) {
      auto at = [&](const std::string& what) {
        return "LRU level " + std::to_string(i) + ": " + what;
      };
      std::size_t n = 0;
      auto before = no_block;
      for (auto b = heads_[i]; b != no_block; before = b, b = next_[b]) {
        if (b >= next_.size())
          return at("block " + std::to_string(b) + " is out of range");
        if (prev_[b] != before)
          return at("block " + std::to_string(b) + " links back to "
                    + std::to_string(prev_[b]) + ", not to "
                    + std::to_string(before));
        if (++n > next_.size())
          return at("the links form a cycle");
      }
      if (tails_[i] != before)
        return at("the tail is " + std::to_string(tails_[i])
                  + " but the walk ends at " + std::to_string(before));
      if (n != sizes_[i])
        return at(std::to_string(n) + " blocks listed, its size says "
                  + std::to_string(sizes_[i]));
      total += n;
    }
    if (total != total_)
      return std::to_string(total) + " blocks on the LRU levels, its size says "
             + std::to_string(total_);
    return {};
  }

  /// Calls f(block, level) for every block, in eviction order.
  template <class F>
  void for_each(F&& f) const {
    for (std::size_t i = 0; i < num_levels; ++i)
      for (auto b = heads_[i]; b != no_block; b = next_[b])
        f(b, i);
  }

private:
  /// Tests only (tests/unit/pool_test_access.hpp): corrupts state on purpose.
  friend struct block_pool_test_access;

  std::vector<block_id> prev_;
  std::vector<block_id> next_;
  std::array<block_id, num_levels> heads_;
  std::array<block_id, num_levels> tails_;
  std::array<std::size_t, num_levels> sizes_;
  std::size_t total_ = 0;
};

} // namespace kvactor::detail
