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
                                                      std::uint32_t keep,
                                                      bool brought_held) {
  auto seq = find(id);
  if (seq == nullptr || seq->where != residency::resident)
    return release(id);
  keep = std::min<std::uint32_t>(keep, seq->blocks.size());
  std::vector<block_id> table(seq->blocks.begin() + keep, seq->blocks.end());
  std::size_t brought = seq->brought_from > keep ? seq->brought_from - keep : 0;
  if (!brought_held)
    brought = table.size();
  // Its first blocks it found written (hit_blocks): what others computed
  // over them stands, though it no longer trusts them itself.
  std::size_t written = seq->hit_blocks > keep ? seq->hit_blocks - keep : 0;
  auto freed = release(id);
  // Those it held last are cached now (the indexed ones): out of the index,
  // in table order. A pinned one first loses its pin, with the pins below
  // it in the prefix tree (what stays pinned stays reachable). Those it
  // brought that others still hold - they hit them, or forked it - leave
  // the index too: nobody may write them now, and they would serve their
  // unwritten K/V to every later prompt that hit them.
  std::vector<std::uint64_t> gone; // hash.lo of the unwritten ones it took
  std::vector<block_id> held;      // of those, the ones others hold
  for (std::size_t k = 0; k < table.size(); ++k) {
    auto b = table[k];
    auto& m = blocks_[b];
    if (m.state == block_state::used && m.indexed && k >= brought) {
      gone.push_back(m.hash.lo); // past its hits: brought >= written
      held.push_back(b);
      unindex_held(b);
      continue;
    }
    if (m.state != block_state::cached)
      continue; // still used by others (not its own), or it went free
    if (k >= written)
      gone.push_back(m.hash.lo);
    if (m.pinned)
      unpin_with_descendants(b);
    evict_one(b, m.level);
    free_.push(b);
  }
  // A victim's step still writes its K/V (!brought_held): what was
  // computed over them stands.
  if (brought_held)
    forget_built_on(std::move(gone), std::move(held));
  return freed;
}

void block_pool_core::forget_built_on(std::vector<std::uint64_t> gone,
                                      std::vector<block_id> held) {
  if (gone.empty())
    return;
  // 1. The indexed blocks whose chain runs through a block just taken out:
  // computed over K/V nobody wrote, whoever holds them. Found by their
  // parents' hashes - one scan, and a search of the edges only when the
  // scan finds one (the common discard has none: its own later blocks
  // went with it). Only through indexed blocks: one below a block that
  // had left the index before stays (README, Known limitations).
  std::sort(gone.begin(), gone.end());
  auto is_gone = [&](std::uint64_t h) {
    return std::binary_search(gone.begin(), gone.end(), h);
  };
  std::vector<block_id> below;
  for (block_id b = 0; b < blocks_.size(); ++b)
    if (blocks_[b].indexed && is_gone(parent_[b]))
      below.push_back(b);
  if (!below.empty()) {
    std::vector<std::pair<std::uint64_t, block_id>> edges; // parent, child
    for (block_id b = 0; b < blocks_.size(); ++b)
      if (blocks_[b].indexed)
        edges.emplace_back(parent_[b], b);
    std::sort(edges.begin(), edges.end());
    std::vector<bool> seen(blocks_.size(), false);
    for (auto b : below)
      seen[b] = true;
    for (std::size_t i = 0; i < below.size(); ++i) {
      auto h = blocks_[below[i]].hash.lo;
      auto at = std::lower_bound(edges.begin(), edges.end(),
                                 std::make_pair(h, block_id{0}));
      for (; at != edges.end() && at->first == h; ++at)
        if (!seen[at->second]) {
          seen[at->second] = true;
          below.push_back(at->second);
        }
    }
    // Out of the index as discard takes its own: in block order, cached
    // ones free (a pinned one with the pins below it), held ones unindexed.
    std::sort(below.begin(), below.end());
    for (auto b : below) {
      auto& m = blocks_[b];
      gone.push_back(m.hash.lo);
      if (m.state == block_state::cached) {
        if (m.pinned)
          unpin_with_descendants(b);
        evict_one(b, m.level);
        free_.push(b);
      } else {
        held.push_back(b);
        unindex_held(b);
      }
    }
    std::sort(gone.begin(), gone.end());
  }
  // 2. A request that holds one of them (or held one when it moved to the
  // host) computes over them still: nothing it writes from here on enters
  // the index. Only needed if such a request may exist.
  if (held.empty() && host_free_.size() == num_host_blocks_)
    return;
  std::sort(held.begin(), held.end());
  auto is_held = [&](block_id b) {
    return std::binary_search(held.begin(), held.end(), b);
  };
  seq_index_.for_each([&](std::uint64_t, std::uint32_t slot) {
    auto& s = seqs_[slot]; // unhashable too: an undo may make it hashable
    bool over = std::any_of(s.blocks.begin(), s.blocks.end(), is_held)
                || std::any_of(s.incoming.begin(), s.incoming.end(), is_held)
                || std::any_of(s.host_hashes.begin(), s.host_hashes.end(),
                               [&](const block_hash& h) {
                                 return h.lo != 0 && is_gone(h.lo);
                               });
    if (over)
      stop_indexing(s);
  });
}

void block_pool_core::stop_indexing(sequence& seq) {
  seq.hashable = false;
  seq.tail.clear();
  // Nor what a copy in flight deferred, nor after an undo of it.
  for (auto& p : pending_cows_)
    if (p.cache_id == seq.cache_id) {
      p.hashable = false;
      p.deferred.clear();
    }
}

} // namespace kvactor::detail
