// handle_stray_messages: what a cache actor does with a message it has no
// handler for - an error that is not the answer to one of its requests is
// dropped, an unknown request is answered with sec::unexpected_message, an
// unknown plain message is dropped - without stopping and without printing.
//
// CAF 0.17's defaults are harsher. An error that arrives as a plain message
// goes to the actor's error handler, whose default quits with it; and a
// client produces one without meaning any harm: an event-based actor that
// sends to the manager (or a handle) without a request and has no handler
// for the answer replies with CAF's default - sec::unexpected_message, sent
// back to the sender. An unknown message goes to the default handler, which
// answers the same error - also to a plain message, which sends the error to
// the sender, where CAF's default stops it in turn - and first prints the
// message to stdout (a library's host may use stdout for its own output). Every cache actor
// clients can reach (manager, handles, pool, supervisor, device) installs
// this, so one careless client can neither stop the cache nor write to its
// host's stdout. Replies to the actors' own requests are not affected:
// those go to the request's callbacks.
#pragma once

#include <caf/error.hpp>
#include <caf/scheduled_actor.hpp>
#include <caf/message.hpp>
#include <caf/message_view.hpp>
#include <caf/result.hpp>
#include <caf/sec.hpp>

namespace kvactor::detail {

template <class Self>
void handle_stray_messages(Self* self) {
  self->set_error_handler([](caf::error&) {
    // Nothing asked for it: nothing waits for it, nothing changes.
  });
  self->set_default_handler(
    [](caf::scheduled_actor* self, caf::message_view&) -> caf::result<caf::message> {
      if (self->current_message_id().is_request())
        return caf::sec::unexpected_message;
      return caf::message{}; // no answer to a plain message
    });
}

} // namespace kvactor::detail
