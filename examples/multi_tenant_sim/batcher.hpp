// batcher: the simulator's scheduling policy - continuous batching over
// per-tenant waiting queues, preemption by recompute or swap - and the
// figures it keeps, apart from how the cache is reached. Each step it
// produces one step_request (frees, extends of every running request,
// admissions), consumes the step_result, and names the swaps to make.
// CAF-free apart from the message value types; not thread-safe (one actor
// owns it).
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <caf/expected.hpp>

#include "kvactor/messages/step.hpp"
#include "kvactor/messages/types.hpp"
#include "run_figures.hpp"
#include "scenario.hpp"
#include "step_series.hpp"
#include "workload.hpp"

namespace kvactor::sim {

/// A token whose K/V a step computed, and the slot they go to.
struct computed_token {
  request_id id = 0; ///< whose
  std::int64_t slot = 0;
  token_id token = 0;
  std::uint32_t position = 0;
};

/// One running request's cache contents, for a read-back check.
struct verify_target {
  request_id id = 0;
  std::uint64_t cache_id = 0;
  block_table table; ///< as the simulator's mirror has it
  std::vector<token_id> tokens; ///< the tokens in the cache, in order
};

class batcher {
public:
  /// `dev`: the device requests name (the cache's). `track_data`: collect
  /// computed tokens (for storage that holds bytes). `series_cap`: rows the
  /// time series keeps at most (step_series; tests make it small).
  batcher(const scenario& s, const cache_config& effective, kvactor::device dev,
          bool track_data, std::size_t series_cap = default_series_cap);

  /// Arrivals are over and (with drain) nothing is left to do - no
  /// conversation's follow-up turn still to come, either - including
  /// the frees of requests that finished in the last step, which go in the
  /// next step's message. So a drained run's last step is the one that
  /// frees them: it is counted (the simulator's steps are its clock of
  /// step messages, and that step's row shows the pool given back), unlike
  /// the replay's `steps`, which counts REPLAY.md's loop and ends where the
  /// last request finishes (bench/replay_scheduler.hpp).
  bool done() const noexcept;

  /// Nothing to do: no request running, waiting, swapped, to free or
  /// awaiting its free, and no preemption notice or verdict pending - a
  /// step now would send an empty message, unless something arrives.
  bool idle() const noexcept;

  // -- idle gaps (batcher_idle.cpp) ---------------------------------------------

  /// Skips idle steps: if the last step run began and ended idle with
  /// nothing arriving, the run is not done, and nothing arrives in the
  /// next `min_gap` steps, the clock jumps to the next step in which a
  /// request arrives (workload_generator::next_arrival), to `steps` (where
  /// arrivals end), or by `max_draw_steps` (at least min_gap) while new
  /// arrivals still have to be drawn one step at a time - a bound on the
  /// work per call, so that the caller can check for an interrupt between
  /// calls. The skipped steps count as run - the clock, queue delays and
  /// latencies go on - but no message is sent for them: an empty step
  /// changes nothing in the cache. They are sampled with the last step's
  /// state (its level too; admitted, finished and preempted 0) in at most
  /// two rows, at the gap's first and last step (step_sample::steps says
  /// how many steps each stands for; a gap skipped in several calls keeps
  /// two rows) - once the series has coarsened, in the buckets they span
  /// (step_series::add_gap). Returns the steps skipped (0: none; go on with start_step).
  /// REQUIRES: between steps (after end_step).
  std::uint64_t skip_idle(std::uint64_t min_gap, std::uint64_t max_draw_steps);

  /// Steps skip_idle skipped in all.
  std::uint64_t skipped_steps() const noexcept {
    return skipped_;
  }

  /// Steps in a row with requests waiting and nothing running or admitted.
  std::uint64_t stalled_steps() const noexcept {
    return stalled_;
  }

  /// Starts a step: arrivals join their tenant's queue.
  void start_step();

