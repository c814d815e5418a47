// scenario: the JSON reader (field checks on top of json_reader, which makes
// every error say FILE:LINE: FIELD).
#include "scenario.hpp"

#include <algorithm>

#include <caf/message.hpp>
#include <nlohmann/json.hpp>

#include "json_reader.hpp"
#include "kvactor/config/json_helpers.hpp"
#include "kvactor/messages/error.hpp"
#include "workload_reader.hpp"

namespace kvactor::sim {

namespace {

using nlohmann::json;

/// Where nlohmann's parser gave up. Its DOM parse reports a number past a
/// double's range ("number overflow parsing '1e400'") without a position;
/// its SAX interface passes one along.
struct failure_position : nlohmann::json_sax<json> {
  std::size_t at = 0; ///< characters read when it failed
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception&) override {
    at = position;
    return false;
  }
};

} // namespace

std::string cache_field_path(const std::string& field) {
  if (field.empty() || field == "config")
    return "cache";
  return field[0] == '[' ? "cache" + field : "cache." + field;
}

namespace {

caf::error read_cache(const json& obj, const error_maker& fail,
                      cache_config& out) {
  auto cfg = parse_config(obj);
  if (cfg) {
    out = std::move(*cfg);
    return caf::none;
  }
  auto [field, what] = detail::split_field(context_of(cfg.error()));
  return fail(cache_field_path(field), what);
}

/// The line of each key of the cache object, and under "" its own.
std::map<std::string, int> cache_lines_of(const json& obj,
                                          const line_index& lines) {
  std::map<std::string, int> out{{"", lines.line_of("cache")}};
  for (auto& item : obj.items())
    out[item.key()] = lines.line_of("cache." + item.key());
  return out;
}

/// Requests are made whole (prompt and output tokens) as they arrive, and
/// each workload's queue holds up to max_waiting of them: at worst, each
/// its longest. Past this many token ids (16 GiB) in all, the queues could
/// take more memory than a machine has - a prompt_len of 2^24 with the
/// default max_waiting was 2^41 tokens, and the run met the OOM killer.
constexpr std::uint64_t max_waiting_tokens = std::uint64_t{1} << 32;

caf::error check_waiting_room(const scenario& s, bool given,
                              const error_maker& fail) {
  std::uint64_t total = 0;
  for (auto& w : s.workloads) {
    auto tokens = w.max_sequence_tokens();
    if (tokens == 0)
      continue; // lengths are checked to be positive; no division by 0
    // Compared by division: max_waiting may be up to 2^64 - 1.
    if (s.max_waiting > (max_waiting_tokens - total) / tokens)
      return fail("max_waiting",
                  std::to_string(s.max_waiting)
                    + (given ? "" : " (the default)")
                    + " requests waiting per tenant, of up to "
                    + std::to_string(tokens) + " tokens each ("
                    + join_path("workloads", w.tenant)
                    + "'s longest), could hold more than "
                    + std::to_string(max_waiting_tokens)
                    + " tokens in all (16 GiB of token ids, made as requests "
                      "arrive): lower max_waiting or the workloads' lengths");
    total += s.max_waiting * tokens;
  }
  return caf::none;
}

caf::error read_scenario(const json& root, const error_maker& fail,
                         scenario& out) {
  if (!root.is_object())
    return fail("", "expected a JSON object" + got(root));
  object_reader r{root, "", fail};
  const json* cache = nullptr;
  const json* workloads = nullptr;
  std::string preemption = "recompute";
  std::string order = "arrival";
  caf::error err;
  (err = r.check_keys({"cache", "steps", "drain", "seed", "output_dir",
                       "preemption", "admit_up_to", "max_running",
                       "max_admits_per_step", "admission_order",
                       "probe_window", "starvation_steps", "max_waiting",
                       "prefill_chunk", "draft_tokens", "draft_acceptance",
                       "verify_every", "workloads"}))
    || (err = r.object("cache", cache, true))
    || (err = read_cache(*cache, fail, out.cache))
    || (err = r.count("steps", out.steps, 1, true))
    || (err = r.boolean("drain", out.drain))
    || (err = r.count("seed", out.seed, 0, false))
    || (err = r.string("output_dir", out.output_dir))
    || (err = r.string("preemption", preemption))
    || (err = r.string("admit_up_to", out.admit_up_to))
    || (err = r.count("max_running", out.max_running, 1, false))
    || (err = r.count("max_admits_per_step", out.max_admits_per_step, 1, false))
    || (err = r.string("admission_order", order))
    || (err = r.count("probe_window", out.probe_window, 1, false, 4096))
    || (err = r.count("starvation_steps", out.starvation_steps, 1, false))
    || (err = r.count("max_waiting", out.max_waiting, 1, false))
    // As long as the longest prompt can be (lengths are at most 2^24).
    || (err = r.count("prefill_chunk", out.prefill_chunk, 0, false,
                      std::uint64_t{1} << 24))
    // As many drafts as one extend may carry (the cache's bound).
    || (err = r.count("draft_tokens", out.draft_tokens, 0, false,
                      max_draft_tokens))
    || (err = r.number("draft_acceptance", out.draft_acceptance, 0, 1, false))
    || (err = r.count("verify_every", out.verify_every, 0, false))
    || (err = r.object("workloads", workloads, true));
  if (err)
    return err;
  out.cache_lines = cache_lines_of(*cache, fail.lines);
  if (out.output_dir.empty())
    return fail("output_dir", "must not be empty");
  // A path ends at its first NUL for the system: "a\u0000b" would write to
  // "a" and name it wrongly.
  if (out.output_dir.find('\0') != std::string::npos)
    return fail("output_dir", "must not contain a NUL character");
  out.output_dir_origin =
    root.contains("output_dir")
      ? fail.source + ":" + std::to_string(fail.lines.line_of("output_dir"))
          + ": output_dir"
      : fail.source + ": output_dir (default)";
  if (preemption == "swap")
    out.preemption = preemption_mode::swap;
  else if (preemption != "recompute")
    return fail("preemption", "expected \"recompute\" or \"swap\" (got \""
                                + preemption + "\")");
  if (out.preemption == preemption_mode::swap && out.cache.num_host_blocks == 0)
    return fail("preemption", "\"swap\" needs a host tier: set "
                              "cache.num_host_blocks");
  if (auto o = admission_order_from(order))
    out.admission = *o;
  else
    return fail("admission_order", "expected \"arrival\" or \"cached_prefix\" "
                                   "(got \"" + order + "\")");
  auto& up_to = out.admit_up_to;
  if (up_to != "auto" && up_to != "medium" && up_to != "high"
      && up_to != "critical" && up_to != "full")
    return fail("admit_up_to", "expected \"auto\", \"medium\", \"high\", "
                               "\"critical\" or \"full\" (got \"" + up_to + "\")");
  std::string known;
  for (auto& t : out.cache.tenants)
    known += (known.empty() ? "" : ", ") + t.name;
  for (auto& item : workloads->items())
    if (!out.cache.find_tenant(item.key()) || item.key().empty())
      return fail(join_path("workloads", item.key()),
                  "unknown tenant '" + item.key() + "' (cache.tenants: " + known
                    + ")");
  for (auto& t : out.cache.tenants) {
    auto i = workloads->find(t.name);
    if (i == workloads->end())
      continue;
    auto path = join_path("workloads", t.name);
    workload_config w;
    if (auto err = read_workload(*i, path, fail, t, w))
      return err;
    w.line = fail.lines.line_of(path);
    out.workloads.push_back(std::move(w));
  }
  if (out.workloads.empty())
    return fail("workloads", "names no tenant: nothing would arrive");
  auto sends = [](const workload_config& w) {
    return w.rate > 0 || (w.burst.period != 0 && w.burst.rate > 0);
  };
  if (std::none_of(out.workloads.begin(), out.workloads.end(), sends))
    return fail("workloads", "every rate is 0, bursts' too: nothing would arrive");
  if (auto err = check_fits(out, out.cache.num_gpu_blocks))
    return err;
  return check_waiting_room(out, root.contains("max_waiting"), fail);
}

} // namespace

