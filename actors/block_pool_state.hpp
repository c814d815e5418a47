// The block pool actor's state and the helpers its handlers share
// (block_pool_state.cpp): usage reports, copy-on-write through the device,
// incarnation checks. Internal to the pool actor (block_pool*.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "kvactor/actors/block_pool_core.hpp"
#include "kvactor/actors/pressure_tracker.hpp"
#include "kvactor/actors/step_lane.hpp"
#include "kvactor/messages/interfaces.hpp"

namespace kvactor::detail {

struct block_pool_state {
  static inline const char* name = "kvactor.block_pool";

  // Built by spawn_block_pool before the spawn (its allocations, which
  // grow with the pool, fail there as an error) and handed over in init():
  // CAF default-constructs the state before the spawn function sees its
  // arguments.
  std::shared_ptr<block_pool_core> core_ptr;
  std::unique_ptr<pressure_tracker> marks;
  std::size_t band = 0;
  supervisor_actor supervisor;
  /// The supervisor asked for victims: while usage stays at or above its
  /// relief target, the next change is reported even within the band (a
  /// sharer's end, an admission, a tenant past its reservation may make a
  /// victim where its last round found none, and above the critical mark
  /// no crossing would wake it).
  bool victims_watch = false;
  device_actor device; ///< copies for copy-on-write
  /// Weak (a subscription keeps nobody alive); monitored, dropped when gone.
  std::vector<caf::actor_addr> kv_subscribers;
  std::uint64_t kv_seq = 0;
  /// The manager, told each step's effects on its registry (none: a pool
  /// spawned alone), and the storage whose device a step's admits must name
  /// (kind "": not checked).
  kv_cache_manager_actor registry;
  storage_info store;
  block_pool_core::step_trace trace; ///< scratch of the step handler
  lane_ledger lanes; ///< who admitted what through a step
  std::uint32_t block_size = 0;
  /// model.num_layers: a gather of a layer past it is refused here, naming
  /// the request (the device's refusal names only the layer).
  std::uint32_t num_layers = 0;
  /// pressure.preempt_grace_ms: how long a supervisor's victim's blocks
  /// drain (0: they come free at once).
  std::chrono::milliseconds grace{0};

  void init(const cache_config& cfg, std::shared_ptr<block_pool_core> core);

  block_pool_core& core() {
    return *core_ptr;
  }
  const block_pool_core& core() const {
    return *core_ptr;
  }

  /// After each message that may change the pool: KV events to their
  /// subscribers, usage crossings to the supervisor (`always`: the usage
  /// even within the same band; so too once after its victims were asked
  /// for, while usage is still to be relieved: victims_watch).
  void report(block_pool_actor::pointer self, bool always = false);

  void publish_events();

  /// Lets pins whose time ran out go before an operation that takes
  /// blocks: the GC tick alone would leave them in the way until it comes
  /// (never, with gc_interval_ms 0).
  void expire_due_pins();

  /// Before an operation that admits or grows requests: the time they are
  /// stamped with (their stats' last_access).
  void set_clock();