  /// The step's message: verdicts (on the drafts the cache holds of
  /// running requests and of those finished last step), frees (requests
  /// finished last step), extends (every running request by its pending
  /// token and drafts - or, while it prefills in chunks, by its next
  /// prompt chunk - with their token ids, highest priority and oldest
  /// first: the cache preempts from the back) and admissions (with
  /// preemption "swap", in follow-ups only, once no extend lacked a block,
  /// and only of a priority above every swapped request's).
  step_request begin_step();

  /// Applies a reply. Returns whether an admissions-only follow-up message
  /// is wanted (everything sent got in, more wait, nothing was preempted);
  /// an error if the cache failed in a way the run cannot go on from.
  caf::expected<bool> apply(const step_result& res);

  /// The follow-up: more admissions (none: nothing to send).
  step_request more_admits();

  // -- admission order "cached_prefix" (batcher_order.cpp) ---------------------

  /// What to probe the cache with before this step's admissions (call
  /// after start_step): the first probe_window requests of each waiting
  /// queue, as they would be admitted. None with admission order
  /// "arrival", with nothing waiting, or with max_running requests running
  /// (nothing could be admitted). Remembers them for order_waiting.
  std::vector<allocation_request> probe_requests();

  /// Orders each probed queue's first requests by `cached` - the probe's
  /// answer, one count per probe_requests() entry - as cached_prefix_order
  /// says; the rest of each queue stays behind them as it was. Returns
  /// false, changing nothing, if `cached` does not answer the last probe.
  bool order_waiting(const std::vector<std::uint64_t>& cached);

  // -- preemption "swap" (after the step's K/V writes) -------------------------

  /// Requests to swap out, one per extend that lacked a block: the newest,
  /// lowest-priority running request (of the same tenant when the tenant's
  /// quota was the limit). They stop running now.
  std::vector<request_id> swap_victims();

  /// A victim's swap out went through: it waits in the host tier.
  void swapped_out(request_id id);

  /// A victim's swap out failed (host tier full...): it is recomputed
  /// instead. An error if the run cannot go on.
  caf::error swap_out_failed(request_id id, const caf::error& err);

  /// The next swapped request to bring back, if it plausibly fits (only in
  /// steps that swapped nothing out).
  std::optional<request_id> next_swap_in();

  /// It is back, in the blocks of `table`, and runs from the next step on.
  void swapped_in(request_id id, const block_table& table);

  /// Its swap in failed: returns whether to try more this step; an error if
  /// the run cannot go on.
  caf::expected<bool> swap_in_failed(request_id id, const caf::error& err);

  // -- end of step -------------------------------------------------------------

  /// Each request that computed its pending token (or its prompt's last
  /// chunk) this step samples its next one - and before it the drafts the
  /// verifier accepted; complete ones finish.
  void end_step();

  /// The supervisor preempted a request outside a step (applied at the next
  /// safe point; stale notices are ignored by cache id).
  void preempted_elsewhere(request_id id, std::uint64_t cache_id);

  /// Records the state after this step (call before end_step).
  void record(const cache_manager_stats& st, memory_pressure level);

  /// Tokens computed since the last clear (with track_data), in the order
  /// the cache handed out their blocks: where two name the same slot (a
  /// block freed by a preemption and reallocated within the step), the
  /// later one is its owner's and must win.
  const std::vector<computed_token>& computed() const noexcept {
    return computed_;
  }
  void clear_computed() {
    computed_.clear();
  }

  /// The request swapped in last, if it runs, else the k-th running one
  /// (modulo their number), if any.
  std::optional<verify_target> pick_verify(std::uint64_t k);

  std::uint64_t step() const noexcept {
    return step_;
  }
  std::size_t waiting() const noexcept;
  std::size_t running() const noexcept {
    return running_.size();
  }
  std::size_t swapped() const noexcept {
    return swapped_.size();
  }
  std::uint64_t arrived() const noexcept {
    return gen_.generated();
  }

