// pool_reference_model: allocation, extension, release, fork and eviction,
// each written out step by step as the documented policy reads, with no
// attempt at speed. The block mechanics they share, quotas, reservations and
// admission headroom, steps, pins and victims, swapping, drafts and
// discards, and copies held in flight have their own files
// (pool_reference_model_{blocks,admission,step,pins,swap,rollback,copies}.cpp).
#include "pool_reference_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>

namespace kvactor::test {

namespace {

using detail::residency;

model_extension failed_extension(errc e) {
  model_extension out;
  out.err = e;
  return out;
}

} // namespace

pool_model::pool_model(const cache_config& cfg, std::uint32_t num_blocks)
  : block_size_(cfg.block_size),
    prefix_caching_(cfg.prefix_caching),
    model_(cfg.model),
    blocks_(num_blocks) {
  // Block 0 is handed out first, then 1, 2, ...
  for (auto b = num_blocks; b > 0; --b)
    free_.push_back(b - 1);
  for (auto b = static_cast<block_id>(cfg.num_host_blocks); b > 0; --b)
    host_free_.push_back(b - 1);
  admission_ = cfg.admission;
  watermark_blocks_ = static_cast<std::uint64_t>(
    std::ceil(cfg.admission.watermark * num_blocks));
  max_pinned_ = cfg.max_pinned_blocks;
  for (auto& tc : cfg.tenants) {
    model_tenant mt;
    mt.config = tc;
    mt.ns = tc.prefix_namespace.empty() ? "tenant:" + tc.name
                                        : "namespace:" + tc.prefix_namespace;
    mt.lone_cap = num_blocks;
    // A tenant with a reservation that shares its namespace may hold
    // blocks charged to others, protected by its own small charge.
    bool shares = false;
    for (auto& other : cfg.tenants)
      shares = shares
               || (other.name != tc.name && !tc.prefix_namespace.empty()
                   && other.prefix_namespace == tc.prefix_namespace);
    if (!shares) {
      // Its tables hold only blocks charged to it: its quota bounds them,
      // and so does what the other tenants' reservations leave.
      std::uint64_t others = 0;
      for (auto& other : cfg.tenants)
        if (other.name != tc.name)
          others += other.reserved_blocks;
      if (tc.max_blocks != 0)
        mt.lone_cap = std::min<std::uint64_t>(mt.lone_cap, tc.max_blocks);
      mt.lone_cap = std::min<std::uint64_t>(
        mt.lone_cap, num_blocks > others ? num_blocks - others : 0);
    }
    if (cfg.pressure.preempt_at_critical && !(shares && tc.reserved_blocks > 0)) {
      // Critical pressure starts at ceil(critical * blocks) in use.
      auto mark = static_cast<std::uint64_t>(
        std::ceil(cfg.pressure.critical * num_blocks - 1e-9));
      auto alone = std::max<std::uint64_t>(mark == 0 ? 0 : mark - 1,
                                           tc.reserved_blocks);
      mt.lone_cap = std::min(mt.lone_cap, alone);
    }
    tenants_.push_back(mt);
  }
}

std::uint64_t pool_model::used_blocks() const {
  return std::count_if(blocks_.begin(), blocks_.end(),
                       [](const block& b) { return b.st == state::used; });
}

std::uint64_t pool_model::cached_blocks() const {
  std::uint64_t n = 0;
  for (auto& l : lru_)
    n += l.size();
  return n;
}

// -- operations -----------------------------------------------------------------------

pool_model::plan pool_model::plan_allocation(const allocation_request& req) const {
  plan p;
  if ((p.err = check(req, p.t)))
    return p;
  if (seqs_.count(req.id)) {
    p.err = errc::duplicate_request;
    return p;
  }
  auto& prompt = req.prompt;
  p.n = prompt.empty() ? req.initial_tokens : prompt.size();
  p.need = blocks_for(p.n, block_size_);
  p.hashing = prefix_caching_ && (!prompt.empty() || p.n == 0);
  p.hits = p.hashing && !prompt.empty() ? hits(p.t, req.cache_salt, prompt) : 0;
  std::uint64_t revived = 0;
  std::uint64_t pinned = 0;
  for (std::uint32_t i = 0; i < p.hits; ++i) {
    auto& m = blocks_[index_.at(key_of(p.t, req.cache_salt, prompt, (i + 1) * block_size_))];
    if (m.st == state::cached) {
      ++revived;
      pinned += m.pinned;
    }
    // Written for sure: a cached block, before any hit on a held one.
    if (m.st == state::cached && p.written == i)
      ++p.written;
  }
  if (admission_.policy == "reserve_expected") {
    auto out = req.expected_output_tokens != 0
                 ? req.expected_output_tokens
                 : admission_.default_expected_output;
    std::uint64_t others = 0;
    for (std::size_t u = 0; u < tenants_.size(); ++u)
      if (u != p.t)
        others += tenants_[u].config.reserved_blocks;
    auto held = watermark_blocks_ + others;
    std::uint64_t room = blocks_.size() > held ? blocks_.size() - held : 0;
    auto cap = std::max(blocks_for(p.n, block_size_),
                        std::min(tenants_[p.t].lone_cap, room));
    p.expected = std::min(p.n + std::min(out, req.max_sequence_length - p.n),
                          cap * block_size_);
  }
  // The cap and the headroom count the whole prompt; a prefill chunk takes
  // the hits and at most prefill_chunk tokens more.
  if (p.need > tenants_[p.t].lone_cap) {
    p.err = errc::exceeds_capacity;
    return p;
  }
  p.whole = p.n;
  if (req.prefill_chunk != 0) {
    auto rest = p.n - std::uint64_t{p.hits} * block_size_;
    p.n -= rest - std::min(rest, req.prefill_chunk);
    p.need = blocks_for(p.n, block_size_);
  }
  // Revived blocks are charged like fresh ones; pinned ones are on no list.
  auto take = p.need - p.hits + revived;
  if ((p.err = admit(p.t, take, pinned)))
    return p;
  auto want = blocks_for(p.expected, block_size_);
  p.err = headroom(p.t, take - pinned, want > p.need ? want - p.need : 0, take);
  return p;
}

model_allocation pool_model::allocate(const allocation_request& req) {
  auto p = plan_allocation(req);
  if (p.err) {
    if (*p.err == errc::out_of_blocks || *p.err == errc::quota_exceeded
        || *p.err == errc::exceeds_capacity) {
      ++counters_.allocation_failures;
      ++tenants_[p.t].failures;
    }
    return {p.err};
  }
  auto t = p.t;
  auto& prompt = req.prompt;
  model_sequence seq;
  seq.id = req.id;
  seq.cache_id = next_cache_id_++;
  seq.admitted = next_admission_++;
  seq.tenant = t;
  seq.salt = req.cache_salt;
  seq.priority = req.priority;
  seq.level = 4 * static_cast<std::size_t>(tenants_[t].config.priority)
              + static_cast<std::size_t>(req.priority);
  seq.num_tokens = p.n;
  seq.max_tokens = req.max_sequence_length;
  seq.expected_tokens = p.expected;
  seq.hit_blocks = std::min<std::uint32_t>(p.written, 65535);
  seq.brought_from = std::min<std::uint32_t>(p.hits, 65535);
  begin_epoch(seq);
  for (std::uint32_t i = 0; i < p.hits; ++i) {
    auto b = index_.at(key_of(t, req.cache_salt, prompt, (i + 1) * block_size_));
    share(b, seq);
    seq.blocks.push_back(b);
  }
  for (auto i = p.hits; i < p.need; ++i)
    seq.blocks.push_back(take(t, seq.level));
  wrote(seq, p.hits, p.need); // its pass writes them, over its hits
  auto h = p.hits;
  if (p.hashing) {
    seq.hashable = true;
    seq.tokens.assign(prompt.begin(), prompt.begin() + (prompt.empty() ? 0 : p.n));
    for (auto i = h; i < seq.tokens.size() / block_size_; ++i)
      index(seq.blocks[i], key_of(t, req.cache_salt, prompt, (i + 1) * block_size_),
            t);
    if (!prompt.empty()) {
      counters_.query_tokens += p.whole;
      counters_.hit_tokens += std::uint64_t{h} * block_size_;
      counters_.prefix_hit_blocks += h;
      tenants_[t].query_tokens += p.whole;
      tenants_[t].hit_tokens += std::uint64_t{h} * block_size_;
    }
  }
  ++counters_.allocations;
  ++tenants_[t].active;
  auto cache_id = seq.cache_id;
  seqs_[req.id] = std::move(seq);
  return {std::nullopt, cache_id, std::uint64_t{h} * block_size_};
}

bool pool_model::can_allocate(const allocation_request& req) const {
  return !plan_allocation(req).err;
}

std::pair<maybe_errc, std::uint64_t>
pool_model::cached_prefix(const allocation_request& req) const {
  std::uint16_t t = 0;
  if (auto err = check(req, t))
    return {err, 0};
  if (!prefix_caching_ || req.prompt.empty())
    return {std::nullopt, 0};
  return {std::nullopt, std::uint64_t{hits(t, req.cache_salt, req.prompt)} * block_size_};
}

model_extension pool_model::extend(request_id id, std::uint64_t n,
                                   const std::vector<token_id>* tokens,
                                   std::uint64_t drafts, bool hold) {
  auto it = seqs_.find(id);
  if (it == seqs_.end())
    return failed_extension(errc::unknown_request);
  auto& seq = it->second;
  if (seq.where != residency::resident)
    return failed_extension(errc::invalid_request);
  model_extension out;
  if (drafts > n || drafts > max_draft_tokens)
    return failed_extension(errc::invalid_request);
  if (n == 0)
    return out;
  if (seq.drafts != 0) // unsettled drafts: no growth
    return failed_extension(errc::invalid_request);
  if (seq.num_tokens + n > seq.max_tokens)
    return failed_extension(errc::exceeds_max_sequence_length);
  if (tokens != nullptr)
    for (auto tok : *tokens)
      if (tok < 0)
        return failed_extension(errc::invalid_request);
  auto old_size = seq.blocks.size();
  auto add = (seq.num_tokens + n + block_size_ - 1) / block_size_ - old_size;
  if (add > 0 && old_size + add > tenants_[seq.tenant].lone_cap)
    return failed_extension(errc::exceeds_capacity);
  // Appending into a partly filled block that others may read: copy it first.
  auto reason = copy_reason(seq);
  bool cow = reason != nullptr;
  if (auto e = admit(seq.tenant, add + cow))
    return failed_extension(*e);
  out.changed = add + cow > 0;
  out.first_changed = static_cast<std::uint32_t>(old_size - cow);
  auto old = seq.blocks.empty() ? 0 : seq.blocks.back();
  if (cow) {
    ++copy_reasons_[reason];
    auto copy = take(seq.tenant, seq.level);
    if (hold) {
      // Both blocks stay in use until the device answers; a failed copy
      // brings the request back as it is now.
      held_.push_back(held_copy{block_copy{old, copy}, seq, 1 + add});
      ++blocks_[old].refs;
      ++blocks_[copy].refs;
    }
    seq.blocks.back() = copy;
    out.copies.push_back(block_copy{old, copy});
    ++counters_.cow_copies;
  }
  for (std::uint64_t i = 0; i < add; ++i)
    seq.blocks.push_back(take(seq.tenant, seq.level));
  if (cow) {
    // Let go once the new blocks are taken: none of them is the source.
    unref(old, seq.level);
    give_way({old});
  }
  seq.shared_tail = false;
  // The blocks its tokens go into.
  wrote(seq, seq.num_tokens / block_size_,
        (seq.num_tokens + n + block_size_ - 1) / block_size_);
  seq.drafts = drafts;
  counters_.draft_tokens += drafts;
  if (seq.hashable && tokens != nullptr) {
    seq.tokens.insert(seq.tokens.end(), tokens->begin(), tokens->end());
    // With its copy in flight, what it fills waits for the copy (settle).
    if (copy_of(seq) == nullptr)
      index_settled(seq, (seq.num_tokens) / block_size_);
  } else if (seq.hashable) {
    seq.hashable = false;
    seq.tokens.clear();
  }
  seq.num_tokens += n;
  return out;
}

void pool_model::return_blocks(model_sequence& seq) {
  for (auto b = seq.blocks.rbegin(); b != seq.blocks.rend(); ++b)
    unref(*b, seq.level);
  for (auto b = seq.incoming.rbegin(); b != seq.incoming.rend(); ++b)
    unref(*b, seq.level);
  give_way(seq.blocks);
  give_way(seq.incoming);
  for (auto h : seq.host_blocks)
    host_free_.push_back(h);
}

void pool_model::release_now(request_id id) {
  auto& seq = seqs_.at(id);
  end_epoch(seq); // confirmed, if a discard did not end it bad
  return_blocks(seq);
  --tenants_[seq.tenant].active;
  seqs_.erase(id);
}

model_release pool_model::release(request_id id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end())
    return {errc::unknown_request};
  auto& seq = it->second;
  if (seq.where == residency::swapping_out
      || seq.where == residency::swapping_in) {
    // Ended now, a ghost until the device's move ends; the id is free.
    seq.release_pending = true;
    end_epoch(seq); // confirmed: a ghost writes nothing
    --tenants_[seq.tenant].active;
    ghosts_[seq.cache_id] = std::move(seq);
    seqs_.erase(it);
    return {};
  }
  auto before = counters_.blocks_freed;
  release_now(id);
  return {std::nullopt, static_cast<std::uint32_t>(counters_.blocks_freed - before)};
}

