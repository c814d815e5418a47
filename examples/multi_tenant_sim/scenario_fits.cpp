// scenario: whether a scenario's requests can fit the cache it names (the
// longest request of each workload against quotas, reservations, the
// watermark and what one request may hold), and the cache's own start
// errors worded as scenario errors.
#include "scenario.hpp"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "json_reader.hpp"
#include "kvactor/messages/error.hpp"

namespace kvactor::sim {

using nlohmann::json;

std::uint64_t workload_config::max_sequence_tokens() const {
  std::uint64_t sys = 0;
  if (system_prompts.share > 0) {
    sys = system_prompts.len.max;
    for (auto& t : system_prompts.tokens)
      sys = std::max<std::uint64_t>(sys, t.size());
  }
  if (!conversation.enabled())
    return sys + prompt_len.max + output_len.max;
  // A session's last turn resends every turn before it: the first prompt,
  // each earlier output and each follow-up's user tokens, then generates.
  std::uint64_t turns = conversation.turns.max;
  return sys + prompt_len.max + turns * output_len.max
         + (turns - 1) * conversation.user_len.max;
}

caf::error cache_start_error(const scenario& s, const caf::error& err) {
  // Worded as parse_config words its errors: "FIELD: what", where a field
  // "config" (or none) means the cache as a whole.
  auto [field, what] = detail::split_field(context_of(err));
  auto whole = field.empty() || field == "config";
  auto at = whole ? s.cache_lines.end()
                  : s.cache_lines.find(field.substr(0, field.find_first_of(".[")));
  if (at == s.cache_lines.end())
    at = s.cache_lines.find("");
  auto line = at == s.cache_lines.end() ? 1 : at->second;
  return make_error(errc::invalid_config,
                    s.source + ":" + std::to_string(line) + ": "
                      + cache_field_path(field) + ": " + what);
}

caf::error check_fits(const scenario& s, std::uint64_t num_blocks) {
  auto& cache = s.cache;
  // The watermark is kept free at every admission (extends may take it),
  // and a request preempted late comes back with nearly all its tokens:
  // its whole sequence must fit beside the watermark. As the pool rounds:
  // ceil(watermark * blocks).
  auto watermark = static_cast<std::uint64_t>(
    std::ceil(cache.admission.watermark * double(num_blocks)));
  for (auto& w : s.workloads) {
    auto fail = [&](const std::string& what) {
      return make_error(errc::invalid_config,
                        s.source + ":" + std::to_string(w.line) + ": "
                          + join_path("workloads", w.tenant) + ": " + what);
    };
    auto tokens = w.max_sequence_tokens();
    auto blocks = (tokens + cache.block_size - 1) / cache.block_size;
    auto why = std::string{w.conversation.enabled()
                             ? "its longest request (a session's last turn, "
                             : "its longest request ("}
               + std::to_string(tokens) + " tokens, "
               + std::to_string(blocks) + " blocks of "
               + std::to_string(cache.block_size) + ") cannot fit ";
    auto tenant = cache.find_tenant(w.tenant);
    if (tenant->max_blocks != 0 && blocks > tenant->max_blocks)
      return fail(why + "the tenant's max_blocks ("
                  + std::to_string(tenant->max_blocks) + ")");
    if (num_blocks == 0)
      continue;
    std::uint64_t others = 0;
    for (auto& t : cache.tenants)
      if (t.name != w.tenant)
        others += t.reserved_blocks;
    auto held = others + watermark;
    auto room = num_blocks > held ? num_blocks - held : 0;
    if (blocks > room)
      return fail(why + "the pool ("
                  + std::to_string(num_blocks)
                  + (cache.num_gpu_blocks == 0 ? " blocks as sized from device "
                                                 "memory, "
                                               : " blocks, ")
                  + std::to_string(others) + " reserved for other tenants"
                  + (watermark == 0
                       ? std::string{}
                       : ", " + std::to_string(watermark)
                           + " kept free for admissions by "
                             "cache.admission.watermark "
                           + json(cache.admission.watermark).dump())
                  + ")");
    if (blocks > lone_request_cap(cache, *tenant, num_blocks))
      return fail(why + "below critical pressure ("
                  + json(cache.pressure.critical).dump() + " of "
                  + std::to_string(num_blocks)
                  + " blocks), where cache.pressure.preempt_at_critical "
                    "would preempt it alone, nor within the tenant's "
                    "reserved_blocks ("
                  + std::to_string(tenant->reserved_blocks) + ")");
  }
  return caf::none;
}

} // namespace kvactor::sim
