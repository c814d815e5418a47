// Helpers the sim test files share: scenario text edits, the line a piece
// of text is on, parsing with the error's message (and checking where it
// points), small valid scenarios as JSON values, a written file's text and
// a time series a row per step. CAF-light (scenario.hpp brings
// caf/expected.hpp).
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "run_figures.hpp"
#include "scenario.hpp"

namespace kvactor::sim::test {

/// The 1-based line of the first occurrence of `needle` in `text`.
inline int line_of(const std::string& text, const std::string& needle) {
  auto at = text.find(needle);
  BOOST_REQUIRE_MESSAGE(at != std::string::npos, "no '" << needle << "' in text");
  int line = 1;
  for (std::size_t i = 0; i < at; ++i)
    line += text[i] == '\n';
  return line;
}

/// `text` with its one occurrence of `from` replaced by `to`.
inline std::string replace_once(std::string text, const std::string& from,
                                const std::string& to) {
  auto at = text.find(from);
  BOOST_REQUIRE_MESSAGE(at != std::string::npos, "no '" << from << "' in text");
  BOOST_REQUIRE_MESSAGE(text.find(from, at + 1) == std::string::npos,
                        "'" << from << "' occurs more than once");
  return text.replace(at, from.size(), to);
}

inline scenario parse_ok(const std::string& text,
                         const std::string& source = "test.json") {
  auto s = parse_scenario(text, source);
  BOOST_REQUIRE_MESSAGE(s, "parse failed: " << (s ? "" : message_of(s.error())));
  return std::move(*s);
}

/// The message of the error parsing `text` must give; fails the case if it
/// parses.
inline std::string parse_error(const std::string& text,
                               const std::string& source = "test.json") {
  auto s = parse_scenario(text, source);
  BOOST_REQUIRE_MESSAGE(!s, "parsed, but an error was expected");
  return message_of(s.error());
}

/// Checks that parsing `text` fails with a message that starts with
/// "test.json:LINE: FIELD: " (LINE: where `at` is in `text`) and says
/// `what`.
inline void check_error(const std::string& text, const std::string& at,
                        const std::string& field, const std::string& what) {
  auto msg = parse_error(text);
  auto want = "test.json:" + std::to_string(line_of(text, at)) + ": " + field
              + ": ";
  BOOST_TEST_CONTEXT("message: " << msg) {
    BOOST_TEST(msg.compare(0, want.size(), want) == 0, "expected prefix " << want);
    BOOST_TEST(msg.find(what) != std::string::npos, "expected '" << what << "'");
  }
}

/// Two tenants ("a" high priority with a quota, "b"), storage none, a
/// 64-block pool of 4-token blocks; a and b both send traffic.
inline nlohmann::json small_scenario() {
  return nlohmann::json::parse(R"({
    "cache": {
      "block_size": 4,
      "model": {"num_layers": 1, "num_kv_heads": 1, "head_dim": 8, "dtype": "fp16"},
      "storage": "none",
      "num_gpu_blocks": 64,
      "gc_interval_ms": 0,
      "tenants": [
        {"name": "a", "priority": "high", "max_blocks": 40},
        {"name": "b", "priority": "low"}
      ]
    },
    "steps": 200,
    "seed": 7,
    "workloads": {
      "a": {"rate": 0.5, "prompt_len": [4, 12], "output_len": [2, 8],
            "system_prompts": {"count": 2, "len": [8, 16], "share": 0.5}},
      "b": {"rate": 0.3, "prompt_len": [2, 20], "output_len": [1, 10]}
    }
  })");
}

/// A chat tenant holding sessions of 2-5 turns (half of them after a
/// system prompt) beside a batch tenant, in a pool with room for all and
/// no supervisor moves (no GC, no eviction or preemption at pressure
/// marks): a deterministic run in which nothing the cache held is lost.
inline nlohmann::json conv_scenario() {
  return nlohmann::json::parse(R"({
    "cache": {
      "block_size": 4,
      "model": {"num_layers": 1, "num_kv_heads": 1, "head_dim": 8, "dtype": "fp16"},
      "storage": "none", "num_gpu_blocks": 2048, "gc_interval_ms": 0,
      "pressure": {"preempt_at_critical": false, "evict_cached_at_high": false},
      "tenants": [{"name": "chat", "priority": "high"},
                  {"name": "batch", "priority": "low"}]
    },
    "steps": 150, "seed": 3,
    "workloads": {
      "chat": {"rate": 0.15, "prompt_len": [8, 24], "output_len": [4, 16],
               "system_prompts": {"count": 2, "len": [8, 16], "share": 0.5},
               "conversation": {"turns": [2, 5], "user_len": [2, 12],
                                "think_steps": [0, 10]}},
      "batch": {"rate": 0.1, "prompt_len": [16, 64], "output_len": [4, 16]}
    }
  })");
}

inline scenario parse_json(const nlohmann::json& j) {
  return parse_ok(j.dump(2));
}

/// The text of the file at `p` (a report the run wrote); a test error if
/// it is missing.
inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in{p};
  BOOST_REQUIRE_MESSAGE(in, p.string() << " missing");
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

/// A time series a row per step: a row standing for n steps (a skipped
/// gap's, or a coarse series') becomes n rows of its state, each of one
/// step.
inline std::vector<step_sample> per_step(const std::vector<step_sample>& rows) {
  std::vector<step_sample> out;
  for (auto& r : rows)
    for (std::uint64_t k = 0; k < r.steps; ++k) {
      auto x = r;
      x.step = r.step + 1 + k - r.steps;
      x.steps = 1;
      out.push_back(x);
    }
  return out;
}

} // namespace kvactor::sim::test