model_release pool_model::reclaim(request_id id, std::uint64_t cache_id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end() || it->second.cache_id != cache_id)
    return {};
  // Its K/V may never have been written, nor will be: a discard keeping
  // its written hits.
  return discard(id);
}

model_release pool_model::preempt(request_id id, bool unindex) {
  auto it = seqs_.find(id);
  if (it == seqs_.end())
    return {errc::unknown_request};
  auto t = it->second.tenant;
  // Counted only if it frees device blocks now: resident.
  bool resident = it->second.where == residency::resident;
  // The blocks its admission found cached stay (an earlier pass wrote them),
  // and those it brought that others hold (a step's pass writes them).
  auto res = unindex ? discard(id, false) : release(id);
  if (res.err)
    return res;
  if (resident) {
    ++counters_.preemptions;
    ++tenants_[t].preemptions;
  }
  return res;
}

model_allocation pool_model::fork(request_id parent, request_id child) {
  auto p = seqs_.find(parent);
  if (p == seqs_.end())
    return {errc::unknown_request};
  if (p->second.where != residency::resident || p->second.drafts != 0)
    return {errc::invalid_request};
  if (seqs_.count(child))
    return {errc::duplicate_request};
  // Under reserve_expected, admitted like a request: its parent's growth,
  // and a private copy of a partly filled last block on its first append.
  auto& ps = p->second;
  if (admission_.policy == "reserve_expected")
    if (auto e = headroom(ps.tenant, 0,
                          growth(ps) + (ps.num_tokens % block_size_ != 0), 0))
      return {*e};
  // Both may read its partly filled last block now: neither writes into
  // it before copying it while the other still holds it.
  ps.shared_tail = ps.num_tokens % block_size_ != 0;
  model_sequence c = p->second;
  c.id = child;
  c.cache_id = next_cache_id_++;
  c.admitted = next_admission_++;
  c.release_pending = false;
  // c.hit_blocks: its parent's, the blocks its admission found cached.
  // Past the parent's full blocks: a shared partly filled last block the
  // child may write into in place is the child's too.
  c.brought_from = static_cast<std::uint32_t>(
    std::min<std::uint64_t>(ps.num_tokens / block_size_, 65535));
  // It computes over what its parent wrote and what that was over.
  begin_epoch(c);
  c.acc.clear();
  for (auto t : ps.acc)
    if (live_epochs_.count(t))
      c.acc.insert(t);
  add_live(c.acc, ps.epoch);
  for (auto b : c.blocks) {
    ++blocks_[b].refs;
    blocks_[b].level = std::max(blocks_[b].level, c.level);
  }
  ++counters_.allocations;
  ++tenants_[c.tenant].active;
  auto cache_id = c.cache_id;
  seqs_[child] = std::move(c);
  return {std::nullopt, cache_id, 0};
}

std::uint32_t pool_model::evict(std::uint32_t n) {
  std::uint32_t done = 0;
  while (done < n && cached_blocks() > 0) {
    std::size_t level = 0;
    while (lru_[level].empty())
      ++level;
    auto b = lru_[level].front();
    evict_from_lru(b);
    free_.push_back(b);
    ++done;
  }
  return done;
}

} // namespace kvactor::test
