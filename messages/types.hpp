// The value types of kvactor's protocol (DESIGN.md, "Public contract").
// Plain structs with inspect(), so every one of them can cross a process
// boundary once registered (messages/registration.hpp); no CAF actor headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <caf/meta/type_name.hpp>

namespace kvactor {

using request_id = std::uint64_t;
using block_id = std::uint32_t;
using token_id = std::int32_t;

/// Sentinel for "no block".
constexpr block_id no_block = static_cast<block_id>(-1);

// -- enums -------------------------------------------------------------------

enum class device_kind : std::uint8_t { cpu, cuda };

enum class dtype : std::uint8_t { fp32, fp16, bf16, fp8_e4m3, int8 };

enum class priority : std::uint8_t { low, normal, high, critical };

/// Memory pressure, from blocks in use over total blocks (cached free blocks
/// do not count as used).
enum class memory_pressure : std::uint8_t { low, medium, high, critical };

const char* to_string(device_kind x) noexcept;
const char* to_string(dtype x) noexcept;
const char* to_string(priority x) noexcept;
const char* to_string(memory_pressure x) noexcept;

/// Bytes per element of `x`.
std::size_t size_of(dtype x) noexcept;

/// Parse the names that to_string prints; false if `str` names none.
bool from_string(const std::string& str, dtype& out);
bool from_string(const std::string& str, priority& out);

// -- device -------------------------------------------------------------------

struct device {
  device_kind kind = device_kind::cpu;
  int index = 0;
};

inline bool operator==(const device& x, const device& y) noexcept {
  return x.kind == y.kind && x.index == y.index;
}
inline bool operator!=(const device& x, const device& y) noexcept {
  return !(x == y);
}

/// "cpu" or "cuda:0".
std::string to_string(const device& x);

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, device& x) {
  return f(caf::meta::type_name("device"), x.kind, x.index);
}

// -- allocation_request --------------------------------------------------------

/// The most draft tokens (speculative decoding) a request may hold
/// unsettled: an extend's `drafts` (see kv_cache_handle::append and
/// extend_op::num_draft) past this fails with invalid_request.
constexpr std::uint32_t max_draft_tokens = 65535;

/// What a request asks for when it starts. The shape must match the model the
/// cache was configured for.
struct allocation_request {
  request_id id = 0;
  /// Tokens to make room for now; with a prompt, its length (0 means that
  /// too). 0 without a prompt is a request that holds no block yet, which
  /// its extends grow.
  std::uint64_t initial_tokens = 0;
  /// The most tokens this request may ever hold.
  std::uint64_t max_sequence_length = 0;
  std::uint32_t num_layers = 0;
  std::uint32_t num_heads = 0;
  std::uint32_t head_dim = 0;
  kvactor::device device;
  kvactor::dtype dtype = kvactor::dtype::fp16;
  kvactor::priority priority = kvactor::priority::normal;
  /// The tenant's name; "" is the default tenant.
  std::string tenant;
  /// Optional prompt tokens: enables prefix reuse and block hashing.
  std::vector<token_id> prompt;
  /// Tokens the request is expected to generate (0 = unknown), for
  /// admission headroom (config admission.policy "reserve_expected").
  std::uint64_t expected_output_tokens = 0;
  /// Chunked prefill (needs a prompt; 0 = the whole prompt now): admit the
  /// prompt's cached prefix and at most this many more of its tokens. The
  /// whole prompt is looked up in the prefix cache, so a long prompt finds
  /// all of its cached blocks however small the chunk; the table holds
  /// min(prompt length, hit tokens + prefill_chunk) tokens, and their full
  /// blocks enter the index. The rest of the prompt comes later, chunk by
  /// chunk, with its token ids (the facade's append, a step extend's
  /// tokens), in the steps that compute it - so no block enters the index
  /// before the step that writes its K/V. Blocks are taken for the admitted
  /// part only; the capacity check (exceeds_capacity) and reserve_expected's
  /// headroom count the whole prompt.
  std::uint64_t prefill_chunk = 0;
  /// Keys the request's prefix blocks apart from the same tokens under
  /// another salt (0 = none): a LoRA adapter's id, a hash of a multimodal
  /// input or of a user's cache salt - anything besides the tokens that
  /// changes the K/V they produce (vLLM's extra_keys and cache_salt).
  /// Requests share prefix blocks only under the same tenant namespace and
  /// the same salt.
  std::uint64_t cache_salt = 0;
};

bool operator==(const allocation_request& x, const allocation_request& y);

