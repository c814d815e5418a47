// kv_cache_manager: the blocking facade for code that is not an actor
// (ferrum's KvCacheManager). Each call is one request/response with the
// manager actor; copies share one cache, and the last copy's destruction
// stops it. Thread-safe: any thread may call any method - but not an
// actor's handler running on the cache's scheduler threads, which a
// blocking call would hold while the reply needs them: there (on a system
// set up by configure()) each call fails with invalid_request, nothing
// sent, and the getters that cannot fail answer zeros. Actors send
// messages; a detached actor runs on a thread of its own and may call.
//
// Lifetime: destroy every copy of the facade before the caf::actor_system
// (whose destructor waits for the cache's actors). Handles may outlive the
// facade: they turn invalid.
//
// The calls that take a handle (extend, append, settle_drafts) fail with
// invalid_handle for a handle whose request ended, and for a handle another
// cache's facade made: changing nothing in either cache.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "kvactor/actors/kv_cache_handle.hpp"
#include "kvactor/config/cache_config.hpp"
#include "kvactor/messages/interfaces.hpp"
#include "kvactor/messages/step.hpp"
#include "kvactor/messages/types.hpp"
#include "kvactor/metrics/kv_event_file.hpp"

namespace caf {
class actor_system;
class actor_system_config;
} // namespace caf

namespace kvactor {

class storage;

/// Prepares an actor system config for kvactor: registers the message types
/// and error category, applies `cfg.scheduler_threads` and the latency
/// tuning of the scheduler, and marks the threads the system starts, so
/// that a blocking call of the facade made on one of them (from an actor's
/// handler) fails with invalid_request instead of waiting for actors that
/// may need that very thread. Call before constructing the actor_system.
void configure(caf::actor_system_config& sys_cfg, const cache_config& cfg);

class kv_cache_manager {
public:
  /// Starts a cache for `cfg` in `sys`. Errors: invalid_config (naming the
  /// field), device_failure (storage could not be allocated).
  static caf::expected<kv_cache_manager> start(caf::actor_system& sys,
                                               const cache_config& cfg);
  /// As start(sys, cfg), on a storage backend of the embedder's own (its
  /// memory, or a test's fault injection) instead of the one `cfg.storage`
  /// names; its layout must match storage_options_for(cfg)'s (else
  /// invalid_config naming the difference). Null: as start(sys, cfg).
  static caf::expected<kv_cache_manager>
  start(caf::actor_system& sys, const cache_config& cfg,
        std::shared_ptr<kvactor::storage> store);

  /// Starts a request. Errors: see kv_cache_manager_actor's allocate; with
  /// layout contiguous also invalid_request for a max_sequence_length whose
  /// snapshot buffer could not be described. How many prompt tokens it
  /// found cached - whose K/V the model need not compute - is in the
  /// handle's stats().prefix_hit_tokens (cached_prefix beforehand is a
  /// hint that may be stale by then). The request took effect once this
  /// succeeds, but may end by other hands at any moment after (a free of
  /// the id on another thread, a preemption): the handle may read invalid
  /// already when it comes back - as it could a moment later - and its
  /// calls then fail with invalid_handle.
  caf::expected<std::shared_ptr<kv_cache_handle>>
  allocate(const allocation_request& req);

  /// Grows the handle's request by `additional_tokens` (copy-on-write done
  /// before it returns). Errors: invalid_handle, exceeds_max_sequence_length,
  /// exceeds_capacity, out_of_blocks, quota_exceeded, invalid_request
  /// (swapped out: swap it in first), device_failure or shutting_down (the
  /// copy-on-write copy failed); on error nothing changed. Sent to the pool
  /// for the handle's incarnation (not through its handle actor); once
  /// that actor has begun to quit (killed or crashed), invalid_handle.
  caf::error extend(kv_cache_handle& handle, std::size_t additional_tokens);

  /// Grows the handle's request by these tokens (full blocks become findable
  /// by later prompts): decoded tokens, or the next chunk of a prompt
  /// admitted with allocation_request::prefill_chunk. Errors: as extend's,
  /// and invalid_request for a negative token id.
  caf::error append(kv_cache_handle& handle, const std::vector<token_id>& tokens);

  /// Speculative decoding: grows the request by `tokens`, the last `drafts`
  /// of them draft tokens - they get slots (write their K/V as usual), but
  /// no block holding one enters the prefix index until settle_drafts keeps
  /// it. Until then the request neither grows nor forks. Errors: as
  /// append's, and invalid_request for drafts > tokens.size() or past
  /// max_draft_tokens, or while earlier drafts are unsettled. Marking a
  /// whole step's tokens as drafts and settling them once the forward pass
  /// finished also takes them back if it failed (settle_drafts(h, 0)).
  caf::error append(kv_cache_handle& handle, const std::vector<token_id>& tokens,
                    std::size_t drafts);

