// lineage_oracle: a block_pool_core and a brute-force shadow of what the K/V
// in its memory were computed over, for lineage_oracle_test.cpp. A
// request's blocks are indexed before its pass writes them; when it is
// discarded or reclaimed (its pass failed, its owner died) - resident,
// moving, or away on the host: the pool is not told that a pass
// succeeded, and a swap-out does not say so either - its own K/V were
// never written, so every indexed block computed over them
// - by whoever hit, forked or shared them, transitively, however those
// ended since - must leave the index. Nor may the index offer bytes nobody
// rightly wrote: draft tokens a verdict rejected, or a copy-on-write copy
// the device failed to make.
//
// Each slot of each device and host block carries the set of writers its
// K/V depend on. A write by request S at positions [from, to) sets those
// slots to the union of every slot before `from` in S's table plus S's
// writer; copy-on-write copies and swap moves copy the sets. Writer 0 is
// garbage: rejected drafts and the destinations of failed copies hold it.
// A discard or reclaim of a live request (by itself or in a step) marks
// its writer bad, wherever the request is; a request resident again after
// a swap-in gets a fresh writer (its engine resumed it: what it held was
// written; one whose swap-out or swap-in failed keeps its writer). After every operation the pool's invariant
// holds and no indexed slot depends on a bad writer or on garbage; the
// first failure is kept with the operation's number, and every operation
// is logged, so that a failing seed prints how it got there.
#pragma once

#include <algorithm>
#include <bitset>
#include <cstdint>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/actors/block_pool_core.hpp"
#include "kvactor/messages/error.hpp"
#include "kvactor/messages/step.hpp"
#include "pool_fixture.hpp"

namespace kvactor::test {

/// Writers (garbage, the requests, and a request again each time it is back
/// from a move) one oracle may have; a random run stops early when they run
/// out. Every check ANDs sets this wide, so it is kept small: the random
/// runs' 300 operations take at most about 130.
inline constexpr std::size_t lineage_writers = 512;
using lineage = std::bitset<lineage_writers>;

/// The writer of bytes nobody rightly wrote: rejected drafts, failed copies.
inline constexpr int garbage_writer = 0;

/// One slot's K/V as the oracle sees them: the writers they depend on and
/// the one that wrote them (-1: never written).
struct lineage_slot {
  lineage deps;
  int writer = -1;
};
using shadow_block = std::vector<lineage_slot>;

/// How often the runs reached what the oracle is for: the tests require
/// minimum counts, so that they cannot pass by never getting there.
struct lineage_reach {
  /// Discards and reclaims of live requests (writers gone bad), steps'
  /// discards included.
  std::uint64_t bad_ends = 0;
  /// ... of them while the request was being swapped out (its blocks
  /// still its own).
  std::uint64_t bad_ends_swapping_out = 0;
  /// ... while it was away on the host or coming back (what it wrote
  /// cached, or shared by others, since the swap-out).
  std::uint64_t bad_ends_away = 0;
  /// ... while an indexed block another writer computed over its K/V.
  std::uint64_t bad_ends_built_on = 0;
  /// Such blocks the end took out of the index (those it left fail the
  /// oracle).
  std::uint64_t built_on_taken_out = 0;
  /// ... written by a request that had ended (a released fork or hitter:
  /// nobody holding the discarded request's blocks leads to them).
  std::uint64_t built_on_by_ended = 0;
  /// Writes computed over a bad writer's K/V (their blocks must stay out
  /// of the index).
  std::uint64_t writes_over_bad = 0;
  /// Draft slots a verdict rejected (garbage from then on).
  std::uint64_t drafts_rejected = 0;
  /// Held copy-on-write copies the device did not make, and the extends
  /// their failure undid.
  std::uint64_t copies_failed = 0;
  std::uint64_t copies_undone = 0;
  std::uint64_t steps = 0;
  /// Swap-outs of requests holding unsettled drafts: their draft blocks
  /// come back as fresh copies, which must keep what they were computed
  /// over.
  std::uint64_t swaps_with_drafts = 0;
  /// Draft verdicts (settle_drafts or a step's) of a request back from a
  /// swap-in that put more of its blocks in the index.
  std::uint64_t drafts_indexed_after_swap_in = 0;

