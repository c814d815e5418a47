// The replay trace reader (bench/trace.cpp): a well-formed trace loads field
// by field, and each kind of bad input stops with invalid_request naming
// the file, the line and the field - never a crash, a hang or a half-read
// trace. check_fits: a request larger than the pool is refused up front.
#include <cstdio>
#include <fstream>
#include <string>
#include <unistd.h>

#include <boost/test/unit_test.hpp>

#include "bench/trace.hpp"
#include "kvactor/messages/error.hpp"

using namespace kvactor;
using namespace kvactor::bench;

namespace {

const std::string header = R"({"type":"header","block_size":4,"num_blocks":8,)"
                           R"("max_model_len":16,"vocab":100})";
const std::string req0 = R"({"type":"req","id":0,"arrival_step":0,"sys_prompt":-1,)"
                         R"("prompt_len":3,"output_len":2,"prompt":[1,2,3],"output":[4,5]})";
const std::string req1 = R"({"type":"req","id":7,"arrival_step":2,"sys_prompt":1,)"
                         R"("prompt_len":5,"output_len":1,"prompt":[9,8,7,6,5],"output":[99]})";

/// A trace file in the temporary directory, removed with the object.
struct trace_file {
  std::string path;

  explicit trace_file(const std::string& text) {
    char name[] = "/tmp/kvactor_trace_XXXXXX";
    int fd = mkstemp(name);
    BOOST_REQUIRE(fd >= 0);
    close(fd);
    path = name;
    std::ofstream{path} << text;
  }

  ~trace_file() {
    std::remove(path.c_str());
  }
};

/// The error load_trace gives for `text` ("ok" if it loads), with the
/// temporary file's name replaced by "FILE".
std::string load_error(const std::string& text) {
  trace_file f{text};
  auto tr = load_trace(f.path);
  if (tr)
    return "ok";
  BOOST_TEST(tr.error().category() == error_category);
  BOOST_TEST(tr.error().code() == static_cast<std::uint8_t>(errc::invalid_request));
  auto msg = render(tr.error());
  for (auto at = msg.find(f.path); at != std::string::npos; at = msg.find(f.path))
    msg.replace(at, f.path.size(), "FILE");
  return msg;
}

/// Whether `msg` contains `part` (reported with both on failure).
void contains(const std::string& msg, const std::string& part) {
  BOOST_TEST(msg.find(part) != std::string::npos, "'" << part << "' in '" << msg << "'");
}

/// req0 with `from` replaced by `to`.
std::string req0_with(const std::string& from, const std::string& to) {
  auto out = req0;
  auto at = out.find(from);
  BOOST_REQUIRE(at != std::string::npos);
  return out.replace(at, from.size(), to);
}

} // namespace

BOOST_AUTO_TEST_SUITE(trace_suite)

BOOST_AUTO_TEST_CASE(a_well_formed_trace_loads_every_field) {
  // A blank line between requests is allowed and still counted as a line.
  trace_file f{header + "\n" + req0 + "\n\n" + req1 + "\n"};
  auto tr = load_trace(f.path);
  if (!tr)
    BOOST_FAIL(render(tr.error()));
  BOOST_TEST(tr->path == f.path);
  BOOST_TEST(tr->block_size == 4u);
  BOOST_TEST(tr->num_blocks == 8u);
  BOOST_TEST(tr->max_model_len == 16u);
  BOOST_TEST(tr->vocab == 100u);
  BOOST_REQUIRE(tr->requests.size() == 2u);
  auto& a = tr->requests[0];
  BOOST_TEST(a.line == 2u);
  BOOST_TEST(a.id == 0u);
  BOOST_TEST(a.arrival_step == 0u);
  BOOST_TEST(a.sys_prompt == -1);
  BOOST_TEST(a.prompt == (std::vector<token_id>{1, 2, 3}));
  BOOST_TEST(a.output == (std::vector<token_id>{4, 5}));
  auto& b = tr->requests[1];
  BOOST_TEST(b.line == 4u);
  BOOST_TEST(b.id == 7u);
  BOOST_TEST(b.arrival_step == 2u);
  BOOST_TEST(b.sys_prompt == 1);
  BOOST_TEST(b.output == (std::vector<token_id>{99}));
}