  /// Settles the request's drafts: the first `accepted` become ordinary
  /// tokens (the blocks they complete enter the prefix index), the rest are
  /// dropped - the request shrinks by them and blocks left empty go back to
  /// the pool; the next append writes where the first dropped one was.
  /// Errors: invalid_handle, invalid_request (more than it holds; swapped
  /// out; a copy-on-write copy in flight).
  caf::error settle_drafts(kv_cache_handle& handle, std::size_t accepted);

  /// Ends the request: every reference turns invalid, blocks return (full
  /// hashed blocks stay cached). Error: unknown_request.
  caf::error deallocate(request_id id);

  /// Ends a request whose forward pass failed, so its K/V may never have
  /// been written: as deallocate, but the blocks it brought leave the
  /// prefix index (a later prompt computes them anew), also those other
  /// requests hold - they read what it never wrote: discard every request
  /// of the failed pass. What its admission found cached stays, pins and
  /// all: earlier passes wrote it. Error: unknown_request.
  caf::error discard(request_id id);

  /// A new request `child` sharing every block of `parent` (copy-on-write).
  /// Unlike allocate, a fork whose child ended before its handle was made
  /// fails with unknown_request: it takes the child's parameters from a
  /// lookup after the fork, which then finds nothing.
  caf::expected<std::shared_ptr<kv_cache_handle>> fork(request_id parent,
                                                       request_id child);

  /// Whether allocate(req) would succeed now (false on any error).
  bool can_allocate(const allocation_request& req) const;

  /// How many of req's prompt tokens allocate(req) would find cached now
  /// (whole blocks, never the last token; 0 with prefix caching off) - for
  /// cache-aware scheduling, say longest cached prefix first. A hint, not
  /// a promise: allocate looks again. Errors: those of allocate's checks
  /// (unknown_tenant, invalid_request naming the field,
  /// exceeds_max_sequence_length).
  caf::expected<std::uint64_t> cached_prefix(const allocation_request& req) const;

  /// cached_prefix of each request, in one round trip; the first request
  /// that fails a check fails the whole call, naming its id.
  caf::expected<std::vector<std::uint64_t>>
  cached_prefixes(const std::vector<allocation_request>& reqs) const;

  /// The current figures (zeros if the manager does not answer: ferrum's
  /// contract returns plain figures); checked_stats() tells which.
  cache_manager_stats stats() const;
  /// The current figures, or why there are none (shutting_down once the
  /// cache stopped, timeout): where a zero must mean "none", not "no answer".
  caf::expected<cache_manager_stats> checked_stats() const;

  /// Runs GC now.
  caf::expected<cache_gc_stats> gc();

  /// Called with each new pressure level, once per change, in order, on a
  /// thread of its own. Each callback set first hears the level the cache
  /// is at, if that is above low (as a pressure subscriber does) - unless
  /// a change reaches it first.
  /// Replaces the previous callback (from inside the callback too). Once
  /// the last copy of the facade is gone, none runs: its destruction waits
  /// for a call in progress, unless that call is the one destroying it. An
  /// exception the callback throws is caught and dropped: the next level
  /// still reaches the callback. A callback that
  /// captures a copy of this facade keeps the cache running until the
  /// callback is replaced (by an empty one, say): the actor system's
  /// destructor then waits for good - capture a reference, or a weak one.
  /// Once this returns, a call of the callback it replaced is over - except
  /// where this runs in an actor's handler on the cache's scheduler
  /// threads: waiting could hold a thread the running callback's own
  /// facade calls need, so it returns at once, and what the old callback
  /// captured must outlive it. (The last copy's destruction waits on any
  /// thread: it first fails every facade call waiting and refuses new
  /// ones, so a running callback's calls return at once.)
  void set_pressure_callback(std::function<void(memory_pressure)> f);

  /// The live request's handle, or null (also for a request ending: one
  /// whose end the facade heard of already, or an allocate's or fork's that
  /// timed out, which is being ended as unclaimed).
  std::shared_ptr<kv_cache_handle> get_handle(request_id id) const;

  /// Every live request, by id (none that get_handle would not return).
  std::vector<std::pair<request_id, std::shared_ptr<kv_cache_handle>>>
  list_handles() const;

  /// One scheduler step in one round trip (messages/step.hpp), to the
  /// pool's step lane; the registry is current when it returns. An admit
  /// that allocate would refuse for the layout (the contiguous handle's
  /// max_sequence_length) is not sent: it is last in `failed`.
  caf::expected<step_result> step(step_request req);

  /// Recompute-style preemption: frees the request's blocks now; its full
  /// hashed blocks stay cached, as a deallocate's do. For a request whose
  /// K/V may not have been written (its pass failed, or never ran), use
  /// discard.
  caf::error preempt(request_id id);

