// Host-side helper of kvactor's kernel launchers: the choice of vector width
// from alignment (int4 and friends are CUDA types). The kernels' work is in
// kernel_bodies.hpp. Included by .cu files only (no CAF headers here).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

namespace kvactor::detail {

/// Calls f(T{}) with the widest T of int4, int2, int, short, char whose size
/// divides `bits` (the OR of every byte count and address involved), and
/// returns what f returns. Byte movers need no dtype dispatch, only this.
template <class F>
int with_vector_type(std::uint64_t bits, F&& f) {
  if (bits % 16 == 0)
    return f(int4{});
  if (bits % 8 == 0)
    return f(int2{});
  if (bits % 4 == 0)
    return f(int{});
  if (bits % 2 == 0)
    return f(short{});
  return f(char{});
}

inline std::uint64_t address_bits(const void* p) noexcept {
  return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p));
}

} // namespace kvactor::detail
