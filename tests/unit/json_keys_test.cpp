// The JSON readers' shared helpers: a file is read whole up to a limit,
// naming what it is when it cannot be; keys given twice in one JSON object -
// nlohmann keeps the last value silently - are found by their path, and the
// config loader refuses the file naming it (the scenario and trace readers
// are tested beside their own errors).
#include <cstdio>
#include <fstream>
#include <string>

#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "kvactor/config/cache_config.hpp"
#include "kvactor/config/json_helpers.hpp"
#include "kvactor/messages/error.hpp"

using namespace kvactor;

namespace {

/// The path parse_json reports for `text` ("" for none).
std::string duplicate_in(const std::string& text) {
  std::string dup = "stale"; // cleared by every parse
  auto json = detail::parse_json(text, dup);
  BOOST_TEST(!json.is_discarded());
  return dup;
}

} // namespace

BOOST_AUTO_TEST_SUITE(json_keys)

BOOST_AUTO_TEST_CASE(parse_json_names_the_first_key_given_twice_by_its_path) {
  BOOST_TEST(duplicate_in(R"({"a": 1, "b": 2})") == "");
  BOOST_TEST(duplicate_in(R"({"a": 1, "a": 2})") == "a");
  BOOST_TEST(duplicate_in(R"({"a": {"x": 1, "y": {"x": 2}, "x": 3}})") == "a.x");
  // Array elements are counted past nested arrays and objects.
  BOOST_TEST(duplicate_in(R"({"t": [{"n": 1}, [1, [2]], {"n": 1, "m": {}, "n": 2}]})")
             == "t[2].n");
  BOOST_TEST(duplicate_in(R"([{}, {"k": 1}, {"k": 1, "k": 1}])") == "[2].k");
  // The same key in different objects is no repeat; the first repeat wins.
  BOOST_TEST(duplicate_in(R"([{"k": 1}, {"k": 2}])") == "");
  BOOST_TEST(duplicate_in(R"({"b": 1, "c": 1, "c": 2, "b": 3})") == "c");
  // The value is nlohmann's: the last one.
  std::string dup;
  BOOST_TEST(detail::parse_json(R"({"a": 1, "a": 2})", dup)["a"] == 2);
}

BOOST_AUTO_TEST_CASE(parse_json_fails_as_parse_does) {
  std::string dup;
  BOOST_CHECK_THROW(detail::parse_json(R"({"a": 1, "a": )", dup),
                    nlohmann::json::parse_error);
  auto json = detail::parse_json(R"({"a": 1, "a": )", dup, false);
  BOOST_TEST(json.is_discarded());
  BOOST_TEST(dup == ""); // nothing reported from a half-read text
}

BOOST_AUTO_TEST_CASE(parse_json_refuses_nul_bytes_and_deep_nesting_where_they_are) {
  // nlohmann stops reading at a NUL: what follows it would go unread.
  auto refused_at = [](const std::string& text) -> std::size_t {
    std::string dup;
    BOOST_TEST(detail::parse_json(text, dup, false).is_discarded());
    try {
      detail::parse_json(text, dup);
    } catch (const detail::json_text_error& e) {
      return e.offset;
    }
    BOOST_ERROR("accepted: " << text.size() << " bytes");
    return std::string::npos;
  };
  using namespace std::string_literals;
  BOOST_TEST(refused_at("{\"a\": 1}\0 trailing garbage"s) == 8u);
  BOOST_TEST(refused_at("{\"a\": \"x\0y\"}"s) == 8u); // inside a string too
  BOOST_TEST(refused_at("{\"a\": \"\\\0\"}"s) == 8u); // even escaped
  // Nesting: max_json_depth levels are fine, one more is not (the
  // offending bracket is named), and brackets inside strings do not count.
  auto nested = [](std::size_t n) {
    return std::string(n, '[') + std::string(n, ']');
  };
  std::string dup;
  BOOST_TEST(!detail::parse_json(nested(detail::max_json_depth), dup).is_discarded());
  BOOST_TEST(refused_at(nested(detail::max_json_depth + 1)) == detail::max_json_depth);
  BOOST_TEST(refused_at(nested(20000)) == detail::max_json_depth);
  auto quoted = "[\"" + std::string(1000, '[') + "\\\"\"]";
  BOOST_TEST(detail::parse_json(quoted, dup).size() == 1u);
  // An escaped NUL ("\u0000") is a character like any other.
  BOOST_TEST(detail::parse_json(R"({"a": "x\u0000y"})", dup)["a"].get<std::string>().size()
             == 3u);
}

