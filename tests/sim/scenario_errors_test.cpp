// Scenario reading, bad input: each class of mistake is refused with
// "FILE:LINE: FIELD: what", LINE being the line of the offending key (or,
// for a missing key, of the object that lacks it) in multi-line JSON.
#include "sim_support.hpp"

#include "kvactor/messages/error.hpp"

#include <algorithm>

using namespace kvactor;
using namespace kvactor::sim;
using namespace kvactor::sim::test;

namespace {

// Multi-line on purpose; the strings before "workloads" hold braces,
// brackets, escaped quotes and an escaped newline that a line scanner must
// not mistake for structure.
const std::string base = R"({
  "cache": {
    "block_size": 4,
    "model": {"num_layers": 1, "num_kv_heads": 1, "head_dim": 8,
              "dtype": "fp16"},
    "storage": "none",
    "num_gpu_blocks": 64,
    "tenants": [
      {"name": "a", "priority": "high", "max_blocks": 40},
      {"name": "b", "reserved_blocks": 8}
    ]
  },
  "output_dir": "out/{x},[y]\"z\"\n:",
  "steps": 20,
  "workloads": {
    "a": {
      "rate": 0.5,
      "prompt_len": [4, 8],
      "output_len": [2, 6],
      "system_prompts": {
        "count": 1,
        "len": [4, 8],
        "share": 0.5
      }
    },
    "b": {"rate": 0.25, "prompt_len": 4, "output_len": 4}
  }
}
)";

} // namespace

BOOST_AUTO_TEST_SUITE(scenario_errors)

BOOST_AUTO_TEST_CASE(the_base_text_is_valid) {
  auto s = parse_ok(base);
  BOOST_TEST(s.output_dir == "out/{x},[y]\"z\"\n:");
  BOOST_TEST(s.workloads.size() == 2u);
}

BOOST_AUTO_TEST_CASE(errors_name_the_line_whatever_the_line_ends) {
  auto lf = replace_once(base, "\"rate\": 0.5,", "\"rate\": -1,");
  auto line = line_of(lf, "\"rate\": -1");
  auto with_ends = [&](const std::string& text, const std::string& end) {
    std::string out;
    for (auto c : text)
      out += c == '\n' ? end : std::string(1, c);
    return out;
  };
  for (auto end : {"\r\n", "\r"}) {
    auto msg = parse_error(with_ends(lf, end));
    auto want = "test.json:" + std::to_string(line) + ": workloads.a.rate: ";
    BOOST_TEST(msg.compare(0, want.size(), want) == 0, msg);
  }
  parse_ok(with_ends(base, "\r"));
  // A raw CR inside a string is refused as a CR (not as the LF a line end
  // becomes), on its own line, whatever the line ends around it.
  auto raw = replace_once(base, "out/{x}", "out/\r{x}");
  for (auto end : {"\n", "\r\n", "\r"}) {
    auto msg = parse_error(with_ends(raw, end));
    auto want = "test.json:" + std::to_string(line_of(base, "\"output_dir\"")) + ":";
    BOOST_TEST(msg.compare(0, want.size(), want) == 0, msg);
    BOOST_TEST(msg.find("U+000D") != std::string::npos, msg);
  }
}

BOOST_AUTO_TEST_CASE(a_tenant_name_with_dots_is_quoted_in_paths) {
  // Tenants "a" and "a.rate": b's workload, renamed "a.rate", lacks
  // prompt_len; its path must not read as a's rate.
  auto text = replace_once(replace_once(base, "{\"name\": \"b\", \"reserved_blocks\": 8}",
                                        "{\"name\": \"a.rate\", \"reserved_blocks\": 8}"),
                           "\"b\": {\"rate\": 0.25, \"prompt_len\": 4, ",
                           "\"a.rate\": {\"rate\": 0.25, ");
  check_error(text, "\"a.rate\": {", "workloads[\"a.rate\"].prompt_len", "missing");
  // Named the plain way too (a key given twice is found by its line).
  auto twice = replace_once(text, "\"a.rate\": {\"rate\": 0.25, ",
                            "\"a.rate\": {\"rate\": 0.25, \"rate\": 1, ");
  BOOST_TEST(parse_error(twice).find("test.json:" + std::to_string(line_of(text, "\"a.rate\": {")))
               == 0u,
             parse_error(twice));
  // A key cut inside a UTF-8 sequence, with a dot: an error, not a crash.
  BOOST_TEST(!parse_error("{\"a.b\xC3(").empty());
}