  const std::vector<tenant_figures>& figures() const noexcept {
    return figures_;
  }
  /// figures(), with the requests still waiting for their first admission
  /// counted in (the run's figures when it ends).
  std::vector<tenant_figures> final_figures() const;
  /// The time series' rows (at most its cap; step_series).
  const std::vector<step_sample>& samples() const noexcept {
    return series_.rows();
  }
  step_series& series() noexcept {
    return series_;
  }
  const step_series& series() const noexcept {
    return series_;
  }
  /// Finished requests whose free found them ended already: the cache
  /// preempted them after their last token (it counts those preemptions;
  /// the figures count them finished).
  std::uint64_t ended_before_free() const noexcept {
    return ended_before_free_;
  }
  /// Swap-outs answered unknown_request: the supervisor preempted the
  /// request while its swap-out was under way. The figures count it
  /// preempted (it is recomputed); the cache counts a swap if its copy
  /// completed, and no preemption (the request held its blocks until then).
  std::uint64_t preempted_mid_swap() const noexcept {
    return preempted_mid_swap_;
  }
  const std::vector<std::string>& warnings() const noexcept {
    return warnings_;
  }
  /// Replies the cache should not have given this simulator: a table of
  /// another length than the one asked for (extended, admitted, swapped
  /// in), a free or extend refused for a reason none of its steps can
  /// cause. Each is also a warning; any fails the run (failed_checks).
  std::uint64_t inconsistencies() const noexcept {
    return inconsistencies_;
  }
  /// Records a warning that counts as an inconsistency (inconsistencies()).
  void inconsistent(std::string text);
  /// Extends that computed a prompt chunk (prefill_chunk; admissions'
  /// first chunks not counted).
  std::uint64_t chunk_extends() const noexcept {
    return chunk_extends_;
  }
  /// Running requests preempted (any way) or swapped out with part of their
  /// prompt still to prefill.
  std::uint64_t preempted_mid_prefill() const noexcept {
    return preempted_mid_prefill_;
  }

private:
  struct live {
    sim_request req;
    std::uint64_t generated = 0; ///< output tokens sampled so far
    std::uint64_t seq = 0;       ///< admission order
    std::uint64_t cache_id = 0;
    bool admitted_once = false;
    bool running = false;
    bool swapped = false; ///< in the host tier (or on its way there)
    /// The last step in which it computed a token (admission or extend);
    /// only those sample a new one, once the prefill is done.
    std::uint64_t computed_at = ~std::uint64_t{0};
    /// What its last admission prefills: the prompt, and after a recompute
    /// the output sampled before it (prompt.size() + generated then).
    std::uint64_t prefill_len = 0;
    /// Of those, in the cache: all of them at once without prefill_chunk;
    /// with it, the hits and the chunks computed so far.
    std::uint64_t prefilled = 0;
    block_table table;
    /// Speculative decoding: the drafts of its decode extend this step (or
    /// last, if unsettled), at positions draft_at...: the first `accepted`
    /// are its next output tokens, the rest other ids. `unsettled`: the
    /// cache holds them until a verdict, which goes with its next extend
    /// (or its free).
    std::vector<token_id> drafts;
    std::uint32_t accepted = 0;
    std::uint64_t draft_at = 0;
    bool unsettled = false;
    /// The last step whose extend decoded (past its prefill) and went
    /// through.
    std::uint64_t decoded_at = ~std::uint64_t{0};

