// cache_config: range checks (validate), the embedded default, the JSON
// writer and tenant lookup. The JSON reader lives in parse_config.cpp, the
// block counts pressure and tenants imply in cache_capacity.cpp.
#include "kvactor/config/cache_config.hpp"
#include "kvactor/config/cache_limits.hpp"

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "kvactor/messages/error.hpp"

namespace kvactor {

namespace {

constexpr std::uint32_t max_model_dim = 1024; // layers, heads, head_dim
constexpr std::uint64_t max_interval_ms = 24ull * 60 * 60 * 1000;
constexpr std::uint64_t max_grace_ms = 60 * 1000;
constexpr std::uint32_t max_scheduler_threads = 256;

caf::error fail(const std::string& field, const std::string& what) {
  return make_error(errc::invalid_config, field + ": " + what);
}

/// Whether `s` is well-formed UTF-8 (no overlong forms, surrogates or code
/// points past U+10FFFF): tenant names reach JSON, KV events and Prometheus
/// labels, which all require it.
bool valid_utf8(const std::string& s) {
  auto at = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  for (std::size_t i = 0; i < s.size();) {
    auto c = at(i);
    std::size_t n = 0;
    std::uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    }
    if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    for (std::size_t k = 1; k <= n; ++k) {
      if (i + k >= s.size() || (at(i + k) & 0xC0) != 0x80)
        return false;
      cp = (cp << 6) | (at(i + k) & 0x3F);
    }
    static constexpr std::uint32_t least[] = {0, 0x80, 0x800, 0x10000};
    if (cp < least[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += n + 1;
  }
  return true;
}

/// Shortest decimal text of `x` that reads back as `x`: "0.6", not
/// "0.59999999999999998" (for messages).
std::string num(double x) {
  std::string text;
  for (int digits = 1; digits <= std::numeric_limits<double>::max_digits10;
       ++digits) {
    std::ostringstream out;
    out.precision(digits);
    out << x;
    text = out.str();
    if (std::strtod(text.c_str(), nullptr) == x)
      break;
  }
  return text;
}

/// " (got x)", for the value a message refuses.
std::string got(double x) {
  return " (got " + num(x) + ")";
}
std::string got(std::uint64_t x) {
  return " (got " + std::to_string(x) + ")";
}
std::string got(std::int64_t x) {
  return " (got " + std::to_string(x) + ")";
}
std::string got(std::uint32_t x) {
  return got(std::uint64_t{x});
}

/// True for x in (0, 1]; false for NaN.
bool in_unit_interval(double x) {
  return x > 0.0 && x <= 1.0;
}

bool known(dtype x) {
  return std::strcmp(to_string(x), "unknown") != 0;
}

bool known(priority x) {
  return std::strcmp(to_string(x), "unknown") != 0;
}

caf::error check_dim(const char* field, std::uint32_t value) {
  if (value < 1 || value > max_model_dim)
    return fail(field, "must be in [1, " + std::to_string(max_model_dim) + "]"
                         + got(value));
  return caf::none;
}

caf::error validate_model(const model_config& m) {
  if (auto err = check_dim("model.num_layers", m.num_layers))
    return err;
  if (auto err = check_dim("model.num_kv_heads", m.num_kv_heads))
    return err;
  if (auto err = check_dim("model.head_dim", m.head_dim))
    return err;
  if (!known(m.dtype))
    return fail("model.dtype",
                "must be one of fp32, fp16, bf16, fp8_e4m3, int8"
                  + got(std::int64_t{static_cast<int>(m.dtype)}));
  return caf::none;
}

caf::error validate_pressure(const pressure_config& p) {
  const std::pair<const char*, double> levels[] = {
    {"pressure.medium", p.medium},
    {"pressure.high", p.high},
    {"pressure.critical", p.critical},
  };
  for (auto& [field, value] : levels)
    if (!in_unit_interval(value))
      return fail(field, "must be in (0, 1]" + got(value));
  if (!(p.high > p.medium))
    return fail("pressure.high", "must be greater than pressure.medium ("
                                   + num(p.medium) + ")" + got(p.high));
  if (!(p.critical > p.high))
    return fail("pressure.critical",
                "must be greater than pressure.high (" + num(p.high) + ")"
                  + got(p.critical));
  if (!(p.hysteresis >= 0.0 && p.hysteresis < 0.5))
    return fail("pressure.hysteresis", "must be in [0, 0.5)" + got(p.hysteresis));
  if (!(p.hysteresis < p.medium))
    return fail("pressure.hysteresis", "must be smaller than pressure.medium ("
                                         + num(p.medium) + ")"
                                         + got(p.hysteresis));
  if (p.preempt_grace_ms > max_grace_ms)
    return fail("pressure.preempt_grace_ms",
                "must be at most " + std::to_string(max_grace_ms)
                  + " (a minute: its blocks are no one's meanwhile)"
                  + got(p.preempt_grace_ms));
  return caf::none;
}

/// The pressure marks in whole blocks of a pool of `num_blocks`: medium's
/// must be at least one block, entered and left. At 0 blocks the pool
/// would be at medium pressure empty, or never go back to low (left below
/// 0 blocks in use). Higher levels' marks are at least medium's.
caf::error validate_pressure_marks(const pressure_config& p,
                                   std::uint64_t num_blocks) {
  auto one_block = num(1.0 / static_cast<double>(num_blocks));
  auto of_pool = " of " + std::to_string(num_blocks) + " blocks";
  if (pressure_mark(p.medium, num_blocks) == 0)
    return fail("pressure.medium",
                num(p.medium) + of_pool + " is no whole block: the pool would "
                  "be at medium pressure empty (at least " + one_block
                  + ", one block)");
  if (pressure_mark(p.medium - p.hysteresis, num_blocks) == 0)
    return fail("pressure.hysteresis",
                "leaves medium pressure below " + num(p.medium - p.hysteresis)
                  + of_pool + ", no whole block: the pool would never go "
                  "back to low (pressure.medium - pressure.hysteresis must be "
                  "at least " + one_block + ", one block)");
  return caf::none;
}

/// One block's bytes, all layers, K and V (storage_layout::bytes_per_block).
/// REQUIRES: a validated block size and model; then at most 2^43.
std::uint64_t bytes_per_block(const cache_config& cfg) {
  return 2 * std::uint64_t{cfg.model.num_layers} * cfg.block_size
         * cfg.model.num_kv_heads * cfg.model.head_dim * size_of(cfg.model.dtype);
}

/// `blocks` of `per_block` bytes must stay within int64's range: the
/// storages keep every byte offset in one (device/validate.cpp refuses a
/// layout past it at start), and the memory figures are that product.
caf::error check_pool_bytes(const char* field, std::uint64_t blocks,
                            std::uint64_t per_block) {
  constexpr auto max_bytes =
    static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  if (per_block == 0 || blocks <= max_bytes / per_block)
    return caf::none;
  return fail(field, std::to_string(blocks) + " blocks of "
                       + std::to_string(per_block)
                       + " bytes (all layers, K and V) are 2^63 bytes or "
                         "more: at most "
                       + std::to_string(max_bytes / per_block));
}

caf::error validate_tenants(const std::vector<tenant_config>& tenants,
                            std::uint64_t num_gpu_blocks) {
  if (tenants.empty())
    return fail("tenants", "must name at least one tenant");
  if (tenants.size() > max_tenants)
    return fail("tenants", "must be at most " + std::to_string(max_tenants)
                             + " (got " + std::to_string(tenants.size()) + ")");
  std::unordered_set<std::string> names;
  std::uint64_t reserved_sum = 0;
  for (std::size_t i = 0; i < tenants.size(); ++i) {
    auto& t = tenants[i];
    auto path = "tenants[" + std::to_string(i) + "].";
    if (t.name.empty())
      return fail(path + "name", "must not be empty");
    if (!valid_utf8(t.name))
      return fail(path + "name", "must be valid UTF-8");
    if (!valid_utf8(t.prefix_namespace))
      return fail(path + "prefix_namespace", "must be valid UTF-8");
    if (!names.insert(t.name).second)
      return fail(path + "name", "duplicate tenant '" + t.name + "'");
    if (t.max_blocks > max_num_blocks)
      return fail(path + "max_blocks", "must be at most "
                                         + std::to_string(max_num_blocks)
                                         + got(t.max_blocks));
    if (t.reserved_blocks > max_num_blocks)
      return fail(path + "reserved_blocks", "must be at most "
                                              + std::to_string(max_num_blocks)
                                              + got(t.reserved_blocks));
    if (t.max_blocks != 0 && t.max_blocks < t.reserved_blocks)
      return fail(path + "max_blocks",
                  "must be 0 (no quota) or at least reserved_blocks ("
                    + std::to_string(t.reserved_blocks) + ")");
    if (!known(t.priority))
      return fail(path + "priority",
                  "must be one of low, normal, high, critical"
                    + got(std::int64_t{static_cast<int>(t.priority)}));
    // Cannot overflow: each term is at most 2^31.
    reserved_sum += t.reserved_blocks;
    if (num_gpu_blocks > 0 && reserved_sum > num_gpu_blocks)
      return fail(path + "reserved_blocks",
                  "reserved blocks of all tenants sum to "
                    + std::to_string(reserved_sum)
                    + ", more than num_gpu_blocks ("
                    + std::to_string(num_gpu_blocks) + ")");
  }
  return caf::none;
}

/// The first tenant without a reservation of its own, or null.
const tenant_config* unreserved_tenant(const cache_config& cfg) {
  for (auto& t : cfg.tenants)
    if (t.reserved_blocks == 0)
      return &t;
  return nullptr;
}

/// With preempt_at_critical, a request may hold only the blocks below the
/// critical mark (beyond its tenant's reservation): a mark of one block
/// leaves a tenant without a reservation none, and its every allocation
/// exceeds_capacity.
caf::error validate_critical_room(const cache_config& cfg) {
  const auto n = cfg.num_gpu_blocks;
  if (n == 0 || !cfg.pressure.preempt_at_critical
      || pressure_mark(cfg.pressure.critical, n) > 1)
    return caf::none;
  if (auto* t = unreserved_tenant(cfg))
    return fail("pressure.critical",
                num(cfg.pressure.critical) + " of " + std::to_string(n)
                  + " blocks is a mark of 1 block: one request of tenant '"
                  + t->name + "' (no reservation) could hold none and stay "
                  "live - at critical pressure the supervisor preempts (at "
                  "least 2 blocks, or pressure.preempt_at_critical false)");
  return caf::none;
}

/// The watermark's blocks, kept free from admissions, come out of the
/// blocks no reservation holds: with the tenants' reservations they may
/// leave a tenant without a reservation of its own no block to admit with,
/// and its every admission would fail for good - as out_of_blocks, which
/// says to retry.
caf::error validate_watermark_room(const cache_config& cfg) {
  const auto n = cfg.num_gpu_blocks;
  if (n == 0)
    return caf::none;
  const auto held = static_cast<std::uint64_t>(
    std::ceil(cfg.admission.watermark * double(n)));
  std::uint64_t reserved = 0;
  for (auto& t : cfg.tenants)
    reserved += t.reserved_blocks;
  if (held + reserved < n)
    return caf::none;
  if (auto* t = unreserved_tenant(cfg))
    return fail("admission.watermark",
                "holds back " + std::to_string(held) + " blocks, and the "
                  "tenants' reserved_blocks " + std::to_string(reserved)
                  + ": of the " + std::to_string(n) + " blocks, none is left "
                  "for tenant '" + t->name + "' (no reservation of its own) "
                  "to be admitted with");
  return caf::none;
}

} // namespace

// -- cache_config -------------------------------------------------------------

const tenant_config* cache_config::find_tenant(const std::string& name) const {
  if (name.empty()) {
    for (auto& t : tenants)
      if (t.name == "default")
        return &t;
    return tenants.empty() ? nullptr : &tenants.front();
  }
  for (auto& t : tenants)
    if (t.name == name)
      return &t;
  return nullptr;
}

bool operator==(const cache_config& x, const cache_config& y) {
  return x.block_size == y.block_size && x.model == y.model
         && x.layout == y.layout && x.storage == y.storage
         && x.num_gpu_blocks == y.num_gpu_blocks
         && x.gpu_memory_utilization == y.gpu_memory_utilization
         && x.num_host_blocks == y.num_host_blocks
         && x.prefix_caching == y.prefix_caching && x.pressure == y.pressure
         && x.gc_interval_ms == y.gc_interval_ms && x.tenants == y.tenants
         && x.scheduler_threads == y.scheduler_threads
         && x.device_index == y.device_index
         && x.device_timeout_ms == y.device_timeout_ms
         && x.admission == y.admission
         && x.max_pinned_blocks == y.max_pinned_blocks;
}

// -- validation ---------------------------------------------------------------

caf::error validate(const cache_config& cfg) {
  if (!valid_block_size(cfg.block_size))
    return fail("block_size", "must be a power of two in [1, "
                                + std::to_string(max_block_size) + "]"
                                + got(cfg.block_size));
  if (auto err = validate_model(cfg.model))
    return err;
  if (cfg.layout != "paged" && cfg.layout != "contiguous")
    return fail("layout",
                "must be 'paged' or 'contiguous' (got '" + cfg.layout + "')");
  if (cfg.storage != "auto" && cfg.storage != "cuda" && cfg.storage != "host"
      && cfg.storage != "none")
    return fail("storage", "must be 'auto', 'cuda', 'host' or 'none' (got '"
                             + cfg.storage + "')");
  if (cfg.num_gpu_blocks > max_num_blocks)
    return fail("num_gpu_blocks", "must be at most "
                                    + std::to_string(max_num_blocks)
                                    + got(cfg.num_gpu_blocks));
  if (cfg.num_gpu_blocks == 0
      && (cfg.storage == "host" || cfg.storage == "none"))
    return fail("num_gpu_blocks",
                "storage '" + cfg.storage
                  + "' needs an explicit count > 0 (0 derives it from GPU "
                    "memory: cuda and auto only)");
  if (!in_unit_interval(cfg.gpu_memory_utilization))
    return fail("gpu_memory_utilization",
                "must be in (0, 1]" + got(cfg.gpu_memory_utilization));
  if (cfg.num_host_blocks > max_num_blocks)
    return fail("num_host_blocks", "must be at most "
                                     + std::to_string(max_num_blocks)
                                     + got(cfg.num_host_blocks));
  if (auto err = check_pool_bytes("num_gpu_blocks", cfg.num_gpu_blocks,
                                  bytes_per_block(cfg)))
    return err;
  if (auto err = check_pool_bytes("num_host_blocks", cfg.num_host_blocks,
                                  bytes_per_block(cfg)))
    return err;
  if (cfg.prefix_caching && cfg.layout == "contiguous")
    return fail("prefix_caching",
                "requires layout paged (layout is 'contiguous')");
  if (auto err = validate_pressure(cfg.pressure))
    return err;
  if (cfg.num_gpu_blocks > 0)
    if (auto err = validate_pressure_marks(cfg.pressure, cfg.num_gpu_blocks))
      return err;
  if (cfg.gc_interval_ms > max_interval_ms)
    return fail("gc_interval_ms", "must be at most "
                                    + std::to_string(max_interval_ms)
                                    + " (one day); 0 = on demand only"
                                    + got(cfg.gc_interval_ms));
  if (auto err = validate_tenants(cfg.tenants, cfg.num_gpu_blocks))
    return err;
  if (auto err = validate_critical_room(cfg))
    return err;
  if (cfg.admission.policy != "immediate"
      && cfg.admission.policy != "reserve_expected")
    return fail("admission.policy", "must be immediate or reserve_expected (got '"
                                      + cfg.admission.policy + "')");
  if (!(cfg.admission.watermark >= 0.0 && cfg.admission.watermark < 1.0))
    return fail("admission.watermark",
                "must be in [0, 1)" + got(cfg.admission.watermark));
  // The pool holds ceil(watermark * blocks) back from admissions: all of
  // them would admit nothing, ever.
  if (cfg.num_gpu_blocks > 0
      && std::ceil(cfg.admission.watermark * double(cfg.num_gpu_blocks))
           >= double(cfg.num_gpu_blocks))
    return fail("admission.watermark",
                "keeps all " + std::to_string(cfg.num_gpu_blocks)
                  + " blocks back from admissions");
  if (auto err = validate_watermark_room(cfg))
    return err;
  if (cfg.admission.default_expected_output > (std::uint64_t{1} << 32))
    return fail("admission.default_expected_output",
                "must be at most 2^32"
                  + got(cfg.admission.default_expected_output));
  if (cfg.max_pinned_blocks > max_num_blocks)
    return fail("max_pinned_blocks", "must be at most "
                                       + std::to_string(max_num_blocks)
                                       + got(cfg.max_pinned_blocks));
  if (cfg.scheduler_threads > max_scheduler_threads)
    return fail("scheduler_threads",
                "must be at most " + std::to_string(max_scheduler_threads)
                  + got(cfg.scheduler_threads));
  if (cfg.device_index < 0)
    return fail("device_index",
                "must be >= 0" + got(std::int64_t{cfg.device_index}));
  if (cfg.device_timeout_ms > max_interval_ms)
    return fail("device_timeout_ms", "must be at most "
                                       + std::to_string(max_interval_ms)
                                       + " (one day); 0 = wait for ever"
                                       + got(cfg.device_timeout_ms));
  return caf::none;
}

// -- JSON ---------------------------------------------------------------------

const char* default_config_json() noexcept {
  // DESIGN.md's config with a small model on host storage, so it runs
  // without a GPU. One block holds 16 tokens x 4 layers x 4 heads x 64 dims x
  // 2 bytes x (K, V) = 64 KiB: 16 MiB of device-tier blocks, 4 MiB of host
  // tier - small enough that the example reaches every pressure level.
  return R"({
  "block_size": 16,
  "model": {
    "num_layers": 4, "num_kv_heads": 4, "head_dim": 64, "dtype": "fp16"
  },
  "layout": "paged",
  "storage": "host",
  "num_gpu_blocks": 256,
  "gpu_memory_utilization": 0.9,
  "num_host_blocks": 64,
  "prefix_caching": true,
  "pressure": {
    "medium": 0.6, "high": 0.8, "critical": 0.95, "hysteresis": 0.05,
    "evict_cached_at_high": true, "preempt_at_critical": true,
    "preempt_grace_ms": 0
  },
  "admission": {
    "policy": "immediate", "watermark": 0.0, "default_expected_output": 256
  },
  "max_pinned_blocks": 64,
  "gc_interval_ms": 1000,
  "tenants": [{"name": "default"}],
  "scheduler_threads": 0,
  "device_index": 0,
  "device_timeout_ms": 30000
}
)";
}