BOOST_AUTO_TEST_CASE(malformed_json_names_the_line_and_what_was_read_last) {
  // A missing comma: the parser stops at the next key, a line further.
  auto text = replace_once(base, "\"prompt_len\": [4, 8],", "\"prompt_len\": [4, 8]");
  auto msg = parse_error(text);
  auto want = "test.json:" + std::to_string(line_of(text, "\"output_len\": [2, 6]"))
              + ": malformed JSON after workloads.a.prompt_len";
  BOOST_TEST(msg.compare(0, want.size(), want) == 0, msg);
  // Cut short: the error is on the last line read.
  auto cut = base.substr(0, base.find("\"b\": {"));
  auto msg2 = parse_error(cut);
  auto want2 = "test.json:" + std::to_string(line_of(base, "\"b\": {"))
               + ": malformed JSON after workloads.a.system_prompts.share";
  BOOST_TEST(msg2.compare(0, want2.size(), want2) == 0, msg2);
  // Not JSON at all, on line 1.
  BOOST_TEST(parse_error("steps = 3").rfind("test.json:1: malformed JSON", 0) == 0);
  // JSON, but not an object: no empty field name in the message.
  BOOST_TEST(parse_error("[1, 2]")
             == "test.json:1: expected a JSON object (got an array)");
  // A NUL byte (the parser would stop there, unread garbage after it
  // accepted), and nesting past the reader's depth, where they are.
  using namespace std::string_literals;
  auto lines = 1 + std::count(base.begin(), base.end(), '\n');
  BOOST_TEST(parse_error(base + "\0 garbage {{{"s)
             == "test.json:" + std::to_string(lines)
                  + ": malformed JSON after workloads.b.output_len: a NUL byte "
                    "at column 1");
  std::string x = "x";
  for (int i = 0; i < 62; ++i) // the arrays entered before the 64th bracket
    x += "[0]";
  BOOST_TEST(parse_error("{\n\"x\": " + std::string(20000, '[') + "\n}")
             == "test.json:2: malformed JSON after " + x
                  + ": objects and arrays nested more than 64 deep at column 69");
  // (the 64th '[': the object is 1)
}

BOOST_AUTO_TEST_CASE(a_key_written_with_escapes_is_found_on_its_line) {
  // "r\u0061te" is "rate" to the parser: its line is the key's own.
  auto text = replace_once(base, "\"rate\": 0.5,", "\n\"r\\u0061te\": -1,");
  check_error(text, "\"r\\u0061te\"", "workloads.a.rate", "must be >= 0 (got -1)");
}

BOOST_AUTO_TEST_CASE(a_byte_order_mark_does_not_move_the_lines) {
  // Some editors start a UTF-8 file with one; the parser skips it, and so
  // must the line scanner (it once hid the '{' after it: every field was
  // on line 1).
  auto text = "\xEF\xBB\xBF" + replace_once(base, "\"rate\": 0.5,", "\"rate\": -1,");
  check_error(text, "\"rate\": -1,", "workloads.a.rate", "must be >= 0 (got -1)");
}

