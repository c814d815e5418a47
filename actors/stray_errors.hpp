// keep_on_stray_errors: an error that arrives as a plain message, not as
// the answer to a request, is dropped instead of stopping the actor.
//
// CAF 0.17 hands such a message to the actor's error handler, whose default
// quits with that error. A client produces one without meaning any harm:
// an event-based actor that sends to the manager (or a handle) without a
// request and has no handler for the answer replies to it with CAF's
// default - sec::unexpected_message, sent back to the sender. Every cache
// actor clients can reach (manager, handles, pool, supervisor, device)
// installs this, so one careless client cannot stop the cache. Replies to
// the actors' own requests are not affected: those go to the request's
// error callback.
#pragma once

#include <caf/error.hpp>

namespace kvactor::detail {

template <class Self>
void keep_on_stray_errors(Self* self) {
  self->set_error_handler([](caf::error&) {
    // Nothing asked for it: nothing waits for it, nothing changes.
  });
}

} // namespace kvactor::detail
