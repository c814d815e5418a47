// flat_index: an open-addressing hash map from 64-bit keys to 32-bit values
// (linear probing, backward-shift deletion: probe_shift.hpp). The pool's
// request lookup (request id -> sequence) and the manager's registry use it:
// O(1) per operation, no allocation per entry. (The prefix index has its
// own, smaller table: prefix_index.hpp.)
//
// Growth is spread over later operations. Rehashing the whole table inside
// one insert cost 13 ms at the 65,537th live request on the 2-core VM
// (11.6 ms of it writing the new 4 MiB table: each page fault costs that VM
// ~11 us). Instead a table comes from calloc - all zeros, which is every
// slot empty, its pages arriving as they are first used - and growth only
// starts one: the old table retires while each later insert and erase moves
// `move_per_op` of its slots across, in order, and lookups try the new table
// first, then the old. An entry erased from the retiring table leaves a
// tombstone there (backward shift could carry a not-yet-moved entry behind
// the cursor). The retiring table is freed once the cursor has passed its
// end - well before the new table fills: it starts a quarter full, and half
// its slots must fill before it grows. What remains is the VM's page cost
// (~10 us a page, faulted in or given back): the first few hundred
// operations on a new table fault its pages in, and freeing the retired one
// returns them: growing to 100,000 live requests, the slowest allocate (32
// in flight) waits 3-5 ms, where the vectors' moves and the one-insert
// rehash made it 146-188 ms (scale's allocate_max_us). Giving the pages back
// 64 KiB at a time as the cursor passed them did not shorten it. CAF-free.
#pragma once

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "kvactor/actors/probe_shift.hpp"

namespace kvactor::detail {

class flat_index {
public:
  /// Returned by find() and take() for an absent key; never a valid value.
  static constexpr std::uint32_t npos = 0xFFFFFFFFu;
  /// The largest value the index stores.
  static constexpr std::uint32_t max_value = npos - 2;
  /// Slots of a retiring table moved across per insert or erase.
  static constexpr std::size_t move_per_op = 4;

  /// Room for `expected` keys before the first growth.
  explicit flat_index(std::size_t expected = 16) {
    std::size_t cap = 16;
    while (cap < expected * 2)
      cap *= 2;
    cur_ = table{cap};
  }

  flat_index(const flat_index&) = default;
  flat_index(flat_index&&) noexcept = default;
  flat_index& operator=(flat_index&&) noexcept = default;
  /// Copy and swap: a copy that throws leaves this index as it was.
  flat_index& operator=(const flat_index& other) {
    flat_index copy{other};
    return *this = std::move(copy);
  }

  std::size_t size() const noexcept {
    return size_;
  }

  /// The value stored under `key`, or npos.
  std::uint32_t find(std::uint64_t key) const noexcept {
    auto tag = cur_.lookup(key);
    if (tag == empty && old_.slots != nullptr)
      tag = old_.lookup(key);
    return tag == empty ? npos : tag - offset;
  }

  /// Adds `key` -> `value`; false (and no change) if `key` is present.
  /// REQUIRES: value <= max_value.
  bool insert(std::uint64_t key, std::uint32_t value) {
    assert(value <= max_value);
    if (old_.slots != nullptr && old_.lookup(key) != empty)
      return false;
    if ((size_ + 1) * 2 > cur_.capacity()) {
      if (cur_.lookup(key) != empty)
        return false;
      grow(); // in neither table: the new one takes it
    }
    if (!cur_.place(key, value + offset))
      return false; // one probe finds it present or places it
    ++size_;
    move_some();
    return true;
  }

  /// Replaces the value of a present key; false if absent.
  bool assign(std::uint64_t key, std::uint32_t value) noexcept {
    assert(value <= max_value);
    auto s = cur_.slot_of(key);
    if (s == nullptr && old_.slots != nullptr)
      s = old_.slot_of(key);
    if (s == nullptr)
      return false;
    s->tag = value + offset;
    return true;
  }

  /// Removes `key`; false if absent.
  bool erase(std::uint64_t key) noexcept {
    return take(key) != npos;
  }

  /// Removes `key` and returns its value; npos if absent.
  std::uint32_t take(std::uint64_t key) noexcept {
    auto tag = cur_.remove(key);
    if (old_.slots != nullptr) {
      // A key moved across has a stale copy behind the cursor; one not yet
      // moved has its only copy ahead of it. Either way it goes.
      if (auto s = old_.slot_of(key)) {
        if (tag == empty)
          tag = s->tag;
        s->tag = gone;
      }
    }
    if (tag == empty)
      return npos;
    --size_;
    move_some();
    return tag - offset;
  }

  /// Calls f(key, value) for every entry, in no particular order.
  template <class F>
  void for_each(F&& f) const {
    cur_.for_each(0, f);
    if (old_.slots != nullptr)
      old_.for_each(cursor_, f); // the slots not moved yet
  }

  /// True while a retired table is still being moved across (tests).
  bool growing() const noexcept {
    return old_.slots != nullptr;
  }

