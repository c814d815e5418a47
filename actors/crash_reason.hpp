// name_crashes: a cache actor that throws (host memory running out, an
// embedder's storage backend that throws) ends with an error naming the
// actor and what was thrown - "block pool: crashed: std::bad_alloc" -
// rather than CAF 0.17's default: a bare sec::runtime_error, with the
// exception printed to stderr (a library's host's stream). When a part of
// the cache crashes (pool, device actor, supervisor), the manager stops the
// cache with that text in its reason ("its block pool ended (...)"), so
// every caller told the cache stopped learns why; a request handle's crash
// ends its request (the supervisor reclaims it). What the crash leaves
// behind is each actor's own affair: the device actor's state still
// answers the work in flight, the manager's attached functor its open
// promises.
#pragma once

#include <exception>
#include <string>

#include <caf/error.hpp>

#include "kvactor/messages/error.hpp"

namespace kvactor::detail {

/// Installs the handler on `self`: `who` is the actor as the error names
/// it, `code` the error's code.
template <class Self>
void name_crashes(Self* self, const char* who, errc code = errc::shutting_down) {
  self->set_exception_handler([who, code](std::exception_ptr& thrown) -> caf::error {
    std::string what = "an unknown exception";
    try {
      std::rethrow_exception(thrown);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    return make_error(code, std::string{who} + ": crashed: " + what);
  });
}

} // namespace kvactor::detail
