// A seeded random test: 100,000 operations through the actors (allocate with
// and without shared prompts, extend and append through the manager and the
// handle actors, fork, free, preempt, steps, handle kills, orphans and GC)
// against a small reference model of what must hold: which requests live,
// their tables (ceil(tokens / block_size) blocks, shared blocks only where a
// fork or a prompt prefix shares them, copy-on-write of a shared last
// block), each outcome's class, and free + used = total. The pool's own
// invariant check runs (through GC) every 1,000 operations.
#include "fixture.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>

#include <caf/all.hpp>

using namespace kvactor;
using namespace kvactor::test;

namespace {

constexpr std::uint64_t bs = 4;
constexpr std::uint64_t total_blocks = 64;

struct model_request {
  std::uint64_t tokens = 0;
  std::uint64_t max_len = 0;
  std::vector<block_id> blocks;
  std::optional<request_handle_actor> handle; ///< looked up when needed
  int doc = -1;         ///< follows this document while its tokens are named
  std::uint64_t pos = 0; ///< how much of the document it holds
  /// Its cache id if a step admitted it (0 otherwise): the next step's
  /// reply names it in `ended` if something else ends it.
  std::uint64_t stepped = 0;
};

class random_model : public cache_fixture {
public:
  explicit random_model(std::uint64_t seed) : rng_(seed), seed_(seed) {
    for (int d = 0; d < 4; ++d)
      docs_.push_back(make_tokens(48, 1000 + d));
    auto lane = ask<step_actor>(mgr, step_atom::value);
    BOOST_REQUIRE_MESSAGE(lane, outcome(lane));
    lane_ = *lane;
  }

  void run_ops(std::size_t n);

  std::size_t checks = 0;
  std::map<std::string, std::size_t> tally; ///< "op:outcome" -> count

private:
  // -- the model ------------------------------------------------------------------

  using ref_counts = std::vector<int>; ///< per block id

  ref_counts refs() const {
    ref_counts out(total_blocks, 0);
    for (auto& [id, r] : live_)
      for (auto b : r.blocks)
        ++out.at(b);
    for (auto& [id, t] : orphans_)
      for (auto b : t.blocks)
        ++out.at(b);
    return out;
  }
  static std::uint64_t held(const ref_counts& r) {
    return static_cast<std::uint64_t>(
      std::count_if(r.begin(), r.end(), [](int n) { return n > 0; }));
  }
  std::uint64_t used() const {
    return held(refs());
  }
  std::uint64_t free_blocks() const {
    return total_blocks - used();
  }
  /// Blocks released when `blocks` lose one reference each.
  std::uint32_t released_by(const std::vector<block_id>& blocks) const {
    auto r = refs();
    std::uint32_t n = 0;
    for (auto b : blocks)
      if (r[b] == 1)
        ++n;
    return n;
  }

  // -- checking -----------------------------------------------------------------------

  void expect(bool ok, const std::string& what) {
    ++checks;
    if (!ok)
      BOOST_FAIL("seed " << seed_ << ", op " << op_ << " (" << op_name_
                         << "): " << what);
  }
  template <class T>
  void expect_outcome(const caf::expected<T>& x, const std::string& want) {
    auto got = outcome(x);
    tally[op_name_ + ":" + got]++;
    expect(got == want, "outcome " + got + ", expected " + want);
  }
  /// A table just handed out for `tokens` tokens: size, and `fresh_from`
  /// onwards held by nobody else (before the operation).
  void expect_table(const block_table& t, std::uint64_t tokens,
                    std::size_t fresh_from, const ref_counts& before) {
    expect(t.num_tokens == tokens, "table holds " + std::to_string(t.num_tokens)
                                     + " tokens, expected "
                                     + std::to_string(tokens));
    expect(t.block_size == bs, "block size");
    expect(t.blocks.size() == blocks_for(tokens, bs),
           "table of " + std::to_string(t.blocks.size()) + " blocks for "
             + std::to_string(tokens) + " tokens");
    std::set<block_id> distinct(t.blocks.begin(), t.blocks.end());
    expect(distinct.size() == t.blocks.size(), "a block twice in one table");
    for (std::size_t i = fresh_from; i < t.blocks.size(); ++i) {
      expect(t.blocks[i] < total_blocks, "block id out of range");
      expect(before.at(t.blocks[i]) == 0,
             "block " + std::to_string(t.blocks[i]) + " at " + std::to_string(i)
               + " is still held by another request");
    }
  }

