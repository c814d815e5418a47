// validate(cache_config): every range check of a config, built in code or
// read from JSON, each failure an invalid_config naming the field and the
// value it refuses.
#include "kvactor/config/cache_config.hpp"
#include "kvactor/config/cache_limits.hpp"

#include <cstdint>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>
#include <unordered_set>

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
  auto* t = unreserved_tenant(cfg);
  if (t == nullptr)
    return caf::none;
  auto left = " of the " + std::to_string(n) + " blocks, none is left for "
              "tenant '" + t->name + "' (no reservation of its own) to be "
              "admitted with";
  // The reservations alone take the pool: theirs is the field to fix,
  // named at the last tenant that reserves.
  if (reserved >= n) {
    std::size_t last = 0;
    for (std::size_t i = 0; i < cfg.tenants.size(); ++i)
      if (cfg.tenants[i].reserved_blocks != 0)
        last = i;
    return fail("tenants[" + std::to_string(last) + "].reserved_blocks",
                "the tenants' reservations add up to "
                  + std::to_string(reserved) + ":" + left
                  + " (reserve fewer, or give it a reservation)");
  }
  return fail("admission.watermark",
              "holds back " + std::to_string(held) + " blocks, and the "
                "tenants' reserved_blocks " + std::to_string(reserved) + ":"
                + left);
}

} // namespace

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
  if (cfg.gc_check_interval_ms > max_interval_ms)
    return fail("gc_check_interval_ms",
                "must be at most " + std::to_string(max_interval_ms)
                  + " (one day); 0 = only gc() checks"
                  + got(cfg.gc_check_interval_ms));
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

} // namespace kvactor