BOOST_AUTO_TEST_CASE(a_cache_error_found_at_start_names_its_line) {
  // What only the starting cache can tell (storage auto without a block
  // count, on a machine without a GPU) reads like a parse error: the
  // field's own line, or the cache object's for a field not written.
  auto s = parse_ok(base);
  auto msg = message_of(cache_start_error(
    s, make_error(errc::invalid_config, "num_gpu_blocks: needs a block count")));
  BOOST_TEST(msg == "test.json:" + std::to_string(line_of(base, "\"num_gpu_blocks\""))
                      + ": cache.num_gpu_blocks: needs a block count");
  msg = message_of(cache_start_error(
    s, make_error(errc::invalid_config, "gpu_memory_utilization: too small")));
  BOOST_TEST(msg == "test.json:" + std::to_string(line_of(base, "\"cache\""))
                      + ": cache.gpu_memory_utilization: too small");
  msg = message_of(cache_start_error(
    s, make_error(errc::invalid_config, "config: no device")));
  BOOST_TEST(msg == "test.json:" + std::to_string(line_of(base, "\"cache\""))
                      + ": cache: no device");
  // A pool sized from device memory, too small for the reservations: the
  // cache names the field first and the pool's size after it.
  msg = message_of(cache_start_error(
    s, make_error(errc::invalid_config,
                  "tenants[1].reserved_blocks: too many (with the pool sized "
                  "to 4 blocks from device memory)")));
  BOOST_TEST(msg == "test.json:" + std::to_string(line_of(base, "\"tenants\""))
                      + ": cache.tenants[1].reserved_blocks: too many (with the "
                        "pool sized to 4 blocks from device memory)");
}

BOOST_AUTO_TEST_CASE(missing_required_fields_are_reported_where_their_object_starts) {
  check_error(replace_once(base, "\"steps\": 20,", ""), "{", "steps", "missing");
  auto no_prompt = replace_once(base, "\"prompt_len\": [4, 8],", "");
  check_error(no_prompt, "\"a\": {", "workloads.a.prompt_len", "missing");
  auto no_rate = replace_once(base, "\"rate\": 0.25, ", "");
  check_error(no_rate, "\"b\": {", "workloads.b.rate", "missing");
  auto no_len = replace_once(base, "\"len\": [4, 8],", "");
  check_error(no_len, "\"system_prompts\": {", "workloads.a.system_prompts.len",
              "missing");
  auto cut = base.substr(0, base.find("  \"workloads\""));
  check_error(replace_once(cut, "\"steps\": 20,", "\"steps\": 20") + "}", "{",
              "workloads", "missing");
}

BOOST_AUTO_TEST_CASE(unknown_keys_are_errors_at_every_level) {
  check_error(replace_once(base, "\"steps\": 20,", "\"steps\": 20,\n  \"stepz\": 1,"),
              "\"stepz\"", "stepz", "unknown key 'stepz'");
  check_error(replace_once(base, "\"rate\": 0.5,", "\"rate\": 0.5,\n \"rat\": 1,"),
              "\"rat\"", "workloads.a.rat", "unknown key 'rat'");
  check_error(replace_once(base, "\"share\": 0.5", "\"share\": 0.5,\n\"cnt\": 2"),
              "\"cnt\"", "workloads.a.system_prompts.cnt", "unknown key");
  // Inside the cache object, through kvactor's config reader.
  check_error(replace_once(base, "\"storage\": \"none\",",
                           "\"storage\": \"none\",\n    \"blocks\": 3,"),
              "\"blocks\"", "cache.blocks", "unknown");
  // A key with ": " in it is quoted, and the error still finds its line
  // (split at the first ": " it was taken for the field's end).
  check_error(replace_once(base, "\"storage\": \"none\",",
                           "\"storage\": \"none\",\n    \"a: b\": 3,"),
              "\"a: b\"", "cache[\"a: b\"]", "unknown key 'a: b'");
}

