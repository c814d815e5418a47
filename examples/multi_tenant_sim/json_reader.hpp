// json_reader: reading JSON objects field by field with errors that name
// the file, the line and the field ("scenario.json:14: workloads.chat.rate:
// must be >= 0 (got -1)"). nlohmann::json keeps no positions, so line_index
// scans the text once for the line each key starts on. CAF-free but for
// caf::error.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <unordered_map>

#include <caf/error.hpp>
#include <nlohmann/json.hpp>

#include "kvactor/config/json_helpers.hpp"

namespace kvactor::sim {

/// detail::join_path: "a.b" from ("a", "b"), a["x.y"] from ("a", "x.y").
std::string join_path(const std::string& path, const std::string& key);

/// The line each key and array element of a JSON text starts on, by path
/// ("cache.tenants[0].name"). Tolerates text cut short (a malformed
/// document's prefix), so it can also say what was read last.
class line_index {
public:
  explicit line_index(const std::string& text,
                      std::size_t end = std::string::npos);

  /// The line of `path`, or of the nearest enclosing path recorded (1 if
  /// none): a missing key is reported where its object starts.
  int line_of(std::string path) const;

  /// The path read last ("" if none).
  const std::string& last_path() const noexcept {
    return last_;
  }

private:
  void record(const std::string& path, int line);

  std::unordered_map<std::string, int> lines_;
  std::string last_;
};

/// Makes invalid_config errors reading "SOURCE:LINE: FIELD: what".
struct error_maker {
  const std::string& source;
  const line_index& lines;

  caf::error operator()(const std::string& field, const std::string& what) const;
};

// " (got -1)", " (got an array)", and the integer >= 0 test: the same
// helpers as kvactor's config reader, so both word their errors alike.
using detail::got;
using detail::non_negative_integer;

/// Reads the fields of one object whose path is `path`. Each read leaves its
/// output untouched when the key is missing and not required; every error
/// names the field.
class object_reader {
public:
  object_reader(const nlohmann::json& obj, std::string path,
                const error_maker& fail)
    : obj_(obj), path_(std::move(path)), fail_(fail) {
  }

  std::string field(const std::string& key) const {
    return join_path(path_, key);
  }

  /// Fails on the first key not in `known`.
  caf::error check_keys(std::initializer_list<const char*> known) const;

  const nlohmann::json* find(const char* key) const;

  caf::error missing(const char* key, const char* expected) const;

  /// An integer in [min, max] (max: T's, or lower).
  template <class T>
  caf::error count(const char* key, T& out, std::uint64_t min, bool required,
                   std::uint64_t max = std::numeric_limits<T>::max()) const {
    auto value = find(key);
    if (!value)
      return required ? missing(key, "an integer") : caf::error{};
    std::uint64_t x = 0;
    if (!non_negative_integer(*value, x))
      return fail_(field(key), "expected a non-negative integer" + got(*value));
    if (x < min)
      return fail_(field(key), "must be >= " + std::to_string(min) + got(*value));
    max = std::min<std::uint64_t>(max, std::numeric_limits<T>::max());
    if (x > max)
      return fail_(field(key), "must be at most " + std::to_string(max)
                                 + got(*value));
    out = static_cast<T>(x);
    return caf::error{};
  }

  /// A number in [min, max].
  caf::error number(const char* key, double& out, double min, double max,
                    bool required) const;

  caf::error boolean(const char* key, bool& out) const;

  caf::error string(const char* key, std::string& out) const;

  caf::error object(const char* key, const nlohmann::json*& out,
                    bool required) const;

  /// [min, max] (or one number for both), min >= `least`, max <= 2^24.
  caf::error range(const char* key, std::uint32_t& min, std::uint32_t& max,
                   std::uint32_t least, bool required) const;

private:
  const nlohmann::json& obj_;
  std::string path_;
  const error_maker& fail_;
};

} // namespace kvactor::sim
