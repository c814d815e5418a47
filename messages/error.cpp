// Rendering of kvactor errors without an actor system.
#include "kvactor/messages/error.hpp"
#include "kvactor/messages/error_context.hpp"

#include <caf/message.hpp>

namespace kvactor {

namespace {

bool has_text(const caf::message& ctx) {
  return ctx.size() == 1 && ctx.match_element<std::string>(0);
}

} // namespace

std::string render(const caf::error& err) {
  if (!err)
    return "none";
  if (err.category() != error_category)
    return to_string(err);
  std::string result = "kvactor: ";
  result += to_string(static_cast<errc>(err.code()));
  auto& ctx = err.context();
  if (has_text(ctx)) {
    result += " (";
    result += ctx.get_as<std::string>(0);
    result += ')';
  } else if (!ctx.empty()) {
    result += ' ';
    result += to_string(ctx);
  }
  return result;
}

std::string context_of(const caf::error& err) {
  if (err && err.category() == error_category && has_text(err.context()))
    return err.context().get_as<std::string>(0);
  return render(err);
}

caf::error in_context(const std::string& what, const caf::error& err,
                      std::optional<errc> foreign) {
  if (!err)
    return err; // no failure to say more about (nor a category to ask)
  if (err.category() == error_category)
    return make_error(static_cast<errc>(err.code()),
                      what + ": " + context_of(err));
  if (foreign)
    return make_error(*foreign, what + ": " + render(err));
  // CAF's code and category stay (callers compare them: a timeout is still
  // caf::sec::request_timeout); the context leads with `what`.
  auto& ctx = err.context();
  std::string was = has_text(ctx) ? ctx.get_as<std::string>(0)
                  : ctx.empty()   ? std::string{}
                                  : to_string(ctx);
  return caf::error{err.code(), err.category(),
                    caf::make_message(was.empty() ? what : what + ": " + was)};
}

caf::error as_ours(const std::string& what, const caf::error& err,
                   errc foreign) {
  if (!err || err.category() == error_category)
    return err;
  return make_error(foreign, what + ": " + render(err));
}

} // namespace kvactor