  static std::uint64_t now_ms();
};

using pool_ptr = block_pool_actor::stateful_pointer<block_pool_state>;

/// Has the device copy `copies` (copy-on-write) and calls `done` with its
/// outcome and the requests whose extends were undone because it failed.
/// The pool handles no other message until then (await): between the
/// extends and settle_copies only the rest of their step touched their
/// requests, so a failed copy can be undone exactly. An exit message
/// waits too, so the promise `done` answers is never dropped: the device
/// answers its work (with shutting_down if it is stopping) before the
/// pool quits.
/// NOTE: the pool pauses meanwhile. Copies are rare (a fork's first
/// append) and one block per request, so on CUDA the pause is a few
/// microseconds; on the host backend, whose copies run on the device
/// actor's thread in order, it also waits out a swap issued before it.
void copy_then(pool_ptr self, const std::vector<block_copy>& copies,
               std::function<void(caf::error, std::vector<request_id>)> done);

/// The error of request `id`'s extend, undone because the device did not
/// make its copy-on-write copy (`cause`): it names the request and says
/// nothing changed - the device's error names neither. Its code stays
/// (device_failure, shutting_down, ...); an error of CAF's own is a device
/// failure.
caf::error copy_undone(request_id id, const caf::error& cause);

/// Moves the extends of `res` that settle_copies undid (the requests in
/// `undone`) from `changed` to `failed`, each with copy_undone(id, err).
void fail_undone_extends(step_result& res, const caf::error& err,
                         const std::vector<request_id>& undone);

/// None if incarnation `cache_id` of request `id` is live; otherwise the
/// error its handle answers with: the request it served has ended
/// (invalid_request for current_incarnation, which names none here).
caf::error check_incarnation(const block_pool_core& core, request_id id,
                             std::uint64_t cache_id);

/// None if request `id` is live as incarnation `cache_id`, the one the
/// manager's registry names. The registry follows the pool a few messages
/// late (steps reach the pool directly), so an operation the manager asks
/// for by id alone could hit a newer incarnation of the id.
caf::error check_current(const block_pool_core& core, request_id id,
                         std::uint64_t cache_id);

/// `cache_id`, or for current_incarnation the live incarnation of `id` (if
/// any): the manager names no incarnation for an id whose admission it
/// has not heard back about yet - the pool, which has it first, does.
std::uint64_t named_incarnation(const block_pool_core& core, request_id id,
                                std::uint64_t cache_id);

/// None if the current message comes from the manager, or if no manager
/// registered (a pool spawned alone). The step lane hands the pool's
/// address to schedulers, so what only the manager may ask - admitting
/// outside a step, ending, forking and swapping requests - is refused from
/// anyone else.
caf::error from_manager(block_pool_actor::pointer self,
                        const kv_cache_manager_actor& mgr, const char* what);

/// `err` with `what` ("allocation of request 7") leading its context if it
/// is a tenant's quota or the pool's shortage, which name no request (the
/// core's other errors do); any other error as it is.
caf::error name_shortage(const std::string& what, caf::error err);

/// The table of a live request (after a successful operation on it).
block_table table_of(const block_pool_core& core, request_id id);

/// The live request an operation names: incarnation `cache_id` of `id`, or
/// with `by_manager` and current_incarnation whichever is live. If none:
/// the handle's error (invalid_handle), or the manager's (unknown_request).
caf::expected<const sequence*> named_request(const block_pool_core& core,
                                             request_id id,
                                             std::uint64_t cache_id,
                                             bool by_manager);

/// Grows incarnation `cache_id` of `id` by `n` tokens (`tokens`: none, or
/// exactly n ids), the last `drafts` of them draft tokens, and reports
/// usage. If that incarnation ended: the handle's error (invalid_handle),
/// or with `by_manager` the registry's (unknown_request). The extension's
/// copies are still to be made.
caf::expected<extension> grow(pool_ptr self, request_id id,
                              std::uint64_t cache_id, std::uint64_t n,
                              const std::vector<token_id>& tokens,
                              bool by_manager, std::uint32_t drafts = 0);

/// The manager's free (or, with `discard`, its discard: nothing let go
/// stays cached) of incarnation `cache_id` of `id`; tells the step lane.
caf::result<std::uint32_t> end_by_manager(pool_ptr self, request_id id,
                                          std::uint64_t cache_id,
                                          bool discard);

/// The manager's preemption of incarnation `cache_id` of `id` (with
/// `unindex`, the supervisor's: block_pool_core::preempt); tells the step
/// lane.
caf::result<std::uint32_t> preempt_by_manager(pool_ptr self, request_id id,
                                              std::uint64_t cache_id,
                                              bool unindex);

/// Settles the draft tokens of incarnation `cache_id` of `id` (as grow
/// names it), keeping `accepted`; reports usage, replies with the table.
caf::expected<block_table> settle(pool_ptr self, request_id id,
                                  std::uint64_t cache_id,
                                  std::uint64_t accepted, bool by_manager);

/// A pin or unpin for tenant `name`: `op(t)` with its index, usage
/// reported after a success. Errors: unknown_tenant, op's.
template <class Op>
caf::result<std::uint32_t> for_tenant(pool_ptr self, const std::string& name,
                                      Op op) {
  auto t = self->state.core().tenant_index(name);
  if (!t)
    return std::move(t.error());
  caf::expected<std::uint32_t> res = op(*t);
  if (!res)
    return std::move(res.error());
  self->state.report(self);
  return *res;
}

/// The reply to request `id`'s extend: `convert(ext)` now if it copied
/// nothing, else once the device made its copy-on-write copies (or, the
/// extend undone, copy_undone's error).
template <class Reply, class Convert>
caf::result<Reply> after_copies(pool_ptr self, request_id id, extension ext,
                                Convert convert) {
  if (ext.copies.empty())
    return convert(std::move(ext));
  auto rp = self->make_response_promise<Reply>();
  auto copies = ext.copies;
  copy_then(self, copies,
            [rp, id, ext = std::move(ext),
             convert](caf::error err, std::vector<request_id>) mutable {
              if (err)
                rp.deliver(copy_undone(id, err));
              else
                rp.deliver(convert(std::move(ext)));
            });
  return rp;
}

} // namespace kvactor::detail
