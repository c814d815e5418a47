// index_hint: lets the actor in front of the block pool - the manager -
// start fetching the cache line where the pool's request index (a
// flat_index) will look an id up, one hop before the pool does. The manager
// passes extends, frees and allocations on to the pool by id; at 100,000
// live requests the pool's first act on each, the index probe, missed the
// cache (~200 ns on the 2-core VM: the index outgrows the last-level cache
// with the sequences beside it). Prefetched as the manager takes the message
// in, the line arrives while the message waits for the pool.
//
// Only addresses cross the actors: prefetch never reads the table, so a
// table the pool has replaced since (it doubles as it grows) costs a useless
// fetch, never a wrong answer. The pool publishes each table it grows into;
// readers load the current site atomically, and every site stays alive with
// the hint (a table doubles ~20 times up to a million requests). CAF-free.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "kvactor/actors/flat_index.hpp"

namespace kvactor::detail {

class index_hint {
public:
  /// The pool, after inserting into `index`: publishes its table if it moved.
  /// Called from the pool's thread only.
  void publish(const flat_index& index) {
    auto at = index.where();
    if (!sites_.empty() && sites_.back()->table == at.table
        && sites_.back()->shift == at.shift)
      return;
    sites_.push_back(std::make_unique<flat_index::site>(at));
    current_.store(sites_.back().get(), std::memory_order_release);
  }

  /// Anyone: starts fetching the line where `id` is probed first. Does
  /// nothing before the pool's first publish.
  void prefetch(std::uint64_t id) const noexcept {
    if (auto at = first_probe(id))
      __builtin_prefetch(reinterpret_cast<const void*>(at));
  }

  /// The address of `id`'s first probe in the table last published; 0
  /// before the first publish.
  std::uintptr_t first_probe(std::uint64_t id) const noexcept {
    auto s = current_.load(std::memory_order_acquire);
    return s != nullptr ? flat_index::first_probe(*s, id) : 0;
  }

private:
  std::atomic<const flat_index::site*> current_{nullptr};
  std::vector<std::unique_ptr<flat_index::site>> sites_; ///< the pool's
};

} // namespace kvactor::detail
