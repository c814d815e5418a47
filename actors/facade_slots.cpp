// facade_core: which handles the facade tracks - one slot per handle actor,
// made from a reply (allocate, lookup, list, fork), marked invalid when its
// request's ended event (or its manager's death) comes or when the facade
// ends it as unclaimed, confirmed with the manager when more ends came
// meanwhile than the facade remembers - and each slot's incarnation.
#include "kvactor/actors/facade_core.hpp"
#include "kvactor/actors/incarnation_error.hpp"

#include <unordered_set>
#include <vector>

#include <caf/sec.hpp>
#include <caf/send.hpp>

#include "kvactor/actors/request_handle.hpp"
#include "kvactor/messages/error_context.hpp"
#include "kvactor/messages/step.hpp"

namespace kvactor::detail {

std::shared_ptr<request_slot>
facade_core::slot_for(const request_handle_actor& h, const request_info& info) {
  auto s = std::make_shared<request_slot>();
  s->info = info;
  s->actor = h;
  s->handle_id = h.id();
  {
    std::lock_guard<std::mutex> guard{mtx_};
    // Ended before this slot was made (its reply crossed the end), or the
    // facade stopped or its manager went: born invalid, and not tracked (no
    // end is coming to untrack it).
    if (stopped_ || manager_gone_ || recent_ends_.contains(h.id())
        || unclaimed_->contains(h.id(), info.cache_id)) {
      s->valid = false;
      return s;
    }
    auto [i, fresh] = slots_.try_emplace(h.id());
    if (!fresh)
      if (auto existing = i->second.slot.lock())
        return existing;
    i->second.slot = s;
    i->second.request = info.request.id;
    // The id maps to its newest incarnation: a lookup that raced the end
    // of an older one must not take the mapping from a newer one. Each
    // incarnation has its own handle actor, spawned in admission order, so
    // the larger actor id is the newer one.
    auto [j, added] = by_request_.try_emplace(info.request.id, h.id());
    if (!added && j->second < h.id())
      j->second = h.id();
  }
  return s;
}

caf::error facade_core::confirm_slots(
  const std::vector<std::shared_ptr<request_slot>>& slots) {
  auto res = ask<std::vector<handle_entry>>(cache_.manager, list_atom::value);
  if (!res)
    return in_context("confirming " + std::to_string(slots.size())
                        + " handle(s) against the manager's list",
                      res.error());
  std::unordered_set<std::uint64_t> live;
  for (auto& e : std::get<0>(*res))
    live.insert(e.handle.id());
  for (auto& s : slots)
    if (live.count(s->handle_id) == 0)
      invalidate(s->handle_id, true);
  return caf::none;
}

std::shared_ptr<kv_cache_handle>
facade_core::make_handle(std::shared_ptr<request_slot> slot) {
  if (cfg_.layout == "contiguous")
    return std::make_shared<contiguous_kv_cache_handle>(std::move(slot),
                                                        weak_from_this());
  return std::make_shared<paged_kv_cache_handle>(std::move(slot),
                                                 weak_from_this());
}

void facade_core::invalidate(std::uint64_t handle_id, bool ended) {
  std::lock_guard<std::mutex> guard{mtx_};
  // Remembered whether or not it has a slot now: a reply on its way may
  // make one (again) later.
  if (ended) {
    recent_ends_.insert(handle_id);
    ++ends_taken_;
  }
  auto i = slots_.find(handle_id);
  if (i == slots_.end())
    return;
  if (auto s = i->second.slot.lock())
    s->valid = false;
  // Whether or not a handle still references the slot.
  untrack(i);
}

void facade_core::unclaim(const request_handle_actor& handle) {
  unclaimed_->insert(handle.id());
  invalidate(handle.id()); // a slot another thread's lookup made meanwhile
  // As the bridge, the request's owner: the handle passes it on as from
  // its sender, and the manager takes it from the owner only.
  caf::send_as(sender(), handle, unclaimed_atom::value);
}

blocking_bridge::late_reply_handler facade_core::unclaim_late() const {
  // It runs inside the bridge, which holds it: the bridge's address, not
  // a reference (which would keep the bridge alive through its own table).
  return [unclaimed = unclaimed_,
          owner = caf::actor_cast<caf::actor_addr>(sender())](caf::message& reply) {
    // allocate's (request_handle_actor, request_info), fork's
    // (request_handle_actor, block_table).
    if (reply.size() != 2 || !reply.match_element<request_handle_actor>(0))
      return;
    auto& handle = reply.get_as<request_handle_actor>(0);
    unclaimed->insert(handle.id());
    caf::send_as(caf::actor_cast<caf::actor>(owner), handle,
                 unclaimed_atom::value);
  };
}

blocking_bridge::late_reply_handler facade_core::unclaim_step_late() const {
  // Sent as their owner, the bridge: the manager takes it from no one else.
  // The pool told the manager of the admissions before it replied. As
  // unclaim_late, the bridge's address, not a reference.
  return [unclaimed = unclaimed_, manager = cache_.manager,
          owner = caf::actor_cast<caf::actor_addr>(sender())](caf::message& reply) {
    if (!reply.match_elements<step_result>())
      return;
    auto from = caf::actor_cast<caf::actor>(owner);
    for (auto& a : reply.get_as<step_result>(0).admitted) {
      unclaimed->insert_incarnation(a.cache_id);
      caf::send_as(from, manager, unclaimed_atom::value, a.id, a.cache_id);
    }
  };
}

caf::error facade_core::free_unreceived(const request_handle_actor& made) {
  unclaimed_->insert(made.id());
  invalidate(made.id()); // a slot another thread's lookup made meanwhile
  // Which incarnation: the handle actor says, also while it ends; one gone
  // bounces the call, and so does its end event (the facade fails the
  // calls waiting on a handle actor then) - either way the request ended.
  caf::error err;
  if (auto info = ask<request_info>(made, info_atom::value)) {
    // Freed by id and incarnation, the manager answering. (Asked of the
    // handle actor, which delegates it to the manager, the free's own end
    // event failed the call before its answer came.) invalid_handle: that
    // incarnation ended already.
    auto& req = std::get<0>(*info);
    auto res = ask<std::uint32_t>(cache_.manager, free_atom::value,
                                  req.request.id, req.cache_id);
    if (res || has_code(res.error(), errc::invalid_handle))
      return caf::none;
    err = std::move(res.error());
  } else if (info.error() == caf::sec::request_receiver_down) {
    return caf::none;
  } else {
    err = std::move(info.error());
  }
  // No answer in time (or the cache stopping): the handle actor ends the
  // request when it gets to it.
  caf::send_as(sender(), made, unclaimed_atom::value); // as unclaim
  return err;
}

void facade_core::untrack(slot_map::iterator i) {
  auto j = by_request_.find(i->second.request);
  if (j != by_request_.end() && j->second == i->first)
    by_request_.erase(j);
  slots_.erase(i);
}

void facade_core::drop_unconfirmed(
  std::vector<std::shared_ptr<request_slot>>&& slots) {
  std::vector<std::uint64_t> ids;
  ids.reserve(slots.size());
  for (auto& s : slots)
    ids.push_back(s->handle_id);
  slots.clear(); // only the handles' references remain
  std::lock_guard<std::mutex> guard{mtx_};
  for (auto id : ids) {
    auto i = slots_.find(id);
    if (i != slots_.end() && i->second.slot.expired())
      untrack(i);
  }
}

std::uint64_t facade_core::invalidate_request(const request_ended& ev) {
  if (ev.handle != 0) {
    invalidate(ev.handle, true);
    return ev.handle;
  }
  std::uint64_t handle_id;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    auto i = by_request_.find(ev.id);
    if (i == by_request_.end())
      return 0;
    // A slot knows its cache id (the pool's start at 1; 0: not known).
    auto k = slots_.find(i->second);
    auto s = k != slots_.end() ? k->second.slot.lock() : nullptr;
    if (s && s->info.cache_id != 0 && s->info.cache_id > ev.cache_id)
      return 0; // a newer incarnation's
    handle_id = i->second;
  }
  invalidate(handle_id);
  return handle_id;
}

