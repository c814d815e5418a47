// reply_book: answering the promises still open when an actor exits.
#include "kvactor/actors/reply_book.hpp"

#include <vector>

#include "kvactor/messages/error.hpp"

namespace kvactor::detail {

void reply_book::fail_all(const char* who, const std::string& because) {
  std::vector<entry> open;
  if (first_.t != 0)
    open.push_back(std::move(first_));
  if (more_)
    for (auto& kvp : *more_)
      open.push_back(std::move(kvp.second));
  first_ = entry{};
  more_.reset();
  size_ = 0;
  for (auto& e : open) {
    std::string text = std::string{who} + " exited before it answered "
                       + e.what.what;
    if (e.what.of_request)
      text += " of request " + std::to_string(e.what.id);
    if (!because.empty())
      text += ": " + because;
    e.rp.deliver(make_error(errc::shutting_down, std::move(text)));
  }
}

} // namespace kvactor::detail
