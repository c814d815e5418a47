// load_trace: JSON lines -> trace, validating as it goes.
#include "bench/trace.hpp"

#include <algorithm>
#include <fstream>
#include <initializer_list>
#include <memory>
#include <optional>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "kvactor/config/cache_limits.hpp"
#include "kvactor/config/json_helpers.hpp"
#include "kvactor/messages/error.hpp"

namespace kvactor::bench {

namespace {

struct line_error {
  std::string what;
};

/// The lines of a stream, each at most max_text_file_bytes long: a path
/// to something that is no trace (`/dev/zero`, a binary) costs a bounded
/// read, not all memory, and a read error is not taken for the end.
class line_reader {
public:
  explicit line_reader(std::istream& in) : in_(in) {
  }

  /// The next line into `line`, without its end: LF, CR LF, or a lone CR
  /// (old Mac files: taken for one line, they would get every message
  /// the first line's number); false at the end.
  bool next(std::string& line) {
    line.clear();
    bool any = false;
    for (;;) {
      if (pos_ == len_ && !fill())
        return any;
      if (after_cr_) { // the LF of a CR LF ends no line of its own
        after_cr_ = false;
        if (buf_[pos_] == '\n') {
          ++pos_;
          continue;
        }
      }
      any = true;
      auto* at = buf_ + pos_;
      auto* end = buf_ + len_;
      auto* eol = std::find_if(at, end, [](char c) { return c == '\n' || c == '\r'; });
      auto n = static_cast<std::size_t>(eol - at);
      if (line.size() + n > detail::max_text_file_bytes)
        throw line_error{"longer than "
                         + std::to_string(detail::max_text_file_bytes >> 20)
                         + " MiB: not a trace line"};
      line.append(at, n);
      pos_ += n;
      if (eol != end) {
        after_cr_ = *eol == '\r';
        ++pos_;
        return true;
      }
    }
  }

private:
  bool fill() {
    in_.read(buf_, sizeof(buf_));
    if (in_.bad())
      throw line_error{"the file could not be read"};
    len_ = static_cast<std::size_t>(in_.gcount());
    pos_ = 0;
    return len_ > 0;
  }

