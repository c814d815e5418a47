// prefix_index: the block pool's map from a block hash (its 64-bit `lo`) to
// the block that holds it, built to stay in the CPU's caches. CAF-free.
//
// Every prefix hit, every block that fills and every eviction touches one
// slot at a random place, so the table's size decides whether that touch is
// a cache hit or a trip to memory. A slot is 8 bytes (a general map of 64-bit
// keys needs 16): the key's top 32 bits and the block. The full key lives in
// the block's metadata, so a tag match is confirmed by the caller's
// `key_of(block)`. A pool indexes at most one hash per block, so the capacity
// is fixed at construction: the next power of two at or above 1.5 times the
// pool (load at most 2/3; 256 KiB for 20,000 blocks instead of 1 MiB).
//
// Linear probing from the key's top bits, backward-shift deletion (no
// tombstones). The home slot is computed from the tag alone, which is what
// lets deletion move entries without their full keys.
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvactor/actors/probe_shift.hpp"

namespace kvactor::detail {

class prefix_index {
public:
  /// Returned by find() for an absent key; never a valid value.
  static constexpr std::uint32_t npos = 0xFFFFFFFFu;

  /// Room for `max_entries` keys; more is a precondition violation.
  explicit prefix_index(std::size_t max_entries) {
    std::size_t cap = 16;
    unsigned bits = 4;
    while (cap < max_entries + max_entries / 2 && bits < 32) {
      cap *= 2;
      ++bits;
    }
    slots_.assign(cap, slot{0, npos});
    mask_ = cap - 1;
    tag_shift_ = 32 - bits;
    max_entries_ = max_entries;
  }

  std::size_t size() const noexcept {
    return size_;
  }
  std::size_t capacity() const noexcept {
    return max_entries_;
  }

  /// The value stored under `key`, or npos. `key_of(value)` returns the full
  /// key of a stored value; it is asked only when the top 32 bits match.
  template <class KeyOf>
  std::uint32_t find(std::uint64_t key, KeyOf&& key_of) const {
    return slots_[locate(key, key_of)].value; // an empty slot's is npos
  }

  /// The slot that holds `key`, or npos (for tests and diagnostics: the
  /// home slot of a key is the top log2(slots) bits of it).
  template <class KeyOf>
  std::size_t slot_of(std::uint64_t key, KeyOf&& key_of) const {
    auto i = locate(key, key_of);
    return slots_[i].value == npos ? npos : i;
  }

  /// Brings the home slot of `key` toward the cache (an erase or lookup of
  /// it comes soon).
  void prefetch(std::uint64_t key) const noexcept {
    __builtin_prefetch(&slots_[home(tag(key))], 1);
  }

  /// Adds `key` -> `value`; false (and no change) if `key` is present.
  /// REQUIRES: value != npos, size() < capacity().
  template <class KeyOf>
  bool insert(std::uint64_t key, std::uint32_t value, KeyOf&& key_of) {
    assert(value != npos && size_ < max_entries_);
    auto t = tag(key);
    for (auto i = home(t);; i = (i + 1) & mask_) {
      auto& s = slots_[i];
      if (s.value == npos) {
        s = slot{t, value};
        ++size_;
        return true;
      }
      if (s.tag == t && key_of(s.value) == key)
        return false;
    }
  }

  /// Removes the entry `key` -> `value`; false if there is none. Needs no
  /// key_of: the value tells the entry apart.
  bool erase(std::uint64_t key, std::uint32_t value) noexcept {
    auto t = tag(key);
    auto i = home(t);
    for (;; i = (i + 1) & mask_) {
      if (slots_[i].value == npos)
        return false;
      if (slots_[i].value == value && slots_[i].tag == t)
        break;
    }
    shift_back(
      slots_.data(), mask_, i, [](const slot& s) { return s.value == npos; },
      [this](const slot& s) { return home(s.tag); }, slot{0, npos});
    --size_;
    return true;
  }

  /// Calls f(value) for every entry, in no particular order.
  template <class F>
  void for_each(F&& f) const {
    for (auto& s : slots_)
      if (s.value != npos)
        f(s.value);
  }

  /// Bytes held (for memory figures).
  std::size_t memory_bytes() const noexcept {
    return slots_.capacity() * sizeof(slot);
  }

private:
  struct slot {
    std::uint32_t tag;
    std::uint32_t value;
  };
  static_assert(sizeof(slot) == 8, "eight slots to a cache line");

  /// The slot holding `key`, or the empty slot that ends its probe run.
  template <class KeyOf>
  std::size_t locate(std::uint64_t key, KeyOf&& key_of) const {
    auto t = tag(key);
    for (auto i = home(t);; i = (i + 1) & mask_) {
      auto& s = slots_[i];
      if (s.value == npos || (s.tag == t && key_of(s.value) == key))
        return i;
    }
  }

  static std::uint32_t tag(std::uint64_t key) noexcept {
    return static_cast<std::uint32_t>(key >> 32);
  }

  std::size_t home(std::uint32_t t) const noexcept {
    return static_cast<std::size_t>(t >> tag_shift_) & mask_;
  }

  std::vector<slot> slots_;
  std::size_t mask_ = 0;
  unsigned tag_shift_ = 28;
  std::size_t size_ = 0;
  std::size_t max_entries_ = 0;
};

} // namespace kvactor::detail
