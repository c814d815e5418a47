// workload: one random stream per tenant, seeded from the scenario's seed and
// the tenant's name, so adding or removing a tenant does not change the
// others' requests.
#include "workload.hpp"

#include <limits>

namespace kvactor::sim {

namespace {

std::uint32_t pick(std::mt19937_64& rng, const length_range& r) {
  return std::uniform_int_distribution<std::uint32_t>{r.min, r.max}(rng);
}

std::vector<token_id> random_tokens(std::mt19937_64& rng, std::size_t n,
                                    std::uint32_t vocab) {
  std::uniform_int_distribution<token_id> dist{0,
                                               static_cast<token_id>(vocab - 1)};
  std::vector<token_id> out(n);
  for (auto& t : out)
    t = dist(rng);
  return out;
}

/// FNV-1a of `text`: a hash that is the same on every platform and build.
std::uint64_t stable_hash(const std::string& text) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

} // namespace

workload_generator::workload_generator(const scenario& s) : scenario_(s) {
  sources_.resize(s.workloads.size());
  for (std::size_t i = 0; i < s.workloads.size(); ++i) {
    auto& w = s.workloads[i];
    auto& src = sources_[i];
    // seed_seq keeps 32 bits of each value: give it both halves.
    auto name = stable_hash(w.tenant);
    std::seed_seq seq{s.seed & 0xffffffffu, s.seed >> 32, name & 0xffffffffu,
                      name >> 32, std::uint64_t{0x6b76}};
    src.rng.seed(seq);
    auto& sp = w.system_prompts;
    if (sp.share <= 0) {
      // None is ever chosen: none is made (count x len may be 2^28 tokens).
    } else if (!sp.tokens.empty()) {
      src.system_prompts = sp.tokens;
    } else {
      for (std::uint32_t k = 0; k < sp.count; ++k)
        src.system_prompts.push_back(
          random_tokens(src.rng, pick(src.rng, sp.len), w.vocab_size));
    }
  }
}

std::vector<sim_request> workload_generator::arrivals(std::uint64_t step) {
  std::vector<std::uint64_t> turned_away;
  return arrivals(step,
                  std::vector<std::uint64_t>(
                    sources_.size(), std::numeric_limits<std::uint64_t>::max()),
                  turned_away);
}

std::vector<sim_request>
workload_generator::arrivals(std::uint64_t step,
                             const std::vector<std::uint64_t>& room,
                             std::vector<std::uint64_t>& turned_away) {
  std::vector<sim_request> out;
  turned_away.assign(sources_.size(), 0);
  if (step >= scenario_.steps)
    return out;
  for (std::size_t i = 0; i < sources_.size(); ++i) {
    auto& w = scenario_.workloads[i];
    auto& src = sources_[i];
    auto rate = w.rate;
    if (w.burst.period != 0 && step % w.burst.period < w.burst.duration)
      rate = w.burst.rate;
    if (rate <= 0)
      continue;
    auto n = std::poisson_distribution<std::uint32_t>{rate}(src.rng);
    if (n > room[i]) {
      turned_away[i] = n - room[i];
      n = static_cast<std::uint32_t>(room[i]);
    }
    for (std::uint32_t k = 0; k < n; ++k) {
      sim_request r;
      r.id = next_id_++;
      r.workload = static_cast<std::uint32_t>(i);
      r.arrival = step;
      r.priority = w.priority;
      auto& sps = src.system_prompts;
      if (!sps.empty()
          && std::bernoulli_distribution{w.system_prompts.share}(src.rng)) {
        auto which = std::uniform_int_distribution<std::size_t>{
          0, sps.size() - 1}(src.rng);
        r.system_prompt = static_cast<std::int32_t>(which);
        r.prompt = sps[which];
      }
      auto own = random_tokens(src.rng, pick(src.rng, w.prompt_len), w.vocab_size);
      r.prompt.insert(r.prompt.end(), own.begin(), own.end());
      r.output = random_tokens(src.rng, pick(src.rng, w.output_len), w.vocab_size);
      out.push_back(std::move(r));
    }
  }
  return out;
}

} // namespace kvactor::sim