BOOST_AUTO_TEST_CASE(out_of_range_numbers_name_their_field) {
  check_error(replace_once(base, "\"rate\": 0.5,", "\"rate\": -1,"),
              "\"rate\": -1", "workloads.a.rate", "must be >= 0 (got -1)");
  check_error(replace_once(base, "\"steps\": 20,", "\"steps\": 0,"),
              "\"steps\": 0", "steps", "must be >= 1");
  check_error(replace_once(base, "\"share\": 0.5", "\"share\": 1.5"),
              "\"share\": 1.5", "workloads.a.system_prompts.share", "must be <= 1");
  check_error(replace_once(base, "\"b\": {\"rate\": 0.25,",
                           "\"b\": {\"vocab_size\": 1, \"rate\": 0.25,"),
              "\"b\": {", "workloads.b.vocab_size", "must be >= 2");
  check_error(replace_once(base, "\"steps\": 20,",
                           "\"steps\": 20, \"max_running\": 0,"),
              "\"steps\": 20", "max_running", "must be >= 1");
  // prefill_chunk: 0 (off) or a chunk no longer than a prompt may be.
  check_error(replace_once(base, "\"steps\": 20,",
                           "\"steps\": 20,\n  \"prefill_chunk\": -16,"),
              "\"prefill_chunk\"", "prefill_chunk",
              "expected a non-negative integer (got -16)");
  check_error(replace_once(base, "\"steps\": 20,",
                           "\"steps\": 20,\n  \"prefill_chunk\": 16.5,"),
              "\"prefill_chunk\"", "prefill_chunk", "expected a non-negative integer");
  check_error(replace_once(base, "\"steps\": 20,",
                           "\"steps\": 20,\n  \"prefill_chunk\": \"32\","),
              "\"prefill_chunk\"", "prefill_chunk", "expected a non-negative integer");
  check_error(replace_once(base, "\"steps\": 20,",
                           "\"steps\": 20,\n  \"prefill_chunk\": 16777217,"),
              "\"prefill_chunk\"", "prefill_chunk", "must be at most 16777216");
  // Token ids are int32; system prompts are made up front.
  check_error(replace_once(base, "\"b\": {\"rate\": 0.25,",
                           "\"b\": {\"vocab_size\": 2147483649, \"rate\": 0.25,"),
              "\"b\": {", "workloads.b.vocab_size", "must be at most 2147483648");
  check_error(replace_once(base, "\"count\": 1,", "\"count\": 4000000000,"),
              "\"count\": 4000000000", "workloads.a.system_prompts.count",
              "must be at most 65536");
  check_error(replace_once(replace_once(base, "\"count\": 1,", "\"count\": 100,"),
                           "\"len\": [4, 8],", "\"len\": [4, 16000000],"),
              "\"len\": [4, 16000000]", "workloads.a.system_prompts.len",
              "tokens in all");
  // A number past a double's range, on its line and named by its field -
  // not at the first text that looks like it (here in a string before it).
  auto huge = replace_once(replace_once(base, "\"rate\": 0.5,", "\"rate\": 1e400,"),
                           "\"output_dir\": \"out/", "\"output_dir\": \"1e400/out/");
  check_error(huge, "\"rate\": 1e400", "workloads.a.rate",
              "number out of range: number overflow parsing '1e400'");
  // In an array, the element; as the whole document, no field at all.
  check_error(replace_once(base, "\"prompt_len\": [4, 8],",
                           "\"prompt_len\": [4,\n -1e999],"),
              "-1e999", "workloads.a.prompt_len[1]", "number overflow parsing '-1e999'");
  BOOST_TEST(parse_error("\n1e400")
             == "test.json:2: number out of range: number overflow parsing '1e400'");
  // System prompts nobody would use (share defaulting to 0): say the share.
  check_error(replace_once(base, ",\n        \"share\": 0.5", ""),
              "\"system_prompts\": {", "workloads.a.system_prompts.share",
              "missing");
  // A key given twice (JSON would keep the last): named where it starts.
  check_error(replace_once(base, "\"share\": 0.5", "\"share\": 0.5, \"share\": 1"),
              "\"share\"", "workloads.a.system_prompts.share", "given twice");
  check_error(replace_once(base, "\"steps\": 20,", "\"steps\": 20, \"steps\": 2,"),
              "\"steps\"", "steps", "given twice");
  // The cache's own fields, with the cache's path in front.
  check_error(replace_once(base, "\"num_gpu_blocks\": 64,",
                           "\"num_gpu_blocks\": 64,\n\"pressure\": {\"high\": 2},"),
              "\"pressure\"", "cache.pressure.high", "");
}

