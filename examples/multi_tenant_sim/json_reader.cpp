// json_reader: the line scanner and the field readers.
#include "json_reader.hpp"

#include <algorithm>
#include <vector>

#include "kvactor/messages/error.hpp"

namespace kvactor::sim {

namespace {

using nlohmann::json;

/// Shortest text of `x` for messages ("0", "1e+06").
std::string num(double x) {
  auto text = json(x).dump();
  if (text.size() > 2 && text.compare(text.size() - 2, 2, ".0") == 0)
    text.resize(text.size() - 2);
  return text;
}

/// The string a JSON string literal's body (between its quotes) stands
/// for; the body itself if it is not valid JSON.
std::string decode_string(const std::string& body) {
  auto v = json::parse("\"" + body + "\"", nullptr, false);
  return v.is_string() ? v.get<std::string>() : body;
}

} // namespace

std::string join_path(const std::string& path, const std::string& key) {
  return detail::join_path(path, key);
}

namespace {

/// `path` less its last step ("a.b[2]" -> "a.b", "a[\"x.y\"]" -> "a"); ""
/// for a single step.
std::string parent_of(const std::string& path) {
  std::size_t cut = 0;
  bool quoted = false;
  for (std::size_t i = 0; i < path.size(); ++i) {
    auto c = path[i];
    if (quoted) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        quoted = false;
    } else if (c == '"') {
      quoted = true;
    } else if (c == '.' || c == '[') {
      cut = i;
    }
  }
  return path.substr(0, cut);
}

} // namespace

// -- line_index -----------------------------------------------------------------

line_index::line_index(const std::string& text, std::size_t end) {
  end = std::min(end, text.size());
  struct frame {
    bool array;
    std::size_t index;
    std::string path;
    bool expect_key;
  };
  std::vector<frame> stack;
  std::string value_path; // of the value after the last key
  int line = 1;
  auto value_start = [&]() -> std::string {
    if (stack.empty()) {
      record("", line);
      return "";
    }
    auto& top = stack.back();
    if (!top.array)
      return value_path;
    auto p = top.path + "[" + std::to_string(top.index) + "]";
    record(p, line);
    return p;
  };
  auto is_delim = [](char c) {
    return c == ',' || c == '{' || c == '}' || c == '[' || c == ']'
           || c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == ':'
           || c == '"';
  };
  // A UTF-8 byte order mark, which the parser skips too (some editors
  // write one): read as a value, it hid the '{' after it and every field
  // fell back to line 1.
  std::size_t first = text.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;
  for (std::size_t i = first; i < end; ++i) {
    auto c = text[i];
    switch (c) {
      case '\n':
        ++line;
        break;
      case ' ':
      case '\t':
      case '\r':
      case ':':
        break;
      case '"': {
        auto start_line = line;
        std::string s; // as written, escapes and all
        bool escaped = false;
        for (++i; i < end && text[i] != '"'; ++i) {
          if (text[i] == '\\' && i + 1 < end) {
            escaped = true;
            s += text[i++];
          }
          if (text[i] == '\n')
            ++line;
          s += text[i];
        }
        if (escaped) // a name with escapes: as the parser reads it
          s = decode_string(s);
        if (!stack.empty() && !stack.back().array && stack.back().expect_key) {
          value_path = join_path(stack.back().path, s);
          record(value_path, start_line);
          stack.back().expect_key = false;
        } else {
          value_start();
        }
        break;
      }
      case '{':
      case '[': {
        auto p = value_start();
        stack.push_back(frame{c == '[', 0, std::move(p), true});
        break;
      }
      case '}':
      case ']':
        if (!stack.empty())
          stack.pop_back();
        break;
      case ',':
        if (!stack.empty()) {
          if (stack.back().array)
            ++stack.back().index;
          else
            stack.back().expect_key = true;
        }
        break;
      default: // a number, true, false or null
        value_start();
        while (i + 1 < end && !is_delim(text[i + 1]))
          ++i;
    }
  }
}