std::unordered_map<request_id, std::uint64_t>
facade_core::handles_of(const step_request& step) {
  std::unordered_map<request_id, std::uint64_t> out;
  auto note = [&](request_id id) {
    if (auto i = by_request_.find(id); i != by_request_.end())
      out.emplace(id, i->second);
  };
  std::lock_guard<std::mutex> guard{mtx_};
  for (auto id : step.frees)
    note(id);
  for (auto id : step.discards)
    note(id);
  for (auto& op : step.extends)
    note(op.id);
  return out;
}

facade_core::tracking facade_core::tracked() {
  std::lock_guard<std::mutex> guard{mtx_};
  return {slots_.size(), by_request_.size(), recent_ends_.size()};
}

void facade_core::invalidate_all(bool manager_gone) {
  std::lock_guard<std::mutex> guard{mtx_};
  manager_gone_ = manager_gone_ || manager_gone;
  for (auto& kvp : slots_)
    if (auto s = kvp.second.slot.lock())
      s->valid = false;
  slots_.clear();
  by_request_.clear();
}

caf::expected<std::uint64_t> facade_core::incarnation(request_slot& slot) {
  // What the handle actor would have answered had the call gone through
  // it: its request ended (the reclaim is on its way, and the pool would
  // take the call until it lands).
  if (is_going(slot.actor))
    return ended_error(slot.info.request.id);
  // Every slot the facade makes has it from the reply that made it; 0
  // would be the pool's "whichever incarnation is live" (current_incarnation),
  // which a handle must never name.
  if (slot.info.cache_id == 0)
    return make_error(errc::invalid_handle,
                      "request " + std::to_string(slot.info.request.id)
                        + ": its handle names no incarnation");
  return slot.info.cache_id;
}

} // namespace kvactor::detail
