// Reads a cache_config from JSON (parse_config, load_config): key and type
// checks here, range checks shared with validate() in validate_config.cpp.
#include "kvactor/config/cache_config.hpp"
#include "kvactor/config/cache_limits.hpp"

#include <initializer_list>
#include <limits>
#include <type_traits>

#include <caf/message.hpp>
#include <nlohmann/json.hpp>

#include "kvactor/config/json_helpers.hpp"
#include "kvactor/messages/error.hpp"

namespace kvactor {

namespace {

using nlohmann::json;
using detail::got;
using detail::non_negative_integer;

caf::error fail(const std::string& field, const std::string& what) {
  return make_error(errc::invalid_config, field + ": " + what);
}

/// Reads the fields of one JSON object whose path is `path` ("" at the root,
/// else "model", "tenants[1]", ...). Each read leaves `out` untouched when the
/// key is missing and fails, naming the field, on a wrong type.
class object_reader {
public:
  object_reader(const json& obj, std::string path)
    : obj_(obj), path_(std::move(path)) {
  }

  /// Fails on the first key not in `known`.
  caf::error check_keys(std::initializer_list<const char*> known) const {
    if (auto key = detail::first_unknown_key(obj_, known))
      return fail(field(*key), detail::unknown_key_message(*key, known));
    return caf::none;
  }

  /// A JSON integer >= 0; `positive` only words the message for fields whose
  /// range starts at 1 (validate() reports 0 for those). A value past T's
  /// range is refused here, with the value given: a count never wraps, nor
  /// reaches validate() clamped (whose message would name the clamp).
  template <class T>
  caf::error count(const char* key, T& out, bool positive = false) const {
    static_assert(std::is_unsigned<T>::value, "counts are unsigned");
    auto value = find(key);
    if (!value)
      return caf::none;
    auto expected = positive ? "expected a positive integer"
                             : "expected a non-negative integer";
    std::uint64_t x = 0;
    if (!non_negative_integer(*value, x))
      return fail(field(key), expected + got(*value));
    constexpr std::uint64_t max = std::numeric_limits<T>::max();
    if (x > max)
      return fail(field(key), "must be at most " + std::to_string(max)
                                + got(*value));
    out = static_cast<T>(x);
    return caf::none;
  }

  /// Any JSON number, integer or not.
  caf::error number(const char* key, double& out) const {
    auto value = find(key);
    if (!value)
      return caf::none;
    if (!value->is_number())
      return fail(field(key), "expected a number" + got(*value));
    out = value->get<double>();
    return caf::none;
  }

  caf::error string(const char* key, std::string& out) const {
    auto value = find(key);
    if (!value)
      return caf::none;
    if (!value->is_string())
      return fail(field(key), "expected a string" + got(*value));
    out = value->get<std::string>();
    return caf::none;
  }

  caf::error boolean(const char* key, bool& out) const {
    auto value = find(key);
    if (!value)
      return caf::none;
    if (!value->is_boolean())
      return fail(field(key), "expected true or false" + got(*value));
    out = value->get<bool>();
    return caf::none;
  }

  /// A string naming an enumerator (from_string); `names` lists them all.
  template <class Enum>
  caf::error enumerator(const char* key, Enum& out, const char* names) const {
    std::string text;
    auto value = find(key);
    if (!value)
      return caf::none;
    if (auto err = string(key, text))
      return err;
    if (!from_string(text, out))
      return fail(field(key),
                  std::string{"must be one of "} + names + got(*value));
    return caf::none;
  }

  /// The object at `key`, or null when missing; fails when not an object.
  caf::error object(const char* key, const json*& out) const {
    out = find(key);
    if (out && !out->is_object())
      return fail(field(key), "expected an object" + got(*out));
    return caf::none;
  }

  const json* find(const char* key) const {
    auto i = obj_.find(key);
    return i == obj_.end() ? nullptr : &*i;
  }

