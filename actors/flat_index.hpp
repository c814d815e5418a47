// flat_index: an open-addressing hash map from 64-bit keys to 32-bit values
// (linear probing, backward-shift deletion: probe_shift.hpp). The pool's
// request lookup (request id -> sequence) uses it: O(1) per operation, no
// allocation per entry. (The prefix index has its own, smaller table:
// prefix_index.hpp.) CAF-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvactor/actors/probe_shift.hpp"

namespace kvactor::detail {

class flat_index {
public:
  /// Returned by find() for an absent key; never a valid value.
  static constexpr std::uint32_t npos = 0xFFFFFFFFu;

  /// Room for `expected` keys before the first growth.
  explicit flat_index(std::size_t expected = 16) {
    std::size_t cap = 16;
    while (cap < expected * 2)
      cap *= 2;
    resize(cap);
  }

  std::size_t size() const noexcept {
    return size_;
  }

  /// The value stored under `key`, or npos.
  std::uint32_t find(std::uint64_t key) const noexcept {
    for (auto i = home(key);; i = (i + 1) & mask_) {
      auto& s = slots_[i];
      if (s.value == npos)
        return npos;
      if (s.key == key)
        return s.value;
    }
  }

  /// Adds `key` -> `value`; false (and no change) if `key` is present.
  /// REQUIRES: value != npos.
  bool insert(std::uint64_t key, std::uint32_t value) {
    if ((size_ + 1) * 2 > slots_.size())
      grow();
    for (auto i = home(key);; i = (i + 1) & mask_) {
      auto& s = slots_[i];
      if (s.value == npos) {
        s = slot{key, value};
        ++size_;
        return true;
      }
      if (s.key == key)
        return false;
    }
  }

  /// Replaces the value of a present key; false if absent.
  bool assign(std::uint64_t key, std::uint32_t value) noexcept {
    for (auto i = home(key);; i = (i + 1) & mask_) {
      auto& s = slots_[i];
      if (s.value == npos)
        return false;
      if (s.key == key) {
        s.value = value;
        return true;
      }
    }
  }

  /// Removes `key`; false if absent.
  bool erase(std::uint64_t key) noexcept {
    auto i = home(key);
    for (;; i = (i + 1) & mask_) {
      if (slots_[i].value == npos)
        return false;
      if (slots_[i].key == key)
        break;
    }
    shift_back(
      slots_, mask_, i, [](const slot& s) { return s.value == npos; },
      [this](const slot& s) { return home(s.key); }, slot{0, npos});
    --size_;
    return true;
  }

  /// Calls f(key, value) for every entry, in no particular order.
  template <class F>
  void for_each(F&& f) const {
    for (auto& s : slots_)
      if (s.value != npos)
        f(s.key, s.value);
  }

  /// Where the table lies and how keys map into it: enough to compute a
  /// key's first probe without reading the table (index_hint.hpp).
  struct site {
    std::uintptr_t table = 0;
    unsigned shift = 64;
  };
  site where() const noexcept {
    return {reinterpret_cast<std::uintptr_t>(slots_.data()), shift_};
  }
  /// The address of `key`'s first probe in a table at `s` - an address
  /// only: the table may have been replaced since.
  static std::uintptr_t first_probe(const site& s, std::uint64_t key) noexcept {
    return s.table + home_of(key, s.shift) * sizeof(slot);
  }

  /// Bytes held (for memory figures).
  std::size_t memory_bytes() const noexcept {
    return slots_.capacity() * sizeof(slot);
  }

private:
  struct slot {
    std::uint64_t key;
    std::uint32_t value;
  };

  static std::size_t home_of(std::uint64_t key, unsigned shift) noexcept {
    // Fibonacci hashing spreads sequential request ids as well as hashes.
    return static_cast<std::size_t>((key * 0x9e3779b97f4a7c15ull) >> shift);
  }
  std::size_t home(std::uint64_t key) const noexcept {
    return home_of(key, shift_);
  }

  void resize(std::size_t cap) {
    slots_.assign(cap, slot{0, npos});
    mask_ = cap - 1;
    shift_ = 64;
    for (auto c = cap; c > 1; c >>= 1)
      --shift_;
  }

  void grow() {
    std::vector<slot> old;
    old.swap(slots_);
    resize(old.size() * 2);
    size_ = 0;
    for (auto& s : old)
      if (s.value != npos)
        insert(s.key, s.value);
  }

  std::vector<slot> slots_;
  std::size_t mask_ = 0;
  unsigned shift_ = 64;
  std::size_t size_ = 0;
};

} // namespace kvactor::detail
