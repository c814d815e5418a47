// block_pool_core: taking back K/V that were not (or not rightly) computed.
// Speculative decoding: a request grows by draft tokens (extend's `drafts`):
// their slots are taken like any others, but no block holding one enters
// the prefix index, since the verifying pass may reject them and the
// request then writes other tokens into the same slots. The next step
// settles them: accepted drafts become ordinary tokens (and the blocks they
// complete are indexed then), rejected ones are dropped. A failed forward
// pass: discard ends a request without caching what it let go.
#include "kvactor/actors/block_pool_core.hpp"

#include <algorithm>

#include "kvactor/messages/error.hpp"

namespace kvactor::detail {

caf::expected<extension_outcome>
block_pool_core::settle_drafts(request_id id, std::uint64_t accepted) {
  caf::error err;
  auto seq = find_resident(id, err);
  if (seq == nullptr)
    return err;
  if (accepted > seq->drafts)
    return make_error(errc::invalid_request,
                      req_name(id) + ": accepts " + std::to_string(accepted)
                        + " draft tokens of the "
                        + std::to_string(seq->drafts) + " it holds");
  extension_outcome out;
  auto rejected = seq->drafts - accepted;
  auto promised_before = growth(*seq);
  seq->drafts = 0;
  seq->num_tokens -= rejected;
  counters_.drafts_rejected += rejected;
  if (seq->hashable) {
    seq->tail.resize(seq->tail.size() - rejected);
    hash_tail(*seq); // accepted drafts may complete blocks
  }
  // Blocks past the new end held only rejected drafts: none is indexed,
  // shared (no fork while drafts are unsettled) or held by a copy (their
  // request's copy was settled: find_resident), so each goes back free.
  auto keep = blocks_for(seq->num_tokens);
  out.first_changed = static_cast<std::uint32_t>(keep);
  out.changed = keep < seq->blocks.size();
  while (seq->blocks.size() > keep) {
    auto b = seq->blocks.back();
    seq->blocks.pop_back();
    unref(b, seq->level);
  }
  seq->last_access = clock_ns_;
  repromise(*seq, promised_before);
  return out;
}

caf::expected<std::uint32_t> block_pool_core::discard(request_id id,
                                                      bool brought_held) {
  auto seq = find_mut(id);
  if (seq == nullptr)
    return release(id); // unknown_request
  // Away on the host or coming back, its epoch is live still (a swap-out
  // does not say its passes succeeded): what it wrote went cached at the
  // swap-out, or others share it since.
  if (seq->where == residency::swapped || seq->where == residency::swapping_in)
    return brought_held ? discard_away(*seq) : release(id);
  // Being swapped out, its blocks are its own still: what it wrote leaves
  // the index as for a resident one, and the ghost frees it when the move
  // ends.
  // What its admission found cached an earlier pass wrote (hit_blocks
  // stops at the first hit on a block in use, which may be unwritten):
  // it stays cached, and keeps its pins - one failed pass must not take
  // an operator's pinned system prompt with it.
  std::uint32_t keep = std::min<std::uint32_t>(seq->hit_blocks,
                                               seq->blocks.size());
  std::vector<block_id> table(seq->blocks.begin() + keep, seq->blocks.end());
  std::size_t brought = seq->brought_from > keep ? seq->brought_from - keep : 0;
  if (!brought_held)
    brought = table.size();
  // Its epoch ends bad - but a victim's: the pass of a step that admitted
  // it still writes its K/V, so what was computed over them stands (its
  // release confirms the epoch).
  const auto bad = epoch_of(*seq);
  const bool spread = brought_held && lineage_.end(bad);
  const bool ghost = seq->where == residency::swapping_out;
  auto freed = release(id);
  // Those it held last are cached now (the indexed ones): out of the index,
  // in table order. A pinned one first loses its pin, with the pins below
  // it in the prefix tree (what stays pinned stays reachable). Those it
  // brought that others still hold - they hit them, or forked it - leave
  // the index too: nobody may write them now, and they would serve their
  // unwritten K/V to every later prompt that hit them. A ghost (it was
  // being swapped out) holds its blocks until the copy ends: those it
  // holds alone, which it lets go last then, leave the index now as a
  // resident one's cached blocks do (held, they count as no eviction; a
  // KV event each), and the ghost frees them.
  for (std::size_t k = 0; k < table.size(); ++k) {
    auto b = table[k];
    auto& m = blocks_[b];
    bool alone = ghost && m.state == block_state::used && m.ref_count == 1;
    if (alone || (m.state == block_state::used && k >= brought)) {
      // Out of the index (a pin first, with the pins below it), and a
      // second copy takes no first copy's place. Unless its ghost's alone,
      // others hold it (a fork its partly filled last block, say).
      if (m.indexed)
        unindex_held(b);
      else if (!second_copies_.empty())
        drop_second_copy(b);
      continue;
    }
    if (m.state != block_state::cached)
      continue; // still used by others (not its own), or it went free
    // What it brought from others (before `brought`) their passes wrote:
    // it no longer trusts them itself, but what was built on them stands.
    free_cached(b);
  }
  // Nothing was built on its writes unless another request acquired its
  // epoch (a hit on one of its blocks, a fork, a swap-in's share). A
  // step's discards share one scan (run_step).
  if (spread)
    forget_spread(bad);
  return freed;
}

caf::expected<std::uint32_t> block_pool_core::discard_away(sequence& seq) {
  const auto id = seq.id;
  const auto bad = epoch_of(seq);
  const bool spread = lineage_.end(bad);
  // Unless another request took its epoch on (a hit, a swap-in's share),
  // what it wrote and let go at the swap-out is cached, if still indexed,
  // or held by its own ghost coming back: found by the hashes it took to
  // the host, its own if its epoch last wrote the block (the prefix may
  // have been computed again since, by another). Out of the index in
  // table order, as a resident one's; its admission's hits its epoch did
  // not write.
  std::vector<block_id> own;
  if (!spread)
    for (auto h : seq.host_hashes) {
      if (h == block_hash{})
        continue;
      auto b = find_indexed(h.lo);
      if (b != prefix_index::npos && blocks_[b].hash.hi == h.hi
          && lineage_.writer_of(b) == bad)
        own.push_back(b);
    }
  auto freed = release(id); // a ghost, if coming back
  for (auto b : own) {
    auto& m = blocks_[b];
    if (m.state != block_state::cached) {
      // Its ghost's share (freed when the copy ends) - or, after 2^32
      // swap-ins, a block another's ended epoch of the same number wrote:
      // out of the index, more than it must, never freed under a holder.
      unindex_held(b);
      continue;
    }
    free_cached(b);
  }
  // Spread: whatever holds its writes or was computed over them - its
  // ghost's shares included - is found by the scan.
  if (spread)
    forget_spread(bad);
  return freed;
}

void block_pool_core::free_cached(block_id b) {
  auto& m = blocks_[b];
  if (m.pinned)
    unpin_with_descendants(b);
  evict_one(b, m.level);
  free_.push(b);
}

void block_pool_core::forget_spread(write_lineage::token bad) {
  if (batched_bad_ != nullptr)
    batched_bad_->push_back(bad);
  else
    forget_built_on({bad});
}

void block_pool_core::forget_built_on(std::vector<write_lineage::token> bad) {
  std::sort(bad.begin(), bad.end());
  // Every indexed block computed over their writes, in block order as
  // discard takes its own: cached ones free (a pinned one with the pins
  // below it), held ones unindexed - whoever computed them, whether that
  // request lives on, ended, or the blocks between were evicted.
  for (block_id b = 0; b < blocks_.size(); ++b) {
    auto& m = blocks_[b];
    if (!m.indexed || !lineage_.depends_on_any(b, bad))
      continue;
    if (m.state == block_state::cached) {
      free_cached(b);
    } else {
      unindex_held(b);
    }
  }
  // A second copy computed over them never takes a first copy's place.
  for (auto i = second_copies_.begin(); i != second_copies_.end();)
    if (lineage_.depends_on_any(i->second.block, bad))
      i = second_copies_.erase(i);
    else
      ++i;
  // Every request that computes over them - live, away on the host, or a
  // ghost - indexes nothing more: what it writes builds on them too.
  auto visit = [&](sequence& s) {
    if (s.acquired && lineage_.acquired_any(s.cache_id, bad))
      stop_indexing(s);
  };
  seq_index_.for_each(
    [&](std::uint64_t, std::uint32_t slot) { visit(seqs_[slot]); });
  for (auto slot : ghosts_)
    visit(seqs_[slot]);
}

void block_pool_core::stop_indexing(sequence& seq) {
  seq.hashable = false;
  seq.tail.clear();
  // Nor do its second copies take a first copy's place.
  if (!second_copies_.empty())
    for (auto b : seq.blocks)
      drop_second_copy(b);
  // Nor what a copy in flight deferred, nor after an undo of it.
  for (auto& p : pending_cows_)
    if (p.cache_id == seq.cache_id) {
      p.hashable = false;
      p.deferred.clear();
    }
}

} // namespace kvactor::detail