  /// The member's path as parse_json names a key given twice: an unknown
  /// key may be "" or hold '.' or brackets, which join_path quotes.
  std::string field(const std::string& key) const {
    return detail::join_path(path_, key);
  }

private:
  const json& obj_;
  std::string path_;
};

// The readers below chain `(err = read(...)) || ...`: each read runs only
// while every one before it succeeded, and `err` holds the first failure.

caf::error read_model(const json& obj, model_config& out) {
  object_reader r{obj, "model"};
  caf::error err;
  (err = r.check_keys({"num_layers", "num_kv_heads", "head_dim", "dtype"}))
    || (err = r.count("num_layers", out.num_layers, true))
    || (err = r.count("num_kv_heads", out.num_kv_heads, true))
    || (err = r.count("head_dim", out.head_dim, true))
    || (err = r.enumerator("dtype", out.dtype,
                           "fp32, fp16, bf16, fp8_e4m3, int8"));
  return err;
}

caf::error read_pressure(const json& obj, pressure_config& out) {
  object_reader r{obj, "pressure"};
  caf::error err;
  (err = r.check_keys({"medium", "high", "critical", "hysteresis",
                       "evict_cached_at_high", "preempt_at_critical",
                       "preempt_grace_ms"}))
    || (err = r.number("medium", out.medium))
    || (err = r.number("high", out.high))
    || (err = r.number("critical", out.critical))
    || (err = r.number("hysteresis", out.hysteresis))
    || (err = r.boolean("evict_cached_at_high", out.evict_cached_at_high))
    || (err = r.boolean("preempt_at_critical", out.preempt_at_critical))
    || (err = r.count("preempt_grace_ms", out.preempt_grace_ms));
  return err;
}

caf::error read_admission(const json& obj, admission_config& out) {
  object_reader r{obj, "admission"};
  caf::error err;
  (err = r.check_keys({"policy", "watermark", "default_expected_output"}))
    || (err = r.string("policy", out.policy))
    || (err = r.number("watermark", out.watermark))
    || (err = r.count("default_expected_output", out.default_expected_output));
  return err;
}

caf::error read_tenant(const json& obj, const std::string& path,
                       tenant_config& out) {
  if (!obj.is_object())
    return fail(path, "expected an object" + got(obj));
  object_reader r{obj, path};
  caf::error err;
  (err = r.check_keys({"name", "max_blocks", "reserved_blocks", "priority",
                       "prefix_namespace"}))
    || (err = r.string("name", out.name))
    || (err = r.count("max_blocks", out.max_blocks))
    || (err = r.count("reserved_blocks", out.reserved_blocks))
    || (err = r.enumerator("priority", out.priority,
                           "low, normal, high, critical"))
    || (err = r.string("prefix_namespace", out.prefix_namespace));
  return err;
}

caf::error read_tenants(const json* arr, std::vector<tenant_config>& out) {
  if (!arr)
    return caf::none;
  if (!arr->is_array())
    return fail("tenants", "expected an array of tenant objects" + got(*arr));
  // validate()'s bound, before a tenant is made for each element: the 20
  // million elements of a 40 MB file made as many tenants (1.2 GB) before
  // the first was refused.
  if (arr->size() > max_tenants)
    return fail("tenants", "must be at most " + std::to_string(max_tenants)
                             + " (got " + std::to_string(arr->size()) + ")");
  std::vector<tenant_config> tenants(arr->size());
  for (std::size_t i = 0; i < tenants.size(); ++i)
    if (auto err = read_tenant((*arr)[i], "tenants[" + std::to_string(i) + "]",
                               tenants[i]))
      return err;
  out = std::move(tenants);
  return caf::none;
}

caf::error read_device_index(const object_reader& r, int& out) {
  auto value = r.find("device_index");
  if (!value)
    return caf::none;
  std::uint64_t x = 0;
  if (!non_negative_integer(*value, x))
    return fail("device_index",
                "expected a non-negative integer" + got(*value));
  constexpr int max = std::numeric_limits<int>::max();
  if (x > static_cast<std::uint64_t>(max))
    return fail("device_index",
                "must be at most " + std::to_string(max) + got(*value));
  out = static_cast<int>(x);
  return caf::none;
}

caf::error read_config(const json& obj, cache_config& out) {
  if (!obj.is_object())
    return fail("config", "expected a JSON object" + got(obj));
  object_reader r{obj, ""};
  const json* model = nullptr;
  const json* pressure = nullptr;
  const json* admission = nullptr;
  caf::error err;
  (err = r.check_keys({"block_size", "model", "layout", "storage",
                       "num_gpu_blocks", "gpu_memory_utilization",
                       "num_host_blocks", "prefix_caching", "pressure",
                       "gc_interval_ms", "gc_check_interval_ms", "tenants",
                       "scheduler_threads",
                       "device_index", "device_timeout_ms", "admission",
                       "max_pinned_blocks"}))
    || (err = r.count("block_size", out.block_size, true))
    || (err = r.object("model", model))
    || (model && (err = read_model(*model, out.model)))
    || (err = r.string("layout", out.layout))
    || (err = r.string("storage", out.storage))
    || (err = r.count("num_gpu_blocks", out.num_gpu_blocks))
    || (err = r.number("gpu_memory_utilization", out.gpu_memory_utilization))
    || (err = r.count("num_host_blocks", out.num_host_blocks))
    || (err = r.boolean("prefix_caching", out.prefix_caching))
    || (err = r.object("pressure", pressure))
    || (pressure && (err = read_pressure(*pressure, out.pressure)))
    || (err = r.object("admission", admission))
    || (admission && (err = read_admission(*admission, out.admission)))
    || (err = r.count("max_pinned_blocks", out.max_pinned_blocks))
    || (err = r.count("gc_interval_ms", out.gc_interval_ms))
    || (err = r.count("gc_check_interval_ms", out.gc_check_interval_ms))
    || (err = read_tenants(r.find("tenants"), out.tenants))
    || (err = r.count("scheduler_threads", out.scheduler_threads))
    || (err = read_device_index(r, out.device_index))
    || (err = r.count("device_timeout_ms", out.device_timeout_ms));
  // Prefix caching needs the paged layout: unsaid, it is off for contiguous.
  if (!err && out.layout == "contiguous" && !r.find("prefix_caching"))
    out.prefix_caching = false;
  return err;
}

} // namespace

caf::expected<cache_config> parse_config(const nlohmann::json& json) {
  cache_config cfg;
  if (auto err = read_config(json, cfg))
    return err;
  if (auto err = validate(cfg))
    return err;
  return cfg;
}

caf::expected<cache_config> load_config(const std::string& path) {
  auto text = detail::read_text_file(path);
  if (!text)
    return std::move(text.error());
  nlohmann::json json;
  std::string duplicate;
  try {
    json = detail::parse_json(*text, duplicate);
  } catch (const detail::json_text_error& e) {
    return make_error(errc::invalid_config,
                      path + ": malformed JSON at byte "
                        + std::to_string(e.offset + 1) + ": " + e.what());
  } catch (const nlohmann::json::parse_error& e) {
    return make_error(errc::invalid_config,
                      path + ": malformed JSON at byte "
                        + std::to_string(e.byte) + ": " + e.what());
  } catch (const nlohmann::json::exception& e) {
    // A number past a double's range ("number overflow parsing '1e400'").
    return make_error(errc::invalid_config,
                      path + ": malformed JSON: " + e.what());
  }
  if (!duplicate.empty())
    return make_error(errc::invalid_config,
                      path + ": " + duplicate + ": " + detail::given_twice);
  auto cfg = parse_config(json);
  if (!cfg)
    return make_error(errc::invalid_config,
                      path + ": " + context_of(cfg.error()));
  return cfg;
}

} // namespace kvactor
