// block_pool_core::check_invariant: recomputes the pool's accounting from the
// sequence tables and compares it with the pool's own, block by block; also
// each request's hashing state, copy-on-write safety, copies in flight,
// quotas and the lists' own bookkeeping. O(blocks + table entries).
#include "kvactor/actors/block_pool_core.hpp"

#include <algorithm>
#include <optional>

#include "kvactor/messages/error.hpp"

namespace kvactor::detail {

namespace {

caf::error broken(std::string what) {
  return make_error(errc::invariant_violation, std::move(what));
}

std::string blk(block_id b) {
  return "block " + std::to_string(b);
}

} // namespace

/// The parts of check_invariant that look at one kind of state apart.
struct block_pool_core::checks {
  /// Copies in flight: counts the holds each block should have into
  /// its mark, and into `records` (per slot of the request table) the
  /// copies each live incarnation has in flight - the pass over the
  /// requests matches them with cow_pending (copy_pending). A record of a
  /// request ended since stays, still holding its blocks, until settled.
  static caf::error copies(const block_pool_core& p,
                           std::vector<std::uint8_t>& records) {
    auto n = p.blocks_.size();
    auto& marks = p.marks_;
    for (auto& c : p.pending_cows_) {
      if (c.copy.src >= n || c.copy.dst >= n || c.copy.src == c.copy.dst)
        return broken("the copy in flight for " + req_name(c.id) + " names "
                      + blk(c.copy.src) + " -> " + blk(c.copy.dst));
      ++marks[c.copy.src].holds;
      ++marks[c.copy.dst].holds;
      auto slot = p.seq_index_.find(c.id);
      if (slot != flat_index::npos && slot < records.size()
          && p.seqs_[slot].cache_id == c.cache_id && records[slot]++ != 0)
        return broken(req_name(c.id) + " has two copies in flight");
    }
    return caf::none;
  }
  /// Each live request marked cow_pending has exactly one copy in flight
  /// (`records`, at its slot), and a ghost none.
  static caf::error copy_pending(const sequence& s, std::uint8_t records,
                                 bool ghost) {
    if (ghost)
      return s.cow_pending ? broken("ghost of " + req_name(s.id)
                                    + " waits for a copy")
                           : caf::none;
    if (s.cow_pending == (records == 1))
      return caf::none;
    return broken(req_name(s.id)
                  + (s.cow_pending
                       ? " waits for a copy that is not in flight"
                       : " has a copy in flight but does not wait for it"));
  }

  /// The block `s` may write into in place, if any: its partial last
  /// block on the device, unless flagged tail_shared.
  static std::optional<block_id> writes_into(const block_pool_core& p,
                                             const sequence& s) {
    auto fill = s.num_tokens % p.block_size_;
    bool on_device = s.where == residency::resident
                     || s.where == residency::swapping_out;
    if (s.tail_shared || fill == 0 || !on_device)
      return std::nullopt;
    return s.blocks.back();
  }

  /// Copy-on-write safety: a partially filled last block that several
  /// tables hold is written in place by one of them at most - the one that
  /// appended in place while the other holders' copies of the block were
  /// in flight - and only if no other has more tokens in it (its writes
  /// past its own tokens then touch no one else's). The others may come
  /// back to the block when their copies fail, as many tokens in it as the
  /// writer once its drafts are rejected, never more. Every other holder
  /// is flagged tail_shared, so its next append copies the block first.
  /// From block `b`'s mark, counted by the pass over the tables: refs,
  /// top_fill, and the tables writes_into names it for.
  static caf::error shared_tail(const block_pool_core& p, block_id b,
                                const check_mark& mark) {
    if (mark.refs < 2 || mark.writers == 0
        || (mark.writers == 1 && mark.writer_fill == mark.top_fill))
      return caf::none;
    // Broken: name the first such table, as a pass over them meets it.
    request_id id = 0;
    bool found = false;
    auto first = [&](const sequence& s) {
      if (!found && writes_into(p, s) == b) {
        id = s.id;
        found = true;
      }
    };
    p.for_each_sequence(first);
    p.for_each_ghost(first);
    return broken(req_name(id) + " may write into its last " + blk(b)
                  + ", which another table holds with more tokens or may "
                    "write into too, but is not flagged tail_shared");
  }

