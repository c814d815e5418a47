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
  // Its own blocks begin there; another request may have built on them
  // only if it held one (block_meta::shared, kept while they go free).
  const std::uint64_t own_from = keep + brought;
  const std::uint64_t parent_id = seq->cache_id;
  bool shared = false;
  for (std::size_t k = brought; k < table.size(); ++k)
    shared |= blocks_[table[k]].shared;
  auto freed = release(id);
  // Those it held last are cached now (the indexed ones): out of the index,
  // in table order. A pinned one first loses its pin, with the pins below
  // it in the prefix tree (what stays pinned stays reachable). Those it
  // brought that others still hold - they hit them, or forked it - leave
  // the index too: nobody may write them now, and they would serve their
  // unwritten K/V to every later prompt that hit them.
  std::vector<std::uint64_t> gone; // hash.lo of its own it took out
  std::vector<block_id> held;      // its own that others hold
  for (std::size_t k = 0; k < table.size(); ++k) {
    auto b = table[k];
    auto& m = blocks_[b];
    if (m.state == block_state::used && k >= brought) {
      // Others hold it (a fork its partly filled last block, say).
      held.push_back(b);
      if (m.indexed) {
        gone.push_back(m.hash.lo);
        unindex_held(b);
      }
      continue;
    }
    if (m.state != block_state::cached)
      continue; // still used by others (not its own), or it went free
    // What it brought from others (before `brought`) their passes wrote:
    // it no longer trusts them itself, but what was built on them stands.
    if (k >= brought)
      gone.push_back(m.hash.lo);
    if (m.pinned)
      unpin_with_descendants(b);
    evict_one(b, m.level);
    free_.push(b);
  }
  // A victim's step still writes its K/V (!brought_held): what was
  // computed over them stands. Nor can anything be built on blocks of its
  // own no other request ever held: its own later ones went above (an
  // indexed block elsewhere under one's hash was computed over another
  // block, written).
  if (brought_held && shared)
    forget_built_on(std::move(gone), std::move(held), parent_id, own_from);
  return freed;
}

void block_pool_core::forget_built_on(std::vector<std::uint64_t> gone,
                                      std::vector<block_id> held,
                                      std::uint64_t parent,
                                      std::uint64_t own_from) {
  // Rounds until nothing more goes: (1) the indexed blocks whose chain runs
  // through a gone block, found by their parents' hashes through indexed
  // blocks; (2) the requests that hold a gone block (or held one when they
  // moved to the host) stop indexing, and what they indexed after it goes
  // too - it was computed over it, whatever hash chain led there (a
  // duplicate block of theirs the index never took, say). A fork of it (or
  // of such a fork) counts as holding its own blocks from `own_from` on,
  // though it may have copied one before writing into it.
  std::vector<std::uint64_t> forks{parent}; // incarnations, sorted
  std::sort(gone.begin(), gone.end());
  std::sort(held.begin(), held.end());
  auto is_gone = [&](std::uint64_t h) {
    return std::binary_search(gone.begin(), gone.end(), h);
  };
  auto is_held = [&](block_id b) {
    return std::binary_search(held.begin(), held.end(), b);
  };
  // Out of the index, in block order, as discard takes its own: cached ones
  // free (a pinned one with the pins below it), held ones unindexed.
  auto take_out = [&](std::vector<block_id>& out) {
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    for (auto b : out) {
      auto& m = blocks_[b];
      if (!m.indexed)
        continue;
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
    std::sort(held.begin(), held.end());
  };
  for (;;) {
    // (1): one scan for children of gone blocks, a search of the edges
    // only when it finds one.
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
      take_out(below);
    }
    // (2): the holders, the requests away on the host and the forks.
    std::vector<block_id> after;
    // Live requests and ghosts (ended mid-swap: they index nothing more,
    // but what they indexed goes as any holder's).
    std::vector<std::uint64_t> forked;
    auto visit = [&](sequence& s) {
      auto f = forked_from_.find(s.cache_id);
      bool fork = f != forked_from_.end()
                  && std::binary_search(forks.begin(), forks.end(), f->second);
      if (!fork && held.empty() && s.host_hashes.empty())
        return; // nothing it holds can be gone
      // A table (its blocks, or a swap-in's incoming ones): what it indexed
      // past a gone block it holds - past its parent's own, for a fork.
      auto scan = [&](const auto& table) {
        bool over = false;
        for (std::size_t k = 0; k < table.size(); ++k) {
          auto b = table[k];
          over |= fork && k >= own_from;
          if (over && blocks_[b].indexed)
            after.push_back(b);
          over |= is_held(b);
        }
        return over;
      };
      bool over = scan(s.blocks);
      bool in = scan(s.incoming);
      if (fork && !std::binary_search(forks.begin(), forks.end(), s.cache_id))
        forked.push_back(s.cache_id);
      bool away = false;
      for (std::size_t k = 0; k < s.host_hashes.size(); ++k) {
        auto& h = s.host_hashes[k];
        away |= fork && k >= own_from;
        if (away && h.lo != 0) {
          auto b = find_indexed(h.lo);
          if (b != prefix_index::npos && blocks_[b].hash.hi == h.hi)
            after.push_back(b);
        }
        away |= h.lo != 0 && is_gone(h.lo);
      }
      if (over || in || away || fork)
        stop_indexing(s); // unhashable too: an undo may make it hashable
    };
    seq_index_.for_each(
      [&](std::uint64_t, std::uint32_t slot) { visit(seqs_[slot]); });
    for (auto slot : ghosts_)
      visit(seqs_[slot]);
    if (after.empty() && forked.empty())
      return;
    forks.insert(forks.end(), forked.begin(), forked.end());
    std::sort(forks.begin(), forks.end());
    take_out(after);
  }
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
