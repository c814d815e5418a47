// Boost.Test printers for kvactor's and CAF's types, shared by the actor,
// facade and remote tests (Boost.Test finds them by ADL).
#pragma once

#include <cstddef>
#include <ostream>

#include <caf/error.hpp>

#include "kvactor/messages/error.hpp"
#include "kvactor/messages/protocol.hpp"
#include "kvactor/messages/types.hpp"

namespace caf {
inline std::ostream& boost_test_print_type(std::ostream& os, const error& x) {
  return os << kvactor::render(x);
}
} // namespace caf

namespace kvactor {
inline std::ostream& boost_test_print_type(std::ostream& os, errc x) {
  return os << to_string(x);
}
inline std::ostream& boost_test_print_type(std::ostream& os, memory_pressure x) {
  return os << to_string(x);
}
inline std::ostream& boost_test_print_type(std::ostream& os, end_reason x) {
  return os << to_string(x);
}
inline std::ostream& boost_test_print_type(std::ostream& os, topic x) {
  return os << to_string(x);
}
inline std::ostream& boost_test_print_type(std::ostream& os, dtype x) {
  return os << to_string(x);
}
inline std::ostream& boost_test_print_type(std::ostream& os, const device& x) {
  return os << to_string(x);
}
inline std::ostream& boost_test_print_type(std::ostream& os,
                                           const block_table& x) {
  os << "{blocks [";
  for (std::size_t i = 0; i < x.blocks.size(); ++i)
    os << (i > 0 ? " " : "") << x.blocks[i];
  return os << "], tokens " << x.num_tokens << ", block_size " << x.block_size
            << '}';
}
} // namespace kvactor
