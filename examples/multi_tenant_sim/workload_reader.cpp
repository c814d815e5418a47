// workload_reader: a workload's JSON object, field by field (see the header).
#include "workload_reader.hpp"

#include <algorithm>

#include "kvactor/config/json_helpers.hpp"
#include "kvactor/messages/error.hpp"

namespace kvactor::sim {

namespace {

using nlohmann::json;

// -- the parts ------------------------------------------------------------------

caf::error read_burst(const json& obj, const std::string& path,
                      const error_maker& fail, burst_config& out) {
  object_reader r{obj, path, fail};
  caf::error err;
  (err = r.check_keys({"period", "duration", "rate"}))
    || (err = r.count("period", out.period, 1, true))
    || (err = r.count("duration", out.duration, 1, true))
    || (err = r.number("rate", out.rate, 0, 1e6, true));
  if (!err && out.duration > out.period)
    err = fail(join_path(path, "duration"),
               "must be <= period (" + std::to_string(out.period) + ")");
  return err;
}

caf::error read_system_prompts(const json& obj, const std::string& path,
                               const error_maker& fail, std::uint32_t vocab,
                               system_prompt_config& out) {
  object_reader r{obj, path, fail};
  caf::error err;
  (err = r.check_keys({"count", "len", "tokens", "share"}))
    || (err = r.number("share", out.share, 0, 1, true));
  if (err)
    return err;
  if (auto tokens = r.find("tokens")) {
    if (r.find("count") || r.find("len"))
      return fail(r.field("tokens"), "give either tokens or count and len");
    auto tpath = r.field("tokens");
    if (!tokens->is_array())
      return fail(tpath, "expected an array of token id arrays" + got(*tokens));
    for (std::size_t i = 0; i < tokens->size(); ++i) {
      auto& prompt = (*tokens)[i];
      auto ppath = tpath + "[" + std::to_string(i) + "]";
      if (!prompt.is_array() || prompt.empty())
        return fail(ppath, "expected a non-empty array of token ids" + got(prompt));
      std::vector<token_id> ids;
      for (std::size_t j = 0; j < prompt.size(); ++j) {
        auto& t = prompt[j];
        auto jpath = ppath + "[" + std::to_string(j) + "]";
        if (!t.is_number_integer())
          return fail(jpath, "expected a token id (an integer)" + got(t));
        // Unsigned first: a value past INT64_MAX read as signed is negative.
        std::uint64_t v = 0;
        if (!non_negative_integer(t, v) || v >= vocab)
          return fail(jpath, "token id " + t.dump() + " out of range [0, "
                               + std::to_string(vocab) + ") (vocab_size)");
        ids.push_back(static_cast<token_id>(v));
      }
      out.tokens.push_back(std::move(ids));
    }
    out.count = static_cast<std::uint32_t>(out.tokens.size());
  } else {
    // All of them are made up front: a bound on how much that takes.
    constexpr std::uint64_t max_prompts = 1u << 16;
    constexpr std::uint64_t max_tokens = 1u << 28;
    // len is required only with prompts to make, but checked when given.
    (err = r.count("count", out.count, 0, true, max_prompts))
      || (err = r.range("len", out.len.min, out.len.max, 1, out.count > 0));
    if (err)
      return err;
    if (std::uint64_t{out.count} * out.len.max > max_tokens)
      return fail(r.field("len"),
                  std::to_string(out.count) + " prompts of up to "
                    + std::to_string(out.len.max) + " tokens exceed "
                    + std::to_string(max_tokens) + " tokens in all");
  }
  if (out.share > 0 && out.count == 0)
    return fail(r.field("share"), "is > 0 but there are no system prompts");
  return caf::none;
}

caf::error read_conversation(const json& obj, const std::string& path,
                             const error_maker& fail, conversation_config& out) {
  object_reader r{obj, path, fail};
  caf::error err;
  (err = r.check_keys({"turns", "user_len", "think_steps"}))
    || (err = r.range("turns", out.turns.min, out.turns.max, 1, true))
    || (err = r.range("user_len", out.user_len.min, out.user_len.max, 1, true))
    || (err = r.range("think_steps", out.think_steps.min, out.think_steps.max, 0,
                      false));
  if (err)
    return err;
  // Sessions hold their history until their next turn: a bound on turns
  // keeps a session's prompts (and their sum over turns) in reach.
  constexpr std::uint32_t max_turns = 1u << 16;
  if (out.turns.max > max_turns)
    return fail(r.field("turns"), "max must be at most "
                                    + std::to_string(max_turns) + " (got "
                                    + std::to_string(out.turns.max) + ")");
  return caf::none;
}

} // namespace

caf::error read_workload(const json& obj, const std::string& path,
                         const error_maker& fail, const tenant_config& tenant,
                         workload_config& out) {
  if (!obj.is_object())
    return fail(path, "expected an object" + got(obj));
  object_reader r{obj, path, fail};
  out.tenant = tenant.name;
  out.priority = tenant.priority;
  const json* burst = nullptr;
  const json* sys = nullptr;
  const json* conv = nullptr;
  std::string prio;
  caf::error err;
  (err = r.check_keys({"rate", "burst", "prompt_len", "output_len",
                       "system_prompts", "conversation", "priority",
                       "vocab_size"}))
    || (err = r.number("rate", out.rate, 0, 1e6, true))
    || (err = r.object("burst", burst, false))
    || (burst && (err = read_burst(*burst, r.field("burst"), fail, out.burst)))
    || (err = r.range("prompt_len", out.prompt_len.min, out.prompt_len.max, 1,
                      true))
    || (err = r.range("output_len", out.output_len.min, out.output_len.max, 1,
                      true))
    // Token ids are int32: ids 0 .. vocab_size - 1 must fit.
    || (err = r.count("vocab_size", out.vocab_size, 2, false,
                      std::uint64_t{1} << 31))
    || (err = r.object("system_prompts", sys, false))
    || (sys && (err = read_system_prompts(*sys, r.field("system_prompts"), fail,
                                          out.vocab_size, out.system_prompts)))
    || (err = r.object("conversation", conv, false))
    || (conv && (err = read_conversation(*conv, r.field("conversation"), fail,
                                         out.conversation)))
    || (err = r.string("priority", prio));
  if (err)
    return err;
  // Token positions are 32-bit: a session's last turn must stay in reach.
  constexpr std::uint64_t max_tokens = std::uint64_t{1} << 31;
  if (conv && out.max_sequence_tokens() > max_tokens)
    return fail(r.field("conversation"),
                "its longest turn (" + std::to_string(out.max_sequence_tokens())
                  + " tokens) exceeds " + std::to_string(max_tokens) + " tokens");
  if (r.find("priority") && !from_string(prio, out.priority))
    return fail(r.field("priority"), "expected one of low, normal, high, "
                                     "critical (got \"" + prio + "\")");
  return caf::none;
}

} // namespace kvactor::sim
