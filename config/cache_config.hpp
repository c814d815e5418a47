// cache_config: everything kvactor is configured with, its JSON form
// (DESIGN.md, "Config") and its validation. Plain data; no actor headers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/expected.hpp>
#include <nlohmann/json_fwd.hpp>

#include "kvactor/messages/types.hpp"

namespace kvactor {

/// The model whose K/V the cache holds; every request must match it.
struct model_config {
  std::uint32_t num_layers = 32;
  std::uint32_t num_kv_heads = 8;
  std::uint32_t head_dim = 128;
  kvactor::dtype dtype = kvactor::dtype::fp16;
};

/// Pressure levels as fractions of blocks in use (cached free blocks do not
/// count). A level is entered at its threshold and left once usage falls
/// `hysteresis` below it, so a pool hovering at a mark does not flap.
struct pressure_config {
  double medium = 0.6;
  double high = 0.8;
  double critical = 0.95;
  double hysteresis = 0.05;
  /// At high pressure, evict cached free blocks until blocks in use plus
  /// cached ones fall to the medium mark, so the pool keeps free blocks with
  /// nothing worth keeping in them. Off: cached blocks are evicted only when
  /// an allocation needs them (vLLM's lazy LRU), which keeps more prefixes.
  bool evict_cached_at_high = true;
  /// At critical pressure the supervisor preempts (recompute-style) until
  /// usage is back under the high mark: lowest priority first, then the
  /// tenant furthest over its fair share, then the newest; never a tenant
  /// at or below its reservation. Off: schedulers preempt themselves.
  /// The supervisor's preemption ends a request whatever its owner is
  /// doing: a model that writes K/V (views, DLPack, slot writes) while
  /// another client or thread may allocate needs preempt_grace_ms, or this
  /// off and its own preemption at critical pressure (README, Using it).
  bool preempt_at_critical = true;
  /// How long the blocks of the supervisor's victims drain - no request
  /// holds them, none may take them - before they come free, so that a
  /// forward pass still writing a victim's K/V writes into blocks nobody
  /// else has: at least the longest forward pass. A victim admitted by a
  /// step's admits drains only until its stepper's next step with
  /// earlier_steps_written (messages/step.hpp). 0: its
  /// blocks come free at once (one scheduler that writes each step's K/V
  /// before its next step needs no more). At most 60000.
  std::uint64_t preempt_grace_ms = 0;
};

/// When may a request be admitted? Extends never wait for headroom.
struct admission_config {
  /// "immediate": when its blocks are free now (vLLM). "reserve_expected":
  /// only if, after taking them, the free blocks still cover the expected
  /// growth of every live request and its own, so admitted requests do not
  /// immediately preempt each other.
  std::string policy = "immediate";
  /// Fraction of the pool admissions always leave free (vLLM v0's
  /// watermark), under either policy.
  double watermark = 0.0;
  /// Expected output of a request that does not say
  /// (allocation_request::expected_output_tokens == 0), for reserve_expected.
  std::uint64_t default_expected_output = 256;
};

/// One tenant. Block counts are device blocks.
struct tenant_config {
  std::string name = "default";
  /// Hard quota; 0 = none. Allocations past it fail with quota_exceeded.
  std::uint64_t max_blocks = 0;
  /// Guaranteed minimum: while the tenant holds fewer, the difference stays
  /// free for it and no other tenant may take it.
  std::uint64_t reserved_blocks = 0;
  kvactor::priority priority = kvactor::priority::normal;
  /// Prefix-cache namespace; "" = the tenant's own (isolated). Tenants that
  /// name the same namespace share cached prefixes.
  std::string prefix_namespace;
};

struct cache_config {
  std::uint32_t block_size = 16;
  model_config model;
  /// "paged" or "contiguous".
  std::string layout = "paged";
  /// "auto", "cuda", "host" or "none".
  std::string storage = "auto";
  /// 0 = derive from gpu_memory_utilization (cuda only).
  std::uint64_t num_gpu_blocks = 0;
  /// Fraction of the device's free memory the pool takes (128 MiB of it
  /// always stay free for the backend's buffers).
  double gpu_memory_utilization = 0.9;
  std::uint64_t num_host_blocks = 0;
  /// Needs layout paged; a JSON config with layout contiguous that does not
  /// mention it reads false (parse_config), a cache_config built in code
  /// must say false itself.
  bool prefix_caching = true;
  pressure_config pressure;
  admission_config admission;
  /// Cap on blocks pinned in the prefix cache with a time to live (pin
  /// messages); 0 disables pinning.
  std::uint64_t max_pinned_blocks = 0;
  /// Period of the supervisor's GC; 0 = only on demand.
  std::uint64_t gc_interval_ms = 1000;
  /// How often a timer GC pass also checks the accounting invariant (the
  /// first pass does, then one every this many ms, counted in passes); 0 =
  /// only gc() checks. The check is O(blocks + table entries) and the pool
  /// serves nothing meanwhile (~0.1 s at 1M blocks): each pass would stall
  /// a large pool. gc() always checks.
  std::uint64_t gc_check_interval_ms = 60000;
  std::vector<tenant_config> tenants{tenant_config{}};
  /// CAF worker threads; 0 = CAF's default.
  std::uint32_t scheduler_threads = 0;
  /// CUDA device index (for storage cuda / auto).
  int device_index = 0;
  /// Device work (a copy, swap, write or gather) not complete after this
  /// long is taken for a stalled GPU: its requesters and every other one
  /// waiting get device_failure, and the cache stops (its blocks cannot be
  /// handed on while the work may still write them). 0 = wait for ever.
  /// Below the facade's 60 s call timeout, so its callers hear the stall.
  std::uint64_t device_timeout_ms = 30000;

