// kv_cache_manager facade: each method is one blocking round trip.
#include "kvactor/actors/kv_cache_manager.hpp"

#include <algorithm>
#include <iterator>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/send.hpp>

#include "kvactor/actors/facade_core.hpp"
#include "kvactor/actors/incarnation_error.hpp"
#include "kvactor/actors/system_threads.hpp"
#include "kvactor/messages/error_context.hpp"
#include "kvactor/messages/registration.hpp"

namespace kvactor {

namespace {

/// invalid_handle unless `handle` is live and this facade's: a handle of
/// another cache (two caches in one process, a draft and a target model)
/// would name a request of that cache - the same id, even the same
/// incarnation number, may be another request here.
caf::error check_handle(const detail::facade_core& core,
                        const kv_cache_handle& handle) {
  if (!handle.is_valid())
    return detail::ended_error(handle.id());
  if (!handle.made_by(core))
    return make_error(errc::invalid_handle,
                      "request " + std::to_string(handle.id())
                        + ": the handle belongs to another cache");
  return caf::none;
}

/// A growth (extend, append, drafts) or draft settlement of `handle`'s
/// incarnation, asked of the pool straight away: its handle actor would
/// only relay it, a hop more to and from an actor gone cold among
/// thousands (the facade replay's bookkeeping is about a quarter less
/// without it: README, Benchmarks). The pool has shared
/// blocks copied (copy-on-write) before it replies. An ended incarnation
/// fails with invalid_handle - also when the id names a newer request by
/// now: the pool gets the incarnation, never "whichever is live".
template <class Reply = block_table, class Atom, class... Ts>
caf::error at_pool(detail::facade_core& core, kv_cache_handle& handle,
                   Atom atom, Ts&&... xs) {
  if (auto err = check_handle(core, handle))
    return err;
  auto cache_id = core.incarnation(*handle.slot());
  if (!cache_id)
    return std::move(cache_id.error());
  return core.ask_done<Reply>(core.cache().pool, atom, handle.id(), *cache_id,
                              std::forward<Ts>(xs)...);
}

/// invalid_request unless `n` (draft tokens) is at most max_draft_tokens.
caf::error check_drafts(const kv_cache_handle& handle, std::size_t n,
                        const char* what) {
  if (n <= max_draft_tokens)
    return caf::none;
  return make_error(errc::invalid_request,
                    "request " + std::to_string(handle.id()) + ": " + what
                      + ' ' + std::to_string(n) + " draft tokens (at most "
                      + std::to_string(max_draft_tokens) + ")");
}

} // namespace

void configure(caf::actor_system_config& sys_cfg, const cache_config& cfg) {
  add_message_types(sys_cfg);
  if (cfg.scheduler_threads > 0)
    sys_cfg.set("scheduler.max-threads", std::size_t{cfg.scheduler_threads});
  tune_for_latency(sys_cfg);
  // Lets the facade refuse a blocking call from an actor's handler.
  detail::mark_system_threads(sys_cfg);
}

caf::expected<kv_cache_manager> kv_cache_manager::start(caf::actor_system& sys,
                                                        const cache_config& cfg) {
  return start(sys, cfg, nullptr);
}

caf::expected<kv_cache_manager>
kv_cache_manager::start(caf::actor_system& sys, const cache_config& cfg,
                        std::shared_ptr<kvactor::storage> store) {
  spawn_options opts; // the device actor detached: callers block on threads
  opts.store = std::move(store);
  auto cache = spawn_kv_cache(sys, cfg, std::move(opts));
  if (!cache)
    return std::move(cache.error());
  auto effective = cfg;
  effective.num_gpu_blocks = cache->store->layout().num_blocks;
  effective.storage = to_string(cache->store->kind());
  auto core = std::make_shared<detail::facade_core>(sys, std::move(effective),
                                                    std::move(*cache));
  // The facade copies share an owner that stops the cache when the last copy
  // goes. Handles only lock the core for a call: were the copies to share
  // the core itself, handles in use on other threads could keep it - and
  // the cache - running indefinitely after the last copy went.
  struct owner {
    std::shared_ptr<detail::facade_core> core;
    ~owner() {
      if (core)
        core->stop();
    }
  };
  auto token = std::make_shared<owner>();
  token->core = core;
  auto* ptr = core.get();
  return kv_cache_manager{std::shared_ptr<detail::facade_core>{token, ptr}};
}

caf::error kv_cache_manager::check_layout(const allocation_request& req) const {
  auto& cfg = core_->config();
  if (cfg.layout != "contiguous")
    return caf::none;
  auto& m = cfg.model;
  auto row = std::uint64_t{m.num_kv_heads} * m.head_dim * size_of(m.dtype);
  return contiguous_kv_cache_handle::check_length(req.id,
                                                  req.max_sequence_length, row);
}

namespace {

/// "fork of request <parent> as <child>", leading a failed fork's errors.
std::string fork_name(request_id parent, request_id child) {
  return "fork of request " + std::to_string(parent) + " as "
         + std::to_string(child);
}

} // namespace

caf::expected<std::shared_ptr<kv_cache_handle>>
kv_cache_manager::allocate(const allocation_request& req) {
  if (auto err = check_layout(req))
    return err;
  // The handle serves the table on demand: the reply names the handle actor
  // and the incarnation admitted, which the handle's calls to the pool name
  // (no 'info' round trip to the handle actor before the first).
  auto since = core_->ends_taken();
  // A reply after the caller timed out: the request nobody holds a handle
  // of is ended as unclaimed (through its handle actor, which names its own
  // incarnation) - nobody wrote its K/V, so its prompt's fresh blocks must
  // not stay in the prefix index - and no lookup hands it out meanwhile.
  auto res = core_->ask_undoable<request_handle_actor, request_info>(
    core_->unclaim_late(), core_->cache().manager, allocate_atom::value, req,
    info_atom::value);
  if (!res)
    return std::move(res.error());
  auto& [made, info] = *res;
  auto slot = core_->slot_for(made, info);
  if (core_->may_have_forgotten(since))
    if (auto err = core_->confirm_slots({slot})) {
      // No handle goes out: nobody will use the request.
      core_->unclaim(made);
      return in_context("allocate of request " + std::to_string(req.id), err);
    }
  return core_->make_handle(std::move(slot));
}

caf::error kv_cache_manager::extend(kv_cache_handle& handle,
                                    std::size_t additional_tokens) {
  return at_pool<extension>(*core_, handle, extend_atom::value,
                            std::uint64_t{additional_tokens},
                            std::vector<token_id>{});
}

caf::error kv_cache_manager::append(kv_cache_handle& handle,
                                    const std::vector<token_id>& tokens) {
  return at_pool<extension>(*core_, handle, extend_atom::value,
                            std::uint64_t{tokens.size()}, tokens);
}

caf::error kv_cache_manager::append(kv_cache_handle& handle,
                                    const std::vector<token_id>& tokens,
                                    std::size_t drafts) {
  if (auto err = check_drafts(handle, drafts, "appends"))
    return err;
  return at_pool(*core_, handle, draft_atom::value,
                 std::uint64_t{tokens.size()}, tokens,
                 static_cast<std::uint32_t>(drafts));
}

caf::error kv_cache_manager::settle_drafts(kv_cache_handle& handle,
                                           std::size_t accepted) {
  if (auto err = check_drafts(handle, accepted, "accepts"))
    return err;
  return at_pool(*core_, handle, settle_atom::value,
                 static_cast<std::uint32_t>(accepted));
}

caf::error kv_cache_manager::discard(request_id id) {
  // As deallocate: the bridge marks the handles before the reply.
  auto res = core_->ask<std::uint32_t>(core_->cache().manager,
                                       discard_atom::value, id);
  return res ? caf::none : std::move(res.error());
}

caf::error kv_cache_manager::deallocate(request_id id) {
  // The manager tells its lifecycle subscribers, the bridge among them,
  // before it replies, and the bridge marks the slot there and then: the
  // handle is invalid when this returns. (Invalidating by id after the reply
  // could hit a newer incarnation another thread allocated meanwhile.)
  auto res = core_->ask<std::uint32_t>(core_->cache().manager, free_atom::value,
                                       id);
  return res ? caf::none : std::move(res.error());
}

caf::expected<std::shared_ptr<kv_cache_handle>>
kv_cache_manager::fork(request_id parent, request_id child) {
  auto since = core_->ends_taken();
  auto res = core_->ask_first<request_handle_actor, block_table>(
    core_->unclaim_late(), core_->cache().manager, fork_atom::value, parent,
    child);
  if (!res)
    return std::move(res.error());
  auto& made = *res;
  auto info = core_->ask<request_handle_actor, request_info>(
    core_->cache().manager, lookup_atom::value, child);
  if (!info || std::get<0>(*info) != made) {
    // The child ended already (preempted at critical pressure, freed by
    // another thread; the id may even be live again, another incarnation)
    // or the lookup timed out: no handle goes out, so none may stay
    // allocated - a failed fork changes nothing, and when the free
    // answers, has changed nothing by the time it returns. (The free names
    // the child's incarnation; one that ended already is left alone.) If
    // the free times out as well, the handle actor ends the request when it
    // gets to it (a request nobody received: its K/V unwritten) - the id
    // may read as allocated until then, though no lookup hands it out.
    (void) core_->free_unreceived(made);
    if (!info)
      return in_context(fork_name(parent, child) + ": looking up the child",
                        info.error());
    return make_error(errc::unknown_request,
                      fork_name(parent, child)
                        + ": the child ended before its handle was made");
  }
  auto slot = core_->slot_for(made, std::get<1>(*info));
  if (core_->may_have_forgotten(since))
    if (auto err = core_->confirm_slots({slot})) {
      core_->unclaim(made);
      return in_context(fork_name(parent, child), err);
    }
  return core_->make_handle(std::move(slot));
}

bool kv_cache_manager::can_allocate(const allocation_request& req) const {
  if (check_layout(req))
    return false;
  auto res = core_->ask<bool>(core_->cache().manager, can_alloc_atom::value, req);
  return res && std::get<0>(*res);
}

caf::expected<std::uint64_t>
kv_cache_manager::cached_prefix(const allocation_request& req) const {
  auto res = cached_prefixes({req});
  if (!res)
    return std::move(res.error());
  return res->front();
}

caf::expected<std::vector<std::uint64_t>>
kv_cache_manager::cached_prefixes(const std::vector<allocation_request>& reqs) const {
  // allocate's own check first: a request it refuses fails the probe.
  for (auto& req : reqs)
    if (auto err = check_layout(req))
      return err;
  auto res = core_->ask<std::vector<std::uint64_t>>(core_->cache().manager,
                                                    probe_atom::value, reqs);
  if (!res)
    return std::move(res.error());
  return std::move(std::get<0>(*res));
}

cache_manager_stats kv_cache_manager::stats() const {
  auto res = checked_stats();
  return res ? std::move(*res) : cache_manager_stats{};
}

caf::expected<cache_manager_stats> kv_cache_manager::checked_stats() const {
  auto res = core_->ask<cache_manager_stats>(core_->cache().manager,
                                             stats_atom::value);
  if (!res)
    return std::move(res.error());
  return std::move(std::get<0>(*res));
}

caf::expected<cache_gc_stats> kv_cache_manager::gc() {
  auto res = core_->ask<cache_gc_stats>(core_->cache().manager, gc_atom::value);
  if (!res)
    return std::move(res.error());
  return std::get<0>(*res);
}

void kv_cache_manager::set_pressure_callback(
  std::function<void(memory_pressure)> f) {
  core_->set_pressure_callback(std::move(f));
}

std::shared_ptr<kv_cache_handle> kv_cache_manager::get_handle(request_id id) const {
  auto since = core_->ends_taken();
  auto res = core_->ask<request_handle_actor, request_info>(
    core_->cache().manager, lookup_atom::value, id);
  if (!res)
    return nullptr;
  auto slot = core_->slot_for(std::get<0>(*res), std::get<1>(*res));
  if (core_->may_have_forgotten(since) && core_->confirm_slots({slot})) {
    std::vector<std::shared_ptr<detail::request_slot>> made;
    made.push_back(std::move(slot)); // not a braced list: it keeps a copy
    core_->drop_unconfirmed(std::move(made));
    return nullptr; // as for a failed lookup
  }
  // Ended by the time its slot was made (the lookup's reply crossed its
  // end, or it is being ended as unclaimed): not live, so none.
  if (!slot->valid.load())
    return nullptr;
  return core_->make_handle(std::move(slot));
}

std::vector<std::pair<request_id, std::shared_ptr<kv_cache_handle>>>
kv_cache_manager::list_handles() const {
  std::vector<std::pair<request_id, std::shared_ptr<kv_cache_handle>>> out;
  auto since = core_->ends_taken();
  auto res = core_->ask<std::vector<handle_entry>>(core_->cache().manager,
                                                   list_atom::value);
  if (!res)
    return out;
  std::vector<std::shared_ptr<detail::request_slot>> slots;
  slots.reserve(std::get<0>(*res).size());
  for (auto& e : std::get<0>(*res))
    slots.push_back(core_->slot_for(e.handle, e.info));
  if (core_->may_have_forgotten(since) && core_->confirm_slots(slots)) {
    core_->drop_unconfirmed(std::move(slots));
    return out; // as for a failed list
  }
  out.reserve(slots.size());
  for (std::size_t i = 0; i < slots.size(); ++i)
    if (slots[i]->valid.load()) // as get_handle: ended ones are not live
      out.emplace_back(std::get<0>(*res)[i].id, core_->make_handle(slots[i]));
  return out;
}

caf::expected<step_result> kv_cache_manager::step(step_request req) {
  // Straight to the pool (the step lane), which replies before the manager
  // has taken in the step's effects (and told the bridge). The handles of
  // what the step may end - its frees and extends - are noted first, and
  // those it did end are marked invalid here; by handle, not by id, so a
  // newer incarnation another thread allocates once the reply is out keeps
  // its handle.
  auto known = core_->handles_of(req);
  // Admits allocate would refuse for the layout (a contiguous handle's
  // buffer past int64) fail here, as the lane fails a foreign device's:
  // after the step's own failures, never sent.
  std::vector<op_failure> refused;
  auto& admits = req.admits;
  admits.erase(std::remove_if(admits.begin(), admits.end(),
                              [&](const allocation_request& a) {
                                auto err = check_layout(a);
                                if (!err)
                                  return false;
                                refused.push_back(op_failure{
                                  a.id, in_context("admission of request "
                                                     + std::to_string(a.id),
                                                   err)});
                                return true;
                              }),
               admits.end());
  // A reply that comes after the caller timed out: its admissions are
  // ended again, as unclaimed, and no lookup hands them out meanwhile.
  auto res = core_->ask_undoable<step_result>(core_->unclaim_step_late(),
                                              core_->cache().pool,
                                              step_atom::value, std::move(req));
  if (!res)
    return std::move(res.error());
  auto& r = std::get<0>(*res);
  r.failed.insert(r.failed.end(), std::make_move_iterator(refused.begin()),
                  std::make_move_iterator(refused.end()));
  for (auto* ended : {&r.freed, &r.preempted})
    for (auto id : *ended)
      if (auto i = known.find(id); i != known.end())
        core_->invalidate(i->second);
  return std::move(r);
}

caf::error kv_cache_manager::preempt(request_id id) {
  // Invalid on return, as for deallocate: the manager's ended event
  // reaches the bridge before its reply.
  auto res = core_->ask<std::uint32_t>(core_->cache().manager,
                                       preempt_atom::value, id);
  return res ? caf::none : std::move(res.error());
}

caf::error kv_cache_manager::swap_out(request_id id) {
  auto res = core_->ask<std::uint32_t>(core_->cache().manager,
                                       swap_out_atom::value, id);
  return res ? caf::none : std::move(res.error());
}

caf::error kv_cache_manager::swap_in(request_id id) {
  return core_->ask_done<block_table>(core_->cache().manager,
                                     swap_in_atom::value, id);
}

caf::expected<std::uint32_t>
kv_cache_manager::pin_prefix(const std::string& tenant,
                             const std::vector<token_id>& tokens,
                             std::chrono::milliseconds ttl,
                             std::uint64_t cache_salt) {
  if (ttl.count() < 0)
    return make_error(errc::invalid_request,
                      "pin_prefix: negative time to live ("
                        + std::to_string(ttl.count()) + " ms)");
  auto res = core_->ask<std::uint32_t>(
    core_->cache().manager, pin_atom::value, tenant, tokens,
    static_cast<std::uint64_t>(ttl.count()), cache_salt);
  if (!res)
    return std::move(res.error());
  return std::get<0>(*res);
}

caf::expected<std::uint32_t>
kv_cache_manager::unpin_prefix(const std::string& tenant,
                               const std::vector<token_id>& tokens,
                               std::uint64_t cache_salt) {
  auto res = core_->ask<std::uint32_t>(core_->cache().manager,
                                       unpin_atom::value, tenant, tokens,
                                       cache_salt);
  if (!res)
    return std::move(res.error());
  return std::get<0>(*res);
}

caf::error kv_cache_manager::write_kv_events(const std::string& path) {
  return core_->write_kv_events(path);
}

std::vector<kv_event_file_stats> kv_cache_manager::kv_event_files() const {
  return core_->kv_event_files();
}

kv_cache_manager_actor kv_cache_manager::actor() const {
  return core_->cache().manager;
}

const cache_config& kv_cache_manager::config() const {
  return core_->config();
}

storage_info kv_cache_manager::storage() const {
  // Fixed once the storage exists, so read here rather than asked of the
  // device actor.
  auto& store = *core_->cache().store;
  auto& lay = store.layout();
  return storage_info{to_string(store.kind()), store.where(), lay.num_blocks,
                      lay.num_host_blocks, lay.bytes_per_block()};
}

caf::error kv_cache_manager::set_timeout(std::chrono::milliseconds t) {
  if (t.count() < 0)
    return make_error(errc::invalid_request,
                      "set_timeout: negative timeout (" + std::to_string(t.count())
                        + " ms)");
  core_->timeout(t);
  return caf::none;
}

} // namespace kvactor