BOOST_AUTO_TEST_CASE(load_config_refuses_a_key_given_twice_naming_it) {
  char path[] = "/tmp/kvactor_keys_XXXXXX";
  int fd = mkstemp(path);
  BOOST_REQUIRE(fd >= 0);
  close(fd);
  std::ofstream{path} << R"({"block_size": 16, "num_gpu_blocks": 64,
    "tenants": [{"name": "a"}, {"name": "b", "max_blocks": 8, "max_blocks": 0}]})";
  auto cfg = load_config(path);
  std::remove(path);
  BOOST_REQUIRE(!cfg);
  BOOST_TEST(has_code(cfg.error(), errc::invalid_config));
  auto msg = render(cfg.error());
  BOOST_TEST(msg.find(std::string{path} + ": tenants[1].max_blocks: given twice")
               != std::string::npos,
             msg);
}

BOOST_AUTO_TEST_CASE(got_shortens_a_long_value_between_characters) {
  // "a" then 30 two-byte characters: cut at byte 37, the text ended in half
  // a character, and the error message was no longer UTF-8 (a JSON writer
  // with strict checks throws on it).
  std::string text = "a";
  for (int i = 0; i < 30; ++i)
    text += "\xc3\xa9"; // U+00E9
  auto shown = detail::got(nlohmann::json(text));
  BOOST_TEST(shown.find("...") != std::string::npos, shown);
  BOOST_CHECK_NO_THROW(nlohmann::json(shown).dump());
  BOOST_TEST(shown.size() <= std::string{" (got )"}.size() + 40u);
  // A short value stays whole.
  BOOST_TEST(detail::got(nlohmann::json("\xc3\xa9")) == " (got \"\xc3\xa9\")");
}

BOOST_AUTO_TEST_CASE(read_text_file_names_a_directory_or_a_missing_file) {
  // Shared with the simulator's scenario loader, which read a directory
  // into an uncaught exception before.
  auto dir = kvactor::detail::read_text_file("/tmp");
  BOOST_REQUIRE(!dir);
  BOOST_TEST(has_code(dir.error(), errc::invalid_config));
  BOOST_TEST(render(dir.error()).find("/tmp: is a directory") != std::string::npos);
  auto missing = kvactor::detail::read_text_file("/tmp/kvactor_no_such_file");
  BOOST_REQUIRE(!missing);
  BOOST_TEST(render(missing.error()).find("/tmp/kvactor_no_such_file: cannot open")
             != std::string::npos);
}

BOOST_AUTO_TEST_CASE(read_text_file_stops_at_its_limit) {
  // A config path naming a device or a huge file once read until the
  // allocation threw, an abort: now it stops reading past the limit.
  auto zero = kvactor::detail::read_text_file("/dev/zero", 1000);
  BOOST_REQUIRE(!zero);
  BOOST_TEST(has_code(zero.error(), errc::invalid_config));
  BOOST_TEST(render(zero.error()).find("/dev/zero: larger than 1000 bytes")
             != std::string::npos);
  char path[] = "/tmp/kvactor_text_XXXXXX";
  int fd = mkstemp(path);
  BOOST_REQUIRE(fd >= 0);
  close(fd);
  std::ofstream{path} << std::string(1000, ' ');
  auto at_limit = kvactor::detail::read_text_file(path, 1000);
  auto past = kvactor::detail::read_text_file(path, 999);
  std::remove(path);
  BOOST_REQUIRE(at_limit);
  BOOST_TEST(at_limit->size() == 1000u);
  BOOST_REQUIRE(!past);
  BOOST_TEST(render(past.error()).find("larger than 999 bytes") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