  void add(const lineage_reach& r) {
    bad_ends += r.bad_ends;
    bad_ends_swapping_out += r.bad_ends_swapping_out;
    bad_ends_away += r.bad_ends_away;
    bad_ends_built_on += r.bad_ends_built_on;
    built_on_taken_out += r.built_on_taken_out;
    built_on_by_ended += r.built_on_by_ended;
    writes_over_bad += r.writes_over_bad;
    drafts_rejected += r.drafts_rejected;
    copies_failed += r.copies_failed;
    copies_undone += r.copies_undone;
    steps += r.steps;
    swaps_with_drafts += r.swaps_with_drafts;
    drafts_indexed_after_swap_in += r.drafts_indexed_after_swap_in;
  }
};

/// Tokens as "1,2,3".
inline std::string str(const std::vector<token_id>& ts) {
  std::string out;
  for (auto t : ts)
    out += (out.empty() ? "" : ",") + std::to_string(t);
  return out;
}

/// A block_pool_core and its lineage shadow. Each operation runs on the
/// pool, updates the shadow, logs a line and checks.
class lineage_oracle {
public:
  /// One extend of a step: `drafts` of `tokens` speculative.
  struct step_extend {
    request_id id = 0;
    std::vector<token_id> tokens;
    std::uint32_t drafts = 0;
  };
  /// One admission of a step.
  struct step_admit {
    request_id id = 0;
    std::vector<token_id> prompt;
    std::uint64_t chunk = 0; ///< prefill_chunk
    std::uint64_t salt = 0;  ///< cache_salt
  };
  /// A run_step's parts (messages/step.hpp), with token ids.
  struct step_ops {
    std::vector<draft_verdict> verdicts;
    std::vector<request_id> frees;
    std::vector<request_id> discards;
    std::vector<step_extend> extends;
    std::vector<step_admit> admits;
    bool admit_after_preemption = false;
  };

  lineage_oracle(const cache_config& cfg, std::uint32_t num_blocks)
    : pool_(cfg, num_blocks), bs_(cfg.block_size),
      dev_(num_blocks, shadow_block(cfg.block_size)),
      host_(cfg.num_host_blocks, shadow_block(cfg.block_size)) {
    writer_req_.push_back({0, 0});
    next_writer_ = garbage_writer + 1;
    bad_.set(garbage_writer);
  }

  const detail::block_pool_core& pool() const {
    return pool_;
  }
  /// "" while every check passed.
  const std::string& failure() const {
    return failure_;
  }
  const std::string& log() const {
    return log_;
  }
  const lineage_reach& reached() const {
    return reach_;
  }
  /// Room for another operation's writers (a step or a round of held
  /// copies makes a few).
  bool writers_left() const {
    return static_cast<std::size_t>(next_writer_) + 8 < lineage_writers;
  }
  /// Live requests (swapped ones too), by id.
  std::vector<request_id> live() const {
    std::vector<request_id> out;
    for (auto& [id, r] : live_)
      out.push_back(id);
    return out;
  }
  std::size_t num_ghosts() const {
    return ghosts_.size();
  }
  bool copies_pending() const {
    return !pending_.empty();
  }
  std::vector<block_id> blocks(request_id id) const {
    auto s = pool_.find(id);
    return s ? std::vector<block_id>(s->blocks.begin(), s->blocks.end())
             : std::vector<block_id>{};
  }
  /// The prompt tokens a chunked admission of `id` has yet to extend by
  /// (null if none): its next extends must name them.
  const std::vector<token_id>* remaining(request_id id) const {
    auto it = remaining_.find(id);
    return it == remaining_.end() || it->second.empty() ? nullptr : &it->second;
  }
  /// Drains begun and not known to have ended, by serial.
  const std::vector<std::uint64_t>& drains() const {
    return drains_;
  }

  // -- operations ------------------------------------------------------------

  caf::expected<detail::allocation_outcome>
  allocate(request_id id, const std::vector<token_id>& prompt,
           std::uint64_t chunk = 0, std::uint64_t salt = 0) {
    auto req = prompt_req(id, prompt);
    req.prefill_chunk = chunk;
    req.cache_salt = salt;
    auto r = pool_.allocate(req);
    if (r)
      admitted(id, r->cache_id, r->hit_tokens, prompt);
    std::ostringstream line;
    line << "allocate " << id << " [" << str(prompt) << "]";
    if (chunk != 0)
      line << " chunk " << chunk;
    if (salt != 0)
      line << " salt " << salt;
    line << " -> "
         << (r ? "hit " + std::to_string(r->hit_tokens) + table(id) : code(r));
    after(line.str());
    return r;
  }

