// The manager's two-phase swap: reserve in the pool, copy on the device,
// commit or undo in the pool.
#include "kvactor/actors/kv_cache_manager_state.hpp"

#include <caf/send.hpp>

namespace kvactor::detail {

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
          [done, ok, cause, moved](std::uint32_t) mutable {
            if (ok)
              done(moved);
            else
              done(std::move(cause));
          },
          [done](caf::error& err) mutable { done(std::move(err)); });
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
    if (out)
      self->request(self->state.device, caf::infinite, swap_out_atom::value,
                    std::move(moves))
        .then(on_copied, on_failed);
    else
      self->request(self->state.device, caf::infinite, swap_in_atom::value,
                    std::move(moves))
        .then(on_copied, on_failed);
  };
  auto failed = [done](caf::error& err) mutable { done(std::move(err)); };
  if (out)
    self->request(st.pool, caf::infinite, swap_out_atom::value, id, cache_id)
      .then(copy, failed);
  else
    self->request(st.pool, caf::infinite, swap_in_atom::value, id, cache_id)
      .then(copy, failed);
}

} // namespace kvactor::detail
