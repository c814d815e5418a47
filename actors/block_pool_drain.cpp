// block_pool_core's drains: the blocks a supervisor's victim let go, kept
// from every request until whoever may still be writing the victim's K/V is
// done. The supervisor preempts at any moment - a forward pass of the
// victim may be under way - and without a drain its blocks would be the
// next allocation's while that pass still writes into them (see the
// README, "The supervisor's preemption"). A drain ends when its grace
// runs out or when the stepper that admitted the victim sends a step
// promising its earlier steps' K/V are written (earlier_steps_written);
// the block_pool actor does both. Draining blocks are neither free, cached
// nor used: pressure drops at once (no second round of victims for the
// same blocks), but no one allocates them until the drain ends.
#include "kvactor/actors/block_pool_core.hpp"

#include "kvactor/messages/error.hpp"

#include <algorithm>
#include <cassert>

namespace kvactor::detail {

caf::expected<std::uint32_t>
block_pool_core::preempt_draining(request_id id, std::uint64_t tag) {
  last_drain_ = 0;
  auto seq = find(id);
  if (seq == nullptr || seq->where != residency::resident)
    return preempt(id, true); // the error, or no device blocks go now
  // A copy's blocks are held until it settles, and come free then: into
  // no drain. (The pool actor settles a step's copies before it takes
  // another message; only a direct caller could come between.)
  for (auto& p : pending_cows_)
    for (auto b : seq->blocks)
      if (b == p.copy.src || b == p.copy.dst)
        return make_error(errc::invalid_request,
                          req_name(id) + ": block " + std::to_string(b)
                            + " is in a copy-on-write copy in flight - "
                              "settle it before a draining preemption");
  std::vector<block_id> table(seq->blocks.begin(), seq->blocks.end());
  auto stacked = free_.size();
  auto res = preempt(id, true);
  if (!res)
    return res;
  // Every block the victim let go that is free now went onto the free stack
  // during this preemption - nothing else is pushed there meanwhile (pins
  // that give way go to the LRU) - so they are its top entries.
  drain d;
  for (auto b : table)
    if (blocks_[b].state == block_state::free)
      d.blocks.push_back(b);
  // Should that ever not hold, the blocks stay free: never one lost.
  assert(free_.size() - stacked == d.blocks.size());
  if (free_.size() - stacked != d.blocks.size())
    return res;
  for (std::size_t i = 0; i < d.blocks.size(); ++i)
    free_.pop();
  if (d.blocks.empty())
    return res;
  for (auto b : d.blocks) {
    blocks_[b].state = block_state::draining;
    add_draining(blocks_[b].tenant, +1); // uncharged from it just now
  }
  draining_ += d.blocks.size();
  d.serial = next_drain_++;
  d.tag = tag;
  last_drain_ = d.serial;
  drains_.push_back(std::move(d));
  // The release let pins give way as if those blocks were free; the drain
  // covers only its own tenant's reservation. What it kept cached and
  // pinned (the blocks it brought) gives way now if another falls short.
  give_way(table.data(), table.size());
  return res;
}

std::uint32_t block_pool_core::end_drain_at(std::size_t i) {
  auto& d = drains_[i];
  for (auto b : d.blocks) {
    blocks_[b].state = block_state::free;
    add_draining(blocks_[b].tenant, -1);
    free_.push(b);
  }
  auto n = static_cast<std::uint32_t>(d.blocks.size());
  draining_ -= n;
  drains_.erase(drains_.begin() + static_cast<std::ptrdiff_t>(i));
  return n;
}

std::uint32_t block_pool_core::end_drain(std::uint64_t serial) {
  auto i = std::find_if(drains_.begin(), drains_.end(),
                        [&](const drain& d) { return d.serial == serial; });
  if (i == drains_.end())
    return 0;
  return end_drain_at(static_cast<std::size_t>(i - drains_.begin()));
}

std::uint32_t block_pool_core::end_drains(std::uint64_t tag) {
  if (tag == 0)
    return 0;
  std::uint32_t n = 0;
  for (auto i = drains_.size(); i-- > 0;)
    if (drains_[i].tag == tag)
      n += end_drain_at(i);
  return n;
}

} // namespace kvactor::detail