  // -- picking ----------------------------------------------------------------------------

  std::uint64_t pick(std::uint64_t lo, std::uint64_t hi) {
    return std::uniform_int_distribution<std::uint64_t>{lo, hi}(rng_);
  }
  bool chance(double p) {
    return std::bernoulli_distribution{p}(rng_);
  }
  request_id any_id() {
    return pick(1, 48);
  }
  /// A live id most of the time, some other id otherwise.
  request_id some_id() {
    if (live_.empty() || chance(0.1))
      return any_id();
    auto i = live_.begin();
    std::advance(i, pick(0, live_.size() - 1));
    return i->first;
  }
  std::optional<request_handle_actor> handle_of(request_id id) {
    auto& r = live_.at(id);
    if (!r.handle) {
      auto found = lookup(id);
      expect(static_cast<bool>(found), "lookup of live request "
                                         + std::to_string(id) + ": "
                                         + outcome(found));
      r.handle = found->first;
    }
    return r.handle;
  }

  // -- operations -------------------------------------------------------------------------

  void op_allocate();
  void op_allocate_prompt();
  void op_extend(bool named);
  void op_fork();
  void op_free(bool preempting);
  void op_kill();
  void op_orphan();
  void op_gc();
  void op_step();
  void op_queries();
  void full_check();

  /// A request a step admitted ended by another operation.
  void ended_elsewhere(request_id id, const model_request& r, end_reason why) {
    if (r.stepped != 0)
      ended_elsewhere_.emplace_back(id, r.stepped, why);
  }

