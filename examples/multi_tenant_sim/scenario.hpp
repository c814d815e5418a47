// scenario: what multi_tenant_sim simulates - the cache it runs against and
// each tenant's workload - and its JSON form, read with every error naming
// the file, the line and the field.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include "admission_order.hpp"
#include "kvactor/config/cache_config.hpp"
#include "kvactor/messages/types.hpp"

// -- the scenario format --------------------------------------------------------
//
// A scenario is one JSON object. Unknown keys are errors everywhere; keys
// marked (required) must be present, the others take the default shown.
//
// {
//   "cache": {...},            (required) a kvactor cache_config, read by
//                              kvactor::parse_config (DESIGN.md, "Config"):
//                              block_size, model, storage, num_gpu_blocks,
//                              pressure thresholds, tenants (name, max_blocks,
//                              reserved_blocks, priority, prefix_namespace)...
//                              Tenants, quotas, reservations and priorities
//                              come from here.
//   "steps": 2000,             (required) simulated steps during which requests
//                              arrive (>= 1). One step = one scheduler
//                              iteration: every running request decodes one
//                              token (and its drafts, with draft_tokens),
//                              admitted requests prefill their prompt.
//   "drain": true,             after `steps`, keep stepping (no new arrivals)
//                              until every request has finished.
//   "seed": 1,                 seed of every random choice: a scenario and a
//                              seed always give the same requests (and the
//                              same run, but for what the supervisor does on
//                              its own clock: GC evictions, preemptions at
//                              critical, the moment a pressure change is
//                              heard).
//   "output_dir": "sim-out",   where report.json, timeseries.csv, usage.gp and
//                              usage.png are written (created if missing).
//   "preemption": "recompute", what happens to a request preempted under
//                              pressure. "recompute": its blocks are freed and
//                              it goes back to the front of its tenant's
//                              queue, to prefill prompt + generated tokens
//                              again (cached prefix blocks are found again);
//                              the step message preempts the newest request
//                              itself. "swap": an extend that lacks a block
//                              fails alone, and the scheduler swaps the
//                              newest, lowest-priority request out to the
//                              host tier (manager swap_out; needs
//                              cache.num_host_blocks > 0; recompute when the
//                              tier is full); swapped requests come back
//                              (swap_in) before new admissions of their
//                              priority or lower, oldest first. Either way, an
//                              extend refused at its tenant's max_blocks makes
//                              the newest request of that tenant give way.
//   "admit_up_to": "auto",     admissions (and swap-ins) stop where they
//                              would take the pool's blocks in use past this
//                              pressure mark of cache.pressure: "medium",
//                              "high", "critical", or "full" (vLLM: admit
//                              while blocks are free). Running requests grow
//                              past it. "auto": "high" when the supervisor
//                              preempts at critical
//                              (cache.pressure.preempt_at_critical, on by
//                              default), else "full" - a scheduler that
//                              admits up to critical while the supervisor
//                              preempts there keeps undoing its work.
//   "max_running": 256,        most requests decoding at once (vLLM's
//                              max_num_seqs), >= 1.
//   "max_admits_per_step": 16, most admissions sent in one step message (more
//                              follow in the same step while all fit), and
//                              most swap-ins per step, >= 1.
//   "prefill_chunk": 0,        chunked prefill (vLLM v1's), in tokens; 0 =
//                              off: an admission computes its whole prompt
//                              in its step. N > 0: an admission looks the
//                              whole prompt up in the prefix cache but
//                              computes only its first N tokens past the
//                              hits (allocation_request::prefill_chunk);
//                              each later step extends it by its next N
//                              prompt tokens (fewer at the end), with their
//                              token ids, instead of decoding, and it
//                              samples its first output token in the step
//                              that computes its last prompt token: a
//                              prompt of P tokens with H cached takes
//                              ceil((P - H) / N) steps. Admissions count
//                              a prompt whole, and leave free what running
//                              prefills still need for the rest of theirs.
//                              A request preempted mid-prefill prefills
//                              again (finding the chunks it computed
//                              cached); swapped out and back in, it
//                              carries on.
//   "draft_tokens": 0,         speculative decoding: k draft tokens per step
//                              and decoding request (0 = off). N > 0: each
//                              step extends a request past its prefill by
//                              its last sampled token and k' = min(k, tokens
//                              it has still to generate - 1) drafts
//                              (extend_op::num_draft), and the next step's
//                              message settles them (step_request::verdicts,
//                              with its next extend): the verifier keeps
//                              the leading drafts it accepts, so a step
//                              yields accepted + 1 output tokens; rejected
//                              drafts are dropped, and the tokens that
//                              really come overwrite their slots. At most
//                              kvactor::max_draft_tokens (65535).
//   "draft_acceptance": 0.7,   the chance, in [0, 1], that the verifier
//                              accepts a draft, each independently until
//                              the first rejection (drawn from the seed).
//   "admission_order": "arrival", the order of each tenant's waiting queue
//                              at admission. "arrival": first come, first
//                              served. "cached_prefix": before each step
//                              that may admit, the scheduler asks the cache
//                              (one probe_atom round trip to the step lane)
//                              how many prompt tokens each of the first
//                              probe_window requests of every queue would
//                              find cached, and admits those with the most
//                              first (SGLang's longest prefix match), ties
//                              in arrival order; a request that has waited
//                              starvation_steps steps goes first regardless
//                              (oldest first). Only the order within a
//                              queue changes: tenants take turns by
//                              priority, then by the arrival of their
//                              oldest waiting request, as before.
//   "probe_window": 64,        with cached_prefix: requests probed per queue
//                              and step, in [1, 4096].
//   "starvation_steps": 200,   with cached_prefix: steps of waiting after
//                              which a request is admitted before any with
//                              more cached, >= 1.
//   "max_waiting": 65536,      most requests of one tenant waiting for
//                              admission (preempted ones included), >= 1:
//                              its arrivals beyond it are turned away, as a
//                              server's bounded queue answers 503, and
//                              counted (turned_away) - never generated, so
//                              an arrival rate past what the cache serves
//                              costs neither memory nor time, and one
//                              tenant's flood turns none of another's away.
//   "verify_every": 0,         with storage host or cuda (which hold bytes),
//                              every computed token's K/V - a pattern made
//                              from the token and its position - is written
//                              through the device actor; every N steps one
//                              running request's K/V are gathered back and
//                              compared (0 = never; mismatches are reported,
//                              and verifies that read nothing back - nothing
//                              running, the request ended - are counted; a
//                              run that read nothing back at all fails).
//   "workloads": {             (required) one entry per tenant that sends
//                              requests; each name must be a tenant of
//                              cache.tenants (tenants without one stay idle).
//     "<tenant>": {
//       "rate": 0.2,           (required) mean arrivals per step (Poisson), >= 0.
//       "burst": {             optional: a higher rate for `duration` steps at
//         "period": 500,         the start of every `period` steps; all
//         "duration": 50,        three keys required (period >= 1,
//         "rate": 1.5            1 <= duration <= period, rate >= 0).
//       },
//       "prompt_len": [32, 256], (required) the request's own prompt tokens,
//                              uniform in [min, max] (or one number), >= 1;
//                              a system prompt, if chosen, comes before them.
//       "output_len": [16, 128], (required) tokens to generate, uniform in
//                              [min, max] (or one number), >= 1.
//       "system_prompts": {    optional shared prefixes, drawn once per run:
//         "count": 2,            how many distinct system prompts (required
//                                without tokens);
//         "len": [256, 512],     their lengths, uniform in [min, max]
//                                (required when count > 0);
//         "tokens": [[1, 2]],    or the prompts' token ids given explicitly
//                                (instead of count and len; each id in
//                                [0, vocab_size));
//         "share": 0.8           (required) the fraction of requests that
//                                start with one (chosen uniformly), in [0, 1].
//       },
//       "conversation": {      optional multi-turn chat sessions: each
//                              arrival (Poisson, as above) opens one;
//         "turns": [1, 6],       its turns, uniform in [min, max] (required,
//                                >= 1, at most 65536);
//         "user_len": [16, 128], fresh user tokens each follow-up adds
//                                (required, >= 1);
//         "think_steps": [20, 200] steps from a turn's end to the next
//                                turn's arrival (>= 0; default 0).
//       },                     A turn whose last output token is sampled
//                              in step S makes its session's next turn
//                              arrive in step S + 1 + think: a new request
//                              of this workload whose prompt is the
//                              previous turn's whole prompt and output,
//                              then user_len fresh tokens, its output
//                              length from output_len. Follow-ups are
//                              arrivals: they count against max_waiting
//                              (before the step's new sessions; one turned
//                              away ends its session, as does a turn the
//                              cache refuses) and their queue delay runs
//                              from their arrival. Sessions opened before
//                              `steps` go on during the drain (at most
//                              turns.max turns each, so the drain ends);
//                              without drain they end at `steps`. Sessions
//                              draw from a seeded stream of the workload's
//                              own: first turns are the requests the
//                              workload sends without "conversation".
//       "priority": "high",    the requests' priority (low, normal, high,
//                              critical); default: the tenant's. Admission
//                              goes by priority, then arrival; under pressure
//                              the lowest priority, newest request is
//                              preempted first.
//       "vocab_size": 32000    token ids are drawn from [0, vocab_size), >= 2.
//     }
//   }
// }
//
// Bounds, beyond the minimums above: rates at most 1e6 per step; lengths
// (prompt_len, output_len, system_prompts.len) and prefill_chunk at most
// 2^24 tokens;
// system_prompts.count at most 65536, count x len.max at most 2^28 tokens;
// conversation.user_len and think_steps at most 2^24, a conversation's
// longest turn (below) at most 2^31 tokens;
// vocab_size at most 2^31; max_waiting x each workload's longest request
// (below), summed over the workloads, at most 2^32 tokens (requests are made
// as they arrive, and the queues could fill: lower max_waiting for long
// requests). output_dir is relative to the working directory.
// The run keeps one sample per step (~100-200 bytes with a few tenants)
// for the time series and the step round trips' percentiles.
//
// Every request's longest sequence (system prompt + prompt + output; with
// conversation, a session's last turn: system prompt + prompt_len.max +
// turns.max x output_len.max + (turns.max - 1) x user_len.max) must fit
// in its tenant's max_blocks, in the pool less the other tenants'
// reservations and the blocks cache.admission.watermark keeps free (a
// request preempted late is admitted again with nearly all its tokens),
// and in what the cache lets one request hold (lone_request_cap: with
// preempt_at_critical, below the critical mark unless within the tenant's
// reservation): a request that could never fit is a scenario error, not a
// stall. With
// cache.num_gpu_blocks 0 the pool is sized from device memory at start,
// and the check is made again then, before the first step.
//
// Errors read "FILE:LINE: FIELD: what is wrong", e.g.
//   scenario.json:14: workloads.chat.rate: must be >= 0 (got -1)
//   scenario.json:3: cache.pressure.high: must be in (0, 1]
//   scenario.json:9: malformed JSON after workloads.chat.rate: syntax error ...