BOOST_AUTO_TEST_CASE(a_missing_or_empty_file_is_named) {
  auto tr = load_trace("/nonexistent/kvactor/trace.jsonl");
  BOOST_REQUIRE(!tr);
  contains(render(tr.error()),
           "/nonexistent/kvactor/trace.jsonl: cannot open (No such file or directory)");
  tr = load_trace("/tmp");
  BOOST_REQUIRE(!tr);
  contains(render(tr.error()), "/tmp: is a directory");
  contains(load_error(""), "FILE: empty trace");
  // Not a trace at all, and no end to it: a bounded read, then an error
  // naming the line (before, all memory went, then "empty trace").
  tr = load_trace("/dev/zero");
  BOOST_REQUIRE(!tr);
  contains(render(tr.error()), "/dev/zero:1: longer than 64 MiB: not a trace line");
}

BOOST_AUTO_TEST_CASE(the_headers_own_account_is_checked_when_given) {
  // trace.py's header describes the trace; its version and counts are
  // checked: a trace cut short at a line's end is otherwise well-formed.
  auto with = [](const std::string& extra) {
    return R"({"type":"header","block_size":4,"num_blocks":8,"max_model_len":16,)"
           R"("vocab":100,)" + extra + "}";
  };
  BOOST_TEST(load_error(with(R"("version":1,"num_requests":2,"num_sys_prompts":2)")
                        + "\n" + req0 + "\n" + req1 + "\n")
             == "ok");
  contains(load_error(with(R"("num_requests":3)") + "\n" + req0 + "\n" + req1 + "\n"),
           "FILE:1: num_requests: the header says 3, the trace has 2");
  contains(load_error(with(R"("num_requests":"many")") + "\n" + req0 + "\n"),
           "FILE:1: num_requests: expected a non-negative integer");
  contains(load_error(with(R"("version":99)") + "\n" + req0 + "\n"),
           "FILE:1: version: this reader knows version 1 (got 99)");
  // req1 names system prompt 1: there must be two.
  contains(load_error(with(R"("num_sys_prompts":1)") + "\n" + req0 + "\n" + req1 + "\n"),
           "FILE:3: sys_prompt: expected -1 or a system prompt's index below "
           "num_sys_prompts 1 (got 1)");
  auto minus7 = req0;
  minus7.replace(minus7.find("-1"), 2, "-7");
  contains(load_error(header + "\n" + minus7 + "\n"),
           "FILE:2: sys_prompt: expected -1 or a system prompt's index (>= 0) (got -7)");
}

BOOST_AUTO_TEST_CASE(the_headers_description_is_refused_where_no_generator_wrote_it) {
  // trace.py's settings are not read, but a negative rate or a fraction
  // past 1 says the file is not what it claims.
  auto with = [](const std::string& extra) {
    return R"({"type":"header","block_size":4,"num_blocks":8,"max_model_len":16,)"
           R"("vocab":100,)" + extra + "}\n" + req0 + "\n";
  };
  BOOST_TEST(load_error(with(R"("generator":"trace.py","seed":0,"num_sys_prompts":2,)"
                             R"("sys_prompt_lens":[5,6],"shared_frac":0.5,"min_suffix":16,)"
                             R"("prompt_range":[1,4],"output_range":[2,2],"rate_per_step":0.5)"))
             == "ok");
  contains(load_error(with(R"("rate_per_step":-0.5)")), "FILE:1: rate_per_step: must be > 0 (got -0.5)");
  contains(load_error(with(R"("rate_per_step":0)")), "FILE:1: rate_per_step: must be > 0 (got 0)");
  contains(load_error(with(R"("rate_per_step":"x")")),
           "FILE:1: rate_per_step: expected a number (got \"x\")");
  contains(load_error(with(R"("shared_frac":-3)")), "FILE:1: shared_frac: must be in [0, 1] (got -3)");
  contains(load_error(with(R"("shared_frac":1.5)")), "FILE:1: shared_frac: must be in [0, 1]");
  contains(load_error(with(R"("seed":"x")")), "FILE:1: seed: expected a non-negative integer");
  contains(load_error(with(R"("min_suffix":-1)")), "FILE:1: min_suffix: expected a non-negative integer");
  contains(load_error(with(R"("generator":3)")), "FILE:1: generator: expected a string (got 3)");
  contains(load_error(with(R"("prompt_range":[5,4])")),
           "FILE:1: prompt_range: expected [min, max], non-negative integers, min <= max");
  contains(load_error(with(R"("output_range":7)")), "FILE:1: output_range: expected [min, max]");
  contains(load_error(with(R"("sys_prompt_lens":"oops")")),
           "FILE:1: sys_prompt_lens: expected an array of non-negative integers");
  contains(load_error(with(R"("num_sys_prompts":3,"sys_prompt_lens":[1,2])")),
           "FILE:1: sys_prompt_lens: 2 lengths, but num_sys_prompts says 3");
}