/// `req` without its prompt (its length kept as initial_tokens): what
/// registries and handles keep of a request.
allocation_request without_prompt(const allocation_request& req);

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, allocation_request& x) {
  return f(caf::meta::type_name("allocation_request"), x.id, x.initial_tokens,
           x.max_sequence_length, x.num_layers, x.num_heads, x.head_dim,
           x.device, x.dtype, x.priority, x.tenant, x.prompt,
           x.expected_output_tokens, x.prefill_chunk, x.cache_salt);
}

// -- block_table ---------------------------------------------------------------

/// A request's blocks in token order: token i lives in blocks[i / block_size]
/// at offset i % block_size. A swapped-out request's table keeps its
/// num_tokens but has no blocks (its K/V are in the host tier): slot() is
/// for tables that hold their tokens (holds_tokens()).
struct block_table {
  std::vector<block_id> blocks;
  std::uint64_t num_tokens = 0;
  std::uint32_t block_size = 0;

  std::size_t num_blocks() const noexcept {
    return blocks.size();
  }

  /// Whether the blocks hold every token (false while swapped out).
  bool holds_tokens() const noexcept {
    return std::uint64_t{blocks.size()} * block_size >= num_tokens;
  }

  /// The global slot of token `i`: blocks[i / block_size] * block_size + i %
  /// block_size. REQUIRES: i < num_tokens, holds_tokens().
  std::uint64_t slot(std::uint64_t i) const noexcept {
    return std::uint64_t{blocks[i / block_size]} * block_size + i % block_size;
  }
};

inline bool operator==(const block_table& x, const block_table& y) {
  return x.blocks == y.blocks && x.num_tokens == y.num_tokens
         && x.block_size == y.block_size;
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, block_table& x) {
  return f(caf::meta::type_name("block_table"), x.blocks, x.num_tokens,
           x.block_size);
}

// -- block movement -------------------------------------------------------------

/// Copy one device block's K and V, all layers, into another (copy-on-write,
/// fork).
struct block_copy {
  block_id src = 0;
  block_id dst = 0;
};

inline bool operator==(const block_copy& x, const block_copy& y) noexcept {
  return x.src == y.src && x.dst == y.dst;
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, block_copy& x) {
  return f(caf::meta::type_name("block_copy"), x.src, x.dst);
}

/// Pairs a device block with a host-tier block, for swapping either way.
struct block_move {
  block_id device_block = 0;
  block_id host_block = 0;
};

inline bool operator==(const block_move& x, const block_move& y) noexcept {
  return x.device_block == y.device_block && x.host_block == y.host_block;
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, block_move& x) {
  return f(caf::meta::type_name("block_move"), x.device_block, x.host_block);
}

// -- statistics ------------------------------------------------------------------

/// One tenant's share of the pool.
struct tenant_usage {
  std::string name;
  std::uint64_t blocks_used = 0;     ///< blocks charged to the tenant
  std::uint64_t max_blocks = 0;      ///< quota, 0 = none
  std::uint64_t reserved_blocks = 0; ///< guaranteed minimum
  std::uint64_t active_requests = 0;
  std::uint64_t prefix_query_tokens = 0; ///< prompt tokens looked up
  std::uint64_t prefix_hit_tokens = 0;   ///< of which found cached
  std::uint64_t preemptions = 0; ///< of requests holding device blocks
  std::uint64_t allocation_failures = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tenant_usage& x) {
  return f(caf::meta::type_name("tenant_usage"), x.name, x.blocks_used,
           x.max_blocks, x.reserved_blocks, x.active_requests,
           x.prefix_query_tokens, x.prefix_hit_tokens, x.preemptions,
           x.allocation_failures);
}

