// workload: one random stream per tenant, seeded from the scenario's seed and
// the tenant's name, so adding or removing a tenant does not change the
// others' requests; conversations draw from streams of their own.
#include "workload.hpp"

#include <algorithm>
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

/// A generator seeded with (seed, name, tag): seed_seq keeps 32 bits of
/// each value, so it gets both halves.
void seed_stream(std::mt19937_64& rng, std::uint64_t seed, std::uint64_t name,
                 std::uint64_t tag) {
  std::seed_seq seq{seed & 0xffffffffu, seed >> 32, name & 0xffffffffu,
                    name >> 32, tag};
  rng.seed(seq);
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
    auto name = stable_hash(w.tenant);
    seed_stream(src.rng, s.seed, name, 0x6b76);
    seed_stream(src.conv_rng, s.seed, name, 0x636f6e76); // "conv"
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

sim_request workload_generator::make_request(std::size_t i, std::uint64_t step) {
  auto& w = scenario_.workloads[i];
  auto& src = sources_[i];
  sim_request r;
  r.workload = static_cast<std::uint32_t>(i);
  r.arrival = step;
  r.priority = w.priority;
  auto& sps = src.system_prompts;
  if (!sps.empty()
      && std::bernoulli_distribution{w.system_prompts.share}(src.rng)) {
    auto which =
      std::uniform_int_distribution<std::size_t>{0, sps.size() - 1}(src.rng);
    r.system_prompt = static_cast<std::int32_t>(which);
    r.prompt = sps[which];
  }
  auto own = random_tokens(src.rng, pick(src.rng, w.prompt_len), w.vocab_size);
  r.prompt.insert(r.prompt.end(), own.begin(), own.end());
  r.output = random_tokens(src.rng, pick(src.rng, w.output_len), w.vocab_size);
  if (w.conversation.enabled()) {
    r.conv.turns = pick(src.conv_rng, w.conversation.turns);
    r.conv.seed = src.conv_rng();
  }
  return r;
}

std::vector<sim_request>
workload_generator::arrivals(std::uint64_t step,
                             const std::vector<std::uint64_t>& room,
                             std::vector<std::uint64_t>& turned_away,
                             std::vector<std::uint64_t>* follow_ups_turned_away) {
  std::vector<sim_request> out;
  turned_away.assign(sources_.size(), 0);
  if (follow_ups_turned_away != nullptr)
    follow_ups_turned_away->assign(sources_.size(), 0);
  // The follow-ups due, per workload, in the order they were scheduled.
  std::vector<std::vector<sim_request>> due(sources_.size());
  while (!follow_ups_.empty() && follow_ups_.begin()->first.first <= step) {
    auto node = follow_ups_.extract(follow_ups_.begin());
    due[node.mapped().workload].push_back(std::move(node.mapped()));
  }
  auto give_id = [&](sim_request& r) {
    r.id = next_id_++;
    if (!r.conv.follow_up())
      r.conv.session = r.id;
    out.push_back(std::move(r));
  };
  for (std::size_t i = 0; i < sources_.size(); ++i) {
    auto left = room[i];
    for (auto& r : due[i]) {
      if (left == 0) { // its session ends here
        ++turned_away[i];
        if (follow_ups_turned_away != nullptr)
          ++(*follow_ups_turned_away)[i];
        continue;
      }
      --left;
      r.arrival = step;
      give_id(r);
    }
    // Drawn already by next_arrival: none before quiet_until_, and the
    // counts kept for drawn_step_.
    auto n = step < quiet_until_    ? 0
             : step == drawn_step_ ? drawn_[i]
                                   : draw_count(i, step);
    if (n > left) {
      turned_away[i] += n - left;
      n = static_cast<std::uint32_t>(left);
    }
    for (std::uint32_t k = 0; k < n; ++k) {
      auto r = make_request(i, step);
      give_id(r);
    }
  }
  if (step == drawn_step_)
    drawn_step_ = no_step;
  return out;
}

std::uint32_t workload_generator::draw_count(std::size_t i, std::uint64_t step) {
  if (step >= scenario_.steps)
    return 0;
  auto& w = scenario_.workloads[i];
  auto rate = w.rate;
  if (w.burst.period != 0 && step % w.burst.period < w.burst.duration)
    rate = w.burst.rate;
  if (rate <= 0)
    return 0; // nothing drawn: the stream stays where it was
  return std::poisson_distribution<std::uint32_t>{rate}(sources_[i].rng);
}

std::uint64_t workload_generator::next_arrival(std::uint64_t from,
                                               std::uint64_t limit) {
  auto end = limit;
  if (!follow_ups_.empty())
    end = std::min(end, std::max(from, follow_ups_.begin()->first.first));
  if (drawn_step_ != no_step) // drawn already, by an earlier look
    return std::min(end, drawn_step_);
  // Each step's draws, workload by workload, as arrivals() makes them: the
  // streams are per workload, so drawing every count of a step before any
  // request of it leaves each stream's order as it was.
  drawn_.resize(sources_.size());
  auto step = std::max(from, quiet_until_);
  for (; step < std::min(end, scenario_.steps); ++step) {
    bool any = false;
    for (std::size_t i = 0; i < sources_.size(); ++i) {
      drawn_[i] = draw_count(i, step);
      any = any || drawn_[i] > 0;
    }
    if (any) {
      drawn_step_ = quiet_until_ = step;
      return step;
    }
  }
  quiet_until_ = std::max(quiet_until_, step);
  return end;
}

bool workload_generator::finished(sim_request r, std::uint64_t step) {
  if (r.conv.last())
    return false;
  auto& w = scenario_.workloads[r.workload];
  auto& c = w.conversation;
  // The session's k-th follow-up comes from its own (seed, k) stream.
  auto turn = r.conv.turn + 1;
  std::mt19937_64 rng;
  seed_stream(rng, r.conv.seed, turn, 0x7475726e); // "turn"
  auto think = pick(rng, c.think_steps);
  auto user = random_tokens(rng, pick(rng, c.user_len), w.vocab_size);
  sim_request next;
  next.workload = r.workload;
  next.arrival = step + 1 + think;
  next.priority = r.priority;
  next.system_prompt = r.system_prompt;
  next.conv = r.conv;
  next.conv.turn = turn;
  next.conv.history = r.prompt.size() + r.output.size();
  next.prompt = std::move(r.prompt);
  next.prompt.insert(next.prompt.end(), r.output.begin(), r.output.end());
  next.prompt.insert(next.prompt.end(), user.begin(), user.end());
  next.output = random_tokens(rng, pick(rng, w.output_len), w.vocab_size);
  follow_ups_.emplace(std::make_pair(next.arrival, scheduled_++), std::move(next));
  return true;
}

} // namespace kvactor::sim