  std::vector<std::tuple<request_id, std::uint64_t, end_reason>> ended_elsewhere_;
  std::mt19937_64 rng_;
  std::uint64_t seed_;
  step_actor lane_; ///< where the manager says steps may go
  std::vector<std::vector<token_id>> docs_;
  std::map<request_id, model_request> live_;
  std::map<request_id, block_table> orphans_;
  request_id next_orphan_ = 10000;
  std::size_t op_ = 0;
  std::string op_name_;
};

void random_model::op_allocate() {
  op_name_ = "allocate";
  auto id = any_id();
  auto tokens = pick(0, 40);
  auto max_len = chance(0.05) ? pick(1, 40) : tokens + pick(0, 80);
  auto before = refs();
  auto res = allocate(make_request(cfg, id, tokens, max_len));
  if (live_.count(id) != 0)
    return expect_outcome(res, "duplicate_request");
  if (tokens > max_len || max_len == 0)
    return expect_outcome(res, max_len == 0 ? "invalid_request"
                                            : "exceeds_max_sequence_length");
  if (blocks_for(tokens, bs) > total_blocks - held(before))
    return expect_outcome(res, "out_of_blocks");
  expect_outcome(res, "ok");
  expect_table(res->table, tokens, 0, before);
  model_request r;
  r.tokens = tokens;
  r.max_len = max_len;
  r.blocks = res->table.blocks;
  r.handle = res->handle;
  live_[id] = std::move(r);
}

void random_model::op_allocate_prompt() {
  op_name_ = "allocate_prompt";
  auto id = any_id();
  int doc = static_cast<int>(pick(0, docs_.size() - 1));
  auto len = pick(1, 40);
  std::vector<token_id> prompt(docs_[doc].begin(), docs_[doc].begin() + len);
  bool diverges = chance(0.3);
  if (diverges)
    for (auto& t : make_tokens(pick(1, 8), static_cast<std::uint32_t>(pick(1, 1 << 20))))
      prompt.push_back(t);
  auto max_len = prompt.size() + pick(0, 60);
  auto before = refs();
  auto res = allocate(make_prompt_request(cfg, id, prompt, max_len));
  if (live_.count(id) != 0)
    return expect_outcome(res, "duplicate_request");
  auto need = blocks_for(prompt.size(), bs);
  auto avail = total_blocks - held(before);
  if (need > avail && !res) // may still fit by sharing blocks in use
    return expect_outcome(res, "out_of_blocks");
  expect_outcome(res, "ok");
  // Blocks held by others before: only full prompt blocks, never the one
  // holding the last token; the rest fresh, no more than were free.
  auto& t = res->table;
  expect(t.blocks.size() == blocks_for(prompt.size(), bs), "prompt table size");
  std::size_t shared = 0;
  for (std::size_t k = 0; k < t.blocks.size(); ++k) {
    if (before.at(t.blocks[k]) == 0)
      continue;
    ++shared;
    expect(k < (prompt.size() - 1) / bs,
           "block " + std::to_string(k) + " of a "
             + std::to_string(prompt.size())
             + "-token prompt is shared with a live request");
  }
  expect_table(t, prompt.size(), t.blocks.size(), before);
  expect(t.blocks.size() - shared <= avail, "took more blocks than were free");
  model_request r;
  r.tokens = prompt.size();
  r.max_len = max_len;
  r.blocks = t.blocks;
  r.handle = res->handle;
  if (!diverges) {
    r.doc = doc;
    r.pos = len;
  }
  live_[id] = std::move(r);
}

void random_model::op_extend(bool named) {
  op_name_ = named ? "append" : "extend";
  auto id = some_id();
  auto n = pick(0, 12);
  bool via_handle = live_.count(id) != 0 && chance(0.5);
  if (via_handle)
    op_name_ += "_handle";
  std::vector<token_id> tokens;
  bool bad_token = false;
  auto i = live_.find(id);
  if (named) {
    if (i != live_.end() && i->second.doc >= 0
        && i->second.pos + n <= docs_[i->second.doc].size()) {
      auto& d = docs_[i->second.doc];
      tokens.assign(d.begin() + i->second.pos, d.begin() + i->second.pos + n);
    } else {
      tokens = make_tokens(n, static_cast<std::uint32_t>(pick(1, 1 << 20)));
    }
    if (n > 0 && chance(0.03)) {
      tokens[pick(0, n - 1)] = -5;
      bad_token = true;
    }
  }
  auto before = refs();
  caf::expected<block_table> res{no_reply("extend")};
  if (via_handle) {
    auto h = *handle_of(id);
    res = named ? handle_append(h, tokens) : handle_extend(h, n);
  } else {
    res = named ? append(id, tokens) : extend(id, n);
  }
  if (i == live_.end())
    return expect_outcome(res, "unknown_request");
  auto& r = i->second;
  if (n == 0) {
    expect_outcome(res, "ok");
    expect(res->blocks == r.blocks, "extend by 0 changed the table");
    return;
  }
  if (r.tokens + n > r.max_len)
    return expect_outcome(res, "exceeds_max_sequence_length");
  if (bad_token)
    return expect_outcome(res, "invalid_request");
  auto add = blocks_for(r.tokens + n, bs) - r.blocks.size();
  bool cow = r.tokens % bs != 0 && before[r.blocks.back()] > 1;
  if (add + cow > total_blocks - held(before))
    return expect_outcome(res, "out_of_blocks");
  expect_outcome(res, "ok");
  auto keep = r.blocks.size() - (cow ? 1 : 0);
  expect_table(*res, r.tokens + n, keep, before);
  expect(std::equal(r.blocks.begin(), r.blocks.begin() + keep,
                    res->blocks.begin()),
         "extend changed blocks it had no reason to");
  r.tokens += n;
  r.blocks = res->blocks;
  if (named && r.doc >= 0 && r.pos + n <= docs_[r.doc].size())
    r.pos += n;
  else
    r.doc = -1;
}

void random_model::op_fork() {
  op_name_ = "fork";
  auto parent = some_id();
  auto child = chance(0.2) ? some_id() : any_id();
  auto res = fork(parent, child);
  auto p = live_.find(parent);
  if (p == live_.end())
    return expect_outcome(res, "unknown_request");
  if (live_.count(child) != 0)
    return expect_outcome(res, "duplicate_request");
  expect_outcome(res, "ok");
  expect(res->table.blocks == p->second.blocks, "fork does not share the table");
  expect(res->table.num_tokens == p->second.tokens, "fork token count");
  auto c = p->second;
  c.handle = res->handle;
  c.stepped = 0; // admitted by the manager
  live_[child] = std::move(c);
}

void random_model::op_free(bool preempting) {
  op_name_ = preempting ? "preempt" : "free";
  auto id = some_id();
  auto i = live_.find(id);
  bool via_handle = !preempting && i != live_.end() && chance(0.3);
  if (via_handle)
    op_name_ += "_handle";
  caf::expected<std::uint32_t> res{no_reply("free")};
  if (via_handle)
    res = handle_free(*handle_of(id));
  else
    res = preempting ? preempt(id) : free(id);
  if (i == live_.end())
    return expect_outcome(res, "unknown_request");
  expect_outcome(res, "ok");
  auto want = released_by(i->second.blocks);
  expect(*res == want, "released " + std::to_string(*res) + ", expected "
                         + std::to_string(want));
  ended_elsewhere(id, i->second,
                  preempting ? end_reason::preempted : end_reason::deallocated);
  live_.erase(i);
}

void random_model::op_kill() {
  op_name_ = "kill";
  if (live_.empty())
    return;
  auto id = some_id();
  if (live_.count(id) == 0)
    return;
  caf::anon_send_exit(*handle_of(id), caf::exit_reason::kill);
  run();
  ended_elsewhere(id, live_.at(id), end_reason::reclaimed);
  live_.erase(id);
  auto res = lookup(id);
  expect_outcome(res, "unknown_request");
}

void random_model::op_orphan() {
  op_name_ = "orphan";
  auto id = next_orphan_++;
  auto tokens = pick(1, 12);
  auto before = refs();
  auto res = ask<admission>(pool, allocate_atom::value,
                            make_request(cfg, id, tokens));
  if (blocks_for(tokens, bs) > total_blocks - held(before))
    return expect_outcome(res, "out_of_blocks");
  expect_outcome(res, "ok");
  expect_table(res->table, tokens, 0, before);
  orphans_[id] = res->table;
}

void random_model::op_gc() {
  op_name_ = "gc";
  std::uint32_t want_blocks = 0;
  auto r = refs();
  for (auto& [id, t] : orphans_)
    for (auto b : t.blocks)
      if (r[b] == 1)
        ++want_blocks;
  auto res = gc();
  expect_outcome(res, "ok");
  expect(res->caches_freed == orphans_.size(),
         "gc freed " + std::to_string(res->caches_freed) + " caches, expected "
           + std::to_string(orphans_.size()));
  // Evictions (under high pressure) may add to the blocks.
  expect(res->blocks_reclaimed >= want_blocks, "gc reclaimed too few blocks");
  expect(res->memory_freed == res->blocks_reclaimed * bytes_per_block,
         "gc memory_freed");
  orphans_.clear();
}

void random_model::op_step() {
  op_name_ = "step";
  step_request req;
  for (auto n = pick(0, 2); n > 0; --n)
    req.frees.push_back(some_id());
  for (auto n = pick(0, 4); n > 0; --n) {
    extend_op op;
    op.id = some_id();
    op.num_tokens = static_cast<std::uint32_t>(pick(0, 12));
    req.extends.push_back(op);
  }
  for (auto n = pick(0, 3); n > 0; --n) {
    auto tokens = pick(0, 40);
    req.admits.push_back(make_request(cfg, any_id(), tokens,
                                      chance(0.05) ? pick(1, 40)
                                                   : tokens + pick(1, 60)));
  }
  req.preempt_on_shortage = chance(0.8);
  req.admit_after_preemption = chance(0.3);
  // Half the steps take the lane the manager hands out (straight to the
  // pool), half go through the manager: both keep its registry.
  bool lane = chance(0.5);
  if (lane)
    op_name_ = "step_lane";
  auto res = lane ? ask<step_result>(lane_, step_atom::value, req) : step(req);
  // Simulate the step (messages/step.hpp) on a copy of the model. Blocks a
  // request takes during the step are counted in `fresh` (their ids come
  // with the reply); a copy-on-write drops the shared last block from the
  // request's own list.
  struct delta {
    request_id id;
    std::uint32_t first;
    std::uint64_t num_tokens;
    std::size_t num_blocks;
  };
  std::vector<delta> deltas;
  std::vector<request_id> freed, preempted, admitted;
  std::multiset<std::pair<request_id, std::string>> failed;
  request_id blocked = 0;
  auto sim = live_;
  std::map<request_id, std::uint64_t> fresh;
  // A copy-on-write holds both its blocks until the device copied them,
  // after the step: the source (its id is known) and the fresh destination
  // (counted per request). Neither comes free before, even if released.
  std::vector<block_id> held_src;
  std::map<request_id, std::uint64_t> held_dst;
  std::uint64_t released_dst = 0;
  auto sim_refs = [&](bool with_holds) {
    ref_counts out(total_blocks, 0);
    for (auto& [id, r] : sim)
      for (auto b : r.blocks)
        ++out.at(b);
    for (auto& [id, t] : orphans_)
      for (auto b : t.blocks)
        ++out.at(b);
    if (with_holds)
      for (auto b : held_src)
        ++out.at(b);
    return out;
  };
  std::uint64_t free_now = total_blocks - held(sim_refs(true));
  auto release = [&](request_id id) {
    auto r = sim_refs(true);
    std::uint64_t n = fresh[id] - held_dst[id];
    released_dst += held_dst[id];
    for (auto b : sim.at(id).blocks)
      if (r.at(b) == 1)
        ++n;
    fresh.erase(id);
    held_dst.erase(id);
    sim.erase(id);
    free_now += n;
  };
  for (auto id : req.frees) {
    if (sim.count(id) == 0) {
      failed.emplace(id, "unknown_request");
      continue;
    }
    release(id);
    freed.push_back(id);
  }
  auto& ops = req.extends;
  std::vector<bool> gone(ops.size(), false);
  auto last = ops.size();
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (gone[i])
      continue;
    auto& op = ops[i];
    for (;;) {
      auto it = sim.find(op.id);
      if (it == sim.end()) {
        failed.emplace(op.id, "unknown_request");
        break;
      }
      auto& r = it->second;
      if (op.num_tokens == 0)
        break;
      if (r.tokens + op.num_tokens > r.max_len) {
        failed.emplace(op.id, "exceeds_max_sequence_length");
        break;
      }
      auto have = r.blocks.size() + fresh[op.id];
      auto add = blocks_for(r.tokens + op.num_tokens, bs) - have;
      // The last block is copied if it is partly filled and shared; one
      // taken in this step is private.
      bool cow = r.tokens % bs != 0 && fresh[op.id] == 0
                 && sim_refs(false).at(r.blocks.back()) > 1;
      if (add + cow <= free_now) {
        free_now -= add + cow;
        if (cow) {
          held_src.push_back(r.blocks.back());
          ++held_dst[op.id];
          r.blocks.pop_back();
        }
        fresh[op.id] += add + cow;
        r.tokens += op.num_tokens;
        if (add + cow > 0)
          deltas.push_back(delta{op.id, static_cast<std::uint32_t>(have - cow),
                                 r.tokens, blocks_for(r.tokens, bs)});
        break;
      }
      if (!req.preempt_on_shortage) {
        failed.emplace(op.id, "out_of_blocks");
        break;
      }
      while (last > i && gone[last - 1])
        --last;
      auto victim = last - 1;
      gone[victim] = true;
      auto vid = ops[victim].id;
      if (sim.count(vid) != 0) {
        release(vid);
        preempted.push_back(vid);
      } else {
        failed.emplace(vid, "unknown_request");
      }
      if (victim == i)
        break;
    }
  }
  if (!req.admits.empty()) {
    if (!preempted.empty() && !req.admit_after_preemption) {
      blocked = req.admits.front().id;
    } else {
      for (auto& a : req.admits) {
        if (a.initial_tokens > a.max_sequence_length) {
          failed.emplace(a.id, "exceeds_max_sequence_length");
          continue;
        }
        if (sim.count(a.id) != 0) {
          failed.emplace(a.id, "duplicate_request");
          continue;
        }
        auto need = blocks_for(a.initial_tokens, bs);
        if (need > free_now) {
          blocked = a.id;
          break;
        }
        free_now -= need;
        model_request r;
        r.tokens = a.initial_tokens;
        r.max_len = a.max_sequence_length;
        sim[a.id] = r;
        fresh[a.id] = need;
        admitted.push_back(a.id);
      }
    }
  }
  // The copies are done when the reply comes: their holds are gone.
  {
    auto with = sim_refs(true);
    held_src.clear();
    auto without = sim_refs(false);
    for (std::size_t b = 0; b < total_blocks; ++b)
      if (with.at(b) > 0 && without.at(b) == 0)
        ++free_now;
    free_now += released_dst;
  }
  // Compare.
  expect_outcome(res, "ok");
  expect(res->freed == freed, "freed ids differ");
  expect(res->preempted == preempted, "preempted ids differ");
  std::vector<request_id> got_admitted;
  for (auto& a : res->admitted)
    got_admitted.push_back(a.id);
  expect(got_admitted == admitted, "admitted ids differ");
  std::multiset<std::pair<request_id, std::string>> got_failed;
  for (auto& f : res->failed)
    got_failed.emplace(f.id, outcome(f.error));
  expect(got_failed == failed, "failed operations differ");
  expect(res->blocked == blocked, "blocked id differs");
  expect(res->admission_blocked == (blocked != 0), "admission_blocked");
  expect(res->free_blocks == free_now, "free blocks after the step: "
                                         + std::to_string(res->free_blocks)
                                         + ", expected "
                                         + std::to_string(free_now));
  expect(res->used_blocks + res->free_blocks == total_blocks, "free + used");
  expect(res->changed.size() == deltas.size(),
         std::to_string(res->changed.size()) + " tables changed, expected "
           + std::to_string(deltas.size()));
  for (std::size_t k = 0; k < deltas.size(); ++k) {
    auto& d = res->changed[k];
    auto& w = deltas[k];
    expect(d.id == w.id && d.first == w.first && d.num_tokens == w.num_tokens
             && d.first + d.blocks.size() == w.num_blocks,
           "delta " + std::to_string(k) + " of request " + std::to_string(d.id)
             + " differs");
  }
  // Apply: ended requests go, grown ones take their new blocks in order,
  // admitted ones come in with their tables.
  for (auto id : freed)
    live_.erase(id);
  for (auto id : preempted)
    live_.erase(id);
  for (auto& d : res->changed) {
    auto i = live_.find(d.id);
    if (i == live_.end())
      continue; // grown, then preempted later in the step
    auto& b = i->second.blocks;
    b.resize(d.first);
    b.insert(b.end(), d.blocks.begin(), d.blocks.end());
  }
  for (auto& [id, r] : live_) {
    auto& s = sim.at(id);
    if (s.tokens != r.tokens) {
      r.tokens = s.tokens;
      r.doc = -1;
    }
  }
  for (auto& a : res->admitted) {
    auto& sa = sim.at(a.id);
    model_request r;
    r.tokens = sa.tokens;
    r.max_len = sa.max_len;
    r.blocks = a.table.blocks;
    r.stepped = a.cache_id;
    live_[a.id] = std::move(r);
  }
  // Told of what ended elsewhere since the last step, once.
  std::vector<std::string> got_ended, want_ended;
  for (auto& e : res->ended)
    got_ended.push_back(std::to_string(e.id) + "@" + std::to_string(e.cache_id)
                        + ":" + to_string(e.reason));
  for (auto& [id, cache_id, why] : ended_elsewhere_)
    want_ended.push_back(std::to_string(id) + "@" + std::to_string(cache_id)
                         + ":" + to_string(why));
  expect(got_ended == want_ended, "the step reply's ended differs: "
                                    + std::to_string(got_ended.size())
                                    + " ends, expected "
                                    + std::to_string(want_ended.size()));
  ended_elsewhere_.clear();
  // Every block taken in the step is private to its request.
  auto after = refs();
  for (auto& a : res->admitted)
    for (auto b : a.table.blocks)
      expect(after.at(b) == 1, "an admitted request's block is shared");
  for (auto& d : res->changed)
    for (auto b : d.blocks)
      if (live_.count(d.id) != 0)
        expect(after.at(b) == 1, "a grown request's new block is shared");
  for (auto& [id, r] : live_)
    expect(r.blocks.size() == blocks_for(r.tokens, bs),
           "request " + std::to_string(id) + " holds "
             + std::to_string(r.blocks.size()) + " blocks for "
             + std::to_string(r.tokens) + " tokens after the step");
  expect(held(after) == res->used_blocks,
         "used blocks after the step: model " + std::to_string(held(after))
           + ", reply " + std::to_string(res->used_blocks));
  // The registry followed before the reply: ended requests are gone, the
  // admitted ones have handles serving their incarnation.
  // (An id may end and be admitted again in one step.)
  for (auto ids : {&res->freed, &res->preempted})
    for (auto id : *ids)
      if (live_.count(id) == 0)
        expect_outcome(lookup(id), "unknown_request");
  for (auto& a : res->admitted) {
    auto l = lookup(a.id);
    expect(l && l->second.cache_id == a.cache_id,
           "admitted request " + std::to_string(a.id) + " not registered");
  }
}

