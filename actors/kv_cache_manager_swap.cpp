// The manager's two-phase swap: reserve in the pool, copy on the device,
// commit or undo in the pool; and its replies, which say so when the request
// ended before them.
#include "kvactor/actors/kv_cache_manager_state.hpp"

#include <caf/send.hpp>

#include "kvactor/messages/error.hpp"
#include "kvactor/messages/error_context.hpp"

namespace kvactor::detail {

namespace {

/// The reply to a swap (`way`: "out" or "in") whose request ended before
/// the reply: released while the device moved its blocks (or, for a
/// swap-in, by a step right after the move).
caf::error ended_mid_swap(request_id id, const char* way) {
  return make_error(errc::unknown_request,
                    "request " + std::to_string(id)
                      + " ended before its swap-" + way + " was answered");
}

/// The reply to a swap whose device copy failed (`cause`): the pool has
/// undone it, and the caller learns which request and that nothing moved -
/// the device's error alone names neither. Its code stays (device_failure,
/// shutting_down, ...); an error of CAF's own is a device failure.
caf::error copy_failed(request_id id, const char* way, const caf::error& cause) {
  return in_context("swap-" + std::string{way} + " of request "
                      + std::to_string(id)
                      + " undone, the request is where it was: the device "
                        "copy failed",
                    cause, errc::device_failure);
}

/// The reply to a swap whose request ended during the move and whose copy
/// then failed: its blocks went back all the same, so nothing is "where it
/// was" - the id may name a newer incarnation. The device's code stays.
caf::error ended_and_failed(request_id id, const char* way,
                            const caf::error& cause) {
  return in_context("request " + std::to_string(id)
                      + " ended before its swap-" + way
                      + " was answered, and the device copy failed",
                    cause, errc::device_failure);
}

/// Swaps request `id` (incarnation `cache_id`) out (`out`) or in; `done`
/// gets the device blocks moved or the error (the copy's, or that the
/// request ended during the move).
void swap_request(mgr_ptr self, request_id id, std::uint64_t cache_id,
                  bool out,
                  std::function<void(caf::expected<std::uint32_t>)> done) {
  auto& st = self->state;
  auto finish = [self, id, cache_id, out, done](bool ok, caf::error cause,
                                                std::uint32_t moved) {
    // The incarnation, not just the id: released during the move, the
    // request may have been admitted again under the same id by now.
    auto phase2 = [&](auto atom) {
      self->request(self->state.pool, caf::infinite, atom, id, cache_id, ok)
        .then(
          [done, ok, cause, moved, id, out](std::uint32_t, bool ended) mutable {
            // Ended first: its blocks went back whatever the copy did, and
            // "the request is where it was" would be false - the id may
            // name a newer incarnation by now. The copy's error says why
            // the device failed.
            if (ended)
              done(ok ? ended_mid_swap(id, out ? "out" : "in")
                      : ended_and_failed(id, out ? "out" : "in", cause));
            else if (!ok)
              done(copy_failed(id, out ? "out" : "in", cause));
            else
              done(moved);
          },
          [done, id, out](caf::error& err) mutable {
            done(as_ours("swap-" + std::string{out ? "out" : "in"}
                           + " of request " + std::to_string(id),
                         err, errc::shutting_down));
          });
    };
    if (out)
      phase2(swap_out_atom::value);
    else
      phase2(swap_in_atom::value);
  };
  auto copy = [self, out, finish](std::vector<block_move>& moves) {
    auto n = static_cast<std::uint32_t>(moves.size());
    auto on_copied = [finish, n](std::uint32_t) { finish(true, caf::none, n); };
    auto on_failed = [finish](caf::error& err) { finish(false, err, 0); };
    // Nothing to move (a swap-in that shared every block back, or an empty
    // request): no device round trip, which would wait behind earlier swaps.
    if (moves.empty()) {
      finish(true, caf::none, 0);
      return;
    }
    // Requested by the manager itself, never delegated: the device takes
    // a swap from its cache's manager alone (device_actor.cpp).
    if (out)
      self->request(self->state.device, caf::infinite, swap_out_atom::value,
                    std::move(moves))
        .then(on_copied, on_failed);
    else
      self->request(self->state.device, caf::infinite, swap_in_atom::value,
                    std::move(moves))
        .then(on_copied, on_failed);
  };
  auto failed = [done, id, out](caf::error& err) mutable {
    done(as_ours("swap-" + std::string{out ? "out" : "in"} + " of request "
                   + std::to_string(id),
                 err, errc::shutting_down));
  };
  if (out)
    self->request(st.pool, caf::infinite, swap_out_atom::value, id, cache_id)
      .then(copy, failed);
  else
    self->request(st.pool, caf::infinite, swap_in_atom::value, id, cache_id)
      .then(copy, failed);
}

/// The reply to a swap of `id`, which the registry does not hold: not
/// allocated - or not yet, its admission in flight (a swap names the
/// incarnation it moves from its start to its end, which such a request
/// has not got here yet: unlike the by-id calls that leave the choice to
/// the pool, it waits for the allocate's reply).
caf::error not_swappable(const manager_state& st, request_id id,
                         const char* way) {
  if (st.admitting.contains(id))
    return make_error(errc::unknown_request,
                      "swap-" + std::string{way} + " of request "
                        + std::to_string(id)
                        + ": its admission is still in flight (swap it once "
                          "the allocate is answered)");
  return make_error(errc::unknown_request,
                    unknown(*way == 'o' ? "swap-out" : "swap-in", id));
}

} // namespace

caf::result<std::uint32_t> swap_out_request(mgr_ptr self, request_id id) {
  auto& st = self->state;
  auto i = st.registry.find(id);
  if (i == st.registry.end())
    return not_swappable(st, id, "out");
  auto rp = owe(self, self->make_response_promise<std::uint32_t>(),
                "swap-out", id);
  auto cache_id = i->second.info.cache_id;
  auto done = [self, rp, id, cache_id](caf::expected<std::uint32_t> res) mutable {
    if (!res) {
      rp.deliver(std::move(res.error()));
      return;
    }
    set_swapped(self, id, cache_id, true);
    rp.deliver(*res);
  };
  swap_request(self, id, cache_id, true, std::move(done));
  return rp.promise();
}

caf::result<block_table> swap_in_request(mgr_ptr self, request_id id) {
  auto& st = self->state;
  auto i = st.registry.find(id);
  if (i == st.registry.end())
    return not_swappable(st, id, "in");
  auto rp = owe(self, self->make_response_promise<block_table>(),
                "swap-in", id);
  auto cache_id = i->second.info.cache_id;
  auto done = [self, rp, id, cache_id](caf::expected<std::uint32_t> res) mutable {
    if (!res) {
      rp.deliver(std::move(res.error()));
      return;
    }
    set_swapped(self, id, cache_id, false);
    // The table from the pool, which knows first if the request ended
    // during the move (a step may have ended it there).
    self->request(self->state.pool, caf::infinite, table_atom::value, id,
                  cache_id)
      .then([rp](block_table& t) mutable { rp.deliver(std::move(t)); },
            [rp, id](caf::error& err) mutable {
              // The blocks are back on the device, committed; only the
              // table could not be read (the pool ended: the cache stops).
              rp.deliver(has_code(err, errc::invalid_handle)
                           ? ended_mid_swap(id, "in")
                           : as_ours("swap-in of request " + std::to_string(id)
                                       + " done, but its table could not be "
                                         "read",
                                     err, errc::shutting_down));
            });
  };
  swap_request(self, id, cache_id, false, std::move(done));
  return rp.promise();
}

} // namespace kvactor::detail