  /// Where the table lies and how keys map into it: enough to compute a
  /// key's first probe without reading the table (index_hint.hpp). Names
  /// the newest table (while one retires, keys not yet moved are not there:
  /// the prefetch of such a key is wasted, never wrong).
  struct site {
    std::uintptr_t table = 0;
    unsigned shift = 64;
  };
  site where() const noexcept {
    return {reinterpret_cast<std::uintptr_t>(cur_.slots), cur_.shift};
  }
  /// The address of `key`'s first probe in a table at `s` - an address
  /// only: the table may have been replaced since.
  static std::uintptr_t first_probe(const site& s, std::uint64_t key) noexcept {
    return s.table + home_of(key, s.shift) * sizeof(slot);
  }

  /// Bytes held (for memory figures).
  std::size_t memory_bytes() const noexcept {
    return (cur_.capacity() + old_.capacity()) * sizeof(slot);
  }

private:
  /// tag: empty (0, what calloc gives), gone (a tombstone, only in a
  /// retiring table) or value + offset.
  struct slot {
    std::uint64_t key;
    std::uint32_t tag;
  };
  static constexpr std::uint32_t empty = 0;
  static constexpr std::uint32_t gone = 1;
  static constexpr std::uint32_t offset = 2;

  static std::size_t home_of(std::uint64_t key, unsigned shift) noexcept {
    // Fibonacci hashing spreads sequential request ids as well as hashes.
    return static_cast<std::size_t>((key * 0x9e3779b97f4a7c15ull) >> shift);
  }

  /// A power-of-two array of slots from calloc (or none).
  struct table {
    slot* slots = nullptr;
    std::size_t mask = 0;
    unsigned shift = 64;

    table() = default;
    explicit table(std::size_t cap)
      : slots(static_cast<slot*>(std::calloc(cap, sizeof(slot)))), mask(cap - 1) {
      if (slots == nullptr)
        throw std::bad_alloc{};
      for (auto c = cap; c > 1; c >>= 1)
        --shift;
    }
    table(const table& other) : table() {
      if (other.slots != nullptr) {
        *this = table{other.capacity()};
        std::memcpy(slots, other.slots, other.capacity() * sizeof(slot));
      }
    }
    table(table&& other) noexcept
      : slots(std::exchange(other.slots, nullptr)),
        mask(std::exchange(other.mask, 0)),
        shift(std::exchange(other.shift, 64)) {
    }
    table& operator=(table other) noexcept {
      std::swap(slots, other.slots);
      std::swap(mask, other.mask);
      std::swap(shift, other.shift);
      return *this;
    }
    ~table() {
      std::free(slots);
    }

    std::size_t capacity() const noexcept {
      return slots != nullptr ? mask + 1 : 0;
    }
    std::size_t home(std::uint64_t key) const noexcept {
      return home_of(key, shift);
    }
    /// `key`'s live slot, or null.
    slot* slot_of(std::uint64_t key) const noexcept {
      for (auto i = home(key);; i = (i + 1) & mask) {
        auto& s = slots[i];
        if (s.tag == empty)
          return nullptr;
        if (s.key == key && s.tag != gone)
          return &s;
      }
    }
    std::uint32_t lookup(std::uint64_t key) const noexcept {
      auto s = slot_of(key);
      return s != nullptr ? s->tag : empty;
    }
    /// Puts `key` in unless present - false then - in one probe (room
    /// guaranteed by the caller; never called on a retiring table).
    bool place(std::uint64_t key, std::uint32_t tag) noexcept {
      auto i = home(key);
      for (; slots[i].tag != empty; i = (i + 1) & mask)
        if (slots[i].key == key)
          return false;
      slots[i] = slot{key, tag};
      return true;
    }
    /// Takes `key` out, closing the gap (never called on a retiring
    /// table, which has tombstones); its tag, or empty if absent.
    std::uint32_t remove(std::uint64_t key) noexcept {
      auto s = slot_of(key);
      if (s == nullptr)
        return empty;
      auto tag = s->tag;
      shift_back(
        slots, mask, static_cast<std::size_t>(s - slots),
        [](const slot& x) { return x.tag == empty; },
        [this](const slot& x) { return home(x.key); }, slot{0, empty});
      return tag;
    }
    template <class F>
    void for_each(std::size_t from, F&& f) const {
      for (auto i = from; i < capacity(); ++i)
        if (slots[i].tag >= offset)
          f(slots[i].key, slots[i].tag - offset);
    }
  };

  /// Retires the current table for one twice its size. A table still
  /// retiring (which the step sizes make impossible) is finished first.
  void grow() {
    while (old_.slots != nullptr)
      move_some();
    table fresh{cur_.capacity() * 2}; // first: if it throws, nothing changed
    old_ = std::move(cur_);
    cur_ = std::move(fresh);
    cursor_ = 0;
  }

  /// Moves the retiring table's next move_per_op slots across.
  void move_some() noexcept {
    if (old_.slots == nullptr)
      return;
    auto end = std::min(cursor_ + move_per_op, old_.capacity());
    for (; cursor_ < end; ++cursor_) {
      auto& s = old_.slots[cursor_];
      if (s.tag >= offset)
        cur_.place(s.key, s.tag);
    }
    if (cursor_ == old_.capacity())
      old_ = table{};
  }

  table cur_;
  table old_;              ///< the retiring table, if any
  std::size_t cursor_ = 0; ///< old_'s slots below it have been moved
  std::size_t size_ = 0;
};

} // namespace kvactor::detail