nlohmann::json to_json(const cache_config& cfg) {
  using nlohmann::json;
  json tenants = json::array();
  for (auto& t : cfg.tenants)
    tenants.push_back(json{{"name", t.name},
                           {"max_blocks", t.max_blocks},
                           {"reserved_blocks", t.reserved_blocks},
                           {"priority", to_string(t.priority)},
                           {"prefix_namespace", t.prefix_namespace}});
  return json{
    {"block_size", cfg.block_size},
    {"model",
     {{"num_layers", cfg.model.num_layers},
      {"num_kv_heads", cfg.model.num_kv_heads},
      {"head_dim", cfg.model.head_dim},
      {"dtype", to_string(cfg.model.dtype)}}},
    {"layout", cfg.layout},
    {"storage", cfg.storage},
    {"num_gpu_blocks", cfg.num_gpu_blocks},
    {"gpu_memory_utilization", cfg.gpu_memory_utilization},
    {"num_host_blocks", cfg.num_host_blocks},
    {"prefix_caching", cfg.prefix_caching},
    {"pressure",
     {{"medium", cfg.pressure.medium},
      {"high", cfg.pressure.high},
      {"critical", cfg.pressure.critical},
      {"hysteresis", cfg.pressure.hysteresis},
      {"evict_cached_at_high", cfg.pressure.evict_cached_at_high},
      {"preempt_at_critical", cfg.pressure.preempt_at_critical},
      {"preempt_grace_ms", cfg.pressure.preempt_grace_ms}}},
    {"admission",
     {{"policy", cfg.admission.policy},
      {"watermark", cfg.admission.watermark},
      {"default_expected_output", cfg.admission.default_expected_output}}},
    {"max_pinned_blocks", cfg.max_pinned_blocks},
    {"gc_interval_ms", cfg.gc_interval_ms},
    {"tenants", std::move(tenants)},
    {"scheduler_threads", cfg.scheduler_threads},
    {"device_index", cfg.device_index},
    {"device_timeout_ms", cfg.device_timeout_ms},
  };
}

} // namespace kvactor
