// Device-side helpers of kvactor's byte-moving kernels: an unrolled,
// cache-streaming copy of one contiguous chunk, and the choice of vector
// width from alignment. Included by .cu files only (no CAF headers here).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

namespace kvactor::detail {

/// Loads each thread issues before its first store of a round. 8 x 16 B x
/// 2048 resident threads = 256 KiB in flight per SM, well above what hides
/// HBM latency at full bandwidth (about 30 KiB per SM on an H200).
constexpr int copy_unroll = 8;

/// Copies `n` T's from `src` to `dst` using the threads `lane`, `lane +
/// width`, ... of a group (a warp or a CUDA block). Each round issues up to
/// copy_unroll predicated loads before any store, so every thread keeps that
/// many requests in flight. Loads and stores are streaming (ld/st.global.cs,
/// evict-first): each byte is touched once and should not push hot data such
/// as attention inputs out of L2.
/// REQUIRES: dst and src do not overlap; both aligned to sizeof(T).
template <class T>
__device__ __forceinline__ void copy_chunk(T* __restrict__ dst,
                                           const T* __restrict__ src,
                                           std::int64_t n, int lane,
                                           int width) {
  const std::int64_t step = std::int64_t{width} * copy_unroll;
  for (std::int64_t base = lane; base < n; base += step) {
    T v[copy_unroll];
#pragma unroll
    for (int u = 0; u < copy_unroll; ++u) {
      const std::int64_t i = base + std::int64_t{u} * width;
      if (i < n)
        v[u] = __ldcs(src + i);
    }
#pragma unroll
    for (int u = 0; u < copy_unroll; ++u) {
      const std::int64_t i = base + std::int64_t{u} * width;
      if (i < n)
        __stcs(dst + i, v[u]);
    }
  }
}

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
