// block_pool_core: checks and block movement (charging, taking, releasing).
// The request table (release, fork), allocation, extension, the step and the
// invariant check live in block_pool_sequences.cpp, block_pool_allocate.cpp,
// block_pool_extend.cpp, block_pool_step.cpp and block_pool_check.cpp.
#include "kvactor/actors/block_pool_core.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <string>

#include "kvactor/actors/token_ids.hpp"
#include "kvactor/messages/error.hpp"

namespace kvactor::detail {

block_pool_core::block_pool_core(const cache_config& cfg,
                                 std::uint32_t num_blocks)
  : block_size_(cfg.block_size),
    prefix_caching_(cfg.prefix_caching),
    model_(cfg.model),
    blocks_(num_blocks),
    parent_(num_blocks, 0),
    pin_until_(num_blocks, 0),
    pin_pos_(cfg.max_pinned_blocks > 0 ? num_blocks : 0, 0),
    lru_(num_blocks),
    index_(num_blocks),
    lineage_(num_blocks),
    marks_(num_blocks) {
  free_.reserve(num_blocks);
  // Hand out low block ids first: push them last.
  for (auto b = num_blocks; b > 0; --b)
    free_.push(b - 1);
  admission_ = cfg.admission;
  watermark_blocks_ = static_cast<std::uint64_t>(
    std::ceil(cfg.admission.watermark * num_blocks));
  max_pinned_ = cfg.max_pinned_blocks;
  num_host_blocks_ = static_cast<std::uint32_t>(cfg.num_host_blocks);
  host_free_.reserve(num_host_blocks_);
  for (auto b = num_host_blocks_; b > 0; --b)
    host_free_.push(b - 1);
  auto bounds = tenant_bounds_of(cfg, num_blocks);
  for (auto& tc : cfg.tenants) {
    auto& b = bounds[tenants_.size()];
    tenant_state ts;
    ts.config = tc;
    ts.lone_cap = b.lone_cap;
    ts.others_reserved = b.others_reserved;
    ts.shares_namespace = b.shares_namespace;
    auto held = watermark_blocks_ + ts.others_reserved;
    ts.promise_room = num_blocks > held ? num_blocks - held : 0;
    ts.seed = namespace_seed(tc.prefix_namespace.empty()
                               ? "tenant:" + tc.name
                               : "namespace:" + tc.prefix_namespace);
    shortfall_total_ += tc.reserved_blocks;
    held_total_ += tc.reserved_blocks;
    tenants_.push_back(std::move(ts));
  }
  // "" names the default tenant: cache_config decides which, once.
  if (auto* d = cfg.find_tenant(""))
    default_tenant_ = static_cast<std::uint16_t>(d - cfg.tenants.data());
}

// -- checks -------------------------------------------------------------------------

caf::expected<std::uint16_t>
block_pool_core::check(const allocation_request& req) const {
  return check(req, false);
}

caf::expected<std::uint16_t>
block_pool_core::check(const allocation_request& req,
                       bool prompt_validated) const {
  auto ti = tenant_index(req.tenant);
  if (!ti)
    return make_error(errc::unknown_tenant,
                      req_name(req.id) + ": " + context_of(ti.error()));
  auto t = *ti;
  // An enum off the wire is whatever integer the peer sent: the priority
  // picks an LRU level, an index into the pool's lists.
  if (req.priority > priority::critical)
    return make_error(errc::invalid_request,
                      req_name(req.id) + ": priority "
                        + std::to_string(static_cast<int>(req.priority))
                        + " is not one of low, normal, high, critical (0-3)");
  auto shape_err = [&](const char* field, std::uint64_t got,
                       std::uint64_t want) {
    return make_error(errc::invalid_request,
                      req_name(req.id) + ": " + field + " " + std::to_string(got)
                        + " does not match the model's " + std::to_string(want));
  };
  if (req.num_layers != model_.num_layers)
    return shape_err("num_layers", req.num_layers, model_.num_layers);
  if (req.num_heads != model_.num_kv_heads)
    return shape_err("num_heads", req.num_heads, model_.num_kv_heads);
  if (req.head_dim != model_.head_dim)
    return shape_err("head_dim", req.head_dim, model_.head_dim);
  if (req.dtype != model_.dtype)
    return make_error(errc::invalid_request,
                      req_name(req.id) + ": dtype " + to_string(req.dtype)
                        + " does not match the model's "
                        + to_string(model_.dtype));
  if (req.max_sequence_length == 0)
    return make_error(errc::invalid_request,
                      req_name(req.id) + ": max_sequence_length must be > 0");
  if (!req.prompt.empty() && req.initial_tokens != 0
      && req.initial_tokens != req.prompt.size())
    return make_error(errc::invalid_request,
                      req_name(req.id) + ": initial_tokens "
                        + std::to_string(req.initial_tokens)
                        + " differs from the prompt's length "
                        + std::to_string(req.prompt.size()));
  if (req.prefill_chunk != 0 && req.prompt.empty())
    return make_error(errc::invalid_request,
                      req_name(req.id) + ": prefill_chunk "
                        + std::to_string(req.prefill_chunk)
                        + " needs a prompt (a chunk of what?)");
  if (!prompt_validated)
    if (auto err = negative_token(req.prompt, [&] {
          return req_name(req.id) + ": prompt";
        }))
      return err;
  auto n = req.prompt.empty() ? req.initial_tokens : req.prompt.size();
  if (n > req.max_sequence_length)
    return make_error(errc::exceeds_max_sequence_length,
                      req_name(req.id) + ": " + std::to_string(n)
                        + " initial tokens > max_sequence_length "
                        + std::to_string(req.max_sequence_length));
  return t;
}

std::uint64_t block_pool_core::shortfall(std::uint16_t t) const noexcept {
  auto& ts = tenants_[t];
  auto reserved = ts.config.reserved_blocks;
  return ts.used < reserved ? reserved - ts.used : 0;
}

caf::error block_pool_core::fits_alone(const std::string& who,
                                       std::uint16_t t,
                                       std::uint64_t blocks) const {
  auto& ts = tenants_[t];
  if (blocks <= ts.lone_cap)
    return caf::none;
  auto n = num_blocks();
  auto what = who + " needs " + std::to_string(blocks) + " blocks, more than ";
  auto& name = ts.config.name;
  auto quota = ts.config.max_blocks;
  auto room = n > ts.others_reserved ? n - ts.others_reserved : 0;
  if (!ts.shares_namespace && quota != 0 && blocks > quota)
    what += "the max_blocks " + std::to_string(quota) + " of tenant '" + name
            + "' (every block of its tables is charged to it: its prefix "
              "namespace is its own)";
  else if (!ts.shares_namespace && ts.others_reserved > 0 && blocks > room)
    what += "the " + std::to_string(room) + " blocks the pool of "
            + std::to_string(n) + " leaves tenant '" + name
            + "' past the other tenants' reserved_blocks ("
            + std::to_string(ts.others_reserved) + ")";
  else if (ts.lone_cap == n)
    what += "the pool's " + std::to_string(n);
  else
    what += "the " + std::to_string(ts.lone_cap)
            + " blocks one request of tenant '"
            + name
            + "' can hold and stay live: alone it would reach critical "
              "pressure, where the supervisor preempts "
              "(pressure.preempt_at_critical)"
            + (ts.config.reserved_blocks == 0
                 ? std::string{}
                 : ", beyond the tenant's reserved_blocks "
                     + std::to_string(ts.config.reserved_blocks));
  return make_error(errc::exceeds_capacity, std::move(what));
}

std::uint64_t block_pool_core::takeable(std::uint16_t t) const noexcept {
  auto avail = static_cast<std::uint64_t>(free_.size() + lru_.size());
  auto held = held_total_ - reserve_held(t); // others' reserves
  return avail > held ? avail - held : 0;
}

caf::error block_pool_core::admit_blocks(std::uint16_t t, std::uint64_t n,
                                         std::uint64_t unlisted) const {
  if (n == 0)
    return caf::none;
  auto& ts = tenants_[t];
  auto quota = ts.config.max_blocks;
  if (quota != 0 && (n > quota || ts.used > quota - n))
    return make_error(errc::quota_exceeded,
                      "tenant '" + ts.config.name + "': "
                        + std::to_string(ts.used) + " blocks used + "
                        + std::to_string(n) + " needed > max_blocks "
                        + std::to_string(quota));
  auto can = takeable(t);
  n -= unlisted;
  if (n > can) {
    auto avail = free_.size() + lru_.size();
    return make_error(errc::out_of_blocks,
                      "need " + std::to_string(n) + " blocks, "
                        + std::to_string(can) + " available to tenant '"
                        + ts.config.name + "' (" + std::to_string(avail)
                        + " free incl. " + std::to_string(lru_.size())
                        + " cached, " + std::to_string(avail - can)
                        + " held for other tenants' reservations"
                        + (draining_ == 0
                             ? std::string{}
                             : "; " + std::to_string(draining_)
                                 + " more drain after a preemption")
                        + ")");
  }
  return caf::none;
}

std::int64_t block_pool_core::usable_promise(std::uint16_t t,
                                             std::int64_t promised,
                                             std::int64_t taking) const noexcept {
  using i64 = std::int64_t;
  auto quota = static_cast<i64>(tenants_[t].config.max_blocks);
  if (quota == 0)
    return promised;
  auto room = quota - static_cast<i64>(tenants_[t].used) - taking;
  return std::min(promised, std::max<i64>(room, 0));
}

caf::error block_pool_core::admit_headroom(std::uint16_t t, std::uint64_t n,
                                           std::uint64_t own_growth,
                                           std::uint64_t charged) const {
  bool reserve = admission_.policy == "reserve_expected";
  if (watermark_blocks_ == 0 && !reserve)
    return caf::none;
  // What the watermark and the promises (reserve_expected) lack: they are
  // covered by the free blocks no reservation holds ("shared"), and each
  // tenant's promises first by its own reservation's shortfall - blocks
  // nobody else may take. Without reservations: the watermark and every
  // promise, less the free blocks (vLLM v0's check).
  using i64 = std::int64_t;
  auto avail = static_cast<i64>(free_.size() + lru_.size());
  auto shared = avail - static_cast<i64>(held_total_);
  auto beyond = [](i64 promised, i64 own_reserve) {
    return std::max<i64>(promised - own_reserve, 0);
  };
  i64 promised_all = 0;
  i64 others = 0; // other tenants' promises beyond their own reservations
  if (reserve)
    for (std::size_t u = 0; u < tenants_.size(); ++u) {
      promised_all += static_cast<i64>(tenants_[u].promised);
      auto v = static_cast<std::uint16_t>(u);
      if (u != t)
        others += beyond(usable_promise(v, static_cast<i64>(tenants_[u].promised), 0),
                         static_cast<i64>(reserve_held(v)));
    }
  auto mine = reserve ? static_cast<i64>(tenants_[t].promised) : 0;
  auto own = static_cast<i64>(reserve_held(t));
  // admit_blocks checked n <= takeable(t) = shared + own: what t's own
  // reservation cannot give comes from the shared blocks.
  auto from_own = std::min(static_cast<i64>(n), own);
  auto from_shared = static_cast<i64>(n) - from_own;
  auto lack = [&](i64 shared_left, i64 own_left, i64 promised) {
    return static_cast<i64>(watermark_blocks_) + others
           + beyond(promised, own_left) - shared_left;
  };
  auto before = lack(shared, own, usable_promise(t, mine, 0));
  auto after = lack(shared - from_shared, own - from_own,
                    usable_promise(t,
                                   mine + (reserve ? static_cast<i64>(own_growth) : 0),
                                   static_cast<i64>(charged)));
  // An admission may leave a lack there was before - taking only from its
  // tenant's reservation, for no more growth than that still holds - but
  // not deepen it.
  if (after <= std::max<i64>(before, 0))
    return caf::none;
  return make_error(errc::out_of_blocks,
                    "admission headroom: "
                      + std::to_string(avail - static_cast<i64>(n))
                      + " blocks would stay free, "
                      + std::to_string(after - std::max<i64>(before, 0))
                      + " too few (watermark "
                      + std::to_string(watermark_blocks_)
                      + (reserve ? ", expected growth of live requests "
                                     + std::to_string(promised_all)
                                     + " and of this one "
                                     + std::to_string(own_growth)
                                 : std::string{})
                      + "; blocks a reservation holds count for its own "
                        "tenant only)");
}

// -- block movement -------------------------------------------------------------------

void block_pool_core::charge(block_id b, std::uint16_t t) noexcept {
  blocks_[b].tenant = t;
  auto& ts = tenants_[t];
  if (ts.used < ts.config.reserved_blocks) {
    --shortfall_total_;
    if (ts.config.reserved_blocks - ts.used > ts.draining)
      --held_total_; // its reserve_held falls by one
  }
  ++ts.used;
  ++used_;
}

void block_pool_core::uncharge(block_id b) noexcept {
  auto& ts = tenants_[blocks_[b].tenant];
  --ts.used;
  if (ts.used < ts.config.reserved_blocks) {
    ++shortfall_total_;
    if (ts.config.reserved_blocks - ts.used > ts.draining)
      ++held_total_; // its reserve_held rises by one
  }
  --used_;
}

void block_pool_core::add_draining(std::uint16_t t, int delta) noexcept {
  auto before = reserve_held(t);
  tenants_[t].draining = static_cast<std::uint64_t>(
    static_cast<std::int64_t>(tenants_[t].draining) + delta);
  held_total_ = held_total_ - before + reserve_held(t);
}

block_id block_pool_core::take_block(std::uint16_t t) {
  block_id b;
  if (!free_.empty()) {
    b = free_.pop();
  } else {
    // admit_blocks made sure a cached block is there.
    std::size_t level = 0;
    b = lru_.front(level);
    assert(b != no_block);
    prefetch_evictions(b);
    evict_lru(b, static_cast<std::uint8_t>(level));
  }
  auto& m = blocks_[b];
  m.state = block_state::used;
  m.ref_count = 1;
  m.level = 0;
  lineage_.clear(b);
  charge(b, t);
  ++counters_.blocks_allocated;
  return b;
}

void block_pool_core::unref(block_id b, std::uint8_t level) {
  auto& m = blocks_[b];
  if (--m.ref_count > 0)
    return;
  uncharge(b);
  ++counters_.blocks_freed;
  if (m.indexed) {
    // The most valuable holder decides how long the prefix stays cached.
    // (A pinned one may leave the reservations short: see give_way.)
    m.state = block_state::cached;
    m.level = std::max(m.level, level);
    if (!m.pinned)
      lru_.push_back(b, m.level);
  } else {
    m.state = block_state::free;
    free_.push(b);
    if (!second_copies_.empty()) // perhaps a second copy of a prefix
      refresh_first_copy(b, m.hash, level);
  }
}

std::uint8_t block_pool_core::retention_level(const sequence& seq) const
  noexcept {
  return seq.level;
}

void block_pool_core::share_indexed(block_id b, const sequence& seq,
                                    write_lineage::token_set& took,
                                    write_lineage::token own) {
  auto& m = blocks_[b];
  // A cached block's writer let it go: its epoch ended (a release; a
  // discard takes its own out of the index) - unless it went away to the
  // host, its epoch live until it comes back or ends. Not the sharer's
  // own: a swap-in sharing back what it wrote before it left.
  auto w = lineage_.writer_of(b);
  bool writer = w != own && w != 0
                && (m.state != block_state::cached || lineage_.live(w));
  if (writer || lineage_.has_set(b))
    lineage_.take_on(took, b, writer);
  if (m.state == block_state::cached) {
    if (!m.pinned)
      lru_.remove(b, m.level);
    // A revived prefix keeps its level: a low request's hit on a high one's
    // prefix must not make it the first to go once both are done.
    m.state = block_state::used;
    charge(b, seq.tenant);
  }
  hold(b, seq);
}

void block_pool_core::hold(block_id b, const sequence& seq) noexcept {
  auto& m = blocks_[b];
  m.level = std::max(m.level, seq.level);
  ++m.ref_count;
}

void block_pool_core::next_epoch(sequence& seq) {
  lineage_.end(epoch_of(seq)); // confirmed
  lineage_.restart(seq.cache_id);
  seq.restarted = true;
}

void block_pool_core::wrote(sequence& seq, std::size_t from, std::size_t to) {
  auto t = epoch_of(seq);
  for (auto k = from; k < to; ++k)
    seq.acquired = lineage_.wrote(seq.blocks[k], t, seq.cache_id, seq.acquired);
}

} // namespace kvactor::detail
