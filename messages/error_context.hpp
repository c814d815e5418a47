// Errors passed up with what the caller was doing put in front of their
// context: "extend of request 7: need 2 blocks, 1 available ...". The pool
// core's and the device's errors name neither the operation nor, for a
// quota or a shortage, the request; the layer that knows says so here.
#pragma once

#include <optional>
#include <string>

#include "kvactor/messages/error.hpp"

namespace kvactor {

/// `err` with `what` leading its context ("<what>: <context>"), its code
/// kept. An error of another category (CAF's own) becomes an error of code
/// `foreign` with its rendering as the context, or, without `foreign`,
/// keeps CAF's code and category with `what` leading its context (a
/// timeout stays caf::sec::request_timeout). No error stays no error.
caf::error in_context(const std::string& what, const caf::error& err,
                      std::optional<errc> foreign = std::nullopt);

/// `err` as it is if it is kvactor's own (or no error); CAF's own (say
/// request_receiver_down: an actor asked has ended) becomes an error of
/// code `foreign` naming `what` and CAF's words. For replies passed on
/// from another cache actor, whose own errors name what failed already.
caf::error as_ours(const std::string& what, const caf::error& err,
                   errc foreign);

} // namespace kvactor
