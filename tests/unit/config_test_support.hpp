// The config tests' helpers (config_test.cpp, config_validation_test.cpp):
// the embedded default to patch, and what parse_config says of a patched one.
#pragma once

#include <string>

#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "kvactor/config/cache_config.hpp"
#include "kvactor/config/json_helpers.hpp"
#include "kvactor/messages/error.hpp"

namespace kvactor::test::config_tests {

using nlohmann::json;

/// A valid config to patch: the embedded default.
inline json base() {
  return json::parse(default_config_json());
}

/// render() of the error parse_config gives for `j`, or "ok".
inline std::string parse_error(const json& j) {
  auto cfg = parse_config(j);
  if (cfg)
    return "ok";
  BOOST_TEST(has_code(cfg.error(), errc::invalid_config));
  return render(cfg.error());
}

/// True if parsing `j` fails with invalid_config and a message containing
/// `field + ": "` and `what`; prints the message otherwise.
inline bool fails_naming(const json& j, const std::string& field,
                         const std::string& what = "") {
  auto msg = parse_error(j);
  bool ok = msg.find("invalid_config (" + field + ": ") != std::string::npos
            && msg.find(what) != std::string::npos;
  if (!ok)
    BOOST_TEST_MESSAGE("expected " << field << ": ..." << what << ", got: "
                                   << msg);
  return ok;
}

} // namespace kvactor::test::config_tests