    /// Whether the cache lacks part of its prompt (chunked prefill): it
    /// extends by prompt chunks, and samples nothing, until it has it all.
    bool prefilling() const noexcept {
      return prefilled < prefill_len;
    }
    /// Tokens the cache holds while running, as of the start of a step
    /// (once its drafts are settled): its prefill so far, or, decoding,
    /// its prompt and every sampled token but the last (pending).
    std::uint64_t in_cache() const noexcept {
      return prefilling() ? prefilled : req.prompt.size() + generated - 1;
    }
    /// Tokens the cache holds: in_cache(), or up to its last draft while a
    /// verdict is due.
    std::uint64_t held() const noexcept {
      return unsettled ? draft_at + drafts.size() : in_cache();
    }
    /// The token at `pos` of its sequence (prompt, then output).
    token_id token_at(std::uint64_t pos) const noexcept {
      return pos < req.prompt.size() ? req.prompt[pos]
                                     : req.output[pos - req.prompt.size()];
    }
    /// The token whose K/V its cache slot at `pos` was computed for: a
    /// draft's within the drafts' span, else token_at(pos).
    token_id held_token(std::uint64_t pos) const noexcept {
      return pos >= draft_at && pos - draft_at < drafts.size()
               ? drafts[pos - draft_at]
               : token_at(pos);
    }
    /// Blocks the rest of its prompt will take (0 unless prefilling).
    std::uint64_t owed_blocks(std::uint32_t block_size) const noexcept {
      auto blocks = [&](std::uint64_t t) {
        return (t + block_size - 1) / block_size;
      };
      return blocks(prefill_len) - blocks(prefilled);
    }
    /// Tokens its next extend computes: the next chunk of its prompt (at
    /// most `chunk`) while it prefills, else its pending token and drafts.
    std::uint64_t next_extend(std::uint64_t chunk) const noexcept {
      return prefilling() ? std::min(chunk, prefill_len - prefilled)
                          : 1 + drafts.size();
    }
  };

  static std::uint64_t blocks_for(std::uint64_t tokens,
                                  std::uint32_t block_size) noexcept;
  /// The cache failed in a way the run cannot go on from.
  static bool fatal(const caf::error& err) noexcept;

  allocation_request admission_for(const live& l) const;
  /// Prompt tokens an admission of `len` holds with `hit_tokens` found in
  /// the prefix cache: all of them, or with prefill_chunk its first chunk.
  std::uint64_t admitted_tokens(std::uint64_t len,
                                std::uint64_t hit_tokens) const noexcept;
  /// Blocks the running requests' prefills still take for the rest of
  /// their prompts (0 without prefill_chunk), added per workload to
  /// `per_workload` if given: admissions and swap-ins leave them free.
  std::uint64_t prefill_owed(std::vector<std::uint64_t>* per_workload
                             = nullptr) const;
  bool chunked() const noexcept {
    return scenario_.prefill_chunk != 0;
  }
  /// Whether workload `w` sends multi-turn sessions (figures_[w].conv).
  bool conversing(std::uint32_t w) const noexcept {
    return scenario_.workloads[w].conversation.enabled();
  }
  /// Whether `l` computed its last token this step (end_step finishes it).
  bool finishes_now(const live& l) const noexcept;
  void admit(step_request& out, std::uint64_t reserved);
  /// Where queue `w`, from `cursor` on, stands among the queues at
  /// admission (with equal priorities): the (arrival, id) of its head, or
  /// with cached_prefix of the oldest of its probe window, so that the
  /// order within a queue does not change the tenants' turns.
  std::pair<std::uint64_t, request_id> turn_of(std::size_t w,
                                               std::size_t cursor) const;
  void requeue_front(live& l);
  void stop_running(request_id id);
  void free_and_requeue(request_id id);
  void insert_sorted(std::vector<request_id>& xs, request_id id);
  /// The last running request (of `workload`, unless -1) that does not
  /// finish this step; 0 if none.
  request_id newest_of(std::int64_t workload) const;
  bool swap_mode() const noexcept {
    return scenario_.preemption == preemption_mode::swap;
  }
  void process_external();
  // -- speculative decoding (batcher_drafts.cpp) -------------------------------
  /// A verdict the step's message carries, for its reply to settle.
  struct sent_verdict {
    request_id id = 0;
    std::uint32_t workload = 0;
    std::uint32_t drafts = 0;
    std::uint32_t accepted = 0;
  };
  /// Sets `l`'s drafts for this step's extend: none while it prefills.
  void draw_drafts(live& l);
  /// Adds `l`'s verdict to `out` if one is due; returns the blocks it frees.
  std::uint64_t send_verdict(live& l, step_request& out);
  /// Books the reply's outcome of the verdicts sent; returns, per entry of
  /// res.failed, whether it was a verdict's.
  std::vector<bool> settle_verdicts(const step_result& res);
  /// `l` leaves the cache (or goes back to waiting): unsettled drafts are
  /// dropped.
  void drop_drafts(live& l);
  void warn(std::string text); ///< recorded for the report (the first few)