  /// With `hold`, the copies stay in flight until settle().
  caf::expected<detail::extension_outcome>
  extend(request_id id, const std::vector<token_id>& tokens,
         std::uint64_t drafts = 0, bool hold = false) {
    auto n0 = pool_.find(id)->num_tokens;
    auto r = pool_.extend(id, tokens.size(), tokens.data(), hold, drafts);
    if (r) {
      for (auto& c : r->copies)
        dev_[c.dst] = dev_[c.src];
      if (hold)
        pending_.insert(pending_.end(), r->copies.begin(), r->copies.end());
      write(id, n0, n0 + tokens.size());
      consume_prompt(id, tokens);
    }
    std::ostringstream line;
    line << "extend " << id << " +[" << str(tokens) << "]";
    if (drafts != 0)
      line << " drafts " << drafts;
    if (hold)
      line << " hold";
    line << " -> ";
    if (r)
      line << "copies " << test::str(r->copies) << table(id);
    else
      line << code(r);
    after(line.str());
    return r;
  }

  /// Settles every copy in flight, made or not: a copy not made leaves
  /// garbage in its destination (the extends that took it are undone).
  void settle(bool copied) {
    auto copies = pending_;
    pending_.clear();
    auto undone = pool_.settle_copies(copies, copied);
    if (!copied) {
      for (auto& c : copies)
        garble(dev_[c.dst]);
      reach_.copies_failed += copies.size();
    }
    reach_.copies_undone += undone.size();
    std::ostringstream line;
    line << "settle_copies " << test::str(copies)
         << (copied ? " made" : " failed") << ", undone";
    for (auto id : undone)
      line << ' ' << id << table(id);
    after(line.str());
  }

  /// Keeps the first `accepted` drafts; the rest are garbage.
  caf::expected<detail::extension_outcome> settle_drafts(request_id id,
                                                         std::uint64_t accepted) {
    auto s = pool_.find(id);
    auto n = s->num_tokens;
    auto d = s->drafts;
    auto before = blocks(id);
    auto restarted = s->restarted;
    auto hashed = s->num_hashed;
    auto r = pool_.settle_drafts(id, accepted);
    if (r) {
      garble_slots(before, n - (d - accepted), n);
      if (restarted && pool_.find(id)->num_hashed > hashed)
        ++reach_.drafts_indexed_after_swap_in;
    }
    after("settle_drafts " + std::to_string(id) + " accept "
          + std::to_string(accepted) + " of " + std::to_string(d) + ": "
          + code(r) + table(id));
    return r;
  }

  caf::expected<detail::allocation_outcome> fork(request_id parent,
                                                 request_id child) {
    auto r = pool_.fork(parent, child);
    if (r) {
      live_[child] = {r->cache_id, new_writer(child)};
      if (auto rem = remaining(parent))
        remaining_[child] = *rem;
    }
    after("fork " + std::to_string(parent) + " -> " + std::to_string(child)
          + ": " + code(r));
    return r;
  }

  caf::expected<std::uint32_t> release(request_id id) {
    auto [where, cid] = state(id);
    auto r = pool_.release(id);
    ended(id, where, cid);
    after("release " + std::to_string(id) + ": " + code(r));
    return r;
  }

  caf::expected<std::uint32_t> discard(request_id id) {
    return bad_end(id, false);
  }

  /// Reclaims its live incarnation.
  caf::expected<std::uint32_t> reclaim(request_id id) {
    return bad_end(id, true);
  }

  /// A victim's preemption: its pass still writes, nothing goes bad.
  caf::expected<std::uint32_t> preempt(request_id id, bool unindex) {
    auto [where, cid] = state(id);
    auto r = pool_.preempt(id, unindex);
    ended(id, where, cid);
    after("preempt " + std::to_string(id) + (unindex ? " unindexing" : "")
          + ": " + code(r));
    return r;
  }

