// The replay trace of ../shared/bench/REPLAY.md: a header and one request per
// line (JSON lines). Loading checks every field and names file, line and
// field in its error.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include "kvactor/messages/types.hpp"

namespace kvactor::bench {

struct trace_request {
  std::uint64_t id = 0;
  std::uint64_t arrival_step = 0;
  std::int64_t sys_prompt = -1;
  std::vector<token_id> prompt;
  std::vector<token_id> output;
};

struct trace {
  std::string path;
  std::uint32_t block_size = 16;
  std::uint32_t num_blocks = 0;
  std::uint64_t max_model_len = 0;
  std::uint32_t vocab = 0;
  std::vector<trace_request> requests; ///< in arrival order
};

/// Reads a trace. Errors (invalid_request): "FILE:LINE: FIELD: problem".
caf::expected<trace> load_trace(const std::string& path);

} // namespace kvactor::bench
