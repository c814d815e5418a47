// Helpers of the JSON readers (see json_helpers.hpp).
#include "kvactor/config/json_helpers.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unordered_set>
#include <vector>

#include "kvactor/messages/error.hpp"

namespace kvactor::detail {

caf::expected<std::ifstream> open_text_file(const std::string& path,
                                            errc code) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return make_error(code, path + ": is a directory");
  std::ifstream in{path, std::ios::binary};
  if (!in)
    return make_error(code, path + ": cannot open (" + std::strerror(errno) + ")");
  return in;
}

caf::expected<std::string> read_text_file(const std::string& path,
                                          std::size_t max_bytes) {
  auto opened = open_text_file(path);
  if (!opened)
    return std::move(opened.error());
  auto& in = *opened;
  // In chunks, so a device or a huge file stops at the limit instead of
  // growing the string until the allocation throws.
  std::string text;
  char chunk[1 << 16];
  while (in && text.size() <= max_bytes) {
    in.read(chunk, sizeof chunk);
    text.append(chunk, static_cast<std::size_t>(in.gcount()));
  }
  if (in.bad())
    return make_error(errc::invalid_config,
                      path + ": cannot read (" + std::strerror(errno) + ")");
  if (text.size() > max_bytes)
    return make_error(errc::invalid_config,
                      path + ": larger than " + std::to_string(max_bytes)
                        + " bytes, not a config or scenario file");
  return text;
}

namespace {

/// Throws json_text_error at the first NUL byte or the first bracket past
/// max_json_depth (outside strings).
void check_json_text(const std::string& text) {
  std::size_t depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    auto c = text[i];
    if (c == '\0')
      throw json_text_error{"a NUL byte", i};
    if (in_string) {
      if (c == '\\' && i + 1 < text.size() && text[i + 1] != '\0')
        ++i; // what it escapes (a NUL is caught in the next round)
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"')
      in_string = true;
    else if (c == '{' || c == '[') {
      if (++depth > max_json_depth)
        throw json_text_error{"objects and arrays nested more than "
                                + std::to_string(max_json_depth) + " deep",
                              i};
    } else if ((c == '}' || c == ']') && depth > 0)
      --depth;
  }
}

} // namespace

std::string join_path(const std::string& path, const std::string& key) {
  if (key.empty() || key.find_first_of(".[]\":") != std::string::npos)
    return path + "["
           + nlohmann::json(key).dump(-1, ' ', false,
                                      nlohmann::json::error_handler_t::replace)
           + "]";
  return path.empty() ? key : path + "." + key;
}

std::pair<std::string, std::string> split_field(const std::string& text) {
  bool quoted = false; // inside a JSON string of a ["..."] key
  for (std::size_t i = 0; i + 1 < text.size(); ++i) {
    auto c = text[i];
    if (quoted) {
      if (c == '\\')
        ++i; // an escaped character, '"' included
      else if (c == '"')
        quoted = false;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ':' && text[i + 1] == ' ') {
      return {text.substr(0, i), text.substr(i + 2)};
    }
  }
  return {std::string{}, text};
}

nlohmann::json parse_json(const std::string& text, std::string& duplicate,
                          bool allow_exceptions) {
  duplicate.clear();
  try {
    check_json_text(text);
  } catch (const json_text_error&) {
    if (allow_exceptions)
      throw;
    return nlohmann::json::value_t::discarded;
  }
  using event = nlohmann::json::parse_event_t;
  // One frame per open object or array: its path, and the keys seen so
  // far (objects) or the index of the next element (arrays).
  struct frame {
    bool array = false;
    std::size_t index = 0;
    std::string path;
    std::string key; // the member being read
    std::unordered_set<std::string> keys;
  };
  std::vector<frame> stack;
  auto value_path = [&] {
    if (stack.empty())
      return std::string{};
    auto& top = stack.back();
    return top.array ? top.path + "[" + std::to_string(top.index) + "]"
                     : join_path(top.path, top.key);
  };
  auto element_done = [&] {
    if (!stack.empty() && stack.back().array)
      ++stack.back().index;
  };
  auto watch = [&](int, event ev, nlohmann::json& parsed) {
    switch (ev) {
      case event::object_start:
      case event::array_start: {
        frame f;
        f.array = ev == event::array_start;
        f.path = value_path();
        stack.push_back(std::move(f));
        break;
      }
      case event::key: {
        auto& top = stack.back();
        top.key = parsed.get<std::string>();
        if (!top.keys.insert(top.key).second && duplicate.empty())
          duplicate = join_path(top.path, top.key);
        break;
      }
      case event::object_end:
      case event::array_end:
        stack.pop_back();
        element_done();
        break;
      case event::value:
        element_done();
        break;
    }
    return true; // keep everything
  };
  auto json = nlohmann::json::parse(text, watch, allow_exceptions);
  if (json.is_discarded())
    duplicate.clear(); // half-read: no finding to report
  return json;
}

std::string got(const nlohmann::json& value) {
  if (value.is_array())
    return " (got an array)";
  if (value.is_object())
    return " (got an object)";
  auto text = value.dump(-1, ' ', false,
                         nlohmann::json::error_handler_t::replace);
  if (text.size() > 40) {
    // Cut before a character, not inside one: a message must stay UTF-8
    // (the dump keeps non-ASCII characters as they are).
    std::size_t cut = 37;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80)
      --cut;
    text = text.substr(0, cut) + "...";
  }
  return " (got " + text + ")";
}

bool non_negative_integer(const nlohmann::json& value, std::uint64_t& out) {
  if (value.is_number_unsigned()) {
    out = value.get<std::uint64_t>();
    return true;
  }
  if (value.is_number_integer() && value.get<std::int64_t>() >= 0) {
    out = static_cast<std::uint64_t>(value.get<std::int64_t>());
    return true;
  }
  return false;
}

std::optional<std::string>
first_unknown_key(const nlohmann::json& obj,
                  std::initializer_list<const char*> known) {
  for (auto& item : obj.items()) {
    bool found = false;
    for (auto name : known)
      found = found || item.key() == name;
    if (!found)
      return item.key();
  }
  return std::nullopt;
}

std::string unknown_key_message(const std::string& key,
                                std::initializer_list<const char*> known) {
  std::string list;
  for (auto name : known)
    list += (list.empty() ? "" : ", ") + std::string{name};
  return "unknown key '" + key + "' (known: " + list + ")";
}

} // namespace kvactor::detail
