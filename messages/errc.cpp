// Names of the error codes.
#include "kvactor/messages/errc.hpp"

namespace kvactor {

const char* to_string(errc x) noexcept {
  switch (x) {
    case errc::out_of_blocks: return "out_of_blocks";
    case errc::unknown_request: return "unknown_request";
    case errc::duplicate_request: return "duplicate_request";
    case errc::invalid_request: return "invalid_request";
    case errc::exceeds_max_sequence_length: return "exceeds_max_sequence_length";
    case errc::quota_exceeded: return "quota_exceeded";
    case errc::invalid_handle: return "invalid_handle";
    case errc::invalid_config: return "invalid_config";
    case errc::device_failure: return "device_failure";
    case errc::shutting_down: return "shutting_down";
    case errc::unknown_tenant: return "unknown_tenant";
    case errc::invariant_violation: return "invariant_violation";
    case errc::exceeds_capacity: return "exceeds_capacity";
  }
  return "unknown_errc";
}

} // namespace kvactor