  bool running_before(const live& x, const live& y) const noexcept;

  const scenario& scenario_;
  const cache_config& cfg_;
  kvactor::device device_;
  bool track_data_;
  workload_generator gen_;
  std::uint64_t step_ = 0;
  std::uint64_t seq_ = 0;
  std::unordered_map<request_id, live> live_;
  std::vector<std::deque<request_id>> waiting_; ///< per workload
  std::vector<std::uint64_t> room_;        ///< in each queue, this step
  /// The last probe's requests, in probe order, and how many per queue.
  std::vector<request_id> probed_;
  std::vector<std::size_t> probed_per_queue_;
  std::vector<std::uint64_t> turned_away_; ///< this step's, per workload
  std::vector<request_id> running_;             ///< extend order
  std::vector<request_id> swapped_;             ///< same order
  std::vector<request_id> swapping_out_;        ///< this step's victims
  /// Extends that lacked a block this step (swap mode), and the tenant
  /// whose quota was the limit (-1: the pool).
  std::vector<std::pair<request_id, std::int64_t>> shortage_;
  bool main_message_ = false; ///< the next reply is the step's first
  std::uint64_t swap_in_used_ = 0;
  std::uint32_t swap_ins_ = 0; ///< this step
  request_id verify_next_ = 0;
  std::vector<request_id> to_free_;
  std::vector<request_id> limbo_; ///< freed by us, requeued once freed
  std::vector<request_id> sent_frees_;
  std::vector<request_id> sent_extends_;
  std::vector<request_id> sent_admits_;
  std::vector<std::pair<request_id, std::uint64_t>> external_;
  std::vector<std::uint64_t> tenant_blocks_; ///< per workload, last stats
  std::vector<std::uint64_t> tenant_quota_;  ///< per workload, 0 = none
  std::uint64_t last_free_ = 0;
  /// Blocks admissions leave alone: the pool above the admit_up_to mark.
  std::uint64_t above_limit_ = 0;
  std::uint64_t freeing_blocks_ = 0; ///< held by the requests in to_free_
  std::uint64_t budget_ = 0;          ///< of the current step's admissions
  request_id blocked_id_ = 0;         ///< the head that did not fit...
  std::uint64_t blocked_budget_ = 0;  ///< ...when this many blocks were free
  std::uint64_t total_prefill_ = 0;
  std::uint64_t total_hits_ = 0;
  std::uint64_t chunk_extends_ = 0;
  std::uint64_t preempted_mid_prefill_ = 0;
  std::uint32_t step_admitted_ = 0;
  std::uint32_t step_finished_ = 0;
  std::uint32_t step_preempted_ = 0;
  std::uint64_t ended_before_free_ = 0;
  std::uint64_t preempted_mid_swap_ = 0;
  std::uint64_t stalled_ = 0;
  /// This step began idle and nothing arrived (start_step); the last step
  /// run did, and ended idle (end_step): its sample holds until an arrival.
  bool quiet_start_ = false;
  bool quiet_ = false;
  std::uint64_t skipped_ = 0;
  /// The last skip ended where the clock stands, no step run since: a
  /// further skip goes on with the same gap (its rows).
  bool in_gap_ = false;
  draft_verifier verifier_;
  std::vector<sent_verdict> sent_verdicts_;
  /// Verdicts of requests that finished with drafts unsettled: sent with
  /// their frees (then their completed blocks stay cached).
  std::vector<sent_verdict> finish_verdicts_;
  std::vector<computed_token> computed_;
  std::vector<tenant_figures> figures_;
  step_series series_;
  std::vector<std::string> warnings_;
  std::uint64_t inconsistencies_ = 0;
};

} // namespace kvactor::sim