namespace kvactor::sim {

/// [min, max], inclusive.
struct length_range {
  std::uint32_t min = 0;
  std::uint32_t max = 0;
};

/// A higher arrival rate during the first `duration` steps of each period.
struct burst_config {
  std::uint64_t period = 0; ///< 0 = no bursts
  std::uint64_t duration = 0;
  double rate = 0;
};

struct system_prompt_config {
  std::uint32_t count = 0;
  length_range len;
  std::vector<std::vector<token_id>> tokens; ///< explicit prompts, if given
  double share = 0;
};

/// Multi-turn sessions: each turn's prompt resends the history.
struct conversation_config {
  length_range turns;       ///< per session; max 0 = no conversations
  length_range user_len;    ///< fresh tokens each follow-up adds
  length_range think_steps; ///< between a turn's finish and the next arrival

  bool enabled() const noexcept {
    return turns.max > 0;
  }
};

/// One tenant's traffic.
struct workload_config {
  std::string tenant;
  double rate = 0;
  burst_config burst;
  length_range prompt_len;
  length_range output_len;
  system_prompt_config system_prompts;
  conversation_config conversation;
  kvactor::priority priority = kvactor::priority::normal;
  std::uint32_t vocab_size = 32000;
  /// Where the workload's object starts in the source, for errors found
  /// after parsing (check_fits).
  int line = 1;