  /// A victim's preemption whose blocks drain: nothing goes bad either.
  caf::expected<std::uint32_t> preempt_draining(request_id id,
                                                std::uint64_t tag) {
    auto [where, cid] = state(id);
    auto r = pool_.preempt_draining(id, tag);
    if (r) {
      ended(id, where, cid);
      if (pool_.last_drain() != 0)
        drains_.push_back(pool_.last_drain());
    }
    after("preempt_draining " + std::to_string(id) + " tag "
          + std::to_string(tag) + ": " + code(r) + " drain "
          + std::to_string(pool_.last_drain()));
    return r;
  }

  void end_drain(std::uint64_t serial) {
    auto n = pool_.end_drain(serial);
    drains_.erase(std::remove(drains_.begin(), drains_.end(), serial),
                  drains_.end());
    after("end_drain " + std::to_string(serial) + ": " + std::to_string(n));
  }

  /// Which serials the tag ended the pool does not say: all are forgotten
  /// (ending one that ended already does nothing).
  void end_drains(std::uint64_t tag) {
    auto n = pool_.end_drains(tag);
    drains_.clear();
    after("end_drains tag " + std::to_string(tag) + ": " + std::to_string(n));
  }

  std::uint32_t evict(std::uint32_t n) {
    auto r = pool_.evict(n);
    after("evict " + std::to_string(n) + ": " + std::to_string(r));
    return r;
  }

  void pin(const std::vector<token_id>& tokens, std::uint64_t ttl,
           std::uint64_t salt) {
    auto r = pool_.pin(0, tokens, ttl, now_ms_, salt);
    after("pin [" + str(tokens) + "] ttl " + std::to_string(ttl) + " salt "
          + std::to_string(salt) + ": " + code(r));
  }

  void unpin(const std::vector<token_id>& tokens, std::uint64_t salt) {
    auto r = pool_.unpin(0, tokens, salt);
    after("unpin [" + str(tokens) + "] salt " + std::to_string(salt) + ": "
          + code(r));
  }

  /// Time passes; pins run out.
  void tick(std::uint64_t ms) {
    now_ms_ += ms;
    auto n = pool_.expire_pins(now_ms_);
    after("expire_pins at " + std::to_string(now_ms_) + ": "
          + std::to_string(n));
  }

  caf::expected<std::vector<block_move>> swap_out_begin(request_id id) {
    auto r = pool_.swap_out_begin(id);
    if (r) {
      for (auto& m : *r)
        host_[m.host_block] = dev_[m.device_block];
      if (pool_.find(id)->drafts != 0)
        ++reach_.swaps_with_drafts;
    }
    after("swap_out_begin " + std::to_string(id) + ": " + code(r));
    return r;
  }

  /// Failed: resident again, the same writer - a discard now takes back
  /// what it wrote before the move began too (its own blocks leave the
  /// index), so what was computed over them must go with them.
  caf::expected<std::uint32_t> swap_out_done(request_id id, bool ok) {
    auto r = pool_.swap_out_done(id, live_.at(id).cache_id, ok);
    after("swap_out_done " + std::to_string(id) + (ok ? " ok" : " failed")
          + ": " + code(r));
    return r;
  }

  caf::expected<std::vector<block_move>> swap_in_begin(request_id id) {
    auto r = pool_.swap_in_begin(id);
    if (r)
      for (auto& m : *r)
        dev_[m.device_block] = host_[m.host_block];
    after("swap_in_begin " + std::to_string(id) + ": " + code(r));
    return r;
  }

  /// Back in: a fresh writer (its engine resumed it: what it held was
  /// written).
  caf::expected<std::uint32_t> swap_in_done(request_id id, bool ok) {
    auto r = pool_.swap_in_done(id, live_.at(id).cache_id, ok);
    if (ok && r)
      live_[id].writer = new_writer(id);
    after("swap_in_done " + std::to_string(id) + (ok ? " ok" : " failed")
          + ": " + code(r) + table(id));
    return r;
  }

  /// Ends the move of ghost `i` (in incarnation order).
  void end_ghost(std::size_t i, bool ok) {
    auto it = ghosts_.begin();
    std::advance(it, static_cast<std::ptrdiff_t>(i));
    auto [id, out] = it->second;
    auto r = out ? pool_.swap_out_done(id, it->first, ok)
                 : pool_.swap_in_done(id, it->first, ok);
    ghosts_.erase(it);
    after(std::string{"ghost "} + (out ? "swap_out_done " : "swap_in_done ")
          + std::to_string(id) + (ok ? " ok" : " failed") + ": " + code(r));
  }

