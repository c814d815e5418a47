// block_pool_core: extension - appending in place when the tail block has
// room, taking blocks (copy-on-write for a shared tail) when it has not,
// and hashing the blocks the new tokens fill.
#include "kvactor/actors/block_pool_core.hpp"

#include <algorithm>

#include "kvactor/messages/error.hpp"

namespace kvactor::detail {

// -- extend ---------------------------------------------------------------------------

bool block_pool_core::append_in_place(sequence& seq, std::uint64_t n,
                                      const token_id* tokens,
                                      std::uint64_t drafts) {
  // The common decode step: a few tokens into the partly filled last block,
  // which no one else holds. Anything else takes the full path (which also
  // reports bad input: unsettled drafts, a draft count past n).
  auto used = seq.num_tokens % block_size_;
  if (used == 0 || used + n > block_size_ || seq.tail_shared
      || n > seq.max_tokens - seq.num_tokens || seq.drafts != 0 || drafts > n
      || drafts > max_draft_tokens)
    return false;
  if (tokens != nullptr)
    for (std::uint64_t i = 0; i < n; ++i)
      if (tokens[i] < 0)
        return false; // the full path reports it
  add_tokens(seq, n, tokens, drafts);
  return true;
}

void block_pool_core::add_tokens(sequence& seq, std::uint64_t n,
                                 const token_id* tokens,
                                 std::uint64_t drafts) {
  seq.drafts = static_cast<std::uint16_t>(drafts);
  counters_.draft_tokens += drafts;
  if (tokens != nullptr && seq.hashable) {
    hash_appended(seq, tokens, n);
  } else if (seq.hashable) {
    // Unnamed tokens end the chain: later blocks cannot be looked up.
    seq.hashable = false;
    seq.tail.clear();
  }
  seq.num_tokens += n;
}

void block_pool_core::hash_appended(sequence& seq, const token_id* tokens,
                                    std::uint64_t n) {
  if (n == 1 && seq.tail.size() + 1 < block_size_) {
    seq.tail.push_back(*tokens); // does not complete a block
    return;
  }
  seq.tail.insert(seq.tail.end(), tokens, tokens + n);
  hash_tail(seq);
}

void block_pool_core::hash_tail(sequence& seq) {
  // Drafts sit at the tail's end; only the settled tokens before them count.
  std::size_t off = 0;
  while (seq.tail.size() - off - seq.drafts >= block_size_) {
    auto parent = seq.num_hashed > 0 ? seq.chain.lo : 0;
    auto h = hash_block(seq.chain, seq.tail.data() + off, block_size_);
    index_filled(seq, seq.num_hashed, h, parent, seq.tail.data() + off);
    seq.chain = h;
    ++seq.num_hashed;
    off += block_size_;
  }
  if (off > 0)
    seq.tail.erase(seq.tail.begin(), seq.tail.begin() + off);
}

sequence* block_pool_core::find_resident(request_id id, caf::error& err) {
  auto seq = find_mut(id);
  if (seq == nullptr) {
    err = make_error(errc::unknown_request, req_name(id) + " is not allocated");
    return nullptr;
  }
  if (seq->where != residency::resident) {
    err = make_error(errc::invalid_request,
                     req_name(id)
                       + (seq->where == residency::swapped
                            ? " is swapped out: swap it in first"
                            : " is being swapped: wait for the swap"));
    return nullptr;
  }
  if (seq->cow_pending) {
    // Its table may yet be undone (settle_copies): no fork or swap of it.
    err = make_error(errc::invalid_request,
                     req_name(id) + " has a copy-on-write copy in flight: "
                                    "settle it first");
    return nullptr;
  }
  return seq;
}

caf::expected<extension_outcome>
block_pool_core::extend(request_id id, std::uint64_t n,
                        const token_id* tokens, bool hold_copies,
                        std::uint64_t drafts) {
  auto seq = find_mut(id);
  if (seq == nullptr || seq->where != residency::resident) {
    caf::error err;
    find_resident(id, err);
    return err;
  }
  extension_outcome out;
  if (drafts > n || drafts > max_draft_tokens)
    return make_error(errc::invalid_request,
                      req_name(id) + ": " + std::to_string(drafts)
                        + " draft tokens in an extend of " + std::to_string(n)
                        + " (at most the extend's tokens and "
                        + std::to_string(max_draft_tokens) + ")");
  if (n == 0) {
    seq->last_access = clock_ns_;
    return out;
  }
  if (seq->drafts != 0)
    return make_error(errc::invalid_request,
                      req_name(id) + " has " + std::to_string(seq->drafts)
                        + " draft tokens unsettled: settle them "
                          "(settle_drafts) before it grows again");
  if (append_in_place(*seq, n, tokens, drafts)) {
    out.first_changed = static_cast<std::uint32_t>(seq->blocks.size());
    seq->last_access = clock_ns_;
    return out;
  }
  if (n > seq->max_tokens - seq->num_tokens)
    return make_error(errc::exceeds_max_sequence_length,
                      req_name(id) + ": " + std::to_string(seq->num_tokens)
                        + " + " + std::to_string(n)
                        + " tokens > max_sequence_length "
                        + std::to_string(seq->max_tokens));
  if (tokens != nullptr)
    for (std::uint64_t i = 0; i < n; ++i)
      if (tokens[i] < 0)
        return make_error(errc::invalid_request,
                          req_name(id) + ": token " + std::to_string(tokens[i])
                            + " is not a token id");
  auto old_blocks = seq->blocks.size();
  auto total = seq->num_tokens + n;
  auto new_blocks = blocks_for(total);
  auto add = new_blocks - old_blocks;
  if (add > 0)
    if (auto err = fits_alone(req_name(id), seq->tenant, new_blocks))
      return err;
  // Copy on write only if another table holds the block, or a copy in
  // flight (holds) reads tokens of it past ours - its request, back on the
  // block if the copy fails, would find ours there (a fork makes both
  // holders tail_shared even where one has more tokens in it). A copy that
  // reads only the tokens before ours needs nothing: we never change them.
  // Or if the block entered the prefix index meanwhile: a copy that failed
  // gave us back the shared block our former sharer went on to fill, and
  // an indexed block is never written again, even by its last holder.
  bool cow = false;
  if (seq->tail_shared && seq->num_tokens % block_size_ != 0) {
    auto b = seq->blocks.back();
    auto& last = blocks_[b];
    cow = last.ref_count - last.holds > 1 || last.indexed
          || (last.holds > 0
              && copy_reads_past(b, seq->num_tokens % block_size_));
  }
  if (add + cow > 0)
    if (auto err = admit_blocks(seq->tenant, add + cow))
      return err;
  auto promised_before = growth(*seq);
  seq->tail_shared = false; // its own copy, or it is the only holder left
  out.changed = add + cow > 0;
  out.first_changed = static_cast<std::uint32_t>(old_blocks - cow);
  if (cow) {
    auto old = seq->blocks.back();
    auto copy = take_block(seq->tenant);
    blocks_[copy].level = seq->level;
    if (hold_copies) {
      begin_cow(*seq, block_copy{old, copy}); // before seq changes
      for (auto b : {old, copy}) {
        ++blocks_[b].ref_count;
        ++blocks_[b].holds;
      }
    }
    seq->blocks.back() = copy;
    out.copies.push_back(block_copy{old, copy});
    ++counters_.cow_copies;
  }
  for (std::uint64_t i = 0; i < add; ++i) {
    seq->blocks.push_back(take_block(seq->tenant));
    blocks_[seq->blocks.back()].level = seq->level;
  }
  if (cow) {
    // Our reference to the copied block goes - after the blocks above were
    // taken, so none of them is the source (cached if this was its last
    // reference, an indexed block's) before the device copied it.
    auto old = out.copies.back().src;
    unref(old, seq->level);
    give_way(&old, 1);
  }
  // The blocks the new tokens go into (write_lineage). Appends in place
  // need not say so: their block is one this epoch wrote before (a fork's
  // sharers, tail_shared, come this way first; a swap-in records its
  // copies).
  wrote(*seq, seq->num_tokens / block_size_,
        blocks_for(seq->num_tokens + n));
  add_tokens(*seq, n, tokens, drafts);
  seq->last_access = clock_ns_;
  repromise(*seq, promised_before);
  return out;
}

} // namespace kvactor::detail
