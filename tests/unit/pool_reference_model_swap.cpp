// pool_reference_model: swapping to the host tier and back, in two phases
// around the device's copy, written out step by step as the documented
// policy reads (block_pool_swap.cpp is the code it checks).
#include "pool_reference_model.hpp"

#include <algorithm>

namespace kvactor::test {

using detail::residency;

// -- swapping --------------------------------------------------------------------------

model_moves pool_model::swap_out_begin(request_id id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end())
    return {errc::unknown_request, {}};
  auto& seq = it->second;
  if (seq.where != residency::resident)
    return {errc::invalid_request, {}};
  if (seq.blocks.size() > host_free_.size())
    return {errc::out_of_blocks, {}};
  model_moves out;
  for (auto b : seq.blocks) {
    seq.host_blocks.push_back(host_free_.back());
    seq.host_keys.push_back(blocks_[b].key);
    host_free_.pop_back();
    out.moves.push_back(block_move{b, seq.host_blocks.back()});
  }
  seq.where = residency::swapping_out; // its blocks stay held meanwhile
  return out;
}

model_sequence* pool_model::find_swapping(request_id id,
                                          std::uint64_t cache_id) {
  auto it = seqs_.find(id);
  if (it != seqs_.end() && it->second.cache_id == cache_id)
    return &it->second;
  auto g = ghosts_.find(cache_id);
  if (g != ghosts_.end() && g->second.id == id)
    return &g->second;
  return nullptr;
}

model_release pool_model::finish_swap(model_sequence& seq,
                                      std::uint64_t before) {
  if (seq.release_pending) {
    return_blocks(seq);
    ghosts_.erase(seq.cache_id);
  }
  return {std::nullopt, static_cast<std::uint32_t>(counters_.blocks_freed - before)};
}

model_release pool_model::swap_out_done(request_id id, std::uint64_t cache_id,
                                        bool ok) {
  auto found = find_swapping(id, cache_id);
  if (found == nullptr || found->where != residency::swapping_out)
    return {errc::invalid_request};
  auto& seq = *found;
  auto before = counters_.blocks_freed;
  if (ok) {
    // A second copy indexed during the copy: its key goes along too.
    for (std::size_t i = 0; i < seq.blocks.size(); ++i)
      if (blocks_[seq.blocks[i]].key)
        seq.host_keys[i] = blocks_[seq.blocks[i]].key;
    for (auto b = seq.blocks.rbegin(); b != seq.blocks.rend(); ++b)
      unref(*b, seq.level);
    give_way(seq.blocks);
    seq.blocks.clear();
    seq.where = residency::swapped; // in the same epoch, away
    counters_.swap_outs += !seq.release_pending; // took effect
  } else {
    // As if it never started: the host blocks go back to where they were.
    for (auto h = seq.host_blocks.rbegin(); h != seq.host_blocks.rend(); ++h)
      host_free_.push_back(*h);
    seq.host_blocks.clear();
    seq.host_keys.clear();
    seq.where = residency::resident; // in the same epoch
  }
  return finish_swap(seq, before);
}

model_moves pool_model::swap_in_begin(request_id id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end())
    return {errc::unknown_request, {}};
  auto& seq = it->second;
  if (seq.where != residency::swapped)
    return {errc::invalid_request, {}};
  // A block whose key is still indexed is shared again, not copied; the
  // others are taken fresh, after the shared ones are held.
  auto n = seq.host_blocks.size();
  std::vector<std::optional<block_id>> still(n);
  std::uint64_t shared = 0, revived = 0, pinned = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!seq.host_keys[i])
      continue;
    auto it = index_.find(*seq.host_keys[i]);
    if (it == index_.end())
      continue;
    still[i] = it->second;
    ++shared;
    if (blocks_[it->second].st == state::cached) {
      ++revived;
      pinned += blocks_[it->second].pinned;
    }
  }
  if (auto e = admit(seq.tenant, n - shared + revived, pinned))
    return {e, {}};
  // And leave the headroom an admission leaves.
  auto want = blocks_for(seq.expected_tokens, block_size_);
  if (auto e = headroom(seq.tenant, n - shared + revived - pinned,
                        want > n ? want - n : 0, n - shared + revived))
    return {e, {}};
  seq.incoming.assign(n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    if (!still[i])
      continue;
    share(*still[i], seq);
    seq.incoming[i] = *still[i];
  }
  model_moves out;
  for (std::size_t i = 0; i < n; ++i) {
    if (still[i])
      continue;
    seq.incoming[i] = take(seq.tenant, seq.level);
    out.moves.push_back(block_move{seq.incoming[i], seq.host_blocks[i]});
  }
  seq.where = residency::swapping_in;
  seq.shared_at_swap_in = shared;
  return out;
}

model_release pool_model::swap_in_done(request_id id, std::uint64_t cache_id,
                                       bool ok) {
  auto found = find_swapping(id, cache_id);
  if (found == nullptr || found->where != residency::swapping_in)
    return {errc::invalid_request};
  auto& seq = *found;
  auto before = counters_.blocks_freed;
  if (ok) {
    if (!seq.release_pending)
      counters_.swap_in_shared += seq.shared_at_swap_in;
    seq.blocks = std::move(seq.incoming);
    // Its full blocks' K/V were written before it moved; not a partial
    // last block nor one its drafts reach (it writes there still).
    seq.brought_from = static_cast<std::uint32_t>(std::min<std::uint64_t>(
      (seq.num_tokens - seq.drafts) / block_size_, 65535));
    seq.incoming.clear();
    for (auto h : seq.host_blocks)
      host_free_.push_back(h);
    seq.host_blocks.clear();
    seq.host_keys.clear();
    seq.where = residency::resident;
    counters_.swap_ins += !seq.release_pending;
    if (!seq.release_pending) {
      // Resumed, what it wrote is confirmed. It writes again: its copies
      // from its full blocks on (the last, and those its drafts reach) are
      // the new epoch's.
      end_epoch(seq);
      begin_epoch(seq);
      for (auto k = seq.brought_from; k < seq.blocks.size(); ++k)
        if (blocks_[seq.blocks[k]].refs == 1 && !blocks_[seq.blocks[k]].key)
          wrote(seq, k, k + 1); // not one shared back from the index
    }
  } else {
    // Undone: the fresh blocks were handed out and came back (the flow
    // counters never go down: stats are answered during the copy). A
    // shared block whose last holder let go now went too. The release
    // counts what came back.
    for (auto b = seq.incoming.rbegin(); b != seq.incoming.rend(); ++b)
      unref(*b, seq.level);
    give_way(seq.incoming);
    seq.incoming.clear();
    seq.where = residency::swapped;
  }
  return finish_swap(seq, before);
}

} // namespace kvactor::test
