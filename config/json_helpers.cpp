// Helpers of the JSON readers (see json_helpers.hpp).
#include "kvactor/config/json_helpers.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "kvactor/messages/error.hpp"

namespace kvactor::detail {

caf::expected<std::string> read_text_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return make_error(errc::invalid_config, path + ": is a directory");
  std::ifstream in{path, std::ios::binary};
  if (!in)
    return make_error(errc::invalid_config,
                      path + ": cannot open (" + std::strerror(errno) + ")");
  std::string text{std::istreambuf_iterator<char>{in},
                   std::istreambuf_iterator<char>{}};
  if (in.bad())
    return make_error(errc::invalid_config,
                      path + ": cannot read (" + std::strerror(errno) + ")");
  return text;
}

std::string got(const nlohmann::json& value) {
  if (value.is_array())
    return " (got an array)";
  if (value.is_object())
    return " (got an object)";
  auto text = value.dump(-1, ' ', false,
                         nlohmann::json::error_handler_t::replace);
  if (text.size() > 40)
    text = text.substr(0, 37) + "...";
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

} // namespace kvactor::detail