  /// One run_step; the shadow follows its parts in the order the step runs
  /// them: verdicts, frees, discards, extends (their copies first, made
  /// before the pass writes), admissions. With `hold`, the copies stay in
  /// flight until settle().
  step_result step(const step_ops& ops, bool hold = false) {
    ++reach_.steps;
    step_request req;
    req.verdicts = ops.verdicts;
    req.frees = ops.frees;
    req.discards = ops.discards;
    for (auto& e : ops.extends) {
      req.extends.push_back(
        extend_op{e.id, static_cast<std::uint32_t>(e.tokens.size()), e.drafts});
      req.tokens.insert(req.tokens.end(), e.tokens.begin(), e.tokens.end());
    }
    for (auto& a : ops.admits) {
      auto x = prompt_req(a.id, a.prompt);
      x.prefill_chunk = a.chunk;
      x.cache_salt = a.salt;
      req.admits.push_back(x);
    }
    req.admit_after_preemption = ops.admit_after_preemption;
    std::map<request_id, std::pair<residency, std::uint64_t>> before;
    for (auto id : live())
      before[id] = state(id);
    // A verdict's table, tokens and drafts before the step, and whether
    // the request was back from a swap-in (and how much it had indexed).
    struct verdict_before {
      std::vector<block_id> blocks;
      std::uint64_t num_tokens = 0;
      std::uint64_t drafts = 0;
      bool restarted = false;
      std::uint32_t num_hashed = 0;
    };
    std::map<request_id, verdict_before> verdicts;
    for (auto& v : ops.verdicts)
      if (auto s = pool_.find(v.id))
        verdicts[v.id] = {blocks(v.id), s->num_tokens, s->drafts, s->restarted,
                          s->num_hashed};
    std::vector<built_on> discarded;
    for (auto id : ops.discards)
      if (before.count(id) != 0)
        discarded.push_back(went_bad(id));
    auto r = pool_.run_step(req, hold);
    // Which parts failed: a request fails at most twice, its verdict first
    // - and a failed verdict leaves its drafts, so its extend fails too.
    std::map<request_id, int> failures;
    for (auto& f : r.failed)
      ++failures[f.id];
    std::set<request_id> extended;
    for (auto& e : ops.extends)
      extended.insert(e.id);
    for (auto& v : ops.verdicts) {
      auto it = verdicts.find(v.id);
      if (it == verdicts.end()
          || failures[v.id] > (extended.count(v.id) != 0 ? 1 : 0))
        continue;
      auto& b = it->second;
      garble_slots(b.blocks, b.num_tokens - (b.drafts - v.accepted),
                   b.num_tokens);
      auto s = pool_.find(v.id);
      if (b.restarted && s && s->num_hashed > b.num_hashed)
        ++reach_.drafts_indexed_after_swap_in;
    }
    for (auto id : ops.frees)
      if (before.count(id) != 0)
        ended(id, before[id].first, before[id].second);
    for (auto id : ops.discards)
      if (before.count(id) != 0)
        ended(id, before[id].first, before[id].second);
    std::set<request_id> preempted(r.preempted.begin(), r.preempted.end());
    for (auto& c : r.copies)
      dev_[c.dst] = dev_[c.src];
    if (hold)
      pending_.insert(pending_.end(), r.copies.begin(), r.copies.end());
    for (auto& e : ops.extends) {
      if (preempted.count(e.id) != 0 || failures[e.id] != 0
          || pool_.find(e.id) == nullptr)
        continue;
      auto n = pool_.find(e.id)->num_tokens;
      write(e.id, n - e.tokens.size(), n);
      consume_prompt(e.id, e.tokens);
    }
    for (auto id : r.preempted)
      if (before.count(id) != 0)
        ended(id, before[id].first, before[id].second);
    for (auto& a : r.admitted)
      for (auto& x : ops.admits)
        if (x.id == a.id && pool_.find(a.id) != nullptr)
          admitted(a.id, a.cache_id, a.hit_tokens, x.prompt);
    for (auto& b : discarded)
      count_taken_out(b);
    std::ostringstream line;
    line << "step" << (hold ? " hold" : "") << " verdicts";
    for (auto& v : ops.verdicts)
      line << ' ' << v.id << ':' << v.accepted;
    line << " frees";
    for (auto id : ops.frees)
      line << ' ' << id;
    line << " discards";
    for (auto id : ops.discards)
      line << ' ' << id;
    line << " extends";
    for (auto& e : ops.extends)
      line << ' ' << e.id << "+[" << str(e.tokens) << "]d" << e.drafts;
    line << " admits";
    for (auto& a : ops.admits)
      line << ' ' << a.id << "[" << str(a.prompt) << "]c" << a.chunk << 's'
           << a.salt;
    line << " -> preempted";
    for (auto id : r.preempted)
      line << ' ' << id;
    line << " admitted";
    for (auto& a : r.admitted)
      line << ' ' << a.id << " hit " << a.hit_tokens << table(a.id);
    line << " failed";
    for (auto& f : r.failed)
      line << ' ' << f.id << '(' << code(f.error) << ')';
    line << " copies " << test::str(r.copies);
    after(line.str());
    return r;
  }

private:
  using residency = detail::residency;