double admission_limit(const scenario& s) noexcept {
  auto& p = s.cache.pressure;
  if (s.admit_up_to == "medium")
    return p.medium;
  if (s.admit_up_to == "high")
    return p.high;
  if (s.admit_up_to == "critical")
    return p.critical;
  if (s.admit_up_to == "auto" && p.preempt_at_critical)
    return p.high;
  return 1.0;
}

const char* to_string(preemption_mode x) noexcept {
  return x == preemption_mode::swap ? "swap" : "recompute";
}

caf::expected<scenario> parse_scenario(const std::string& text,
                                       const std::string& source) {
  // A lone CR (old Mac line ends) breaks a line as LF does, so errors
  // name the right line; CR LF counts once already. Outside strings a CR
  // is whitespace and becomes LF here; inside one it stays, and the parser
  // names it (an unescaped control character) on the line it is on.
  auto lone_cr = [&](std::size_t i) {
    return text[i] == '\r' && (i + 1 == text.size() || text[i + 1] != '\n');
  };
  if (text.find('\r') != std::string::npos) {
    auto lf = text;
    bool in_string = false, changed = false;
    for (std::size_t k = 0; k < lf.size(); ++k) {
      if (in_string && lf[k] == '\\') {
        ++k; // the escaped character, whatever it is
      } else if (lf[k] == '"') {
        in_string = !in_string;
      } else if (!in_string && lone_cr(k)) {
        lf[k] = '\n';
        changed = true;
      }
    }
    if (changed)
      return parse_scenario(lf, source);
  }
  json root;
  std::string duplicate;
  try {
    root = detail::parse_json(text, duplicate);
  } catch (const detail::json_text_error& e) {
    auto at = e.offset;
    line_index before{text, at};
    auto line = 1 + std::count(text.begin(), text.begin() + at, '\n');
    auto nl = at == 0 ? std::string::npos : text.rfind('\n', at - 1);
    auto column = at + 1 - (nl == std::string::npos ? 0 : nl + 1);
    std::string where = before.last_path().empty()
                          ? ""
                          : " after " + before.last_path();
    return make_error(errc::invalid_config,
                      source + ":" + std::to_string(line) + ": malformed JSON"
                        + where + ": " + e.what() + " at column "
                        + std::to_string(column));
  } catch (const json::parse_error& e) {
    // e.byte is 1-based: the index of the offending character plus one.
    auto at = e.byte == 0 ? 0 : static_cast<std::size_t>(e.byte - 1);
    at = std::min(at, text.size());
    line_index before{text, at};
    auto line = 1 + std::count(text.begin(), text.begin() + at, '\n');
    std::string what = e.what();
    auto pos = what.find("column");
    if (pos != std::string::npos && (pos = what.find(": ", pos)) != std::string::npos)
      what = what.substr(pos + 2);
    std::string where = before.last_path().empty()
                          ? ""
                          : " after " + before.last_path();
    return make_error(errc::invalid_config, source + ":" + std::to_string(line)
                                              + ": malformed JSON" + where
                                              + ": " + what);
  } catch (const json::exception& e) {
    // A number past a double's range: nlohmann names the token, not its
    // place. Parsing again through SAX finds where it stopped: the line of
    // the token's last character, and the field read last before it.
    std::string what = e.what();
    if (auto pos = what.find("] "); pos != std::string::npos)
      what = what.substr(pos + 2); // "[json.exception.out_of_range.406] "
    failure_position where;
    json::sax_parse(text, &where);
    auto at = std::min(where.at == 0 ? 0 : where.at - 1, text.size());
    line_index before{text, at + 1};
    auto line = 1 + std::count(text.begin(), text.begin() + at, '\n');
    auto& field = before.last_path();
    return make_error(errc::invalid_config,
                      source + ":" + std::to_string(line) + ": "
                        + (field.empty() ? "" : field + ": ")
                        + "number out of range: " + what);
  }
  line_index lines{text};
  error_maker fail{source, lines};
  if (!duplicate.empty()) // named at its first occurrence
    return fail(duplicate, detail::given_twice);
  scenario out;
  out.source = source;
  if (auto err = read_scenario(root, fail, out))
    return err;
  return out;
}

caf::expected<scenario> load_scenario(const std::string& path) {
  auto text = detail::read_text_file(path);
  if (!text)
    return std::move(text.error());
  return parse_scenario(*text, path);
}

std::string message_of(const caf::error& err) {
  return context_of(err);
}

} // namespace kvactor::sim