BOOST_AUTO_TEST_CASE(the_header_must_come_first_and_be_complete) {
  contains(load_error(req0 + "\n"),
           "FILE:1: type: the first non-blank line must be the header");
  // Blank lines before it are skipped, and counted for the messages.
  contains(load_error("\n \t\n" + req0 + "\n"),
           "FILE:3: type: the first non-blank line must be the header");
  {
    trace_file f{"\n\r\n" + header + "\n" + req0 + "\n"};
    auto tr = load_trace(f.path);
    BOOST_REQUIRE_MESSAGE(tr, (tr ? "" : render(tr.error())));
    BOOST_TEST(tr->header_line == 3u);
    BOOST_TEST(tr->requests.size() == 1u);
    BOOST_TEST(tr->requests[0].line == 4u);
  }
  contains(load_error("\n  \n"), "FILE: empty trace");
  // A lone CR ends a line as LF does (old Mac files), CR LF once: each
  // line keeps its own number.
  for (const std::string eol : {"\r", "\r\n"}) {
    trace_file f{eol + header + eol + req0 + eol + eol + req1 + eol};
    auto tr = load_trace(f.path);
    BOOST_REQUIRE_MESSAGE(tr, (tr ? "" : render(tr.error())));
    BOOST_TEST(tr->header_line == 2u);
    BOOST_REQUIRE(tr->requests.size() == 2u);
    BOOST_TEST(tr->requests[0].line == 3u);
    BOOST_TEST(tr->requests[1].line == 5u);
    contains(load_error(header + eol + req0 + eol + "{" + eol),
             "FILE:3: malformed JSON");
  }
  {
    // A CR LF split between two reads of the file (64 KiB each): the LF
    // that begins the second still ends no line of its own.
    std::string padded = header;
    padded.insert(padded.size() - 1, R"(,"generator":")");
    padded.insert(padded.size() - 1, std::string(65535 - padded.size() - 1, 'x'));
    padded.insert(padded.size() - 1, "\"");
    BOOST_REQUIRE_EQUAL(padded.size(), 65535u);
    trace_file f{padded + "\r\n" + req0 + "\r\n"};
    auto tr = load_trace(f.path);
    BOOST_REQUIRE_MESSAGE(tr, (tr ? "" : render(tr.error())));
    BOOST_REQUIRE(tr->requests.size() == 1u);
    BOOST_TEST(tr->requests[0].line == 2u);
  }
  contains(load_error(R"({"type":"header","block_size":4,"num_blocks":8,"vocab":100})"),
           "FILE:1: max_model_len: missing");
  contains(load_error(R"({"type":"header","block_size":0,"num_blocks":8,)"
                      R"("max_model_len":16,"vocab":100})"),
           "FILE:1: block_size: must be > 0");
  contains(load_error(R"({"type":"header","block_size":4,"num_blocks":-8,)"
                      R"("max_model_len":16,"vocab":100})"),
           "FILE:1: num_blocks: expected a non-negative integer");
  contains(load_error(R"({"type":"header","block_size":4,"num_blocks":0,)"
                      R"("max_model_len":16,"vocab":100})"),
           "FILE:1: num_blocks: must be > 0");
  // The cache's limits (validate()), so that core mode, which builds the
  // pool without the actors, runs only on what they accept - and a huge
  // count is refused before anything is allocated for it.
  contains(load_error(R"({"type":"header","block_size":4,"num_blocks":4294967301,)"
                      R"("max_model_len":16,"vocab":100})"),
           "FILE:1: num_blocks: must be at most 2147483647 (got 4294967301)");
  contains(load_error(R"({"type":"header","block_size":4,"num_blocks":2147483648,)"
                      R"("max_model_len":16,"vocab":100})"),
           "FILE:1: num_blocks: must be at most 2147483647 (got 2147483648)");
  contains(load_error(R"({"type":"header","block_size":3,"num_blocks":8,)"
                      R"("max_model_len":16,"vocab":100})"),
           "FILE:1: block_size: must be a power of two in [1, 1024] (got 3)");
  contains(load_error(R"({"type":"header","block_size":2048,"num_blocks":8,)"
                      R"("max_model_len":16,"vocab":100})"),
           "FILE:1: block_size: must be a power of two in [1, 1024] (got 2048)");
  contains(load_error(R"({"type":"header","block_size":4294967312,"num_blocks":8,)"
                      R"("max_model_len":16,"vocab":100})"),
           "FILE:1: block_size: must be a power of two in [1, 1024] (got 4294967312)");
  // The limits themselves are accepted.
  BOOST_TEST(load_error(R"({"type":"header","block_size":1024,"num_blocks":2147483647,)"
                        R"("max_model_len":16,"vocab":100})")
             == "ok");
  contains(load_error(R"({"type":"header","block_size":4,"num_blocks":8,)"
                      R"("max_model_len":16,"vocab":4294967296})"),
           "FILE:1: vocab: must be at most 2147483648");
  contains(load_error(R"({"type":"header","block_size":4,"num_blocks":8,)"
                      R"("max_model_len":0,"vocab":100})"),
           "FILE:1: max_model_len: must be > 0");
}