void random_model::op_queries() {
  op_name_ = "queries";
  auto id = some_id();
  auto t = table(id);
  auto i = live_.find(id);
  if (i == live_.end()) {
    expect_outcome(t, "unknown_request");
  } else {
    expect_outcome(t, "ok");
    expect(t->blocks == i->second.blocks && t->num_tokens == i->second.tokens,
           "table differs from the model");
  }
  auto tokens = pick(0, 40);
  auto req = make_request(cfg, any_id(), tokens, tokens + 10);
  auto can = can_alloc(req);
  expect(static_cast<bool>(can), "can_alloc failed");
  bool want = live_.count(req.id) == 0
              && blocks_for(tokens, bs) <= free_blocks();
  expect(*can == want, "can_alloc answered " + std::to_string(*can));
}

void random_model::full_check() {
  op_name_ = "full_check";
  auto s = stats();
  expect(static_cast<bool>(s), "stats: " + outcome(s));
  expect(s->active_caches == live_.size() + orphans_.size(), "active caches");
  expect(s->free_blocks == free_blocks(),
         "stats free " + std::to_string(s->free_blocks) + ", model "
           + std::to_string(free_blocks()));
  expect(s->total_blocks == total_blocks, "total blocks");
  expect(s->used_memory_bytes == used() * bytes_per_block, "used memory");
  auto entries = list();
  expect(static_cast<bool>(entries), "list");
  std::vector<request_id> ids;
  for (auto& e : *entries)
    ids.push_back(e.id);
  std::vector<request_id> want;
  for (auto& [id, r] : live_)
    want.push_back(id);
  expect(ids == want, "list differs from the model");
  for (auto& [id, r] : live_) {
    auto t = table(id);
    expect(t && t->blocks == r.blocks && t->num_tokens == r.tokens,
           "table of " + std::to_string(id) + " differs from the model");
  }
  op_gc(); // runs the pool's invariant check
}

