// replay_scheduler: REPLAY.md's step loop (vLLM's scheduling policy) over a
// trace, independent of how the cache is reached. Each step it produces the
// cache work as a step_request and consumes the step_result; the facade
// replayer executes that work one call at a time, the actor replayer sends
// it as one message - the decisions are the same.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "bench/trace.hpp"
#include "kvactor/config/cache_config.hpp"
#include "kvactor/messages/step.hpp"

namespace kvactor::bench {

class replay_scheduler {
public:
  /// `max_admits`: admissions sent per message (more follow in an
  /// admissions-only message of the same step while all of them fit).
  replay_scheduler(const trace& tr, const cache_config& cfg,
                   std::size_t max_admits = 8);

  bool done() const noexcept;

  /// Steps 1-3 of the loop: arrivals join the waiting queue; the step's
  /// frees (requests finished last step), extends (every running request,
  /// oldest first, by its pending token) and admissions (the waiting head).
  /// With nothing running, waiting or to free, the clock first jumps to the
  /// next arrival (the steps between are counted, not sent).
  step_request begin_step();

  /// Applies a reply. True if an admissions-only follow-up is wanted: every
  /// admission sent got in, more are waiting, nothing was preempted.
  bool apply(const step_result& res);

  /// The follow-up: the next admissions from the waiting head.
  step_request more_admits();

  /// Steps 4-5: each scheduled request appends its next output token; those
  /// complete are freed (in the next message).
  void end_step();

  /// Steps of REPLAY.md's loop, from step 0 to the one where the last
  /// request finished. The frees of that step's finished requests go out in
  /// one more message (the step message sends frees first), which closes the
  /// replay and is not counted; idle steps before an arrival are counted
  /// but not sent. peak_blocks_used / avg_blocks_used sample each counted
  /// step's usage after its cache work, before its finished requests are
  /// freed (its high-water mark).
  std::uint64_t steps() const noexcept {
    return step_;
  }
  std::uint64_t preemptions() const noexcept {
    return preemptions_;
  }
  std::uint64_t finished() const noexcept {
    return finished_;
  }
  std::uint64_t peak_blocks_used() const noexcept {
    return peak_used_;
  }
  double avg_blocks_used() const noexcept {
    return used_samples_ == 0 ? 0.0 : double(used_sum_) / double(used_samples_);
  }

private:
  struct live {
    std::uint32_t index = 0;      ///< into the trace
    std::uint64_t generated = 0;  ///< output tokens sampled so far
  };

  allocation_request admission_for(std::uint32_t index) const;
  void skip_idle_steps();
  void admit_from_head(step_request& out);

  const trace& trace_;
  allocation_request proto_;
  std::size_t max_admits_;
  std::uint64_t step_ = 0;
  std::size_t next_arrival_ = 0;
  std::deque<std::uint32_t> waiting_;
  std::vector<std::uint32_t> running_;   ///< admission order
  std::vector<std::uint64_t> generated_; ///< per trace request
  std::vector<request_id> to_free_;
  std::vector<std::uint32_t> sent_admits_;
  bool closing_ = false; ///< this message only frees: the replay's close
  std::uint64_t preemptions_ = 0;
  std::uint64_t finished_ = 0;
  std::uint64_t last_used_ = 0;
  std::uint64_t last_free_ = 0;
  std::uint64_t peak_used_ = 0;
  std::uint64_t used_sum_ = 0;
  std::uint64_t used_samples_ = 0;
};

} // namespace kvactor::bench
