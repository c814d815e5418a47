// write_lineage: whose unconfirmed writes each block's K/V were computed
// over - what a discard must take out of the prefix index. CAF-free.
//
// The pool indexes a request's blocks before its forward pass writes them,
// and never learns that the pass ran: only how the request ends. Each
// stretch from a request's admission or swap-in to its end or next
// swap-in is one *epoch* - a swap-out does not end it: the copy says
// nothing of whether the passes that wrote the blocks succeeded -, named
// by a token unique over the pool's life: twice its cache_id for its
// first, an odd number for each later one. An epoch is live while it
// lasts, and ends confirmed (a release, a swap-in - its engine resumes
// it -, a supervisor victim's preemption: a pass wrote what it had) or
// bad (a discard - a reclaim, a failed pass: its own K/V were never
// written), wherever the request is. A cached block's writer's epoch has
// ended, unless that request is away on the host.
//
//  - A block's deps: the live tokens its K/V were computed over - its last
//    writer's, and every live token its writer had acquired then. Set when
//    a request writes into the block (wrote), cleared when it is taken
//    fresh.
//  - A request's acc: the live tokens it acquired from blocks it holds but
//    did not write - a hit, a swap-in's share (take_on, then adopt) - and
//    from its parent, for a fork (the parent's acc and the parent's own
//    token).
//
// A bad token's dependents are then exactly the indexed blocks whose deps
// hold it and the requests whose acc holds it: no search of the prefix
// tree, and nothing missed because a dependent ended or a block in between
// was evicted. Dead tokens are harmless (a token is unique, and one that
// ended confirmed never turns bad): they are dropped when a request takes
// tokens on. A token that no other request acquired (not spread) has no
// dependent but its own blocks: its bad end needs no scan.
//
// Cost: per block 16 bytes (its writer's token and a set number, 0 for
// none); a set of acquired tokens only for requests that built on another
// live request's writes, shared by the blocks each epoch writes; per live
// epoch one entry in an open-addressing table.
#pragma once

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "kvactor/actors/flat_index.hpp"
#include "kvactor/messages/types.hpp"

namespace kvactor::detail {

class write_lineage {
public:
  using token = std::uint64_t;
  using token_set = std::vector<token>; ///< sorted

  /// The token of incarnation `cache_id`'s current epoch; `restarted`:
  /// it has had more than one.
  token current(std::uint64_t cache_id, bool restarted) const noexcept {
    return restarted ? token{restarted_.find(cache_id)} << 1 | 1
                     : cache_id << 1;
  }
  /// Incarnation `cache_id` starts a later epoch: its token, live.
  token restart(std::uint64_t cache_id);

  explicit write_lineage(std::size_t num_blocks = 0)
    : recs_(num_blocks), sets_(1), set_refs_(1, 0) {
  }

  // -- epochs ------------------------------------------------------------------

  void begin(token t) {
    live_.insert(t, 0);
  }
  /// Ends `t`'s epoch (a no-op if it is not live); whether another request
  /// acquired it while it lasted.
  bool end(token t) noexcept {
    return live_.take(t) == spread_mark;
  }
  bool live(token t) const noexcept {
    return t != 0 && live_.find(t) != flat_index::npos;
  }
  std::size_t live_epochs() const noexcept {
    return live_.size();
  }

  // -- blocks ------------------------------------------------------------------

  /// Block `b` was taken fresh: it depends on nothing yet.
  void clear(block_id b) noexcept {
    recs_[b].writer = 0;
    unref_set(recs_[b].set);
    recs_[b].set = 0;
  }
  /// Epoch `writer` of request `cache_id` wrote into block `b`: its deps
  /// become `writer` and that request's acc (`acquired`: whether it has
  /// one). Returns whether it has one. A request's acc changes only
  /// between its epochs (an admission's hits, a fork, a swap-in's shares),
  /// so a block its epoch wrote before is left as it is: one compare. (The
  /// pool calls it from admissions, the full extend path and swap_in_done;
  /// an append in place writes into a block its epoch wrote.)
  bool wrote(block_id b, token writer, std::uint64_t cache_id,
             bool acquired) {
    if (recs_[b].writer == writer)
      return acquired; // this epoch wrote it before: over the same acc
    return wrote_first(b, writer, cache_id, acquired);
  }
  /// Whether block `b`'s K/V were computed over epoch `t`'s writes.
  bool depends_on(block_id b, token t) const noexcept {
    if (recs_[b].writer == t)
      return true;
    auto& s = sets_[recs_[b].set];
    return std::binary_search(s.begin(), s.end(), t);
  }
  /// Whether block `b`'s K/V were computed over any of `bad` (sorted).
  bool depends_on_any(block_id b, const token_set& bad) const noexcept {
    if (std::binary_search(bad.begin(), bad.end(), recs_[b].writer))
      return true;
    for (auto t : sets_[recs_[b].set])
      if (std::binary_search(bad.begin(), bad.end(), t))
        return true;
    return false;
  }
  /// The epoch that last wrote into block `b` (0: none since taken).
  token writer_of(block_id b) const noexcept {
    return recs_[b].writer;
  }
  /// Whether `b`'s deps may hold a token besides its writer's.
  bool has_set(block_id b) const noexcept {
    return recs_[b].set != 0;
  }