BOOST_AUTO_TEST_CASE(bad_json_names_its_line_and_the_parsers_reason) {
  contains(load_error(header + "\n" + req0 + "\n" + R"({"type":"req","id":)" + "\n"),
           "FILE:3: malformed JSON at column 20: syntax error while parsing value "
           "- unexpected end of input");
  contains(load_error(header + "\n" + req0_with(R"("id":0,)", R"("id":0,,)") + "\n"),
           "FILE:2: malformed JSON at column 22: syntax error while parsing "
           "object key - unexpected ','");
  contains(load_error(header + "\n" + req0_with("[4,5]", "[4,1e400]") + "\n"),
           "FILE:2: malformed JSON: number overflow parsing '1e400'");
  contains(load_error(header + "\n[1, 2]\n"), "FILE:2: not a JSON object (got an array)");
  // A key given twice would count only its last value: refused.
  contains(load_error(header + "\n" + req0_with(R"("id":0,)", R"("id":0,"id":3,)")),
           "FILE:2: id: given twice");
}

BOOST_AUTO_TEST_CASE(each_request_field_is_checked) {
  auto one = [](const std::string& line) {
    return load_error(header + "\n" + line + "\n");
  };
  contains(one(req0_with(R"("type":"req")", R"("type":"request")")),
           "FILE:2: type: expected \"req\"");
  contains(one(req0_with(R"("id":0,)", "")), "FILE:2: id: missing");
  contains(one(req0_with(R"("arrival_step":0)", R"("arrival_step":-1)")),
           "FILE:2: arrival_step: expected a non-negative integer");
  contains(one(req0_with(R"("sys_prompt":-1)", R"("sys_prompt":"none")")),
           "FILE:2: sys_prompt: expected an integer");
  contains(one(req0_with(R"("prompt_len":3)", R"("prompt_len":2.5)")),
           "FILE:2: prompt_len: expected a non-negative integer");
  contains(one(req0_with(R"("output_len":2,)", R"("output_len":0,)")),
           "FILE:2: output_len: must be > 0");
  // Past INT64_MAX: an id may be any unsigned 64-bit value, and what is
  // too large is said so, not called negative.
  BOOST_TEST(one(req0_with(R"("id":0,)", R"("id":18446744073709551615,)")) == "ok");
  contains(one(req0_with(R"("id":0,)", R"("id":18446744073709551616,)")),
           "FILE:2: id: expected a non-negative integer (got 1.8446744073709552e+19)");
  contains(one(req0_with(R"("arrival_step":0)", R"("arrival_step":-1)")),
           "FILE:2: arrival_step: expected a non-negative integer (got -1)");
  // The replay's step counter must not wrap (nor lose exactness as a double).
  BOOST_TEST(one(req0_with(R"("arrival_step":0)", R"("arrival_step":9007199254740992)"))
             == "ok");
  contains(one(req0_with(R"("arrival_step":0)", R"("arrival_step":18446744073709551615)")),
           "FILE:2: arrival_step: must be at most 9007199254740992 "
           "(got 18446744073709551615)");
  contains(one(req0_with(R"("sys_prompt":-1)", R"("sys_prompt":18446744073709551615)")),
           "FILE:2: sys_prompt: must be at most 9223372036854775807 "
           "(got 18446744073709551615)");
  BOOST_TEST(one(req0_with(R"("sys_prompt":-1)", R"("sys_prompt":9223372036854775807)"))
             == "ok");
  contains(one(req0_with(R"("prompt":[1,2,3])", R"("prompt":"abc")")),
           "FILE:2: prompt: expected an array of token ids");
  contains(one(req0_with(R"("prompt":[1,2,3])", R"("prompt":[1,2])")),
           "FILE:2: prompt: 2 tokens, but its length field says 3");
}