BOOST_AUTO_TEST_CASE(bad_words_and_types_name_their_field) {
  check_error(replace_once(base, "\"steps\": 20,",
                           "\"steps\": 20, \"preemption\": \"drop\","),
              "\"preemption\"", "preemption", "\"drop\"");
  check_error(replace_once(base, "\"steps\": 20,",
                           "\"steps\": 20,\n\"preemption\": \"swap\","),
              "\"preemption\"", "preemption", "num_host_blocks");
  check_error(replace_once(base, "\"steps\": 20,",
                           "\"steps\": 20,\n\"admit_up_to\": \"most\","),
              "\"admit_up_to\"", "admit_up_to", "\"most\"");
  check_error(replace_once(base, "\"rate\": 0.5,",
                           "\"rate\": 0.5, \"priority\": \"urgent\","),
              "\"priority\": \"urgent\"", "workloads.a.priority", "urgent");
  check_error(replace_once(base, "\"steps\": 20,", "\"steps\": \"20\","),
              "\"steps\": \"20\"", "steps", "expected a non-negative integer");
  check_error(replace_once(base, "\"b\": {\"rate\": 0.25, \"prompt_len\": 4,",
                           "\"b\": {\"rate\": 0.25, \"prompt_len\": [1, 2, 3],"),
              "\"b\": {", "workloads.b.prompt_len", "expected [min, max]");
  check_error(replace_once(base, "\"output_dir\": \"out/{x},[y]\\\"z\\\"\\n:\",",
                           "\"output_dir\": \"\","),
              "\"output_dir\"", "output_dir", "must not be empty");
  check_error(replace_once(base, "\"output_dir\": \"out/{x},[y]\\\"z\\\"\\n:\",",
                           "\"output_dir\": \"out\\u0000/x\","),
              "\"output_dir\"", "output_dir", "must not contain a NUL");
}

BOOST_AUTO_TEST_CASE(a_workload_for_an_unknown_tenant_is_refused) {
  auto text = replace_once(base, "\"b\": {\"rate\"", "\"c\": {\"rate\"");
  check_error(text, "\"c\": {", "workloads.c", "unknown tenant 'c'");
  BOOST_TEST(parse_error(text).find("cache.tenants: a, b") != std::string::npos);
  check_error(replace_once(base, "\"workloads\": {", "\"workloads\": {\"\": {},"),
              "\"workloads\"", "workloads[\"\"]", "unknown tenant ''");
  // An empty workloads object: nothing would ever arrive.
  auto none = base.substr(0, base.find("\"workloads\": {")) + "\"workloads\": {}}";
  check_error(none, "\"workloads\"", "workloads", "nothing would arrive");
}