int line_index::line_of(std::string path) const {
  for (;;) {
    auto i = lines_.find(path);
    if (i != lines_.end())
      return i->second;
    if (path.empty())
      return 1;
    path = parent_of(path);
  }
}

void line_index::record(const std::string& path, int line) {
  lines_.emplace(path, line);
  last_ = path;
}

// -- errors -----------------------------------------------------------------------

caf::error error_maker::operator()(const std::string& field,
                                   const std::string& what) const {
  // The whole document has no field name: "FILE:1: expected a JSON object".
  return make_error(errc::invalid_config,
                    source + ":" + std::to_string(lines.line_of(field)) + ": "
                      + (field.empty() ? "" : field + ": ") + what);
}

// -- object_reader ----------------------------------------------------------------

caf::error
object_reader::check_keys(std::initializer_list<const char*> known) const {
  if (auto key = detail::first_unknown_key(obj_, known))
    return fail_(field(*key), detail::unknown_key_message(*key, known));
  return caf::none;
}

const json* object_reader::find(const char* key) const {
  auto i = obj_.find(key);
  return i == obj_.end() ? nullptr : &*i;
}

caf::error object_reader::missing(const char* key, const char* expected) const {
  return fail_(field(key), std::string{"missing (expected "} + expected + ")");
}

caf::error object_reader::number(const char* key, double& out, double min,
                                 double max, bool required) const {
  auto value = find(key);
  if (!value)
    return required ? missing(key, "a number") : caf::none;
  if (!value->is_number())
    return fail_(field(key), "expected a number" + got(*value));
  auto x = value->get<double>();
  if (x < min)
    return fail_(field(key), "must be >= " + num(min) + got(*value));
  if (x > max)
    return fail_(field(key), "must be <= " + num(max) + got(*value));
  out = x;
  return caf::none;
}

caf::error object_reader::boolean(const char* key, bool& out) const {
  auto value = find(key);
  if (!value)
    return caf::none;
  if (!value->is_boolean())
    return fail_(field(key), "expected true or false" + got(*value));
  out = value->get<bool>();
  return caf::none;
}

caf::error object_reader::string(const char* key, std::string& out) const {
  auto value = find(key);
  if (!value)
    return caf::none;
  if (!value->is_string())
    return fail_(field(key), "expected a string" + got(*value));
  out = value->get<std::string>();
  return caf::none;
}

caf::error object_reader::object(const char* key, const json*& out,
                                 bool required) const {
  out = find(key);
  if (!out)
    return required ? missing(key, "an object") : caf::none;
  if (!out->is_object())
    return fail_(field(key), "expected an object" + got(*out));
  return caf::none;
}

caf::error object_reader::range(const char* key, std::uint32_t& min,
                                std::uint32_t& max, std::uint32_t least,
                                bool required) const {
  auto value = find(key);
  if (!value)
    return required ? missing(key, "[min, max]") : caf::none;
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;
  auto ok = non_negative_integer(*value, lo);
  hi = lo;
  if (!ok && value->is_array() && value->size() == 2)
    ok = non_negative_integer((*value)[0], lo)
         && non_negative_integer((*value)[1], hi);
  if (!ok)
    return fail_(field(key), "expected [min, max] of non-negative integers or "
                             "one integer"
                               + got(*value));
  constexpr std::uint64_t limit = 1u << 24;
  if (lo < least)
    return fail_(field(key), "min must be >= " + std::to_string(least)
                               + " (got " + std::to_string(lo) + ")");
  if (lo > hi)
    return fail_(field(key), "min " + std::to_string(lo) + " > max "
                               + std::to_string(hi));
  if (hi > limit)
    return fail_(field(key), "max must be at most " + std::to_string(limit)
                               + " (got " + std::to_string(hi) + ")");
  min = static_cast<std::uint32_t>(lo);
  max = static_cast<std::uint32_t>(hi);
  return caf::none;
}

} // namespace kvactor::sim
