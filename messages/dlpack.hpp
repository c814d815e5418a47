// DLPack export of tensor views, so frameworks (PyTorch, JAX, CuPy) can use
// the cache memory without a copy.
#pragma once

#include <dlpack/dlpack.h>

#include <caf/expected.hpp>

#include "kvactor/messages/tensor_view.hpp"

namespace kvactor {

/// A DLManagedTensor of `view.data`, holding `view.owner` - the memory
/// stays allocated until the consumer calls the deleter, even if the cache
/// or the handle went first. `data` is the first element and byte_offset 0,
/// as the Python array API asks (consumers such as PyTorch ignored
/// byte_offset for years), so `data` is not always 256-byte aligned.
/// fp8_e4m3 is exported as uint8 (DLPack 0.6 has no float8 code); the
/// consumer reinterprets it. Error: invalid_request for an empty view.
caf::expected<DLManagedTensor*> to_dlpack(const tensor_view& view);

/// The DLPack device of `dev` (kDLCPU or kDLCUDA).
DLDevice to_dl_device(const device& dev) noexcept;

/// The DLPack data type of `type`; bits 0 (an opaque handle) for a value
/// that names no dtype.
DLDataType to_dl_dtype(dtype type) noexcept;

} // namespace kvactor
