// The block pool's side of the step lane (steps sent straight to the pool):
// the admits' device check, the effects message the manager's registry
// follows, and the ledger of which stepper admitted which request - so that
// a request of one stepper ended by other hands (a manager free, a
// supervisor preemption, a reclaim, another stepper's step) is reported in
// that stepper's next step reply, in order with what its steps see. Internal
// to actors/block_pool.cpp.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include <caf/actor_addr.hpp>

#include "kvactor/actors/block_pool_core.hpp"
#include "kvactor/actors/id_map.hpp"
#include "kvactor/messages/protocol.hpp"
#include "kvactor/messages/step.hpp"

namespace kvactor::detail {

/// Takes the admits that name another device than `store`'s out of `step`,
/// each as a failure (as the manager's allocate refuses them). A storage of
/// kind "" (a pool spawned alone) checks nothing.
std::vector<op_failure> reject_foreign(const storage_info& store,
                                       step_request& step);

/// What `res` changed in the manager's registry; `trace` is what run_step
/// traced of it.
step_effects effects_of(const step_request& step, const step_result& res,
                        const block_pool_core::step_trace& trace);

/// Whether a step changed anything the registry keeps.
inline bool has_effects(const step_result& res) noexcept {
  return !res.freed.empty() || !res.preempted.empty() || !res.admitted.empty();
}

/// Which stepper admitted each live request through a step, and the ends of
/// its requests it has not been told of yet.
class lane_ledger {
public:
  /// After a step from `stepper`: its ends and admissions, and whom it grew
  /// that another stepper admitted. Ends of requests another stepper
  /// admitted are kept for that one. True if `stepper` is new here: the
  /// caller monitors it and calls forget() when it goes.
  bool step_done(const caf::actor_addr& stepper, const step_request& step,
                 const step_result& res,
                 const block_pool_core::step_trace& trace);

  /// Request `id` (incarnation `cache_id`) grew outside a step (through
  /// its handle or the manager): its stepper no longer speaks for every
  /// writer of its K/V.
  void grown_outside(request_id id, std::uint64_t cache_id);

  /// `stepper` is gone: drops what it was owed and its admissions (its
  /// requests are reclaimed as its owner's).
  void forget(const caf::actor_addr& stepper);

  /// Request `id` (incarnation `cache_id`) ended outside a step.
  void ended(request_id id, std::uint64_t cache_id, end_reason why,
             std::uint32_t released);

  /// The ends `stepper` has not been told of, oldest first; forgets them.
  std::vector<request_ended> take(const caf::actor_addr& stepper);

  /// The stepper that admitted request `id` (incarnation `cache_id`) and
  /// alone grew it since - whose promise that its earlier steps' K/V are
  /// written covers every write into it - or a null address: none
  /// admitted it, or another stepper's step or a handle grew it too.
  caf::actor_addr stepper_of(request_id id, std::uint64_t cache_id) const;

  /// The drain tag of `stepper`'s victims (block_pool_core::
  /// preempt_draining): a number of its own while it is known here (ids
  /// and hashes of actor addresses repeat across processes); 0 for one
  /// unknown (it admitted nothing: no victim of it drains).
  std::uint64_t drain_tag(const caf::actor_addr& stepper) const;

  /// Whether `addr` has stepped here (and is watched for it).
  bool knows(const caf::actor_addr& addr) const {
    return steppers_.count(addr) != 0;
  }

  /// Live requests admitted through steps, steppers known, ends not yet
  /// told (for tests and diagnostics).
  std::size_t size() const noexcept {
    return owners_.size();
  }
  std::size_t steppers() const noexcept {
    return steppers_.size();
  }
  std::size_t untold() const noexcept {
    std::size_t n = 0;
    for (auto& kvp : pending_)
      n += kvp.second.size();
    return n;
  }

private:
  struct entry {
    std::uint64_t cache_id = 0;
    caf::actor_addr stepper;
    /// Only `stepper` grew it (see stepper_of).
    bool alone = true;
  };

  void tell(const entry& e, request_ended ev);

  /// Per step-admitted request (dense, no node per entry, no rehash
  /// inside one step: id_map.hpp).
  id_map<entry> owners_;
  std::unordered_map<caf::actor_addr, std::vector<request_ended>> pending_;
  /// Known steppers and their drain tags.
  std::unordered_map<caf::actor_addr, std::uint64_t> steppers_;
  std::uint64_t next_tag_ = 1;
};

} // namespace kvactor::detail
