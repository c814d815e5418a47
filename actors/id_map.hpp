// id_map: a map from request ids to T, kept dense - (id, T) pairs in a
// chunked_vector, whose growth moves nothing - and found through a
// flat_index: one probe into a compact table and one visit to the entry,
// where std::unordered_map chases a bucket and two nodes scattered over the
// heap (at 100,000 live requests, three cache and TLB misses per lookup),
// and no node is allocated per entry. The manager's registry, the step
// ledger, the facade's maps, the bridge's calls in flight and the reply
// book use it. Erase moves the last entry into the erased one's place:
// references to those two entries and any end() taken before become
// invalid, the others stay; insert invalidates only end(). The order of
// iteration is unspecified. CAF-free.
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <tuple>
#include <utility>

#include "kvactor/actors/chunked_vector.hpp"
#include "kvactor/actors/flat_index.hpp"

namespace kvactor::detail {

/// ChunkBits: entries per chunk, log 2 - 4,096 for maps that grow with the
/// live requests, fewer for small ones (a chunk is allocated whole).
template <class T, unsigned ChunkBits = 12>
class id_map {
public:
  using key_type = std::uint64_t;
  using value_type = std::pair<key_type, T>;
  using entries_type = chunked_vector<value_type, ChunkBits>;
  using iterator = typename entries_type::iterator;
  using const_iterator = typename entries_type::const_iterator;

  iterator begin() noexcept {
    return entries_.begin();
  }
  iterator end() noexcept {
    return entries_.end();
  }
  const_iterator begin() const noexcept {
    return entries_.begin();
  }
  const_iterator end() const noexcept {
    return entries_.end();
  }

  std::size_t size() const noexcept {
    return entries_.size();
  }
  bool empty() const noexcept {
    return entries_.empty();
  }

  iterator find(key_type id) noexcept {
    auto pos = index_.find(id);
    return pos == flat_index::npos ? end() : iterator{&entries_, pos};
  }
  const_iterator find(key_type id) const noexcept {
    auto pos = index_.find(id);
    return pos == flat_index::npos ? end() : const_iterator{&entries_, pos};
  }

  std::size_t count(key_type id) const noexcept {
    return index_.find(id) == flat_index::npos ? 0 : 1;
  }

  /// The entry of `id`, default-constructed first if absent.
  T& operator[](key_type id) {
    return try_emplace(id).first->second;
  }

  /// Adds `id` -> T(args...) unless `id` is present: the entry of `id`, and
  /// whether it was added (as std::unordered_map's).
  template <class... Args>
  std::pair<iterator, bool> try_emplace(key_type id, Args&&... args) {
    auto pos = index_.find(id);
    if (pos != flat_index::npos)
      return {iterator{&entries_, pos}, false};
    entries_.emplace_back(std::piecewise_construct, std::forward_as_tuple(id),
                          std::forward_as_tuple(std::forward<Args>(args)...));
    auto at = entries_.size() - 1;
    try {
      index_.insert(id, static_cast<std::uint32_t>(at));
    } catch (...) {
      entries_.pop_back(); // all or nothing
      throw;
    }
    return {iterator{&entries_, at}, true};
  }

  /// Removes the entry at `i` (the last one moves into its place).
  /// REQUIRES: i is a valid iterator of this map, not end().
  void erase(iterator i) {
    auto pos = i.index();
    assert(pos < entries_.size());
    index_.erase(i->first);
    if (pos + 1 != entries_.size()) {
      *i = std::move(entries_.back());
      index_.assign(i->first, static_cast<std::uint32_t>(pos));
    }
    entries_.pop_back();
  }

  void clear() {
    entries_.clear();
    index_ = flat_index{};
  }

private:
  entries_type entries_;
  flat_index index_;
};

} // namespace kvactor::detail
