// block_pool_core: allocation - the prefix lookup and the pin of its hits,
// in one call with taking the rest, planned first so a failure changes
// nothing.
#include "kvactor/actors/block_pool_core.hpp"

#include <algorithm>

#include "kvactor/messages/error.hpp"

namespace kvactor::detail {

// -- allocate -------------------------------------------------------------------------

std::uint32_t block_pool_core::lookup(block_hash seed,
                                      const std::vector<token_id>& prompt,
                                      std::uint32_t max_hits, bool memo) const {
  auto full = std::min<std::size_t>(prompt.size() / block_size_, max_hits);
  if (memo && memo_.seed == seed) {
    scratch_ = memo_.hashes;
    std::uint32_t hits = 0;
    for (std::size_t i = 0; i < full; ++i) {
      auto b = find_indexed(scratch_[i].lo);
      if (b == prefix_index::npos || blocks_[b].hash.hi != scratch_[i].hi)
        break;
      ++hits;
    }
    return hits;
  }
  // Hash only up to the first miss: a new prompt that does not fit costs a
  // few hashes, not its length.
  scratch_.clear();
  auto h = seed;
  std::uint32_t hits = 0;
  for (std::size_t i = 0; i < full; ++i) {
    h = hash_block(h, prompt.data() + i * block_size_, block_size_);
    scratch_.push_back(h);
    auto b = find_indexed(h.lo);
    if (b == prefix_index::npos || blocks_[b].hash.hi != h.hi)
      break;
    ++hits;
  }
  return hits;
}

void block_pool_core::hash_all(block_hash seed,
                               const std::vector<token_id>& prompt,
                               std::size_t full) const {
  auto h = scratch_.empty() ? seed : scratch_.back();
  for (auto i = scratch_.size(); i < full; ++i) {
    h = hash_block(h, prompt.data() + i * block_size_, block_size_);
    scratch_.push_back(h);
  }
}

caf::expected<block_pool_core::alloc_plan>
block_pool_core::plan_allocation(const allocation_request& req) const {
  auto known = memo_matches(req);
  auto t = check(req, known);
  if (!t)
    return std::move(t.error());
  if (find(req.id) != nullptr)
    return make_error(errc::duplicate_request,
                      req_name(req.id) + " is already allocated");
  alloc_plan p;
  p.tenant = *t;
  auto& prompt = req.prompt;
  // The whole request: what it holds once every prefill chunk is in.
  auto whole = prompt.empty() ? req.initial_tokens : prompt.size();
  p.tokens = whole;
  p.need = blocks_for(whole);
  if (auto err = fits_alone(req_name(req.id), p.tenant, p.need))
    return err;
  p.hashing = prefix_caching_ && (!prompt.empty() || p.tokens == 0);
  p.seed = seed_of(p.tenant, req.cache_salt);
  if (p.hashing && !prompt.empty()) {
    // The last prompt token is always computed: at most (len - 1) / bs hits.
    p.hits = lookup(p.seed, prompt,
                    static_cast<std::uint32_t>((whole - 1) / block_size_),
                    known);
    bool leading = true;
    for (std::uint32_t i = 0; i < p.hits; ++i) {
      auto& m = blocks_[find_indexed(scratch_[i].lo)];
      if (m.state == block_state::cached) {
        ++p.revived;
        p.pinned += m.pinned;
        p.written += leading;
      } else {
        leading = false;
      }
    }
  }
  if (req.prefill_chunk != 0) { // check() made sure of a prompt
    // hits * bs < whole, so at least one token past the hits is admitted
    // (compared as a difference: a chunk near 2^64 must not wrap).
    auto hit_tokens = std::uint64_t{p.hits} * block_size_;
    if (req.prefill_chunk < whole - hit_tokens) {
      p.tokens = hit_tokens + req.prefill_chunk;
      p.need = blocks_for(p.tokens);
    }
  }
  if (admission_.policy == "reserve_expected") {
    auto out = req.expected_output_tokens != 0
                 ? req.expected_output_tokens
                 : admission_.default_expected_output;
    auto room = req.max_sequence_length - whole; // check() made it >= 0
    // A promise past what one request may hold, or past what an empty pool
    // leaves it beside the watermark and the other tenants' reservations,
    // could never be kept: it would hold the request back for good as
    // out_of_blocks. Never below the request's own blocks.
    auto cap_blocks = std::max<std::uint64_t>(
      blocks_for(whole),
      std::min(tenants_[p.tenant].lone_cap, tenants_[p.tenant].promise_room));
    auto cap = cap_blocks * block_size_;
    p.expected = std::min(whole + std::min(out, room), cap);
  }
  // Revived blocks are charged like fresh ones; pinned ones among them are
  // on no list, so they take nothing from what others may take.
  auto take = p.need - p.hits + p.revived;
  if (auto err = admit_blocks(p.tenant, take, p.pinned))
    return err;
  auto want = blocks_for(p.expected);
  if (auto err = admit_headroom(p.tenant, take - p.pinned,
                                want > p.need ? want - p.need : 0, take))
    return err;
  return p;
}

caf::expected<allocation_outcome>
block_pool_core::allocate(const allocation_request& req) {
  auto planned = plan_allocation(req);
  if (!planned) {
    auto& err = planned.error();
    bool waits = has_code(err, errc::out_of_blocks)
                 || has_code(err, errc::quota_exceeded);
    if (waits || has_code(err, errc::exceeds_capacity)) {
      ++counters_.allocation_failures;
      if (auto t = tenant_index(req.tenant)) {
        ++tenants_[*t].failures;
        // It will be retried: keep what was learned about its prompt.
        if (waits && prefix_caching_ && !req.prompt.empty()
            && !memo_matches(req)) {
          auto seed = seed_of(*t, req.cache_salt);
          hash_all(seed, req.prompt, req.prompt.size() / block_size_);
          memo_.valid = true;
          memo_.seed = seed;
          memo_.prompt = req.prompt;
          memo_.hashes = scratch_;
        }
      }
    }
    return std::move(err);
  }
  auto& p = *planned;
  auto t = p.tenant;
  auto& prompt = req.prompt;
  // Commit: pin the hits first so that taking fresh blocks cannot evict them.
  auto& seq = new_sequence(req.id);
  seq.tenant = t;
  seq.priority = req.priority;
  seq.level = retention_of(tenants_[t].config.priority, req.priority);
  seq.num_tokens = p.tokens;
  seq.max_tokens = req.max_sequence_length;
  seq.expected_tokens = p.expected;
  seq.hit_blocks = static_cast<std::uint16_t>(std::min<std::uint32_t>(p.written, 65535));
  seq.brought_from = static_cast<std::uint16_t>(std::min<std::uint32_t>(p.hits, 65535));
  seq.blocks.reserve(p.need);
  write_lineage::token_set took; // what its hits were computed over
  for (std::uint32_t i = 0; i < p.hits; ++i) {
    auto b = find_indexed(scratch_[i].lo);
    share_indexed(b, seq, took);
    seq.blocks.push_back(b);
  }
  seq.acquired = lineage_.adopt(seq.cache_id, std::move(took));
  // The admitted prompt tokens' full blocks (all of the prompt's, unless a
  // prefill chunk stops short of it).
  auto full = static_cast<std::uint32_t>(
    std::min<std::uint64_t>(prompt.size(), p.tokens) / block_size_);
  if (p.hashing) {
    // The new full blocks' index slots are scattered: asked for now, they
    // arrive while the fresh blocks are taken.
    hash_all(p.seed, prompt, full);
    for (auto i = p.hits; i < full; ++i)
      index_.prefetch(scratch_[i].lo);
  }
  for (auto i = p.hits; i < p.need; ++i) {
    seq.blocks.push_back(take_block(t));
    blocks_[seq.blocks.back()].level = seq.level;
  }
  // Its pass writes them, over the hits (write_lineage).
  wrote(seq, p.hits, p.need);
  if (p.hashing) {
    seq.hashable = true;
    auto& ts = tenants_[t];
    seq.chain = p.seed;
    for (std::uint32_t i = 0; i < full; ++i) {
      if (i >= p.hits)
        index_block(seq.blocks[i], scratch_[i], i > 0 ? scratch_[i - 1].lo : 0,
                    t, prompt.data() + std::size_t{i} * block_size_);
      seq.chain = scratch_[i];
    }
    seq.num_hashed = full;
    if (!prompt.empty()) {
      seq.tail.assign(prompt.begin() + std::size_t{full} * block_size_,
                      prompt.begin() + p.tokens);
      // The lookup covered the whole prompt, chunked or not: its later
      // chunks are computed, never looked up.
      auto hit_tokens = std::uint64_t{p.hits} * block_size_;
      counters_.query_tokens += prompt.size();
      counters_.hit_tokens += hit_tokens;
      counters_.prefix_hit_blocks += p.hits;
      ts.query_tokens += prompt.size();
      ts.hit_tokens += hit_tokens;
    }
  }
  count_promise(seq, true);
  ++counters_.allocations;
  ++tenants_[t].active;
  return allocation_outcome{seq.cache_id, std::uint64_t{p.hits} * block_size_};
}

bool block_pool_core::can_allocate(const allocation_request& req) const {
  return static_cast<bool>(plan_allocation(req));
}

caf::expected<std::uint64_t>
block_pool_core::cached_prefix(const allocation_request& req) const {
  auto t = check(req);
  if (!t)
    return std::move(t.error());
  if (!prefix_caching_ || req.prompt.empty())
    return std::uint64_t{0};
  // plan_allocation's lookup: the last prompt token is always computed.
  auto max_hits = static_cast<std::uint32_t>((req.prompt.size() - 1) / block_size_);
  auto hits = lookup(seed_of(*t, req.cache_salt), req.prompt, max_hits);
  return std::uint64_t{hits} * block_size_;
}

} // namespace kvactor::detail