  struct live_request {
    std::uint64_t cache_id = 0;
    int writer = -1;
  };

  /// The indexed blocks others computed over a writer gone bad, each with
  /// whether its own writer had ended.
  using built_on = std::vector<std::pair<block_id, bool>>;

  void admitted(request_id id, std::uint64_t cache_id, std::uint64_t hit,
                const std::vector<token_id>& prompt) {
    live_[id] = {cache_id, new_writer(id)};
    auto n = pool_.find(id)->num_tokens;
    write(id, hit, n);
    if (n < prompt.size())
      remaining_[id] = std::vector<token_id>(prompt.begin() + n, prompt.end());
  }

  void consume_prompt(request_id id, const std::vector<token_id>& tokens) {
    auto it = remaining_.find(id);
    if (it == remaining_.end())
      return;
    auto& rest = it->second;
    auto k = std::min(rest.size(), tokens.size());
    rest.erase(rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(k));
    if (rest.empty())
      remaining_.erase(it);
  }

  int new_writer(request_id id) {
    if (static_cast<std::size_t>(next_writer_) >= lineage_writers)
      BOOST_FAIL("more than " << lineage_writers << " writers");
    writer_req_.push_back({id, pool_.find(id)->cache_id});
    return next_writer_++;
  }

  bool writer_live(int w) const {
    auto [id, cid] = writer_req_[static_cast<std::size_t>(w)];
    auto it = live_.find(id);
    return it != live_.end() && it->second.cache_id == cid;
  }

  std::pair<residency, std::uint64_t> state(request_id id) const {
    auto s = pool_.find(id);
    return {s->where, s->cache_id};
  }

  std::string table(request_id id) const {
    if (pool_.find(id) == nullptr)
      return "";
    std::string out = ", n " + std::to_string(pool_.find(id)->num_tokens)
                      + " blocks";
    for (auto b : blocks(id))
      out += ' ' + std::to_string(b);
    return out;
  }

  static void garble(lineage_slot& s) {
    s.deps.reset();
    s.deps.set(garbage_writer);
    s.writer = garbage_writer;
  }

  static void garble(shadow_block& b) {
    for (auto& s : b)
      garble(s);
  }

  /// Positions [from, to) of `table` (rejected drafts).
  void garble_slots(const std::vector<block_id>& table, std::uint64_t from,
                    std::uint64_t to) {
    for (auto q = from; q < to; ++q)
      garble(dev_[table[q / bs_]][q % bs_]);
    reach_.drafts_rejected += to - from;
  }

  /// `id` writes positions [from, to) over everything before `from`.
  void write(request_id id, std::uint64_t from, std::uint64_t to) {
    auto& s = *pool_.find(id);
    lineage ctx;
    for (std::uint64_t q = 0; q < from; ++q)
      ctx |= dev_[s.blocks[q / bs_]][q % bs_].deps;
    auto over = ctx & bad_;
    over.reset(garbage_writer);
    if (over.any())
      ++reach_.writes_over_bad;
    auto w = live_.at(id).writer;
    ctx.set(static_cast<std::size_t>(w));
    for (auto q = from; q < to; ++q)
      dev_[s.blocks[q / bs_]][q % bs_] = lineage_slot{ctx, w};
  }

