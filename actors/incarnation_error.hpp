// The errors for a call naming a request that ended: "request N has ended"
// (ended_error), and for one naming an incarnation (request id, cache id)
// that is not live - which one ended, and which is live now, if any
// (not_live). One text everywhere: the facade, the handle actors, the
// manager and the pool say it alike.
#pragma once

#include <cstdint>
#include <string>

#include "kvactor/messages/error.hpp"
#include "kvactor/messages/types.hpp"

namespace kvactor::detail {

/// Request `id` ended: `code` (invalid_handle: a handle names it),
/// "request N has ended".
inline caf::error ended_error(request_id id,
                              errc code = errc::invalid_handle) {
  return make_error(code, "request " + std::to_string(id) + " has ended");
}

/// `live`: the cache id of request `id`'s live incarnation (0: none). An
/// older incarnation than the live one, or any with none live, ended:
/// `ended` (invalid_handle where a stale handle asks). A newer one than the
/// live one the pool never gave - no id has two live incarnations - and is
/// bad input (invalid_request); the manager's registry may lag the pool's
/// steps, so where `live` is the manager's it says only that it is not the
/// live one (`ended`). Without a live one: "request N has ended".
inline caf::error not_live(request_id id, std::uint64_t cache_id,
                           std::uint64_t live,
                           errc ended = errc::invalid_handle,
                           bool pools_truth = true) {
  if (live == 0)
    return ended_error(id, ended);
  auto name = "request " + std::to_string(id);
  auto now = " (incarnation " + std::to_string(live) + " is live)";
  auto which = std::to_string(cache_id);
  if (cache_id < live)
    return make_error(ended, name + "'s incarnation " + which + " has ended"
                               + now);
  if (pools_truth)
    return make_error(errc::invalid_request,
                      name + " has no incarnation " + which + now);
  return make_error(ended,
                    name + "'s incarnation " + which + " is not live" + now);
}

} // namespace kvactor::detail