  /// Moves the request's blocks to the host tier (num_host_blocks) and frees
  /// its device blocks; it cannot grow until swapped in. Errors:
  /// unknown_request, invalid_request (already swapped), out_of_blocks (host
  /// tier full), device_failure; on error nothing changed.
  caf::error swap_out(request_id id);

  /// Brings a swapped request back, byte for byte, possibly into other
  /// blocks: a full block whose prefix is still in the cache (or in use by
  /// another request) is shared again instead of copied - its bytes are the
  /// prefix's, provided the serving system writes a prompt's K/V in the step
  /// that admits it (or a chunk's in the step that extends by it), as for
  /// any prefix hit. Errors: unknown_request,
  /// invalid_request (not swapped), out_of_blocks, quota_exceeded,
  /// device_failure.
  caf::error swap_in(request_id id);

  /// Keeps the tenant's cached full blocks of `tokens` (allocated under
  /// `cache_salt`) from eviction for `ttl`; returns how many blocks are
  /// pinned. Errors: unknown_tenant, quota_exceeded (max_pinned_blocks),
  /// out_of_blocks (the cached blocks are held for reservations),
  /// invalid_request (a negative ttl or token id, or a block another
  /// reserved tenant is using).
  caf::expected<std::uint32_t> pin_prefix(const std::string& tenant,
                                          const std::vector<token_id>& tokens,
                                          std::chrono::milliseconds ttl,
                                          std::uint64_t cache_salt = 0);

  /// Lets the tenant's pin of `tokens` (under `cache_salt`; a pin is known
  /// by where its full blocks end and its token count) go before its
  /// deadline - a retired system prompt, an ended session - except where
  /// another pin still covers its blocks: one of a shorter prefix (the
  /// system prompt under a session's), or of a longer one extending them
  /// (those blocks are then pinned until that pin's deadline); returns how
  /// many blocks lost their pin (0 if none was pinned). They stay cached, now evictable, and
  /// free room under max_pinned_blocks. Errors: unknown_tenant,
  /// invalid_request (a negative token id).
  caf::expected<std::uint32_t> unpin_prefix(const std::string& tenant,
                                            const std::vector<token_id>& tokens,
                                            std::uint64_t cache_salt = 0);

  /// Appends every prefix-index change, from now on, to the file at `path`
  /// as JSON lines (metrics/kv_events.hpp): returns once the pool records
  /// them, so a step() right after has its events written (by a thread of
  /// their own, soon after). A file already written to (under any name)
  /// keeps its one writer: called again, it changes nothing. Errors:
  /// invalid_request if the file cannot be opened or the call is made in an
  /// actor's handler on the cache's threads (both before anything changed),
  /// shutting_down if the cache stopped first, request_timeout if the pool
  /// did not confirm in time (the writer is subscribed: events may follow).
  caf::error write_kv_events(const std::string& path);

  /// Each file write_kv_events writes, in the order first named: batches
  /// written and lost. A batch the file system refuses (a full disk, say)
  /// is lost whole - the file keeps whole lines - and the next is tried
  /// again; a reader sees the loss as a gap in "seq". Still answered after
  /// the cache stopped.
  std::vector<kv_event_file_stats> kv_event_files() const;

  /// The manager actor, for actor clients.
  kv_cache_manager_actor actor() const;

  /// The config the cache runs with (num_gpu_blocks as allocated, storage
  /// as `auto` resolved).
  const cache_config& config() const;

  /// Where the blocks live: the storage kind, the device that requests name
  /// in allocation_request::device, block counts and bytes per block.
  storage_info storage() const;

  /// How long a call waits for its reply (default 60 s; milliseconds::max()
  /// waits for good; 0 gives up after a brief spin). A call that times out
  /// fails with caf::sec::request_timeout, its context naming the message
  /// and the wait ("no reply within 5 ms to 'extend' sent to actor 42");
  /// an allocate, fork or step
  /// answered after that has what it admitted ended again, so it leaves no
  /// request behind (a step's extends and frees still take effect); none
  /// is handed out once the late reply came (get_handle and list_handles
  /// skip it; a step's admission looked up before then was live then, and
  /// turns invalid when the reclaim lands), but the id may read as allocated until the
  /// reclaim lands - a retry may get duplicate_request: try again. Other
  /// calls that time out may still take effect (an extend may still grow
  /// the table: read it again). Calls waiting when the cache stops fail
  /// with errc::shutting_down. A negative timeout is refused
  /// (errc::invalid_request) and changes nothing.
  caf::error set_timeout(std::chrono::milliseconds t);

private:
  explicit kv_cache_manager(std::shared_ptr<detail::facade_core> core)
    : core_(std::move(core)) {
  }

  /// What the configured layout demands of a request beyond the pool's
  /// checks (contiguous: a snapshot buffer that can be described).
  caf::error check_layout(const allocation_request& req) const;

  std::shared_ptr<detail::facade_core> core_;
};

} // namespace kvactor