  void ended(request_id id, residency where, std::uint64_t cache_id) {
    if (where == residency::swapping_out || where == residency::swapping_in)
      ghosts_[cache_id] = {id, where == residency::swapping_out};
    live_.erase(id);
    remaining_.erase(id);
  }

  /// Live `id`'s writer goes bad: its K/V were never written.
  built_on went_bad(request_id id) {
    auto where = state(id).first;
    if (where == residency::swapping_out)
      ++reach_.bad_ends_swapping_out;
    if (where == residency::swapped || where == residency::swapping_in)
      ++reach_.bad_ends_away;
    auto w = static_cast<std::size_t>(live_.at(id).writer);
    bad_.set(w);
    built_on out;
    pool_.for_each_indexed([&](std::uint64_t, block_id b) {
      for (auto& s : dev_[b])
        if (s.deps.test(w) && s.writer != static_cast<int>(w)) {
          out.emplace_back(b, !writer_live(s.writer));
          break;
        }
    });
    ++reach_.bad_ends;
    reach_.bad_ends_built_on += out.empty() ? 0 : 1;
    return out;
  }

  /// After the end: which of the blocks built on it left the index.
  void count_taken_out(const built_on& blocks) {
    for (auto& [b, by_ended] : blocks)
      if (!in_index(pool_, b)) {
        ++reach_.built_on_taken_out;
        reach_.built_on_by_ended += by_ended ? 1 : 0;
      }
  }

  caf::expected<std::uint32_t> bad_end(request_id id, bool reclaim) {
    auto [where, cid] = state(id);
    auto blocks = went_bad(id);
    auto r = reclaim ? pool_.reclaim(id, cid) : pool_.discard(id);
    ended(id, where, cid);
    count_taken_out(blocks);
    std::ostringstream line;
    line << (reclaim ? "reclaim " : "discard ") << id << " ("
         << (where == residency::resident ? "resident" : "away")
         << ": unwritten, built on by " << blocks.size() << "): " << code(r);
    after(line.str());
    return r;
  }

  /// The first indexed slot computed over a bad writer or garbage, "" if
  /// none.
  std::string violation() const {
    std::string out;
    pool_.for_each_indexed([&](std::uint64_t, block_id b) {
      for (std::uint32_t q = 0; q < bs_ && out.empty(); ++q) {
        auto hit = dev_[b][q].deps & bad_;
        if (hit.none())
          continue;
        std::size_t w = 0;
        while (!hit.test(w))
          ++w;
        auto own = dev_[b][q].writer;
        std::ostringstream msg;
        msg << "indexed block " << b << " slot " << q << " (K/V of writer "
            << own << ", request "
            << (own > 0 ? writer_req_[static_cast<std::size_t>(own)].first : 0)
            << ") depends on ";
        if (w == garbage_writer)
          msg << "garbage (a rejected draft or a failed copy)";
        else
          msg << "the unwritten K/V of writer " << w << " (request "
              << writer_req_[w].first << ")";
        out = msg.str();
      }
    });
    return out;
  }

  void after(const std::string& line) {
    log_ += std::to_string(ops_) + ": " + line + '\n';
    if (failure_.empty()) {
      if (auto err = pool_.check_invariant())
        failure_ = "invariant: " + render(err);
      else
        failure_ = violation();
      if (!failure_.empty())
        failure_ = "op " + std::to_string(ops_) + " (" + line + "): " + failure_;
    }
    ++ops_;
  }

  detail::block_pool_core pool_;
  std::uint32_t bs_;
  std::vector<shadow_block> dev_;
  std::vector<shadow_block> host_;
  lineage bad_;
  int next_writer_ = 0;
  /// Per writer: its request and incarnation.
  std::vector<std::pair<request_id, std::uint64_t>> writer_req_;
  std::map<request_id, live_request> live_;
  /// Requests ended during a move, by incarnation: (id, swapping out?).
  std::map<std::uint64_t, std::pair<request_id, bool>> ghosts_;
  std::map<request_id, std::vector<token_id>> remaining_;
  /// Copies in flight (extend or run_step with hold).
  std::vector<block_copy> pending_;
  std::vector<std::uint64_t> drains_;
  std::uint64_t now_ms_ = 1000;
  std::string log_;
  std::string failure_;
  std::size_t ops_ = 0;
  lineage_reach reach_;
};

} // namespace kvactor::test
