// block_pool_core: swapping a request's blocks to the host tier and back, in
// two phases around the device's copy, so that a failed copy changes nothing
// and a block being read is never handed to anyone else. Every block goes
// out (a cached prefix may be evicted while the request is away); coming
// back, a block whose prefix is still on the device (cached, or in use by
// another request) is shared again instead of copied, so a swapped request
// keeps sharing its prompt's prefix and the copy moves only the rest.
#include "kvactor/actors/block_pool_core.hpp"

#include <algorithm>
#include <cassert>

#include "kvactor/messages/error.hpp"

namespace kvactor::detail {

caf::expected<std::vector<block_move>>
block_pool_core::swap_out_begin(request_id id) {
  caf::error err;
  auto seq = find_resident(id, err);
  if (seq == nullptr)
    return err;
  auto n = seq->blocks.size();
  if (n > host_free_.size())
    return make_error(errc::out_of_blocks,
                      req_name(id) + ": swap out needs " + std::to_string(n)
                        + " host blocks, " + std::to_string(host_free_.size())
                        + " of " + std::to_string(num_host_blocks_) + " free");
  std::vector<block_move> moves;
  moves.reserve(n);
  for (auto b : seq->blocks) {
    auto h = host_free_.pop();
    seq->host_blocks.push_back(h);
    auto& m = blocks_[b];
    seq->host_hashes.push_back(m.indexed ? m.hash : block_hash{});
    moves.push_back(block_move{b, h});
  }
  // The device blocks stay referenced until the copy finished.
  seq->where = residency::swapping_out;
  ++swapping_out_;
  return moves;
}

caf::expected<std::uint32_t>
block_pool_core::swap_out_done(request_id id, std::uint64_t cache_id, bool ok,
                               std::vector<block_id>* left) {
  auto seq = find_swapping(id, cache_id);
  if (seq == nullptr || seq->where != residency::swapping_out)
    return make_error(errc::invalid_request,
                      req_name(id) + " (incarnation " + std::to_string(cache_id)
                        + ") has no swap out in progress");
  auto before = counters_.blocks_freed;
  --swapping_out_;
  if (ok) {
    count_promise(*seq, false); // away now, it will not grow
    // A second copy of its own may have been indexed during the copy (the
    // first copy evicted): its hash goes along too, for the way back and
    // for a discard while it is away.
    for (std::size_t i = 0; i < seq->blocks.size(); ++i)
      if (blocks_[seq->blocks[i]].indexed)
        seq->host_hashes[i] = blocks_[seq->blocks[i]].hash;
    auto level = retention_level(*seq);
    for (auto i = seq->blocks.rbegin(); i != seq->blocks.rend(); ++i)
      unref(*i, level);
    give_way(seq->blocks.data(), seq->blocks.size());
    if (left != nullptr)
      left->assign(seq->blocks.begin(), seq->blocks.end());
    seq->blocks.clear();
    seq->where = residency::swapped;
    // Its epoch goes on, away: the pool is not told that the passes which
    // wrote its K/V succeeded - a discard while it is away still takes
    // them back; a swap-in (its engine resumes it) confirms them.
    // A swap that took effect: not one of a request that ended meanwhile
    // (its caller heard unknown_request).
    counters_.swap_outs += !seq->release_pending;
  } else {
    // Back in reverse, so the host tier hands them out as before.
    for (auto h = seq->host_blocks.rbegin(); h != seq->host_blocks.rend(); ++h)
      host_free_.push(*h);
    seq->host_blocks.clear();
    seq->host_hashes.clear();
    seq->where = residency::resident; // its growth stayed promised
  }
  if (seq->release_pending)
    release_now(*seq);
  return static_cast<std::uint32_t>(counters_.blocks_freed - before);
}

caf::expected<std::vector<block_move>>
block_pool_core::swap_in_begin(request_id id) {
  auto seq = find_mut(id);
  if (seq == nullptr)
    return make_error(errc::unknown_request, req_name(id) + " is not allocated");
  if (seq->where != residency::swapped)
    return make_error(errc::invalid_request,
                      req_name(id) + (seq->where == residency::resident
                                        ? " is not swapped out"
                                        : " is being swapped: wait for it"));
  auto n = seq->host_blocks.size();
  // Plan: which blocks are still on the device, and what sharing them takes
  // from the free and cached blocks (as for prefix hits in allocate).
  std::vector<block_id> found(n, no_block);
  std::uint64_t shared = 0;
  std::uint64_t revived = 0;
  std::uint64_t pinned = 0;
  for (std::size_t i = 0; i < n; ++i) {
    auto h = seq->host_hashes[i];
    if (h == block_hash{})
      continue;
    auto b = find_indexed(h.lo);
    if (b == prefix_index::npos || blocks_[b].hash.hi != h.hi)
      continue;
    found[i] = b;
    ++shared;
    if (blocks_[b].state == block_state::cached) {
      ++revived;
      pinned += blocks_[b].pinned;
    }
  }
  auto take = n - shared + revived;
  if (auto err = admit_blocks(seq->tenant, take, pinned))
    return err;
  // Coming back is admitted like a new request (vLLM checks its watermark
  // on swap-in too): it must leave the watermark free and, under
  // reserve_expected, room for every live request's promised growth and
  // its own.
  auto want = blocks_for(seq->expected_tokens);
  if (auto err = admit_headroom(seq->tenant, take - pinned,
                                want > n ? want - n : 0, take))
    return err;
  // Commit: share first, so that taking fresh blocks cannot evict them.
  seq->incoming.assign(n, no_block);
  write_lineage::token_set took; // what its shares were computed over
  const auto own = epoch_of(*seq); // live while it is away
  for (std::size_t i = 0; i < n; ++i)
    if (found[i] != no_block) {
      share_indexed(found[i], *seq, took, own);
      seq->incoming[i] = found[i];
    }
  seq->acquired = lineage_.adopt(seq->cache_id, std::move(took));
  std::vector<block_move> moves;
  moves.reserve(n - shared);
  for (std::size_t i = 0; i < n; ++i) {
    if (found[i] != no_block)
      continue;
    auto b = take_block(seq->tenant);
    blocks_[b].level = seq->level;
    seq->incoming[i] = b;
    moves.push_back(block_move{b, seq->host_blocks[i]});
  }
  seq->where = residency::swapping_in;
  swap_in_shared_.emplace_back(seq->cache_id, static_cast<std::uint32_t>(shared));
  // Admitted with room for its growth: promised from now, as for a new
  // request, or an admission while the device copies would take the room.
  count_promise(*seq, true);
  return moves;
}

caf::expected<std::uint32_t>
block_pool_core::swap_in_done(request_id id, std::uint64_t cache_id, bool ok) {
  auto seq = find_swapping(id, cache_id);
  if (seq == nullptr || seq->where != residency::swapping_in)
    return make_error(errc::invalid_request,
                      req_name(id) + " (incarnation " + std::to_string(cache_id)
                        + ") has no swap in progress");
  auto before = counters_.blocks_freed;
  // How many it shared at begin; the rest it took fresh.
  auto at = std::find_if(swap_in_shared_.begin(), swap_in_shared_.end(),
                         [&](const auto& e) { return e.first == cache_id; });
  assert(at != swap_in_shared_.end());
  std::uint64_t shared = at != swap_in_shared_.end() ? at->second : 0;
  if (at != swap_in_shared_.end())
    swap_in_shared_.erase(at);
  if (ok) {
    // The copies are fresh, private and not findable. The request's hash
    // chain continues from here either way.
    if (!seq->release_pending) // as swap_outs: swaps that took effect
      counters_.swap_in_shared += shared;
    seq->blocks.assign(seq->incoming.begin(), seq->incoming.end());
    // Resumed, its full blocks' K/V are confirmed (next_epoch ends the
    // epoch that wrote them): from here on, only what it writes is its
    // own to take out of the index (discard). Not a partly filled last
    // block, nor one its drafts reach: it writes there still (drafts may
    // be dropped and their places grown anew), and may complete and index
    // it.
    seq->brought_from = static_cast<std::uint16_t>(std::min<std::uint64_t>(
      (seq->num_tokens - seq->drafts) / block_size_, 65535));
    seq->incoming.clear();
    for (auto h : seq->host_blocks)
      host_free_.push(h);
    seq->host_blocks.clear();
    seq->host_hashes.clear();
    seq->where = residency::resident; // its growth was promised at begin
    counters_.swap_ins += !seq->release_pending;
    if (!seq->release_pending) {
      // It writes again, in place into its last block: the copies from
      // its full blocks on (the last, and those its drafts reach - indexed
      // once they settle) are this epoch's (write_lineage). Those before
      // are never indexed again. Not a block it shared back (indexed): it
      // never writes there (tail_shared, or full), and another's record
      // stays.
      next_epoch(*seq);
      for (auto k = seq->brought_from; k < seq->blocks.size(); ++k) {
        auto& m = blocks_[seq->blocks[k]];
        if (m.ref_count == 1 && !m.indexed)
          wrote(*seq, k, k + 1);
      }
    }
  } else {
    count_promise(*seq, false);
    auto level = retention_level(*seq);
    for (auto i = seq->incoming.rbegin(); i != seq->incoming.rend(); ++i)
      unref(*i, level);
    give_way(seq->incoming.data(), seq->incoming.size());
    seq->incoming.clear();
    seq->where = residency::swapped;
    // The fresh blocks were handed out at begin and came back now: counted
    // both ways. Not taken back: the pool answered stats during the copy,
    // and a counter that went down would read as a reset to a scraper (a
    // copy-on-write's undo, answered before any other message, can). A
    // shared block whose last holder let go now - revived from the cache at
    // begin, or released by another request during the copy - went too.
    // The reply counts every block that came back, for whoever waits.
  }
  if (seq->release_pending)
    release_now(*seq);
  return static_cast<std::uint32_t>(counters_.blocks_freed - before);
}

} // namespace kvactor::detail
