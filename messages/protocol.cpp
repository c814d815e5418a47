// Names of the protocol's enums.
#include "kvactor/messages/protocol.hpp"

namespace kvactor {

const char* to_string(end_reason x) noexcept {
  switch (x) {
    case end_reason::deallocated: return "deallocated";
    case end_reason::preempted: return "preempted";
    case end_reason::reclaimed: return "reclaimed";
    case end_reason::shutdown: return "shutdown";
  }
  return "unknown";
}

const char* to_string(topic x) noexcept {
  switch (x) {
    case topic::pressure: return "pressure";
    case topic::lifecycle: return "lifecycle";
    case topic::kv_events: return "kv_events";
  }
  return "unknown";
}

} // namespace kvactor
