// DLPack export of tensor views, so frameworks (PyTorch, JAX, CuPy) can use
// the cache memory without a copy.
#pragma once

#include <dlpack/dlpack.h>

#include <caf/expected.hpp>

#include "kvactor/messages/tensor_view.hpp"

namespace kvactor {

/// A DLManagedTensor borrowing `view.data`: the cache must outlive it. The
/// consumer calls its deleter, which frees only the DLPack bookkeeping.
/// fp8_e4m3 is exported as uint8 (DLPack 0.6 has no float8 code); the
/// consumer reinterprets it. Error: invalid_request for an empty view.
caf::expected<DLManagedTensor*> to_dlpack(const tensor_view& view);

/// The DLPack device of `dev` (kDLCPU or kDLCUDA).
DLDevice to_dl_device(const device& dev) noexcept;

/// The DLPack data type of `type`.
DLDataType to_dl_dtype(dtype type) noexcept;

} // namespace kvactor