BOOST_AUTO_TEST_CASE(explicit_system_prompt_tokens_must_be_in_the_vocabulary) {
  auto with_tokens = [](const std::string& tokens) {
    return replace_once(base, "\"count\": 1,\n        \"len\": [4, 8],",
                        "\"tokens\": [\n[1, 2],\n[3,\n " + tokens + "]],");
  };
  auto vocab = [](std::string text) {
    return replace_once(text, "\"rate\": 0.5,", "\"rate\": 0.5, \"vocab_size\": 50,");
  };
  BOOST_TEST(parse_ok(vocab(with_tokens("49"))).workloads[0].system_prompts.count
             == 2u);
  check_error(vocab(with_tokens("50")), " 50]", "workloads.a.system_prompts.tokens[1][1]",
              "token id 50 out of range [0, 50)");
  check_error(vocab(with_tokens("-1")), " -1]",
              "workloads.a.system_prompts.tokens[1][1]",
              "token id -1 out of range [0, 50)");
  // Past INT64_MAX: said as written, not as the negative it reads as signed.
  check_error(vocab(with_tokens("18446744073709551615")), " 18446744073709551615]",
              "workloads.a.system_prompts.tokens[1][1]",
              "token id 18446744073709551615 out of range [0, 50)");
  check_error(with_tokens("\"x\""), " \"x\"]",
              "workloads.a.system_prompts.tokens[1][1]", "expected a token id");
  // Both forms at once.
  check_error(replace_once(base, "\"count\": 1,", "\"count\": 1, \"tokens\": [[1]],"),
              "\"tokens\"", "workloads.a.system_prompts.tokens", "either");
  // With count 0, len is not needed - but when given it is still checked.
  auto none = [](const std::string& len) {
    return replace_once(replace_once(base, "\"count\": 1,\n        \"len\": [4, 8],",
                                     "\"count\": 0,\n        \"len\": " + len + ","),
                        "\"share\": 0.5", "\"share\": 0");
  };
  BOOST_TEST(parse_ok(none("[4, 8]")).workloads[0].system_prompts.count == 0u);
  check_error(none("\"garbage\""), "\"len\"", "workloads.a.system_prompts.len",
              "expected [min, max]");
  check_error(none("[-5, 1e9]"), "\"len\"", "workloads.a.system_prompts.len",
              "expected [min, max]");
  check_error(none("[5, 4]"), "\"len\"", "workloads.a.system_prompts.len",
              "min 5 > max 4");
  // A share without any system prompt.
  check_error(replace_once(base, "\"count\": 1,\n        \"len\": [4, 8],",
                           "\"count\": 0,"),
              "\"share\"", "workloads.a.system_prompts.share", "no system prompts");
}

BOOST_AUTO_TEST_CASE(ranges_with_min_above_max_are_refused) {
  check_error(replace_once(base, "\"prompt_len\": [4, 8],", "\"prompt_len\": [9, 8],"),
              "\"prompt_len\": [9", "workloads.a.prompt_len", "min 9 > max 8");
  check_error(replace_once(base, "\"output_len\": [2, 6],", "\"output_len\": [0, 6],"),
              "\"output_len\": [0", "workloads.a.output_len", "min must be >= 1");
  check_error(replace_once(base, "\"len\": [4, 8],", "\"len\": [8, 4],"),
              "\"len\": [8", "workloads.a.system_prompts.len", "min 8 > max 4");
  check_error(replace_once(base, "\"rate\": 0.5,",
                           "\"rate\": 0.5,\n\"burst\": {\"period\": 5, \"duration\": 6, "
                           "\"rate\": 1},"),
              "\"burst\"", "workloads.a.burst.duration", "must be <= period (5)");
  check_error(replace_once(base, "\"output_len\": [2, 6],", "\"output_len\": [0, 6],"),
              "\"output_len\": [0", "workloads.a.output_len", "min must be >= 1 (got 0)");
}

BOOST_AUTO_TEST_CASE(a_scenario_where_nothing_can_arrive_is_refused) {
  // A burst that lasts no step never fires.
  check_error(replace_once(base, "\"rate\": 0.5,",
                           "\"rate\": 0.5,\n\"burst\": {\"period\": 5, \"duration\": 0, "
                           "\"rate\": 1},"),
              "\"burst\"", "workloads.a.burst.duration", "must be >= 1");
  // Every rate 0 (a burst with rate 0 too): the run would only count steps.
  auto idle = replace_once(replace_once(base, "\"rate\": 0.5,", "\"rate\": 0,\n\"burst\": "
                                              "{\"period\": 5, \"duration\": 1, \"rate\": 0},"),
                           "\"b\": {\"rate\": 0.25,", "\"b\": {\"rate\": 0,");
  check_error(idle, "\"workloads\"", "workloads", "nothing would arrive");
  // One tenant idle beside one that sends is a scenario like any other.
  parse_ok(replace_once(base, "\"b\": {\"rate\": 0.25,", "\"b\": {\"rate\": 0,"));
}