  /// Tokens of the longest request this workload can produce (with
  /// conversation: a longest session's last turn).
  std::uint64_t max_sequence_tokens() const;
};

enum class preemption_mode : std::uint8_t { recompute, swap };

const char* to_string(preemption_mode x) noexcept;

struct scenario;

/// The fraction of the pool admissions may fill (scenario::admit_up_to).
double admission_limit(const scenario& s) noexcept;

struct scenario {
  std::string source; ///< file name, for messages ("default.json (embedded)")
  cache_config cache;
  /// The line of each key of the cache object, and under "" of the object
  /// itself: for errors only the starting cache finds (cache_start_error).
  std::map<std::string, int> cache_lines;
  std::uint64_t steps = 0;
  bool drain = true;
  std::uint64_t seed = 1;
  std::string output_dir = "sim-out";
  /// Where output_dir was said, for messages: "FILE:LINE: output_dir",
  /// "--out", or "FILE: output_dir (default)".
  std::string output_dir_origin;
  preemption_mode preemption = preemption_mode::recompute;
  /// "auto", "medium", "high", "critical" or "full".
  std::string admit_up_to = "auto";
  std::uint32_t max_running = 256;
  std::uint32_t max_admits_per_step = 16;
  /// How each queue is ordered at admission, and with cached_prefix how
  /// many of each queue's first requests are probed per step and the wait
  /// after which one goes first regardless (admission_order.hpp).
  admission_order admission = admission_order::arrival;
  std::uint32_t probe_window = 64;
  std::uint64_t starvation_steps = 200;
  std::uint64_t max_waiting = 65536;
  /// Tokens an admission or a prefill step computes past the cached prefix
  /// (0 = the whole prompt at admission).
  std::uint32_t prefill_chunk = 0;
  /// Draft tokens a decoding request's extend carries each step (0 = no
  /// speculative decoding), and the chance each is accepted.
  std::uint32_t draft_tokens = 0;
  double draft_acceptance = 0.7;
  std::uint64_t verify_every = 0;
  /// In cache.tenants order; tenants without traffic have none.
  std::vector<workload_config> workloads;
};

/// Parses scenario JSON `text`; `source` names it in errors. Errors are
/// invalid_config whose context is the whole message ("FILE:LINE: FIELD: ...").
caf::expected<scenario> parse_scenario(const std::string& text,
                                       const std::string& source);

/// Whether every workload's longest request fits a pool of `num_blocks`
/// (see "Every request's longest sequence" above); num_blocks 0 (not known
/// before the cache starts) checks the tenants' max_blocks only.
/// parse_scenario checks with cache.num_gpu_blocks; simulate() again with
/// the pool as started. Errors (invalid_config) read "FILE:LINE:
/// workloads.TENANT: ...", LINE where that workload starts.
caf::error check_fits(const scenario& s, std::uint64_t num_blocks);

/// The scenario's path of a field parse_config names ("FIELD: what"):
/// "cache.model.head_dim", "cache[\"a: b\"]"; "cache" for none or
/// "config" (the cache as a whole).
std::string cache_field_path(const std::string& field);

/// A config error the cache found as it started (storage "auto" without a
/// block count on a machine without a GPU, say) as a scenario error:
/// "FILE:LINE: cache.FIELD: ...", LINE where that field is (or the cache
/// object, if the field was not written).
caf::error cache_start_error(const scenario& s, const caf::error& err);

/// Reads and parses the file at `path`.
caf::expected<scenario> load_scenario(const std::string& path);

/// The embedded default scenario (examples/scenarios/default.json).
const char* default_scenario_json() noexcept;

/// The message of an error made by parse_scenario (its context text).
std::string message_of(const caf::error& err);

} // namespace kvactor::sim
