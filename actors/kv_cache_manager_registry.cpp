// The manager's registry: request id -> handle actor, its parameters and
// its owner (monitored once per owner), and the lifecycle notifications sent
// when a request ends.
#include "kvactor/actors/kv_cache_manager_state.hpp"

#include <algorithm>

#include <caf/actor_system.hpp>
#include <caf/send.hpp>

#include "kvactor/actors/request_handle.hpp"
#include "kvactor/messages/error.hpp"

namespace kvactor::detail {

std::string unknown(request_id id) {
  return "request " + std::to_string(id) + " is not allocated";
}

request_handle_actor add_request(mgr_ptr self, const allocation_request& req,
                                 std::uint64_t cache_id,
                                 caf::strong_actor_ptr owner) {
  auto& st = self->state;
  request_handle_args args;
  args.info.request = without_prompt(req);
  args.info.cache_id = cache_id;
  args.block_size = st.cfg.block_size;
  args.bytes_per_block = st.store.bytes_per_block;
  args.pool = st.pool;
  args.manager = caf::actor_cast<kv_cache_manager_actor>(self);
  auto info = args.info;
  auto h = spawn_request_handle(self->system(), std::move(args), st.supervisor);
  if (owner) {
    // One monitor per actor: a subscriber is watched already.
    auto addr = caf::actor_cast<caf::actor_addr>(owner);
    auto [o, fresh] = st.owned.try_emplace(addr, 0);
    ++o->second;
    if (fresh && !is_lifecycle_subscriber(st, addr))
      self->monitor(addr);
  }
  st.registry[req.id] = manager_state::entry{h, std::move(info),
                                             std::move(owner)};
  return h;
}

bool is_lifecycle_subscriber(const manager_state& st,
                             const caf::actor_addr& addr) {
  return std::any_of(st.lifecycle.begin(), st.lifecycle.end(),
                     [&](const caf::actor& x) { return x.address() == addr; });
}

void end_request(mgr_ptr self, request_id id, end_reason why,
                 std::uint32_t released, bool tell_owner) {
  auto& st = self->state;
  auto i = st.registry.find(id);
  if (i == st.registry.end())
    return;
  auto e = std::move(i->second);
  st.registry.erase(i);
  // The owner stays watched with no request left, until it goes: most
  // owners hold one request after another, and a monitor set up and torn
  // down for each would cost an attach and a detach on the owner each time.
  if (e.owner)
    if (auto o = st.owned.find(caf::actor_cast<caf::actor_addr>(e.owner));
        o != st.owned.end())
      --o->second;
  self->send(e.handle, end_atom::value, why);
  request_ended ev{id, e.info.cache_id, why, released, e.handle.id()};
  for (auto& sub : st.lifecycle)
    caf::anon_send(sub, ended_atom::value, ev);
  if (tell_owner && e.owner)
    caf::anon_send(caf::actor_cast<caf::actor>(e.owner), preempt_atom::value, ev);
}

void set_swapped(mgr_ptr self, request_id id, std::uint64_t cache_id,
                 bool swapped) {
  auto& reg = self->state.registry;
  auto i = reg.find(id);
  if (i != reg.end() && i->second.info.cache_id == cache_id)
    i->second.info.swapped = swapped;
}

} // namespace kvactor::detail