  /// Epochs (write_lineage) match the requests, for one request: exactly
  /// the epochs of live requests are live - on the device, moving or away
  /// on the host (a swap-out does not end one, a swap-in does) -; a
  /// ghost's is not.
  static caf::error lineage(const block_pool_core& p, const sequence& s,
                            bool ghost) {
    if (ghost == p.lineage_.live(p.epoch_of(s)))
      return broken((ghost ? "ghost " : "") + req_name(s.id) + "'s epoch is "
                    + (ghost ? "live" : "not live, though the request is"));
    // An append in place records nothing: its block must be one its epoch
    // wrote (unless shared with a fork: then the full path records it).
    bool on_device = s.where == residency::resident
                     || s.where == residency::swapping_out;
    if (!ghost && on_device && !s.tail_shared
        && s.num_tokens % p.block_size_ != 0
        && p.lineage_.writer_of(s.blocks.back()) != p.epoch_of(s))
      return broken(req_name(s.id) + " would append in place into "
                    + blk(s.blocks.back())
                    + ", which its epoch did not write");
    return caf::none;
  }
};

caf::error block_pool_core::check_invariant() const {
  auto n = blocks_.size();
  // What each block should be, counted afresh (check_mark).
  marks_.resize(n);
  std::fill(marks_.begin(), marks_.end(), check_mark{});
  auto& marks = marks_;
  std::vector<std::uint64_t> active(tenants_.size(), 0);
  std::vector<bool> host_seen(num_host_blocks_, false);
  std::vector<std::uint64_t> promised(tenants_.size(), 0);
  // Tokens in a table's last block.
  auto partial_fill = [this](const sequence& s) -> std::uint32_t {
    auto r = static_cast<std::uint32_t>(s.num_tokens % block_size_);
    return r == 0 ? block_size_ : r;
  };
  caf::error err;
  std::size_t live = 0; // live requests (each has a live epoch)
  // The epochs of those away on the host or coming back: a cached block's
  // writer may be one of them, still live (sorted below).
  std::vector<write_lineage::token> away;
  std::size_t seqs = 0;
  std::size_t outs = 0; // swaps in flight, which the pool counts too
  std::size_t ins = 0;
  // Live requests and ghosts (released during a swap) alike hold blocks;
  // only the live count as active.
  auto check_sequence = [&](const sequence& s) {
    if (err)
      return;
    if (s.tenant >= tenants_.size()) {
      err = broken("request " + std::to_string(s.id) + " has no tenant");
      return;
    }
    if (!s.release_pending)
      ++active[s.tenant];
    promised[s.tenant] += growth(s);
    auto want = blocks_for(s.num_tokens);
    auto name = "request " + std::to_string(s.id);
    // Where its table lives: on the device (resident, swapping_out), on the
    // host (swapping_out, swapped, swapping_in), arriving (swapping_in).
    bool on_device = s.where == residency::resident
                     || s.where == residency::swapping_out;
    bool on_host = s.where != residency::resident;
    bool arriving = s.where == residency::swapping_in;
    outs += s.where == residency::swapping_out;
    if (arriving) {
      ++ins;
      auto at = std::find_if(swap_in_shared_.begin(), swap_in_shared_.end(),
                             [&](const auto& e) { return e.first == s.cache_id; });
      if (at == swap_in_shared_.end() || at->second > want) {
        err = broken(name + "'s swap-in has no count of the blocks it shared");
        return;
      }
    }
    if (s.blocks.size() != (on_device ? want : 0)
        || s.host_blocks.size() != (on_host ? want : 0)
        || s.incoming.size() != (arriving ? want : 0)) {
      err = broken(name + " holds " + std::to_string(s.blocks.size()) + "/"
                   + std::to_string(s.host_blocks.size()) + "/"
                   + std::to_string(s.incoming.size())
                   + " device/host/incoming blocks for "
                   + std::to_string(s.num_tokens) + " tokens");
      return;
    }
    if (s.host_hashes.size() != s.host_blocks.size()) {
      err = broken(name + " has " + std::to_string(s.host_hashes.size())
                   + " hashes for " + std::to_string(s.host_blocks.size())
                   + " host blocks");
      return;
    }
    if (s.release_pending
        && (s.where == residency::resident || s.where == residency::swapped)) {
      err = broken(name + " has a release pending but no swap in progress");
      return;
    }
    // Hashing state: the first num_hashed blocks are full and hashed, the
    // tail holds the tokens after them (fewer than a block, and the drafts
    // after those); a request that stopped hashing (unnamed tokens) keeps
    // its count, which its settled tokens still cover. Swapped requests
    // keep theirs for the way back.
    if (s.drafts > s.num_tokens) {
      err = broken(name + " has " + std::to_string(s.drafts)
                   + " draft tokens of " + std::to_string(s.num_tokens));
      return;
    }
    auto settled = s.num_tokens - s.drafts;
    if (std::uint64_t{s.num_hashed} * block_size_ > settled
        || (s.hashable
            && (s.tail.size() < s.drafts
                || s.tail.size() - s.drafts >= block_size_
                || std::uint64_t{s.num_hashed} * block_size_ + s.tail.size()
                     != s.num_tokens))) {
      err = broken(name + " has " + std::to_string(s.num_hashed)
                   + " hashed blocks and " + std::to_string(s.tail.size())
                   + " tail tokens for " + std::to_string(s.num_tokens)
                   + " tokens");
      return;
    }
    // No block holding a draft is in the prefix index.
    for (auto k = s.drafts == 0 ? s.blocks.size() : settled / block_size_;
         k < s.blocks.size(); ++k)
      if (blocks_[s.blocks[k]].indexed) {
        err = broken(name + "'s " + blk(s.blocks[k])
                     + " holds draft tokens but is indexed");
        return;
      }
    struct table_ref {
      const block_id* data;
      std::size_t size;
    };
    for (auto table : {table_ref{s.blocks.data(), s.blocks.size()},
                       table_ref{s.incoming.data(), s.incoming.size()}})
      for (std::size_t k = 0; k < table.size; ++k) {
        auto b = table.data[k];
        if (b >= n) {
          err = broken(name + " holds " + blk(b) + " out of range");
          return;
        }
        auto& mark = marks[b];
        ++mark.refs;
        auto fill = k + 1 == table.size ? partial_fill(s) : block_size_;
        mark.top_fill = std::max<std::uint32_t>(mark.top_fill, fill);
      }
    if (auto b = checks::writes_into(*this, s)) { // (in range: checked above)
      auto& mark = marks[*b];
      mark.writers = static_cast<std::uint8_t>(std::min(mark.writers + 1, 2));
      mark.writer_fill
        = static_cast<std::uint16_t>(s.num_tokens % block_size_);
    }
    for (auto h : s.host_blocks) {
      if (h >= num_host_blocks_ || host_seen[h]) {
        err = broken(name + " holds host block " + std::to_string(h)
                     + " out of range or held twice");
        return;
      }
      host_seen[h] = true;
    }
  };
  // Copies in flight, per block (the marks) and per slot. Their errors,
  // and those of the epochs, are reported after the others, as when these
  // were passes of their own: the most telling first (a table flagged
  // wrongly breaks its epoch's rule too).
  std::vector<std::uint8_t> records(seqs_.size(), 0);
  auto copy_err = checks::copies(*this, records);
  caf::error epoch_err;
  // One pass over the requests, live then ghosts, each checked whole; and
  // every slot of the request table is exactly one of: live (in the id
  // index), a ghost, or free.
  std::vector<std::uint8_t> slot_seen(seqs_.size(), 0);
  bool slots_ok = true;
  auto mark = [&](std::uint32_t slot) {
    if (slot >= slot_seen.size() || slot_seen[slot]++ != 0)
      slots_ok = false;
    return slot < slot_seen.size();
  };
  bool keys_ok = true;
  seq_index_.for_each([&](std::uint64_t id, std::uint32_t slot) {
    if (!mark(slot) || err)
      return; // out of range: slots_ok says so below
    auto& s = seqs_[slot];
    keys_ok = keys_ok && s.id == id;
    ++seqs;
    if (s.release_pending)
      err = broken("request " + std::to_string(s.id)
                   + " has ended but is in the id index");
    check_sequence(s);
    if (!err && !epoch_err)
      epoch_err = checks::lineage(*this, s, false);
    if (!err && !copy_err)
      copy_err = checks::copy_pending(s, records[slot], false);
    ++live;
    if (s.where == residency::swapped || s.where == residency::swapping_in)
      away.push_back(epoch_of(s));
  });
  for (auto slot : ghosts_) {
    if (!mark(slot) || err)
      continue;
    auto& s = seqs_[slot];
    if (!s.release_pending)
      err = broken("ghost of request " + std::to_string(s.id)
                   + " has no release pending");
    check_sequence(s);
    if (!err && !epoch_err)
      epoch_err = checks::lineage(*this, s, true);
    if (!err && !copy_err)
      copy_err = checks::copy_pending(s, 0, true);
  }
  if (err)
    return err;
  if (outs != swapping_out_ || ins != swap_in_shared_.size())
    return broken(std::to_string(outs) + " swap-outs and " + std::to_string(ins)
                  + " swap-ins in flight, the pool counts "
                  + std::to_string(swapping_out_) + " and "
                  + std::to_string(swap_in_shared_.size()));
  for (auto slot : free_seq_slots_)
    mark(slot);
  if (!slots_ok || seqs + ghosts_.size() + free_seq_slots_.size() != seqs_.size())
    return broken("the request table's slots are not live, ghost or free "
                  "exactly once");
  if (!keys_ok)
    return broken("the id index names a slot holding another request");
  for (block_id b = 0; b < n; ++b)
    if (auto e = checks::shared_tail(*this, b, marks[b]))
      return e;
  // Membership of the free stack and the LRU lists.
  for (auto b : free_.ids()) {
    if (b >= n || marks[b].list != 0)
      return broken(blk(b) + " is on the free stack twice or out of range");
    marks[b].list = 1;
  }
  std::uint64_t draining = 0;
  for (auto& d : drains_)
    for (auto b : d.blocks) {
      if (b >= n || marks[b].list != 0)
        return broken(blk(b) + " drains twice, or is also free");
      marks[b].list = 3;
      ++draining;
    }
  if (draining != draining_)
    return broken("draining count " + std::to_string(draining_) + " != "
                  + std::to_string(draining));
  if (auto links = lru_.broken_links(); !links.empty())
    return broken(links);
  lru_.for_each([&](block_id b, std::size_t level) {
    if (err)
      return;
    if (b >= n || marks[b].list != 0) {
      err = broken(blk(b) + " is on two lists");
      return;
    }
    if (blocks_[b].level != level)
      err = broken(blk(b) + " is on the wrong LRU level");
    marks[b].list = 2;
  });
  if (err)
    return err;
  if (copy_err)
    return copy_err;
  std::vector<std::uint64_t> charged(tenants_.size(), 0);
  std::uint64_t used = 0;
  std::size_t indexed = 0;
  std::size_t pinned = 0;
  caf::error cached_err; // (an epoch's error: reported with them, last)
  std::sort(away.begin(), away.end());
  // One pass over the blocks, each against its mark.
  for (block_id b = 0; b < n; ++b) {
    auto& m = blocks_[b];
    auto& mark = marks[b];
    auto on_list = mark.list;
    if (m.holds != mark.holds)
      return broken(blk(b) + " has " + std::to_string(m.holds)
                    + " copy holds, the copies in flight make "
                    + std::to_string(mark.holds));
    if (m.ref_count != mark.refs + m.holds)
      return broken(blk(b) + " has ref count " + std::to_string(m.ref_count)
                    + " but " + std::to_string(mark.refs) + " tables and "
                    + std::to_string(m.holds) + " copies hold it");
    pinned += m.pinned;
    switch (m.state) {
      case block_state::free:
        if (m.ref_count != 0 || on_list != 1 || m.indexed)
          return broken(blk(b) + " is free but not (only) on the free stack");
        break;
      case block_state::cached:
        if (m.ref_count != 0 || on_list != (m.pinned ? 0 : 2) || !m.indexed)
          return broken(blk(b) + " is cached but not an indexed LRU entry "
                                 "(or pinned and on the LRU)");
        // Its writer let it go: its epoch ended, or it is away on the
        // host (share_indexed looks which).
        if (!cached_err && lineage_.live(lineage_.writer_of(b))
            && !std::binary_search(away.begin(), away.end(),
                                   lineage_.writer_of(b)))
          cached_err = broken(blk(b) + " is cached, its writer's epoch live "
                                       "on the device");
        break;
      case block_state::draining:
        if (m.ref_count != 0 || on_list != 3 || m.indexed || m.pinned)
          return broken(blk(b) + " is draining but held, indexed or in no "
                                 "drain");
        break;
      case block_state::used:
        if (m.ref_count == 0 || on_list != 0)
          return broken(blk(b) + " is used but unreferenced, on a list or "
                                 "draining");
        if (m.tenant >= tenants_.size())
          return broken(blk(b) + " is charged to no tenant");
        ++charged[m.tenant];
        ++used;
        break;
    }
    if (m.indexed) {
      ++indexed;
      if (find_indexed(m.hash.lo) != b)
        return broken(blk(b) + " is marked indexed but the index disagrees");
    }
  }
  for (auto h : host_free_.ids()) {
    if (h >= num_host_blocks_ || host_seen[h])
      return broken("host block " + std::to_string(h)
                    + " is free and held, or free twice");
    host_seen[h] = true;
  }
  for (std::uint32_t h = 0; h < num_host_blocks_; ++h)
    if (!host_seen[h])
      return broken("host block " + std::to_string(h) + " is lost");
  if (pinned != pinned_.size())
    return broken("pinned list holds " + std::to_string(pinned_.size())
                  + " blocks, " + std::to_string(pinned) + " are pinned");
  for (auto b : pinned_) {
    if (b >= n || !blocks_[b].pinned || !blocks_[b].indexed)
      return broken(blk(b) + " is on the pinned list but not pinned and indexed");
    if (pin_until_[b] < next_pin_expiry_)
      return broken(blk(b) + "'s pin ends at " + std::to_string(pin_until_[b])
                    + " ms, before the earliest expiry the pool expects ("
                    + std::to_string(next_pin_expiry_) + ")");
  }
  // Pins are prefix-closed: a pinned block's parent is pinned (else it
  // could be evicted, leaving the pinned block out of any lookup's reach).
  // A pin ending at a block ends no later than the block's own pin.
  if (pin_ends_.size() != pinned_.size())
    return broken("pin ends for " + std::to_string(pin_ends_.size())
                  + " of " + std::to_string(pinned_.size()) + " pinned blocks");
  for (std::size_t i = 0; i < pinned_.size(); ++i) {
    auto b = pinned_[i];
    if (pin_pos_[b] != i)
      return broken(blk(b) + " is pinned at " + std::to_string(i)
                    + " but its position says " + std::to_string(pin_pos_[b]));
    auto latest = pin_ends_[i].live_until(0);
    if (latest > pin_until_[b])
      return broken(blk(b) + "'s pin ends at " + std::to_string(pin_until_[b])
                    + ", before a pin ending there ("
                    + std::to_string(latest) + ")");
    if (parent_[b] == 0)
      continue;
    auto up = find_indexed(parent_[b]);
    if (up == no_block || !blocks_[up].pinned)
      return broken(blk(b) + " is pinned but its parent is not");
  }
  for (std::size_t t = 0; t < tenants_.size(); ++t)
    if (promised[t] != tenants_[t].promised)
      return broken("tenant '" + tenants_[t].config.name + "': promised growth "
                    + std::to_string(tenants_[t].promised) + " != "
                    + std::to_string(promised[t]));
  if (indexed != index_.size())
    return broken("the prefix index holds " + std::to_string(index_.size())
                  + " entries for " + std::to_string(indexed)
                  + " indexed blocks");
  if (used != used_)
    return broken("used count " + std::to_string(used_) + " != "
                  + std::to_string(used));
  std::uint64_t shortfall = 0;
  for (std::size_t t = 0; t < tenants_.size(); ++t) {
    auto& ts = tenants_[t];
    if (charged[t] != ts.used)
      return broken("tenant '" + ts.config.name + "' is charged "
                    + std::to_string(ts.used) + " blocks but holds "
                    + std::to_string(charged[t]));
    if (active[t] != ts.active)
      return broken("tenant '" + ts.config.name + "' active count mismatch");
    // Quotas are static and every charge passes admit_blocks.
    if (ts.config.max_blocks != 0 && ts.used > ts.config.max_blocks)
      return broken("tenant '" + ts.config.name + "' is charged "
                    + std::to_string(ts.used) + " blocks, over its max_blocks "
                    + std::to_string(ts.config.max_blocks));
    if (ts.used < ts.config.reserved_blocks)
      shortfall += ts.config.reserved_blocks - ts.used;
  }
  if (shortfall != shortfall_total_)
    return broken("reservation shortfall " + std::to_string(shortfall_total_)
                  + " != " + std::to_string(shortfall));
  // Every reservation can be served at once: the blocks anyone may take
  // (free and evictable) cover what the tenants below theirs still miss -
  // or will when the drains end.
  auto avail = free_.size() + lru_.size() + draining_;
  if (avail < shortfall)
    return broken("reservations short of " + std::to_string(shortfall)
                  + " blocks, only " + std::to_string(avail)
                  + " free, evictable or draining");
  // Each draining block covers the reservation of the tenant it was last
  // charged to, and no other's.
  std::vector<std::uint64_t> drained(tenants_.size(), 0);
  for (auto& d : drains_)
    for (auto b : d.blocks)
      if (blocks_[b].tenant < drained.size())
        ++drained[blocks_[b].tenant];
  std::uint64_t held = 0;
  for (std::size_t t = 0; t < tenants_.size(); ++t) {
    auto& ts = tenants_[t];
    if (drained[t] != ts.draining)
      return broken("tenant '" + ts.config.name + "' has "
                    + std::to_string(ts.draining) + " draining blocks, "
                    + std::to_string(drained[t]) + " drain charged to it");
    held += reserve_held(static_cast<std::uint16_t>(t));
  }
  if (held != held_total_)
    return broken("blocks held back for reservations "
                  + std::to_string(held_total_) + " != "
                  + std::to_string(held));
  // And they are there now: what no tenant's own drain covers, the free
  // and evictable blocks hold (every take passes takeable(), every pin
  // leaves them, a pin gives way before they fall short).
  if (free_.size() + lru_.size() < held_total_)
    return broken("reservations hold back " + std::to_string(held_total_)
                  + " blocks, only " + std::to_string(free_.size() + lru_.size())
                  + " free or evictable");
  if (epoch_err)
    return epoch_err;
  if (live != lineage_.live_epochs())
    return broken(std::to_string(lineage_.live_epochs())
                  + " live epochs for " + std::to_string(live)
                  + " live requests");
  return cached_err;
}

} // namespace kvactor::detail