  std::istream& in_;
  char buf_[64 * 1024];
  std::size_t pos_ = 0;
  std::size_t len_ = 0;
  /// The last line ended at a CR: an LF next is part of its end.
  bool after_cr_ = false;
};

const nlohmann::json& field(const nlohmann::json& obj, const char* name) {
  auto i = obj.find(name);
  if (i == obj.end())
    throw line_error{std::string{name} + ": missing"};
  return *i;
}

std::uint64_t count(const nlohmann::json& obj, const char* name,
                    std::uint64_t max = UINT64_MAX) {
  auto& v = field(obj, name);
  // Read as unsigned: a value past INT64_MAX is not negative.
  std::uint64_t x = 0;
  if (!detail::non_negative_integer(v, x))
    throw line_error{std::string{name} + ": expected a non-negative integer"
                     + detail::got(v)};
  if (x > max)
    throw line_error{std::string{name} + ": must be at most " + std::to_string(max)
                     + " (got " + std::to_string(x) + ")"};
  return x;
}

/// A key not in `known` is an error: a misspelled optional key would
/// otherwise go unnoticed (README: unknown keys are errors).
void check_keys(const nlohmann::json& obj,
                std::initializer_list<const char*> known) {
  for (auto& item : obj.items())
    if (std::none_of(known.begin(), known.end(),
                     [&](const char* k) { return item.key() == k; }))
      throw line_error{item.key() + ": unknown key"};
}

/// trace.py's description of how it made the trace is not read, but a
/// value no generator writes (a negative rate, a fraction past 1, a range
/// upside down) says the file is not what it claims: refused like any bad
/// field. `num_sys_prompts`: the header's count, if it has one.
void check_description(const nlohmann::json& obj,
                       std::optional<std::uint64_t> num_sys_prompts) {
  auto number = [&](const char* name, const char* rule, auto ok) {
    if (!obj.contains(name))
      return;
    auto& v = obj[name];
    if (!v.is_number())
      throw line_error{std::string{name} + ": expected a number" + detail::got(v)};
    if (!ok(v.get<double>()))
      throw line_error{std::string{name} + ": " + rule + detail::got(v)};
  };
  number("rate_per_step", "must be > 0", [](double x) { return x > 0; });
  number("shared_frac", "must be in [0, 1]",
         [](double x) { return x >= 0 && x <= 1; });
  for (auto name : {"seed", "min_suffix"})
    if (obj.contains(name))
      count(obj, name);
  if (obj.contains("generator") && !obj["generator"].is_string())
    throw line_error{"generator: expected a string" + detail::got(obj["generator"])};
  for (auto name : {"prompt_range", "output_range"}) {
    if (!obj.contains(name))
      continue;
    auto& v = obj[name];
    std::uint64_t lo = 0, hi = 0;
    if (!v.is_array() || v.size() != 2 || !detail::non_negative_integer(v[0], lo)
        || !detail::non_negative_integer(v[1], hi) || lo > hi)
      throw line_error{std::string{name}
                       + ": expected [min, max], non-negative integers, min <= max"
                       + detail::got(v)};
  }
  if (obj.contains("sys_prompt_lens")) {
    auto& v = obj["sys_prompt_lens"];
    std::uint64_t len = 0;
    if (!v.is_array()
        || !std::all_of(v.begin(), v.end(), [&](const nlohmann::json& x) {
             return detail::non_negative_integer(x, len);
           }))
      throw line_error{"sys_prompt_lens: expected an array of non-negative integers"
                       + detail::got(v)};
    if (num_sys_prompts && v.size() != *num_sys_prompts)
      throw line_error{"sys_prompt_lens: " + std::to_string(v.size())
                       + " lengths, but num_sys_prompts says "
                       + std::to_string(*num_sys_prompts)};
  }
}

/// The replay jumps over idle steps, so a late arrival costs nothing - but
/// its step counter must not wrap, and `steps` should read exactly where
/// JSON numbers are doubles: 2^53 leaves room for both.
constexpr std::uint64_t max_arrival_step = std::uint64_t{1} << 53;

/// Token ids are int32: without a vocabulary, this is their range.
constexpr std::uint64_t max_token_ids = std::uint64_t{1} << 31;

std::vector<token_id> tokens(const nlohmann::json& obj, const char* name,
                             std::uint64_t len, std::uint32_t vocab) {
  auto& v = field(obj, name);
  if (!v.is_array())
    throw line_error{std::string{name} + ": expected an array of token ids"};
  if (v.size() != len)
    throw line_error{std::string{name} + ": " + std::to_string(v.size())
                     + " tokens, but its length field says "
                     + std::to_string(len)};
  std::vector<token_id> out;
  out.reserve(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    auto& t = v[i];
    auto limit = vocab != 0 ? std::uint64_t{vocab} : max_token_ids;
    std::uint64_t id = 0;
    auto where = std::string{name} + "[" + std::to_string(i) + "]: ";
    if (!t.is_number_integer() && !t.is_number_unsigned())
      throw line_error{where + "expected an integer token id" + detail::got(t)};
    if (!detail::non_negative_integer(t, id) || id >= limit)
      throw line_error{where + "token id out of range [0, "
                       + std::to_string(limit) + ")" + detail::got(t)};
    out.push_back(static_cast<token_id>(id));
  }
  return out;
}

/// Whether a line holds nothing but white space (it is skipped, but still
/// counted for the line numbers of messages).
bool blank(const std::string& text) {
  return text.find_first_not_of(" \t\r") == std::string::npos;
}

/// One line's JSON object; a line_error with the parser's reason if it is
/// none ("malformed JSON at column 21: syntax error ...").
nlohmann::json parse_line(const std::string& text, std::string& duplicate) {
  nlohmann::json obj;
  try {
    obj = detail::parse_json(text, duplicate);
  } catch (const detail::json_text_error& e) {
    throw line_error{"malformed JSON at column " + std::to_string(e.offset + 1)
                     + ": " + e.what()};
  } catch (const nlohmann::json::parse_error& e) {
    // "[json.exception.parse_error.101] parse error at line 1, column 21:
    // syntax error ...": the line is ours to say, the column the parser's.
    std::string what = e.what();
    auto pos = what.find("column");
    if (pos != std::string::npos && (pos = what.find(": ", pos)) != std::string::npos)
      what = what.substr(pos + 2);
    throw line_error{"malformed JSON at column " + std::to_string(e.byte) + ": "
                     + what};
  } catch (const nlohmann::json::exception& e) {
    // A number past a double's range ("number overflow parsing '1e400'").
    std::string what = e.what();
    if (auto pos = what.find("] "); pos != std::string::npos)
      what = what.substr(pos + 2);
    throw line_error{"malformed JSON: " + what};
  }
  if (!obj.is_object())
    throw line_error{"not a JSON object" + detail::got(obj)};
  return obj;
}

} // namespace

caf::expected<trace> load_trace(const std::string& path) {
  auto opened = detail::open_text_file(path, errc::invalid_request);
  if (!opened)
    return std::move(opened.error());
  auto& in = *opened;
  trace out;
  out.path = path;
  std::string text;
  std::size_t line = 0;
  std::string duplicate; // a key given twice on the line
  std::uint64_t last_step = 0;
  std::unordered_map<std::uint64_t, std::size_t> seen; // id -> line
  bool have_header = false;
  // The header's own account, checked against the lines (a trace cut
  // short at a line's end is otherwise well-formed): absent if not given.
  std::optional<std::uint64_t> num_requests;
  std::optional<std::uint64_t> num_sys_prompts;
  try {
    auto reader = std::make_unique<line_reader>(in);
    // The line a read fails on is the one after the last read.
    while ((++line, reader->next(text))) {
      if (blank(text))
        continue;
      auto obj = parse_line(text, duplicate);
      if (!duplicate.empty())
        throw line_error{duplicate + ": " + detail::given_twice};
      auto& type = field(obj, "type");
      if (!have_header) {
        if (type != "header")
          throw line_error{"type: the first non-blank line must be the header"};
        have_header = true;
        out.header_line = line;
        // REPLAY.md's three settings, the vocabulary, and what else
        // trace.py writes to describe how it made the trace.
        check_keys(obj, {"type", "version", "generator", "seed", "num_requests",
                         "block_size", "num_blocks", "max_model_len", "vocab",
                         "num_sys_prompts", "sys_prompt_lens", "shared_frac",
                         "min_suffix", "prompt_range", "output_range",
                         "rate_per_step"});
        // The cache's own limits (validate()): every mode runs on a config
        // the actors accept, and no count is truncated on its way there.
        auto block_size = count(obj, "block_size");
        out.num_blocks = static_cast<std::uint32_t>(
          count(obj, "num_blocks", max_num_blocks));
        out.max_model_len = count(obj, "max_model_len");
        // REPLAY.md's header has no vocab: without one, ids are int32s.
        if (obj.contains("vocab"))
          out.vocab = static_cast<std::uint32_t>(
            count(obj, "vocab", max_token_ids));
        if (block_size == 0)
          throw line_error{"block_size: must be > 0"};
        if (!valid_block_size(block_size))
          throw line_error{"block_size: must be a power of two in [1, "
                           + std::to_string(max_block_size) + "] (got "
                           + std::to_string(block_size) + ")"};
        out.block_size = static_cast<std::uint32_t>(block_size);
        if (out.num_blocks == 0)
          throw line_error{"num_blocks: must be > 0"};
        if (out.max_model_len == 0) // the requests' max_sequence_length
          throw line_error{"max_model_len: must be > 0"};
        // What else it says is a description (trace.py's settings), not
        // read - but for the format's version and the counts to check, and
        // values no generator writes (check_description).
        if (obj.contains("version") && obj["version"] != 1)
          throw line_error{"version: this reader knows version 1"
                           + detail::got(obj["version"])};
        if (obj.contains("num_requests"))
          num_requests = count(obj, "num_requests");
        if (obj.contains("num_sys_prompts"))
          num_sys_prompts = count(obj, "num_sys_prompts");
        check_description(obj, num_sys_prompts);
        continue;
      }
      if (type != "req")
        throw line_error{"type: expected \"req\""};
      check_keys(obj, {"type", "id", "arrival_step", "sys_prompt", "prompt_len",
                       "output_len", "prompt", "output"});
      trace_request r;
      r.line = line;
      r.id = count(obj, "id");
      if (auto [at, fresh] = seen.emplace(r.id, line); !fresh)
        throw line_error{"id: " + std::to_string(r.id)
                         + " repeats the request on line "
                         + std::to_string(at->second)};
      r.arrival_step = count(obj, "arrival_step", max_arrival_step);
      if (r.arrival_step < last_step)
        throw line_error{"arrival_step: requests must come in arrival order"};
      last_step = r.arrival_step;
      auto& sp = field(obj, "sys_prompt");
      if (!sp.is_number_integer())
        throw line_error{"sys_prompt: expected an integer" + detail::got(sp)};
      if (sp.is_number_unsigned() && sp.get<std::uint64_t>() > INT64_MAX)
        throw line_error{"sys_prompt: must be at most "
                         + std::to_string(INT64_MAX) + detail::got(sp)};
      r.sys_prompt = sp.get<std::int64_t>();
      // -1: none; else which of the header's system prompts.
      bool known = r.sys_prompt == -1
                   || (r.sys_prompt >= 0
                       && (!num_sys_prompts
                           || static_cast<std::uint64_t>(r.sys_prompt)
                                < *num_sys_prompts));
      if (!known)
        throw line_error{
          "sys_prompt: expected -1 or a system prompt's index"
          + (num_sys_prompts ? " below num_sys_prompts "
                                 + std::to_string(*num_sys_prompts)
                             : std::string{" (>= 0)"})
          + detail::got(sp)};
      auto plen = count(obj, "prompt_len");
      auto olen = count(obj, "output_len");
      if (plen == 0)
        throw line_error{"prompt_len: must be > 0"};
      if (olen == 0)
        throw line_error{"output_len: must be > 0"};
      // (Compared, and printed, without the sum where two huge lengths
      // would wrap it.)
      if (plen > out.max_model_len || olen > out.max_model_len - plen)
        throw line_error{"prompt_len + output_len: "
                         + (plen > out.max_model_len
                              ? "prompt_len " + std::to_string(plen) + " alone is"
                              : (olen > UINT64_MAX - plen
                                   ? std::to_string(plen) + " + "
                                       + std::to_string(olen)
                                   : std::to_string(plen + olen))
                                  + " tokens,")
                         + " more than max_model_len "
                         + std::to_string(out.max_model_len)};
      r.prompt = tokens(obj, "prompt", plen, out.vocab);
      r.output = tokens(obj, "output", olen, out.vocab);
      out.requests.push_back(std::move(r));
    }
  } catch (line_error& e) {
    return make_error(errc::invalid_request,
                      path + ":" + std::to_string(line) + ": " + e.what);
  }
  if (!have_header)
    return make_error(errc::invalid_request, path + ": empty trace");
  if (num_requests && *num_requests != out.requests.size())
    return make_error(errc::invalid_request,
                      path + ":" + std::to_string(out.header_line)
                        + ": num_requests: the header says "
                        + std::to_string(*num_requests) + ", the trace has "
                        + std::to_string(out.requests.size())
                        + " (cut short, or added to?)");
  return out;
}

caf::error check_fits(const trace& tr, std::uint64_t num_blocks) {
  for (auto& r : tr.requests) {
    auto tokens = r.prompt.size() + r.output.size() - 1;
    auto need = (tokens + tr.block_size - 1) / tr.block_size;
    if (need > num_blocks)
      return make_error(errc::invalid_request,
                        tr.path + ":" + std::to_string(r.line)
                          + ": prompt_len + output_len: request "
                          + std::to_string(r.id) + " needs " + std::to_string(need)
                          + " blocks of " + std::to_string(tr.block_size)
                          + " tokens, more than the pool's "
                          + std::to_string(num_blocks));
  }
  return caf::none;
}

} // namespace kvactor::bench