BOOST_AUTO_TEST_CASE(a_request_that_could_never_fit_is_refused) {
  // a: 8 + 8 + 6 = 22 tokens now; its quota is 40 blocks = 160 tokens.
  check_error(replace_once(base, "\"output_len\": [2, 6],", "\"output_len\": [2, 149],"),
              "\"a\": {", "workloads.a", "the tenant's max_blocks (40)");
  // b may use the pool but for a's reservation (none): 64 blocks.
  check_error(replace_once(base, "\"prompt_len\": 4, \"output_len\": 4",
                           "\"prompt_len\": 4, \"output_len\": 253"),
              "\"b\": {", "workloads.b", "the pool (64 blocks");
  // a may not take b's 8 reserved blocks: 56 blocks are left to it.
  auto big_a = replace_once(replace_once(base, "\"max_blocks\": 40", "\"max_blocks\": 0"),
                            "\"output_len\": [2, 6],", "\"output_len\": [2, 209],");
  check_error(big_a, "\"a\": {", "workloads.a", "8 reserved for other tenants");
  auto just_fits = replace_once(
    replace_once(base, "\"max_blocks\": 40", "\"max_blocks\": 0"),
    "\"output_len\": [2, 6],", "\"output_len\": [2, 208],");
  BOOST_TEST(parse_ok(just_fits).workloads[0].max_sequence_tokens() == 224u);
}

BOOST_AUTO_TEST_CASE(a_request_the_supervisor_would_preempt_alone_is_refused) {
  // Critical pressure starts at 61 of the 64 blocks: one request of b may
  // hold 60 (its reservation of 8 covers fewer); 4 + 240 tokens need 61.
  auto long_b = replace_once(base, "\"prompt_len\": 4, \"output_len\": 4",
                             "\"prompt_len\": 4, \"output_len\": 240");
  check_error(long_b, "\"b\": {", "workloads.b",
              "its longest request (244 tokens, 61 blocks of 4) cannot fit "
              "below critical pressure (0.95 of 64 blocks), where "
              "cache.pressure.preempt_at_critical would preempt it alone, nor "
              "within the tenant's reserved_blocks (8)");
  // 60 blocks fit; so do 61 when the supervisor does not preempt.
  parse_ok(replace_once(base, "\"prompt_len\": 4, \"output_len\": 4",
                        "\"prompt_len\": 4, \"output_len\": 236"));
  parse_ok(replace_once(long_b, "\"num_gpu_blocks\": 64,",
                        "\"num_gpu_blocks\": 64,\n"
                        "    \"pressure\": {\"preempt_at_critical\": false},"));
}

BOOST_AUTO_TEST_CASE(the_admission_watermark_counts_against_the_room) {
  // Watermark 0.5 keeps 32 of the 64 blocks free at every admission, b
  // reserves 8: 24 blocks (96 tokens) are left to a; 8 + 8 + 90 = 106
  // tokens (27 blocks) would wait forever - before, a stall after 1000 steps.
  auto with_watermark = replace_once(base, "\"num_gpu_blocks\": 64,",
                                     "\"num_gpu_blocks\": 64,\n"
                                     "    \"admission\": {\"watermark\": 0.5},");
  auto too_long = replace_once(with_watermark, "\"output_len\": [2, 6],",
                               "\"output_len\": [2, 90],");
  check_error(too_long, "\"a\": {", "workloads.a",
              "the pool (64 blocks, 8 reserved for other tenants, 32 kept free "
              "for admissions by cache.admission.watermark 0.5)");
  // 8 + 8 + 80 = 96 tokens: exactly the 24 blocks left.
  auto fits = replace_once(with_watermark, "\"output_len\": [2, 6],",
                           "\"output_len\": [2, 80],");
  BOOST_TEST(parse_ok(fits).workloads[0].max_sequence_tokens() == 96u);
  // The watermark rounds up, as the pool does: ceil(0.01 * 64) = 1 block.
  auto tiny = replace_once(replace_once(base, "\"num_gpu_blocks\": 64,",
                                        "\"num_gpu_blocks\": 64,\n"
                                        "    \"admission\": {\"watermark\": 0.01},"),
                           "\"prompt_len\": 4, \"output_len\": 4",
                           "\"prompt_len\": 4, \"output_len\": 249");
  // 253 tokens = 64 blocks: the whole pool, less the one block.
  check_error(tiny, "\"b\": {", "workloads.b",
              "the pool (64 blocks, 0 reserved for other tenants, 1 kept free "
              "for admissions by cache.admission.watermark 0.01)");
}