/// The manager's figures: ferrum's CacheManagerStats plus kvactor's own.
struct cache_manager_stats {
  std::uint64_t total_memory_bytes = 0; ///< bytes of all device blocks
  std::uint64_t used_memory_bytes = 0;  ///< bytes of blocks in use
  std::uint64_t active_caches = 0;      ///< live requests
  std::uint64_t total_blocks = 0;
  /// Blocks no request holds and none drains (cached ones too).
  std::uint64_t free_blocks = 0;
  double cache_hit_rate = 0;       ///< prefix hit tokens / looked-up tokens
  std::uint64_t eviction_count = 0;     ///< cached blocks evicted
  /// Successful admissions: allocates, a step's admissions, and forks.
  std::uint64_t allocation_count = 0;
  /// Allocations refused for want of blocks: out_of_blocks,
  /// quota_exceeded, exceeds_capacity.
  std::uint64_t allocation_failures = 0;
  std::uint64_t cached_blocks = 0; ///< free blocks still holding a prefix
  memory_pressure pressure = memory_pressure::low;
  /// Preemptions of requests holding device blocks (ending a swapped-out
  /// or swapping request frees none: its swap-out was the relief, counted
  /// in swap_out_count).
  std::uint64_t preemption_count = 0;
  std::uint64_t swap_out_count = 0; ///< requests swapped out to the host tier
  std::uint64_t swap_in_count = 0;
  std::uint64_t block_size = 0;       ///< tokens per block
  std::uint64_t prefix_query_tokens = 0;
  std::uint64_t prefix_hit_tokens = 0;
  std::uint64_t host_total_blocks = 0; ///< host tier for swapping
  std::uint64_t host_free_blocks = 0;
  std::vector<tenant_usage> tenants;
  // Block operations since start (REPLAY.md's block_ops is their sum with
  // eviction_count). Not a ledger: a cached block a prefix hit takes back
  // into use is counted among prefix_hit_blocks (as is a hit on a block in
  // use), not blocks_allocated, and its release again in blocks_freed - so
  // blocks_allocated - blocks_freed may go below 0. The blocks in use are
  // total_blocks - free_blocks - draining_blocks.
  std::uint64_t blocks_allocated = 0;  ///< fresh blocks handed out
  std::uint64_t prefix_hit_blocks = 0; ///< blocks shared from the index
  std::uint64_t blocks_freed = 0;      ///< blocks whose last ref went
  std::uint64_t blocks_cached = 0;     ///< full blocks entered the index
  std::uint64_t cow_copies = 0;        ///< copy-on-write block copies
  /// Blocks a swap-in shared again because their prefix was still on the
  /// device (cached or in use), instead of copying them from the host.
  std::uint64_t swap_in_shared_blocks = 0;
  /// Speculative decoding: tokens extended as drafts, and those of them
  /// the verification rejected (settle_drafts dropped them).
  std::uint64_t draft_tokens = 0;
  std::uint64_t draft_tokens_rejected = 0;
  /// Blocks the supervisor's victims let go that are not free yet: they
  /// drain until the victim's writer is surely done
  /// (pressure.preempt_grace_ms). Neither used nor free.
  std::uint64_t draining_blocks = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, cache_manager_stats& x) {
  return f(caf::meta::type_name("cache_manager_stats"), x.total_memory_bytes,
           x.used_memory_bytes, x.active_caches, x.total_blocks, x.free_blocks,
           x.cache_hit_rate, x.eviction_count, x.allocation_count,
           x.allocation_failures, x.cached_blocks, x.pressure,
           x.preemption_count, x.swap_out_count, x.swap_in_count, x.block_size,
           x.prefix_query_tokens, x.prefix_hit_tokens, x.host_total_blocks,
           x.host_free_blocks, x.tenants, x.blocks_allocated,
           x.prefix_hit_blocks, x.blocks_freed, x.blocks_cached, x.cow_copies,
           x.swap_in_shared_blocks, x.draft_tokens, x.draft_tokens_rejected,
           x.draining_blocks);
}

/// What one garbage collection did.
struct cache_gc_stats {
  std::uint64_t memory_freed = 0;     ///< bytes of blocks reclaimed
  std::uint64_t caches_freed = 0;     ///< requests reclaimed
  std::uint64_t blocks_reclaimed = 0; ///< blocks returned or evicted
  double gc_time_ms = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, cache_gc_stats& x) {
  return f(caf::meta::type_name("cache_gc_stats"), x.memory_freed,
           x.caches_freed, x.blocks_reclaimed, x.gc_time_ms);
}

/// One request's figures.
struct cache_handle_stats {
  std::uint64_t memory_bytes = 0;     ///< bytes of its blocks
  std::uint64_t blocks_allocated = 0;
  std::uint64_t tokens_stored = 0;
  double utilization = 0;             ///< tokens / (blocks * block_size)
  /// When it was admitted or last grew - through its handle, the manager
  /// or a step - in ns since the Unix epoch (the pool's clock).
  std::uint64_t last_access = 0;
  /// kvactor's own: the prompt tokens its admission found in the prefix
  /// cache (whole blocks, never the last prompt token). Their K/V is in
  /// its first blocks already - or will be once the pass of the request
  /// that admitted them writes it (README, Using it) - so the model
  /// computes the prompt from token prefix_hit_tokens on. Unlike a probe (cached_prefix) it is what
  /// the admission did, not a hint. 0 for a fork (its blocks are its
  /// parent's, all written) and for a request without a prompt.
  std::uint64_t prefix_hit_tokens = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, cache_handle_stats& x) {
  return f(caf::meta::type_name("cache_handle_stats"), x.memory_bytes,
           x.blocks_allocated, x.tokens_stored, x.utilization, x.last_access,
           x.prefix_hit_tokens);
}

} // namespace kvactor

// tensor_view (in-process only) belongs to the public value types.
#include "kvactor/messages/tensor_view.hpp"
