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
  std::size_t line = 0; ///< in the file, for messages
  std::uint64_t id = 0;
  std::uint64_t arrival_step = 0;
  std::int64_t sys_prompt = -1;
  std::vector<token_id> prompt;
  std::vector<token_id> output;
};

struct trace {
  std::string path;
  std::size_t header_line = 1; ///< its first non-blank line, for messages
  std::uint32_t block_size = 16;
  std::uint32_t num_blocks = 0;
  std::uint64_t max_model_len = 0;
  /// Token ids are in [0, vocab); 0 (the header's optional "vocab" not
  /// given, or 0): in [0, 2^31), what a token_id holds.
  std::uint32_t vocab = 0;
  std::vector<trace_request> requests; ///< in arrival order
};

/// Reads a trace; blank lines are skipped (but counted), the first other
/// line is the header. Errors (invalid_request): "FILE:LINE: FIELD:
/// problem" - bad JSON (with the parser's reason), a missing or mistyped field, an unknown key ("FILE:LINE: KEY:
/// unknown key"), a header the cache would refuse (block_size not a power
/// of two up to 1024, num_blocks above 2^31: cache_limits.hpp), token ids
/// outside [0, vocab), an arrival_step past 2^53,
/// lengths that disagree with the token arrays or exceed max_model_len,
/// requests out of arrival order, a repeated id, a NUL byte or nesting
/// past max_json_depth; if the header says them, a version other than 1,
/// a request count other than the lines' (reported at the header's line)
/// or a sys_prompt not below num_sys_prompts.
caf::expected<trace> load_trace(const std::string& path);

/// Whether every request fits a pool of `num_blocks` on its own (its prompt
/// and all output but the last token, which is never computed): a request
/// that never fits would leave the step loop waiting forever. The error
/// names the file, the line and the request.
caf::error check_fits(const trace& tr, std::uint64_t num_blocks);

} // namespace kvactor::bench