  // -- requests ----------------------------------------------------------------

  /// A request holds block `b`, which it did not write: the live tokens
  /// `b` depends on join `took` (sorted; its writer's only if
  /// `writer_may_live`: a cached block's writer let it go, so its epoch
  /// ended). An admission gathers its hits' so, then adopts them.
  void take_on(token_set& took, block_id b, bool writer_may_live);
  /// Request `cache_id` takes `took` on (take_on's): returns whether its
  /// acc holds any token now.
  bool adopt(std::uint64_t cache_id, token_set took);
  /// A fork `child` of `parent` (epoch token `parent_token`): its acc is
  /// the parent's live acc and the parent's token, if live. Returns
  /// whether it holds any.
  bool inherit(std::uint64_t child, std::uint64_t parent, token parent_token,
               bool parent_acquired);
  /// Whether request `cache_id`'s acc holds `t`.
  bool acquired(std::uint64_t cache_id, token t) const;
  /// Whether it holds any of `bad` (sorted).
  bool acquired_any(std::uint64_t cache_id, const token_set& bad) const;
  /// Request `cache_id` ended: its acc and later tokens' record go.
  void forget(std::uint64_t cache_id) {
    if (auto it = acc_.find(cache_id); it != acc_.end()) {
      unref_set(it->second.set);
      acc_.erase(it);
    }
    restarted_.erase(cache_id);
  }

  /// The deps of block `b` (tests), sorted, its writer's included.
  token_set deps(block_id b) const;
  /// The acc of request `cache_id`, ended tokens included until it takes
  /// more on (adopt drops them).
  token_set acc(std::uint64_t cache_id) const;

private:
  static constexpr std::uint32_t spread_mark = 1;

  /// Adds live token `t` to sorted `into` (no duplicate); marks it spread.
  void add_live(token_set& into, token t);
  /// Drops the dead tokens of `s`.
  void prune(token_set& s) const;
  /// Drops a reference to sets_[s] (0: none); the last frees it.
  void unref_set(std::uint32_t s) noexcept {
    if (s != 0 && --set_refs_[s] == 0) {
      sets_[s].clear();
      free_sets_.push_back(s);
    }
  }
  /// wrote(), the first time epoch `writer` writes into `b`.
  bool wrote_first(block_id b, token writer, std::uint64_t cache_id,
                   bool acquired);

  /// A request's acc, and the set its blocks share while it does not
  /// change (made at its first write, 0 till then; the entry holds a
  /// reference): every block an epoch writes records one set, not a copy.
  struct acc_entry {
    token_set tokens;
    std::uint32_t set = 0;
  };
  /// `e`'s tokens changed: its blocks keep the old set, its next write
  /// makes a new one.
  void changed(acc_entry& e) noexcept {
    unref_set(e.set);
    e.set = 0;
  }

  /// Per block, 16 bytes.
  struct record {
    token writer = 0;      ///< its last writer's epoch (0: none since taken)
    std::uint32_t set = 0; ///< the acc its writer had then: sets_[set]
  };
  std::vector<record> recs_;
  std::vector<token_set> sets_; ///< sets_[0] stays empty
  std::vector<std::uint32_t> set_refs_; ///< per set: blocks and accs on it
  std::vector<std::uint32_t> free_sets_;
  std::unordered_map<std::uint64_t, acc_entry> acc_; ///< by cache_id
  flat_index live_; ///< live epochs' tokens -> spread_mark or 0
  /// Incarnations past their first epoch -> their current token's number
  /// n (the token 2n + 1: odd, never a first epoch's).
  flat_index restarted_;
  std::uint32_t restarts_ = 0;
};

} // namespace kvactor::detail
