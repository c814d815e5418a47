// The deletion step shared by kvactor's linear-probing hash tables
// (flat_index, prefix_index): backward shift, which keeps every probe run
// unbroken so that lookups never need tombstones. CAF-free.
#pragma once

#include <cstddef>

namespace kvactor::detail {

/// Empties slot `i` of `slots` (a table of mask + 1 slots, linear probing)
/// and pulls the later entries of its probe run into the hole. `empty(s)`
/// says whether slot s is empty, `home(s)` gives an occupied slot's home
/// index, and `vacant` is the value an emptied slot gets.
template <class Slot, class Empty, class Home>
void shift_back(Slot* slots, std::size_t mask, std::size_t i,
                Empty&& empty, Home&& home, const Slot& vacant) {
  auto hole = i;
  for (auto j = (i + 1) & mask; !empty(slots[j]); j = (j + 1) & mask) {
    auto h = home(slots[j]);
    // Move j into the hole unless its home lies cyclically in (hole, j].
    bool stays = hole <= j ? (hole < h && h <= j) : (hole < h || h <= j);
    if (!stays) {
      slots[hole] = slots[j];
      hole = j;
    }
  }
  slots[hole] = vacant;
}

} // namespace kvactor::detail
