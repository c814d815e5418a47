// negative_token: the one check of token ids the pool makes on whole lists
// (an allocation's prompt, a pin's or unpin's tokens): ids are >= 0, and a
// negative one is an error naming its position. Internal (namespace detail).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include <caf/error.hpp>

#include "kvactor/messages/error.hpp"
#include "kvactor/messages/types.hpp"

namespace kvactor::detail {

/// invalid_request "<name()>[i] = v is not a token id" for the first
/// negative id of `tokens`, or no error. One vectorizable pass; the
/// position, and `name()` (the list's name, built only then), on failure.
template <class Name>
caf::error negative_token(const std::vector<token_id>& tokens, Name&& name) {
  token_id lowest = 0;
  for (auto tok : tokens)
    lowest = std::min(lowest, tok);
  if (lowest >= 0)
    return caf::error{};
  auto i = std::find_if(tokens.begin(), tokens.end(),
                        [](token_id x) { return x < 0; });
  return make_error(errc::invalid_request,
                    name() + "[" + std::to_string(i - tokens.begin())
                      + "] = " + std::to_string(*i) + " is not a token id");
}

} // namespace kvactor::detail