BOOST_AUTO_TEST_CASE(unknown_keys_are_errors_on_header_and_request_lines) {
  // A misspelled optional key would otherwise go unnoticed.
  contains(load_error(R"({"type":"header","block_size":4,"num_blocks":8,)"
                      R"("max_model_len":16,"vocab":100,"bogus":1})"),
           "FILE:1: bogus: unknown key");
  contains(load_error(header + "\n" + req0_with(R"("id":0,)", R"("id":0,"prompt_lenn":3,)")),
           "FILE:2: prompt_lenn: unknown key");
  contains(load_error(header + "\n" + req0 + "\n"
                      + req0_with(R"("id":0,)", R"("id":1,"priority":"high",)")),
           "FILE:3: priority: unknown key");
  // What trace.py writes into its header is known.
  BOOST_TEST(load_error(R"({"type":"header","version":1,"generator":"trace.py",)"
                        R"("seed":0,"num_requests":1,"block_size":4,"num_blocks":8,)"
                        R"("max_model_len":16,"vocab":100,"num_sys_prompts":0,)"
                        R"("sys_prompt_lens":[],"shared_frac":0.5,"min_suffix":1,)"
                        R"("prompt_range":[1,3],"output_range":[1,2],)"
                        R"("rate_per_step":0.5})" "\n" + req0 + "\n")
             == "ok");
}

