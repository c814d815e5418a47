// pool_model's drains: the blocks a supervisor's victim let go, kept off
// the free stack until the drain ends (block_pool_core::preempt_draining).
// Written from the contract, not the core's code: the victim's blocks that
// came free leave the free stack wherever they are on it.
#include "pool_reference_model.hpp"

#include <algorithm>

namespace kvactor::test {

using detail::residency;

model_release pool_model::preempt_draining(request_id id, std::uint64_t tag) {
  last_drain_ = 0;
  auto it = seqs_.find(id);
  if (it == seqs_.end() || it->second.where != residency::resident)
    return preempt(id, true);
  auto table = it->second.blocks;
  auto res = preempt(id, true);
  if (res.err)
    return res;
  drain d;
  for (auto b : table)
    if (blocks_[b].st == state::free) {
      d.blocks.push_back(b);
      blocks_[b].st = state::draining;
      free_.erase(std::find(free_.begin(), free_.end(), b));
    }
  if (d.blocks.empty())
    return res;
  d.serial = next_drain_++;
  d.tag = tag;
  last_drain_ = d.serial;
  drains_.push_back(std::move(d));
  // The drain covers its own tenant alone: pins it kept give way for others.
  give_way(table);
  return res;
}

std::uint32_t pool_model::end_drain_at(std::size_t i) {
  auto n = static_cast<std::uint32_t>(drains_[i].blocks.size());
  for (auto b : drains_[i].blocks) {
    blocks_[b].st = state::free;
    free_.push_back(b);
  }
  drains_.erase(drains_.begin() + static_cast<std::ptrdiff_t>(i));
  return n;
}

std::uint32_t pool_model::end_drain(std::uint64_t serial) {
  for (std::size_t i = 0; i < drains_.size(); ++i)
    if (drains_[i].serial == serial)
      return end_drain_at(i);
  return 0;
}

std::uint32_t pool_model::end_drains(std::uint64_t tag) {
  std::uint32_t n = 0;
  if (tag == 0)
    return n;
  for (auto i = drains_.size(); i-- > 0;)
    if (drains_[i].tag == tag)
      n += end_drain_at(i);
  return n;
}

std::vector<std::uint64_t> pool_model::drains() const {
  std::vector<std::uint64_t> out;
  for (auto& d : drains_)
    out.push_back(d.serial);
  return out;
}

std::uint64_t pool_model::draining_blocks() const {
  return static_cast<std::uint64_t>(
    std::count_if(blocks_.begin(), blocks_.end(),
                  [](const block& b) { return b.st == state::draining; }));
}

} // namespace kvactor::test
