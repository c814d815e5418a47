// reply_book: answering the promises still open when an actor exits.
#include "kvactor/actors/reply_book.hpp"

#include "kvactor/messages/error.hpp"

namespace kvactor::detail {

void reply_book::fail_all(const char* who) {
  auto open = std::move(open_);
  open_.clear();
  for (auto& kvp : open) {
    auto& e = kvp.second;
    std::string text = std::string{who} + " exited before it answered "
                       + e.what.what;
    if (e.what.of_request)
      text += " of request " + std::to_string(e.what.id);
    e.rp.deliver(make_error(errc::shutting_down, std::move(text)));
  }
}

} // namespace kvactor::detail