BOOST_AUTO_TEST_CASE(token_ids_outside_the_vocabulary_are_refused) {
  auto one = [](const std::string& line) {
    return load_error(header + "\n" + line + "\n");
  };
  contains(one(req0_with("[1,2,3]", "[1,100,3]")),
           "FILE:2: prompt[1]: token id out of range [0, 100)");
  contains(one(req0_with("[4,5]", "[4,-5]")),
           "FILE:2: output[1]: token id out of range [0, 100)");
  contains(one(req0_with("[4,5]", "[4,true]")),
           "FILE:2: output[1]: expected an integer token id (got true)");
  contains(one(req0_with("[4,5]", "[4,5.5]")),
           "FILE:2: output[1]: expected an integer token id (got 5.5)");
  contains(one(req0_with("[4,5]", "[4,18446744073709551615]")),
           "FILE:2: output[1]: token id out of range [0, 100) "
           "(got 18446744073709551615)");
  BOOST_TEST(one(req0_with("[1,2,3]", "[0,99,3]")) == "ok");
  // Without a vocabulary (REPLAY.md's header lists none; or vocab 0), ids
  // must still be int32.
  for (auto no_vocab : {R"({"type":"header","block_size":4,"num_blocks":8,)"
                        R"("max_model_len":16,"vocab":0})",
                        R"({"type":"header","block_size":4,"num_blocks":8,)"
                        R"("max_model_len":16})"}) {
    contains(load_error(std::string{no_vocab} + "\n"
                        + req0_with("[1,2,3]", "[1,3000000000,3]") + "\n"),
             "FILE:2: prompt[1]: token id out of range [0, 2147483648)");
    trace_file f{std::string{no_vocab} + "\n"
                 + req0_with("[1,2,3]", "[1,2147483647,3]") + "\n"};
    auto tr = load_trace(f.path);
    BOOST_REQUIRE_MESSAGE(tr, (tr ? "" : render(tr.error())));
    BOOST_TEST(tr->vocab == 0u);
    BOOST_TEST(tr->requests[0].prompt[1] == 2147483647);
  }
}

BOOST_AUTO_TEST_CASE(order_ids_and_lengths_are_checked_across_lines) {
  // req1 arrives at step 2: a later line arriving earlier is out of order.
  auto early = req0_with(R"("id":0)", R"("id":3)");
  contains(load_error(header + "\n" + req1 + "\n" + early + "\n"),
           "FILE:3: arrival_step: requests must come in arrival order");
  contains(load_error(header + "\n" + req0 + "\n" + req0 + "\n"),
           "FILE:3: id: 0 repeats the request on line 2");
  // 14 + 3 tokens > max_model_len 16.
  std::string long_req = R"({"type":"req","id":1,"arrival_step":0,"sys_prompt":-1,)"
                         R"("prompt_len":14,"output_len":3,)"
                         R"("prompt":[1,1,1,1,1,1,1,1,1,1,1,1,1,1],"output":[2,2,2]})";
  contains(load_error(header + "\n" + long_req + "\n"),
           "FILE:2: prompt_len + output_len: 17 tokens, more than max_model_len 16");
  // Lengths whose sum wraps around 2^64 are too long as well, and named so
  // (not found later as a prompt of the wrong length).
  auto wrap = [&](const std::string& plen, const std::string& olen) {
    auto r = req0_with(R"("prompt_len":3,"output_len":2)",
                       R"("prompt_len":)" + plen + R"(,"output_len":)" + olen);
    return load_error(header + "\n" + r + "\n");
  };
  contains(wrap("18446744073709551615", "2"),
           "FILE:2: prompt_len + output_len: prompt_len 18446744073709551615 alone "
           "is more than max_model_len 16");
  contains(wrap("3", "18446744073709551614"),
           "FILE:2: prompt_len + output_len: ");
}

BOOST_AUTO_TEST_CASE(check_fits_refuses_a_request_larger_than_the_pool) {
  trace_file f{header + "\n" + req0 + "\n" + req1 + "\n"};
  auto tr = load_trace(f.path);
  BOOST_REQUIRE(tr);
  // req1: 5 prompt + 1 output - 1 = 5 tokens = 2 blocks of 4; req0: 4 = 1.
  BOOST_TEST(!check_fits(*tr, 2));
  auto err = check_fits(*tr, 1);
  BOOST_REQUIRE(err);
  BOOST_TEST(err.code() == static_cast<std::uint8_t>(errc::invalid_request));
  contains(render(err), f.path + ":3: prompt_len + output_len: request 7 needs 2 "
                                 "blocks of 4 tokens, more than the pool's 1");
}

BOOST_AUTO_TEST_SUITE_END()
