// A seeded random test: 100,000 operations through the actors (allocate with
// and without shared prompts, extend and append through the manager and the
// handle actors, fork, free, preempt, steps, handle kills, orphans and GC)
// against a small reference model of what must hold: which requests live,
// their tables (ceil(tokens / block_size) blocks, shared blocks only where a
// fork or a prompt prefix shares them, copy-on-write of a shared last
// block), each outcome's class, and free + used = total. The pool's own
// invariant check runs (through GC) every 1,000 operations.
#include "random_model.hpp"
#include "soak.hpp"

using namespace kvactor;
using namespace kvactor::test;
using namespace kvactor::test::model;

namespace kvactor::test::model {

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
  auto res = orphan(make_request(cfg, id, tokens));
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

} // namespace kvactor::test::model

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
  // KVACTOR_SOAK: more seeds, a cache each.
  for (auto seed : soak_seeds()) {
    random_model more{seed};
    more.check_on_exit = true;
    more.run_ops(100000);
    BOOST_TEST_MESSAGE("seed " << seed << ": " << more.checks << " checks");
  }
}