void random_model::run_ops(std::size_t n) {
  // Weights: allocation and growth dominate, as in serving.
  const std::vector<std::pair<int, int>> weights{
    {0, 14}, {1, 12}, {2, 16}, {3, 10}, {4, 5}, {5, 12}, {6, 3},
    {7, 1},  {8, 1},  {9, 6},  {10, 4}, {11, 3}};
  int sum = 0;
  for (auto& w : weights)
    sum += w.second;
  for (op_ = 1; op_ <= n; ++op_) {
    auto x = static_cast<int>(pick(0, sum - 1));
    int kind = 0;
    for (auto& w : weights) {
      if (x < w.second) {
        kind = w.first;
        break;
      }
      x -= w.second;
    }
    switch (kind) {
      case 0: op_allocate(); break;
      case 1: op_allocate_prompt(); break;
      case 2: op_extend(false); break;
      case 3: op_extend(true); break;
      case 4: op_fork(); break;
      case 5: op_free(false); break;
      case 6: op_free(true); break;
      case 7: op_kill(); break;
      case 8: op_orphan(); break;
      case 9: op_step(); break;
      case 10: op_queries(); break;
      case 11:
        if (chance(0.1))
          op_gc();
        else
          op_queries();
        break;
    }
    if (op_ % 1000 == 0)
      full_check();
  }
}

} // namespace

BOOST_AUTO_TEST_CASE(random_operations_through_the_actors_match_the_model) {
  random_model m{20261129};
  m.check_on_exit = true;
  m.run_ops(100000);
  BOOST_TEST_MESSAGE("random model: " << m.checks << " checks");
  std::ostringstream os;
  for (auto& [k, v] : m.tally)
    os << k << "=" << v << ' ';
  BOOST_TEST_MESSAGE(os.str());
  // Every class of outcome the model predicts was exercised.
  for (auto key : {"allocate:ok", "allocate:duplicate_request",
                   "allocate:out_of_blocks", "allocate:exceeds_max_sequence_length",
                   "allocate_prompt:ok", "allocate_prompt:out_of_blocks",
                   "extend:ok", "extend:out_of_blocks", "extend:unknown_request",
                   "extend:exceeds_max_sequence_length", "append:invalid_request",
                   "extend_handle:ok", "append_handle:ok", "fork:ok",
                   "fork:duplicate_request", "fork:unknown_request", "free:ok",
                   "free:unknown_request", "free_handle:ok", "preempt:ok",
                   "kill:unknown_request", "orphan:ok", "gc:ok", "step:ok",
                   "step_lane:ok"})
    BOOST_TEST(m.tally[key] > 0u, key);
}
