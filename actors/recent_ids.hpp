// recent_ids: the last `capacity` distinct 64-bit ids seen, oldest forgotten
// first - a ring of ids and a flat_index over it, both allocated once. The
// facade remembers ended handle actors with it (a reply on its way may yet
// make a slot for one). A deque and an unordered_set did the same with a
// node allocation per id and, once the heap had grown large (100,000 live
// requests), several cache misses per request end. CAF-free.
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvactor/actors/flat_index.hpp"

namespace kvactor::detail {

class recent_ids {
public:
  /// REQUIRES: capacity > 0.
  explicit recent_ids(std::size_t capacity)
    : ring_(capacity), index_(capacity) {
    assert(capacity > 0);
  }

  /// Remembers `id`, forgetting the oldest if full; false (and no change)
  /// if `id` is remembered already.
  bool insert(std::uint64_t id) {
    if (index_.find(id) != flat_index::npos)
      return false;
    std::size_t pos;
    if (size_ == ring_.size()) { // full: the oldest's place takes `id`
      pos = head_;
      index_.erase(ring_[pos]);
      head_ = (head_ + 1) % ring_.size();
    } else {
      pos = (head_ + size_) % ring_.size();
      ++size_;
    }
    ring_[pos] = id;
    index_.insert(id, static_cast<std::uint32_t>(pos));
    return true;
  }

  bool contains(std::uint64_t id) const noexcept {
    return index_.find(id) != flat_index::npos;
  }

  std::size_t size() const noexcept {
    return size_;
  }

private:
  std::vector<std::uint64_t> ring_; ///< oldest at head_, size_ in use
  flat_index index_;                ///< id -> its place in ring_
  std::size_t head_ = 0;
  std::size_t size_ = 0;
};

} // namespace kvactor::detail
