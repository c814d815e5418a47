// errc as a CAF error category ("kvactor"), and the one way to build an error
// with context: make_error(errc::out_of_blocks, "need 4 blocks, 2 free").
#pragma once

#include <string>
#include <utility>

#include <caf/make_message.hpp> // must precede error.hpp for CAF_ERROR_CODE_ENUM
#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "kvactor/messages/errc.hpp"

CAF_ERROR_CODE_ENUM(kvactor::errc, "kvactor")

namespace kvactor {

/// The CAF error category of errc (an atom of at most 10 characters).
constexpr caf::atom_value error_category = caf::atom("kvactor");

/// An error of code `code` whose context names what was wrong.
inline caf::error make_error(errc code, std::string context) {
  return caf::make_error(code, std::move(context));
}

/// True if `err` carries the kvactor code `code`; false for no error (a
/// success: CAF's category() must not be asked of none).
inline bool has_code(const caf::error& err, errc code) noexcept {
  return err && err.category() == error_category
         && err.code() == static_cast<std::uint8_t>(code);
}

/// "kvactor: out_of_blocks (need 4 blocks, 2 free)"; readable without an
/// actor system (the registered renderer prints the same).
std::string render(const caf::error& err);

/// What render(err) puts in parentheses - "need 4 blocks, 2 free" - for
/// an error wrapped in another of the same code (render(err) otherwise).
std::string context_of(const caf::error& err);

} // namespace kvactor
