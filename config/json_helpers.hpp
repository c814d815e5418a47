// Helpers of the JSON readers: kvactor's config (parse_config.cpp), the
// simulator's scenarios and the replay's traces share them so that all
// word their errors alike.
// Internal (namespace detail).
#pragma once

#include <cstdint>
#include <fstream>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include <caf/expected.hpp>
#include <nlohmann/json.hpp>

#include "kvactor/messages/errc.hpp"

namespace kvactor::detail {

/// The file at `path`, open for reading; an error of `code` naming the
/// path if it is a directory or cannot be opened (with the system's
/// reason).
caf::expected<std::ifstream> open_text_file(const std::string& path,
                                            errc code = errc::invalid_config);

/// Largest file read_text_file reads: far more than any config or
/// scenario (a scenario's given system prompts included), and a bound on
/// the memory a wrong path costs (`/dev/zero` or a log file).
constexpr std::size_t max_text_file_bytes = std::size_t{64} << 20;

/// The whole file at `path`; invalid_config naming the path if it is a
/// directory, cannot be opened or read, or holds more than `max_bytes`
/// (reading stops within 64 KiB past the limit, never at the file's end).
caf::expected<std::string>
read_text_file(const std::string& path,
               std::size_t max_bytes = max_text_file_bytes);

/// Deepest nesting of objects and arrays parse_json reads: far more than
/// any config, scenario or trace line has, and a bound on the parser's
/// work (nesting 20,000 deep took a gigabyte).
constexpr std::size_t max_json_depth = 64;

/// What parse_json refuses before parsing: a NUL byte (nlohmann would
/// silently stop reading there) or nesting deeper than max_json_depth.
/// `offset`: the offending character's index in the text.
struct json_text_error : std::runtime_error {
  json_text_error(const std::string& what, std::size_t at)
    : std::runtime_error(what), offset(at) {
  }
  std::size_t offset;
};

/// The path of member `key` of the value at `path`: "a.b" from ("a", "b"),
/// "b" from ("", "b"); a key with '.', '[', ']', '"' or ':' in it, or
/// none, quoted as JSON writes it, so the path reads one way: a["x.y"]
/// (and an error "PATH: what" splits one way: split_field).
std::string join_path(const std::string& path, const std::string& key);

/// An error context "FIELD: what" as the readers word it, split at the
/// first ": " outside the path's quoted keys (a["a: b"]: what); no ": "
/// gives an empty field and the whole text.
std::pair<std::string, std::string> split_field(const std::string& text);

/// nlohmann::json::parse(text), also finding the first key given twice in
/// one object - which nlohmann would let the last one win, silently. Its
/// path ("tenants[1].name", "" for none) goes to `duplicate`. Throws
/// json_text_error (see there) and what parse throws; with
/// `allow_exceptions` false returns a discarded value instead of either.
nlohmann::json parse_json(const std::string& text, std::string& duplicate,
                          bool allow_exceptions = true);

/// What the readers say of a key given twice.
constexpr const char* given_twice =
  "given twice in one object (only one value can count: say it once)";

/// " (got 1.5)", " (got an array)": what a field held instead, for messages.
std::string got(const nlohmann::json& value);

/// True if `value` is an integer >= 0, stored in `out`. JSON parsed from text
/// holds those as unsigned, JSON built in code (json{{"k", 16}}) as signed.
bool non_negative_integer(const nlohmann::json& value, std::uint64_t& out);

/// The first key of object `obj` that is not in `known`, if any (a copy:
/// an items() proxy's key may live in the proxy).
std::optional<std::string>
first_unknown_key(const nlohmann::json& obj,
                  std::initializer_list<const char*> known);

/// What the readers say of it: "unknown key 'k' (known: a, b, c)".
std::string unknown_key_message(const std::string& key,
                                std::initializer_list<const char*> known);

} // namespace kvactor::detail
