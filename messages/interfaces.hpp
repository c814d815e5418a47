// The typed interfaces of kvactor's five actors. Each message: what it does,
// what it replies, which errors (errc) it fails with. Every error carries a
// context string naming what was wrong; a failed operation changes nothing.
#pragma once

#include <cstdint>
#include <vector>

#include <caf/actor.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "kvactor/messages/atoms.hpp"
#include "kvactor/messages/protocol.hpp"
#include "kvactor/messages/step.hpp"
#include "kvactor/messages/types.hpp"

namespace kvactor {

/// One per live request: its identity, shape and device, the data movement
/// its growth needs (copy-on-write) and its lifetime (it dies with its owner).
/// It quits when its request ends: a call sent after that gets CAF's
/// request_receiver_down, which means the same as invalid_handle (a call
/// the end overtook on its way).
using request_handle_actor = caf::typed_actor<
  // Its current block table.
  caf::replies_to<table_atom>::with<block_table>,
  // Grow by n tokens (copy-on-write done before the reply); replies with the
  // table. Errors: exceeds_max_sequence_length, exceeds_capacity,
  // out_of_blocks, quota_exceeded, invalid_request (while swapped out),
  // invalid_handle (its incarnation ended),
  // device_failure or shutting_down (the copy-on-write copy failed, or the
  // device stopped first: the extend was undone, the table is as before).
  caf::replies_to<extend_atom, std::uint64_t>::with<block_table>,
  // Grow by these tokens; full blocks enter the prefix index.
  caf::replies_to<append_atom, std::vector<token_id>>::with<block_table>,
  // Its figures.
  caf::replies_to<stats_atom>::with<cache_handle_stats>,
  // What was allocated.
  caf::replies_to<info_atom>::with<request_info>,
  // Ends the request (as the manager's free); replies with blocks released.
  caf::replies_to<free_atom>::with<std::uint32_t>,
  // Nobody received this request (its allocate's or fork's reply came
  // after the caller gave up): it ends as the manager's unclaimed does.
  // Passed on to the manager as from its sender, so it counts only from
  // the request's owner (or the manager): ignored from anyone else.
  caf::reacts_to<unclaimed_atom>,
  // From the manager: the request ended; the actor quits.
  caf::reacts_to<end_atom, end_reason>>;

/// Watches handles, runs GC, turns pool usage into pressure levels.
using supervisor_actor = caf::typed_actor<
  // From the pool: usage crossed a pressure mark.
  caf::reacts_to<usage_atom, pool_usage>,
  // From a handle actor that quit with an error (killed, crashed, stopped)
  // while its request may still hold blocks: (request id, cache id). The
  // manager reclaims the request if that incarnation is still live.
  caf::reacts_to<reclaim_atom, request_id, std::uint64_t>,
  // Runs GC now: reclaims orphaned requests, evicts toward the medium mark
  // under high pressure, checks the invariant. Error: invariant_violation.
  caf::replies_to<gc_atom>::with<cache_gc_stats>,
  // Subscribe an actor to (pressure_atom, pressure_event) messages; replies
  // with the current level. Error: invalid_request for a null handle.
  caf::replies_to<subscribe_atom, caf::actor>::with<memory_pressure>,
  // Stop sending that actor pressure messages.
  caf::reacts_to<unsubscribe_atom, caf::actor>,
  // The current level.
  caf::replies_to<pressure_atom>::with<memory_pressure>,
  // GC timer (its own: from anyone else, ignored). A pass that finds the
  // invariant broken ends the supervisor, and with it the cache.
  caf::reacts_to<tick_atom>>;

/// Where a scheduler sends its steps (messages/step.hpp): the block pool
/// itself, which the manager hands out (`step_atom` with no argument). A step
/// sent here costs one round trip to the one actor that decides; the
/// manager's registry follows by a one-way message the pool sends it before
/// the reply. The manager's own step handler forwards here.
using step_actor = caf::typed_actor<
  caf::replies_to<step_atom, step_request>::with<step_result>,
  // For cache-aware scheduling: per request, the prompt tokens its
  // admission would find cached now (block_pool_core::cached_prefix).
  // Changes nothing; a hint, not a promise. Errors (naming the request):
  // those of allocate's checks - unknown_tenant, invalid_request,
  // exceeds_max_sequence_length.
  caf::replies_to<probe_atom, std::vector<allocation_request>>::with<
    std::vector<std::uint64_t>>>;

/// The one owner of block-level truth (see actors/block_pool_core.hpp).
/// Its forms that name an incarnation (request id, cache id) fail with
/// invalid_handle once that incarnation ended (the text names the live
/// one, if any), and with invalid_request for a cache id newer than the
/// live one's: never given.
using block_pool_actor = caf::typed_actor<
  // Lookup + pin of the cached prefix and allocation of the rest, in one
  // step. The manager's to ask (schedulers admit through steps). Errors: as
  // the manager's allocate, and invalid_request from anyone else.
  caf::replies_to<allocate_atom, allocation_request>::with<admission>,
  // Whether that allocate would succeed now; changes nothing (but drops
  // pins past their deadline, as allocate would).
  caf::replies_to<can_alloc_atom, allocation_request>::with<bool>,
  // The step lane's probe: cached prompt tokens per request.
  caf::replies_to<probe_atom, std::vector<allocation_request>>::with<
    std::vector<std::uint64_t>>,
  // From a handle actor, or the facade for a handle's extend and append
  // (no hop through the handle actor): grow (request id, cache id, n,
  // token ids - optional, empty = unnamed). The cache id names the
  // incarnation the handle serves:
  // a handle whose request ended (its id perhaps allocated again since)
  // gets invalid_handle. Other errors: exceeds_max_sequence_length,
  // exceeds_capacity (more blocks than one request may hold: see
  // lone_request_cap), out_of_blocks, quota_exceeded, invalid_request
  // (swapped out), device_failure or shutting_down (its copy-on-write
  // copy was not made: the extend was undone). The pool handles no other message while such a copy runs.
  caf::replies_to<extend_atom, request_id, std::uint64_t, std::uint64_t,
                  std::vector<token_id>>::with<extension>,
  // From the manager, for its extend and append by id (request id, a cache
  // id - current_incarnation: whichever is live - n or the tokens): as the
  // handle's, but the reply is the table alone, for the manager to delegate
  // (its client gets the pool's answer: no hop through the handle actor,
  // no registry lookup), and the error for an id not live (or not as that
  // incarnation) is unknown_request.
  caf::replies_to<extend_atom, request_id, std::uint64_t,
                  std::uint64_t>::with<block_table>,
  caf::replies_to<append_atom, request_id, std::uint64_t,
                  std::vector<token_id>>::with<block_table>,
  // Speculative decoding, for a request's own incarnation (its cache id:
  // the facade, on behalf of a handle - the handle actors do not relay
  // these, which keeps each one's behavior, paid per live request, as
  // small as it was) or the manager's by-id form (current_incarnation):
  // grow by n tokens (token ids: none or n), the last `drafts` of them
  // draft tokens, replying with the table once any copy-on-write copy is
  // made (errors: as extend's; invalid_request also for drafts > n or past
  // max_draft_tokens, or while earlier drafts are unsettled). Then settle
  // them: (request id, cache id, accepted) keeps the first `accepted` and
  // drops the rest (errors: invalid_request for more than it holds, or
  // while it is swapped out). An ended incarnation fails as in extend
  // (invalid_handle, or unknown_request for the manager's form).
  caf::replies_to<draft_atom, request_id, std::uint64_t, std::uint64_t,
                  std::vector<token_id>, std::uint32_t>::with<block_table>,
  caf::replies_to<settle_atom, request_id, std::uint64_t,
                  std::uint32_t>::with<block_table>,
  // Operations the manager asks for name the incarnation its registry knows
  // (request id, cache id): the registry follows the pool a few messages
  // late, and an id alone could reach a newer incarnation. Each fails with
  // unknown_request once that incarnation ended. (current_incarnation, for
  // free, discard, preempt and a fork's parent: whichever is live - the
  // manager's form for an id whose admission it has sent and not heard
  // back about, which the pool has first.) Ending, forking and
  // swapping are the manager's to ask (invalid_request from anyone else:
  // schedulers hold the pool's address as their step lane).
  // End a request.
  caf::replies_to<free_atom, request_id, std::uint64_t>::with<std::uint32_t>,
  // End a request caching nothing it lets go (its forward pass failed).
  caf::replies_to<discard_atom, request_id, std::uint64_t>::with<std::uint32_t>,
  // End it only if its cache id still matches; replies (whether it did,
  // blocks released).
  caf::replies_to<reclaim_atom, request_id, std::uint64_t>::with<bool, std::uint32_t>,
  // End it as a preemption.
  caf::replies_to<preempt_atom, request_id, std::uint64_t>::with<std::uint32_t>,
  // End it as a preemption, its blocks leaving the prefix index as a
  // discard's do - but for the prefix its admission found cached: the
  // supervisor's victims, chosen at any moment, may not have had their own
  // K/V written.
  caf::replies_to<preempt_atom, discard_atom, request_id,
                  std::uint64_t>::with<std::uint32_t>,
  // (parent, parent's cache id, child): child shares the parent's blocks.
  caf::replies_to<fork_atom, request_id, std::uint64_t, request_id>::with<admission>,
  // A step (as the manager's step, for which the pool checks the admits'
  // device); tells the registered manager its effects before replying.
  caf::replies_to<step_atom, step_request>::with<step_result>,
  // From spawn_kv_cache, once (later ones are ignored): the manager whose
  // registry follows the steps (step_effects), and the storage whose
  // device admitted requests must name (storage "none" takes any).
  caf::reacts_to<registry_atom, caf::actor, storage_info>,
  // The live request's table. Error: unknown_request.
  caf::replies_to<table_atom, request_id>::with<block_table>,
  // From a handle actor, or the facade for a handle's table read: its
  // incarnation's table (request id, cache id). Error: invalid_handle once
  // that incarnation ended.
  caf::replies_to<table_atom, request_id, std::uint64_t>::with<block_table>,
  // An incarnation's tokens of one layer (request id, cache id, layer),
  // gathered by the device, which replies: a contiguous view. Sent to the
  // device from here, with the table as it is now: kvactor's writers of
  // blocks given to someone later (slot writes, copies and swaps through
  // the device actor) come after this message, and the device reads before
  // it writes (block hazards). A writer into the pools' memory directly
  // (paged views, layer_base) orders its own writes. Errors:
  // invalid_handle once that incarnation ended, invalid_request for a
  // layer past the model's (naming the request) or while its blocks are in
  // the host tier, the device's.
  caf::replies_to<gather_atom, request_id, std::uint64_t,
                  std::uint32_t>::with<gathered_kv>,
  // From a handle: its incarnation's figures, all but memory_bytes (0: the
  // handle knows the bytes per block). Error: invalid_handle once that
  // incarnation ended.
  caf::replies_to<stats_atom, request_id, std::uint64_t>::with<cache_handle_stats>,
  // The pool's occupancy (blocks used, cached, requests live), counters and
  // per-tenant usage.
  caf::replies_to<stats_atom>::with<pool_stats>,
  // Evict up to n cached blocks; replies with how many.
  caf::replies_to<evict_atom, std::uint32_t>::with<std::uint32_t>,
  // Verify the accounting invariant. Error: invariant_violation.
  caf::replies_to<check_atom>::with<bool>,
  // The live requests (id, cache id).
  caf::replies_to<list_atom>::with<std::vector<std::pair<request_id, std::uint64_t>>>,
  // Where usage samples go.
  caf::reacts_to<subscribe_atom, supervisor_actor>,
  // KV events: (kv_event_atom, kv_event_batch) to each subscriber (a null
  // handle is ignored).
  caf::reacts_to<subscribe_atom, topic, caf::actor>,
  // Stop sending that actor KV events.
  caf::reacts_to<unsubscribe_atom, topic, caf::actor>,
  // Swap, first phase (request id, cache id): reserve the other side's
  // blocks, reply the moves for the device. Errors: unknown_request,
  // invalid_request (wrong residency), out_of_blocks, quota_exceeded (swap
  // in).
  caf::replies_to<swap_out_atom, request_id, std::uint64_t>::with<std::vector<block_move>>,
  caf::replies_to<swap_in_atom, request_id, std::uint64_t>::with<std::vector<block_move>>,
  // Swap, second phase (request id, cache id, ok): the device's copy
  // succeeded (commit) or not (undo) - also for an incarnation released
  // during the move, whose blocks return then; replies with device blocks
  // released and whether the incarnation had ended.
  caf::replies_to<swap_out_atom, request_id, std::uint64_t, bool>::with<std::uint32_t, bool>,
  caf::replies_to<swap_in_atom, request_id, std::uint64_t, bool>::with<std::uint32_t, bool>,
  // Requests to preempt so about n blocks come free (critical pressure):
  // (request id, cache id) each.
  caf::replies_to<victims_atom, std::uint64_t>::with<
    std::vector<std::pair<request_id, std::uint64_t>>>,
  // Pin a tenant's cached prefix (tenant, tokens, ttl_ms, cache_salt) for
  // ttl_ms; replies with blocks pinned.
  // Errors: unknown_tenant, quota_exceeded (max_pinned_blocks).
  caf::replies_to<pin_atom, std::string, std::vector<token_id>,
                  std::uint64_t, std::uint64_t>::with<std::uint32_t>,
  // Lets (tenant, tokens, cache_salt)'s pins go now; replies with blocks unpinned.
  caf::replies_to<unpin_atom, std::string, std::vector<token_id>,
                  std::uint64_t>::with<std::uint32_t>,
  // Unpin what expired; replies with how many.
  caf::replies_to<tick_atom>::with<std::uint32_t>,
  // The pool's own timer (from anyone else, ignored): the grace of drain
  // `serial` ran out, its blocks come free (pressure.preempt_grace_ms).
  caf::reacts_to<tick_atom, std::uint64_t>,
  // The prefix index: (hash, block) pairs, sorted by hash.
  caf::replies_to<index_atom>::with<std::vector<std::pair<std::uint64_t, block_id>>>>;

/// Owns the K/V storage and every CUDA stream; runs detached.
/// Copies and swaps are the cache's own work: once a cache registered,
/// a copy is taken from its pool alone and a swap (either way) from its
/// manager alone; from any other sender, invalid_request and nothing done
/// (so each must request() them, never delegate(), which would keep its
/// own caller as the sender). A client sends the device actor writes,
/// gathers and info only.
using device_actor = caf::typed_actor<
  // Copy blocks (all layers, K and V); replies once done with the count.
  // Errors: invalid_request (bad ids, or not from the pool), device_failure.
  caf::replies_to<copy_atom, std::vector<block_copy>>::with<std::uint32_t>,
  // Device -> host tier, and back; from the manager alone. Errors:
  // invalid_request (bad ids, no host tier, not from the manager),
  // device_failure. A slot write into a device block a
  // swap-out reads is refused (invalid_request: it would miss the host
  // copy) from the swap-out's start until the copy failed, or, the copy
  // done, until the pool let the blocks go (the next message).
  caf::replies_to<swap_out_atom, std::vector<block_move>>::with<std::uint32_t>,
  // The pool's second phase of a swap-out that copied: the request let
  // these device blocks go, and writes into them are a new owner's. Sent
  // by the pool before it can hand the blocks to anyone, so no new
  // owner's write arrives first - and taken from no one else once a pool
  // registered (a stray one would reopen blocks a copy still reads).
  caf::reacts_to<swap_out_atom, settle_atom, std::vector<block_id>>,
  caf::replies_to<swap_in_atom, std::vector<block_move>>::with<std::uint32_t>,
  // Scatter tokens' K/V into slots; replies with tokens written (slots of
  // -1 are skipped, and not counted).
  caf::replies_to<write_atom, slot_write>::with<std::uint32_t>,
  // A request's tokens of one layer, contiguous: (layer, blocks, tokens).
  caf::replies_to<gather_atom, std::uint32_t, std::vector<block_id>,
                  std::uint64_t>::with<gathered_kv>,
  // What the storage is: kind, device, device and host blocks, bytes per
  // block.
  caf::replies_to<info_atom>::with<storage_info>,
  // From spawn_kv_cache, once (later ones are ignored): the manager and the
  // pool. When this actor stops (a stall, an exit it was told from anyone
  // but the manager, a kill, a crash), each is sent an exit naming why
  // before anyone waiting on the work hears of it: a caller who heard it
  // finds the manager and the pool stopped, so its next call fails - an
  // extend or a step too. A down message, sent
  // as the actor ends, could come after such a caller's next call.
  caf::reacts_to<registry_atom, caf::actor, caf::actor>,
  // Internal: some submitted work completed (the storage's wake).
  caf::reacts_to<done_atom>,
  // Internal: the watchdog's poll while replies are pending (true).
  caf::reacts_to<done_atom, bool>>;

/// A live request in the manager's registry.
struct handle_entry {
  request_id id = 0;
  request_handle_actor handle;
  request_info info;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, handle_entry& x) {
  return f(caf::meta::type_name("handle_entry"), x.id, x.handle, x.info);
}

/// The front door.
using kv_cache_manager_actor = caf::typed_actor<
  // Start a request. Errors: invalid_request, duplicate_request,
  // unknown_tenant, exceeds_max_sequence_length, exceeds_capacity (it
  // needs more blocks than one request may ever hold: retrying cannot
  // help), out_of_blocks, quota_exceeded, shutting_down. The sender (if an actor) owns it: the
  // request is reclaimed when its owner dies.
  caf::replies_to<allocate_atom, allocation_request>::with<request_handle_actor,
                                                           block_table>,
  // Start a request, as above, the reply naming the incarnation admitted
  // (request_info: its cache id, the request without its prompt) in place
  // of the table: what a client that sends the pool its handle's calls
  // itself (the blocking facade) names there, without asking the handle
  // actor first. Errors: as allocate's.
  caf::replies_to<allocate_atom, allocation_request, info_atom>::with<
    request_handle_actor, request_info>,
  // Grow a request by n unnamed tokens; the pool answers (the manager
  // delegates). Errors: unknown_request (also when a step ended the request
  // before the registry heard), and the handle's other extend errors.
  caf::replies_to<extend_atom, request_id, std::uint64_t>::with<block_table>,
  // Grow a request by these tokens.
  caf::replies_to<append_atom, request_id, std::vector<token_id>>::with<block_table>,
  // Speculative decoding by id: grow by n tokens (ids: none or n), the last
  // `drafts` of them drafts; settle them, keeping `accepted`. As the
  // handle's, with unknown_request for an id not live.
  caf::replies_to<draft_atom, request_id, std::uint64_t, std::vector<token_id>,
                  std::uint32_t>::with<block_table>,
  caf::replies_to<settle_atom, request_id, std::uint32_t>::with<block_table>,
  // End a request; replies with the blocks returned. Error: unknown_request.
  caf::replies_to<free_atom, request_id>::with<std::uint32_t>,
  // End a request whose K/V a failed forward pass may have left unwritten:
  // as free, but what it wrote leaves the prefix index - also blocks of it
  // that others hold, and what was computed over them - and what its
  // admission found cached stays (written by earlier passes; pins kept).
  caf::replies_to<discard_atom, request_id>::with<std::uint32_t>,
  // From a handle: end the incarnation it serves (request id, cache id).
  // Error: invalid_handle once that incarnation ended.
  caf::replies_to<free_atom, request_id, std::uint64_t>::with<std::uint32_t>,
  // End incarnation (request id, cache id), admitted by an allocate, fork
  // or step whose reply came after its caller gave up: nobody writes its
  // K/V, so it ends as a reclaim does (the blocks it lets go leave the
  // prefix index, all but those its admission found cached). From its
  // owner or, for an owner that died, the manager itself (passed on by the
  // request's handle actor as from them); ignored from anyone else, and
  // once that incarnation ended.
  caf::reacts_to<unclaimed_atom, request_id, std::uint64_t>,
  // (parent, child): a new request sharing the parent's blocks. Errors:
  // unknown_request, duplicate_request, invalid_request (the parent is
  // swapped out or has drafts unsettled), out_of_blocks (reserve_expected:
  // no room for the child's expected growth).
  caf::replies_to<fork_atom, request_id, request_id>::with<request_handle_actor,
                                                           block_table>,
  // Whether allocate would succeed now.
  caf::replies_to<can_alloc_atom, allocation_request>::with<bool>,
  // Per request, the prompt tokens its allocate would find cached now (the
  // pool answers: see step_actor).
  caf::replies_to<probe_atom, std::vector<allocation_request>>::with<
    std::vector<std::uint64_t>>,
  // The cache's counters (KvCacheManager::stats).
  caf::replies_to<stats_atom>::with<cache_manager_stats>,
  // Runs the supervisor's GC now and replies with what it did.
  caf::replies_to<gc_atom>::with<cache_gc_stats>,
  // A live request's handle. Error: unknown_request.
  caf::replies_to<lookup_atom, request_id>::with<request_handle_actor, request_info>,
  // Every live request's handle (KvCacheManager::list_handles).
  caf::replies_to<list_atom>::with<std::vector<handle_entry>>,
  // A live request's block table. Error: unknown_request.
  caf::replies_to<table_atom, request_id>::with<block_table>,
  // One scheduler step in one round trip (messages/step.hpp), forwarded to
  // the pool, which replies. The admits' device must be the cache's unless
  // the storage is "none" (invalid_request in `failed` otherwise). The
  // sender owns the admitted requests.
  caf::replies_to<step_atom, step_request>::with<step_result>,
  // Where to send steps without this hop: the pool's step lane.
  caf::replies_to<step_atom>::with<step_actor>,
  // From the pool (ignored from anyone else): a step's effects on the
  // registry, and the step's sender, owner of the admitted requests.
  caf::reacts_to<step_atom, step_effects, caf::actor>,
  // Recompute-style preemption: frees the blocks, tells the owner.
  caf::replies_to<preempt_atom, request_id>::with<std::uint32_t>,
  // The same for that incarnation only, and as a discard: the blocks it
  // lets go leave the prefix index, but for the prefix its admission found
  // cached (the supervisor's victims, chosen at any moment - a request
  // admitted a moment ago, its prompt's K/V not written, among them).
  // Error: unknown_request once it ended; invalid_request, the request
  // living on, once preempting it relieves nothing (usage fell under the
  // relief target - the high mark, and out of critical - or it is swapped
  // out or swapping, or every block it holds is shared).
  caf::replies_to<preempt_atom, request_id, std::uint64_t>::with<std::uint32_t>,
  // Moves a request's blocks to the host tier (replies with blocks moved)
  // and back (replies with its new table; the bytes are identical, the
  // blocks may differ: a full block whose prefix is still cached or in use
  // is shared again rather than copied, so its bytes are those the prefix's
  // writer wrote - write a prompt's K/V in the step that admits it, as
  // for any prefix hit). While swapped out it cannot grow. Errors:
  // unknown_request (also when the request ended before the reply),
  // invalid_request (already swapped / not swapped), out_of_blocks (host
  // tier or pool full), quota_exceeded, device_failure.
  caf::replies_to<swap_out_atom, request_id>::with<std::uint32_t>,
  caf::replies_to<swap_in_atom, request_id>::with<block_table>,
  // Pins (tenant, prompt, ttl_ms, cache_salt)'s cached full blocks for
  // ttl_ms (cache_salt: the prompt's allocation_request::cache_salt).
  caf::replies_to<pin_atom, std::string, std::vector<token_id>,
                  std::uint64_t, std::uint64_t>::with<std::uint32_t>,
  // Lets (tenant, prompt, cache_salt)'s pins go early; replies with blocks unpinned.
  caf::replies_to<unpin_atom, std::string, std::vector<token_id>,
                  std::uint64_t>::with<std::uint32_t>,
  // Subscribe / unsubscribe an actor to a topic (a null handle is ignored:
  // no reply carries an error). The subscriber is held by address: keep
  // it alive yourself. kv_events is passed on to the pool, and
  // counts from when the pool has it: a stats request sent after it is
  // answered after that (a step, which goes to the pool's lane directly,
  // could overtake it).
  caf::reacts_to<subscribe_atom, topic, caf::actor>,
  caf::reacts_to<unsubscribe_atom, topic, caf::actor>,
  // From the supervisor: a handle actor died with an error.
  caf::reacts_to<reclaim_atom, request_id, std::uint64_t>,
  // From the supervisor: the pressure level changed (kept for stats; from
  // anyone else, ignored).
  caf::reacts_to<pressure_atom, pressure_event>,
  // From the supervisor's GC: reclaim requests the pool holds that have no
  // live handle (orphans); replies with what was reclaimed.
  caf::replies_to<reclaim_atom>::with<cache_gc_stats>>;

} // namespace kvactor