  /// The tenant named `name`, or null. "" is the default tenant: the one
  /// named "default" if there is one, else the first.
  const tenant_config* find_tenant(const std::string& name) const;
};

// -- equality (field by field; fractions compare exactly) ---------------------

inline bool operator==(const model_config& x, const model_config& y) noexcept {
  return x.num_layers == y.num_layers && x.num_kv_heads == y.num_kv_heads
         && x.head_dim == y.head_dim && x.dtype == y.dtype;
}

inline bool operator==(const pressure_config& x,
                       const pressure_config& y) noexcept {
  return x.medium == y.medium && x.high == y.high && x.critical == y.critical
         && x.hysteresis == y.hysteresis
         && x.evict_cached_at_high == y.evict_cached_at_high
         && x.preempt_at_critical == y.preempt_at_critical
         && x.preempt_grace_ms == y.preempt_grace_ms;
}

inline bool operator==(const admission_config& x,
                       const admission_config& y) noexcept {
  return x.policy == y.policy && x.watermark == y.watermark
         && x.default_expected_output == y.default_expected_output;
}

inline bool operator==(const tenant_config& x, const tenant_config& y) {
  return x.name == y.name && x.max_blocks == y.max_blocks
         && x.reserved_blocks == y.reserved_blocks && x.priority == y.priority
         && x.prefix_namespace == y.prefix_namespace;
}

bool operator==(const cache_config& x, const cache_config& y);

inline bool operator!=(const model_config& x, const model_config& y) noexcept {
  return !(x == y);
}
inline bool operator!=(const pressure_config& x,
                       const pressure_config& y) noexcept {
  return !(x == y);
}
inline bool operator!=(const tenant_config& x, const tenant_config& y) {
  return !(x == y);
}
inline bool operator!=(const cache_config& x, const cache_config& y) {
  return !(x == y);
}

// -- JSON ---------------------------------------------------------------------

/// Parses and validates `json`. Every unknown key, wrong type or value out of
/// range is reported as invalid_config naming the field (e.g. "pressure.high:
/// must be in (0, 1]"). Missing keys take their defaults.
caf::expected<cache_config> parse_config(const nlohmann::json& json);

/// Reads the JSON file at `path` and parses it. Errors (invalid_config) start
/// with the path: "cfg.json: cannot open (No such file or directory)",
/// "cfg.json: malformed JSON at byte 31: <nlohmann's message>",
/// "cfg.json: pressure.high: must be in (0, 1]".
caf::expected<cache_config> load_config(const std::string& path);

/// Validates a config built in code (the same checks as parse_config).
caf::error validate(const cache_config& cfg);

/// Blocks in use at which a pressure fraction is reached in a pool of
/// `num_blocks`: ceil(fraction * num_blocks).
std::uint64_t pressure_mark(double fraction, std::uint64_t num_blocks) noexcept;

/// Past how many blocks one request of `tenant` can never stay live in a
/// pool of `num_blocks`: the pool; for a tenant whose prefix namespace is
/// its own (every block of its tables is charged to it), no more than its
/// max_blocks (if set) and the pool less the other tenants' reservations;
/// with pressure.preempt_at_critical, no more than the critical mark less
/// one (the supervisor would preempt a request that reaches it on its own,
/// until usage is under the high mark) unless the tenant's reservation
/// covers more (a tenant at or below its reservation is never preempted)
/// or the tenant shares its prefix namespace and has a reservation (blocks
/// it shares are charged to their first holder, so its own charge may stay
/// within the reservation). A bound, not a promise: a request within it
/// can still be preempted beside others. The cache's allocate, extend and
/// steps refuse more with exceeds_capacity, up front. Not counted here,
/// though they may refuse a request for long (with out_of_blocks or
/// quota_exceeded): for a tenant sharing its namespace, its max_blocks and
/// other tenants' reservations (blocks shared with another tenant's
/// prompts count against neither); for admissions, the watermark and
/// expected growth (prefix hits on blocks in use need no new blocks).
std::uint64_t lone_request_cap(const cache_config& cfg,
                               const tenant_config& tenant,
                               std::uint64_t num_blocks) noexcept;

/// What bounds one tenant's requests, as the pool computes it at start.
struct tenant_bounds {
  std::uint64_t lone_cap = 0;        ///< lone_request_cap
  std::uint64_t others_reserved = 0; ///< the other tenants' reserved_blocks
  bool shares_namespace = false;     ///< another tenant names its namespace
};

/// tenant_bounds of every tenant of cfg.tenants, in their order, in one
/// pass (lone_request_cap scans the tenants for a shared namespace).
std::vector<tenant_bounds> tenant_bounds_of(const cache_config& cfg,
                                            std::uint64_t num_blocks);

/// The embedded default config as JSON text: DESIGN.md's config with a
/// small model, 256 blocks on host storage. examples/lifecycle runs on it;
/// `make run` uses its scenario's own cache.
const char* default_config_json() noexcept;

/// `cfg` as JSON, with every key; parse_config(to_json(cfg)) == cfg.
nlohmann::json to_json(const cache_config& cfg);

} // namespace kvactor
