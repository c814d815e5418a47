// kvactor's error codes: one enum for every failure the library reports.
// CAF-free; messages/error.hpp turns a code into a caf::error with context.
#pragma once

#include <cstdint>
#include <string>

namespace kvactor {

/// Why an operation failed. A failed operation changes nothing.
enum class errc : std::uint8_t {
  out_of_blocks = 1,            ///< the pool (or host tier) lacks free blocks
  unknown_request,              ///< no live request has this id
  duplicate_request,            ///< a live request already has this id
  invalid_request,              ///< malformed request: shape, sizes, tokens
  exceeds_max_sequence_length,  ///< would grow past max_sequence_length
  quota_exceeded,               ///< the tenant's max_blocks would be exceeded
  invalid_handle,               ///< the handle's request has ended
  invalid_config,               ///< a config field is missing or out of range
  device_failure,               ///< the storage backend failed (CUDA error)
  shutting_down,                ///< the manager is stopping
  unknown_tenant,               ///< the tenant is not configured
  invariant_violation,          ///< the accounting check failed (a bug)
  exceeds_capacity,             ///< more blocks than one request can ever hold
};

/// Returns the enumerator's name, e.g. "out_of_blocks".
const char* to_string(errc x) noexcept;

} // namespace kvactor