BOOST_AUTO_TEST_CASE(queues_that_could_hold_more_than_2_to_the_32_tokens_are_refused) {
  // Requests are made as they arrive: max_waiting of each workload's
  // longest (a: 8 + 8 + 6 = 22 tokens, b: 8) must stay within 2^32 tokens
  // in all. 143165576 x 30 fit; one more each passes the bound at b.
  auto waiting = [&](const std::string& n) {
    return replace_once(base, "\"steps\": 20,",
                        "\"steps\": 20,\n  \"max_waiting\": " + n + ",");
  };
  parse_ok(waiting("143165576"));
  check_error(waiting("143165577"), "\"max_waiting\"", "max_waiting",
              "143165577 requests waiting per tenant, of up to 8 tokens each "
              "(workloads.b's longest), could hold more than 4294967296 tokens "
              "in all");
  check_error(waiting("18446744073709551615"), "\"max_waiting\"", "max_waiting",
              "(workloads.a's longest)");
  // Long prompts with the default: 65536 x (70004 + 22) tokens. Before, such a
  // scenario filled memory until the OOM killer ended the run.
  auto long_b = replace_once(replace_once(base, "\"num_gpu_blocks\": 64,",
                                          "\"num_gpu_blocks\": 32768,"),
                             "\"prompt_len\": 4, \"output_len\": 4",
                             "\"prompt_len\": 70000, \"output_len\": 4");
  check_error(long_b, "{", "max_waiting",
              "65536 (the default) requests waiting per tenant, of up to 70004 "
              "tokens each (workloads.b's longest)");
  parse_ok(replace_once(long_b, "\"steps\": 20,",
                        "\"steps\": 20,\n  \"max_waiting\": 60000,"));
}

BOOST_AUTO_TEST_CASE(a_pool_sized_at_start_is_checked_once_its_size_is_known) {
  // num_gpu_blocks 0 (cuda: sized from device memory) - only the quota can
  // be checked while parsing; check_fits with the pool as started names the
  // file, the workload's line and field like a parse error.
  auto sized = replace_once(replace_once(base, "\"num_gpu_blocks\": 64,",
                                         "\"num_gpu_blocks\": 0,"),
                            "\"storage\": \"none\",", "\"storage\": \"cuda\",");
  auto s = parse_ok(replace_once(sized, "\"output_len\": [2, 6],",
                                 "\"output_len\": [2, 100],"));
  BOOST_TEST(!check_fits(s, 64)); // 116 tokens = 29 blocks of 56
  auto err = check_fits(s, 36);   // 28 left beside b's 8
  BOOST_REQUIRE(err);
  auto msg = message_of(err);
  auto want = "test.json:" + std::to_string(line_of(sized, "\"a\": {"))
              + ": workloads.a: its longest request (116 tokens, 29 blocks of 4) "
                "cannot fit the pool (36 blocks as sized from device memory, 8 "
                "reserved for other tenants)";
  BOOST_TEST(msg == want, msg);
  // The quota still counts while the size is unknown.
  check_error(replace_once(sized, "\"output_len\": [2, 6],", "\"output_len\": [2, 149],"),
              "\"a\": {", "workloads.a", "the tenant's max_blocks (40)");
}

BOOST_AUTO_TEST_CASE(a_missing_file_is_named) {
  auto s = load_scenario("/nonexistent/dir/scenario.json");
  BOOST_REQUIRE(!s);
  auto msg = message_of(s.error());
  BOOST_TEST(msg.rfind("/nonexistent/dir/scenario.json: ", 0) == 0, msg);
}

BOOST_AUTO_TEST_SUITE_END()
