// The work of kvactor's byte-moving kernels, for one thread at explicit grid
// coordinates, and the launch geometry each launcher picks. kernels.cu's
// __global__ functions only pass blockIdx/threadIdx in; the unit tests
// (tests/unit/kernel_bodies_test.cpp) run the same code on the CPU over the
// whole grid, one thread after another, and so check every kernel's index
// math without a GPU. That emulation is exact for these kernels: their
// threads share nothing (no shared memory, no barriers) and each writes bytes
// no other thread reads.
//
// Compiles as CUDA (device functions) and as plain C++ (inline functions);
// includes no CUDA header (kernels.hpp is plain C++). Layout (storage.hpp):
// pool = [num_layers][2 (K, V)][num_blocks][block_size][num_heads][head_dim];
// a "plane" is one layer's K or V pool, a "row" one token of one plane
// (row_bytes), a block of a plane block_bytes contiguous.
#pragma once

#include <cstdint>

#include "kvactor/device/kernels.hpp"

#if defined(__CUDACC__)
#define KVACTOR_KERNEL_FN __device__ __forceinline__
#define KVACTOR_UNROLL _Pragma("unroll")
#else
#define KVACTOR_KERNEL_FN inline
#define KVACTOR_UNROLL
#endif

namespace kvactor::detail::kernel {

/// Threads per CUDA block of every byte mover, and warps among them.
constexpr int threads_per_block = 256;
constexpr int warps_per_block = threads_per_block / 32;
constexpr std::int64_t max_grid_x = 0x7fffffff;
constexpr std::int64_t max_grid_y = 65535;

/// Loads each thread issues before its first store of a round. 8 x 16 B x
/// 2048 resident threads = 256 KiB in flight per SM, well above what hides
/// HBM latency at full bandwidth (about 30 KiB per SM on an H200).
constexpr int copy_unroll = 8;

/// One thread's place in its launch (CUDA's blockIdx, gridDim, threadIdx.x;
/// the same unsigned types, which keep the kernels' index math as cheap).
struct thread_pos {
  unsigned block_x = 0;
  unsigned block_y = 0;
  unsigned grid_x = 1;
  unsigned grid_y = 1;
  unsigned thread = 0;
};

/// A launch's grid (x, y); the block is always threads_per_block.
struct grid_dims {
  std::int64_t x = 1;
  std::int64_t y = 1;
};

constexpr std::int64_t clamp_grid(std::int64_t work, std::int64_t cap) {
  return work < 1 ? 1 : (work < cap ? work : cap);
}

// Streaming loads and stores (ld/st.global.cs, evict-first: each byte is
// touched once and need not stay in L2) or plain ones; kernels.hpp's
// streaming_hints says which the movers use, and why. On the CPU, plain
// ones.
template <class T, bool Streaming = streaming_hints>
KVACTOR_KERNEL_FN T load_once(const T* p) {
#if defined(__CUDA_ARCH__)
  if constexpr (Streaming)
    return __ldcs(p);
  else
    return *p;
#else
  return *p;
#endif
}

template <class T, bool Streaming = streaming_hints>
KVACTOR_KERNEL_FN void store_once(T* p, const T& v) {
#if defined(__CUDA_ARCH__)
  if constexpr (Streaming)
    __stcs(p, v);
  else
    *p = v;
#else
  *p = v;
#endif
}

/// Copies `n` T's from `src` to `dst` using the threads `lane`, `lane +
/// width`, ... of a group (a warp or a CUDA block). Each round issues up to
/// copy_unroll predicated loads before any store, so every thread keeps that
/// many requests in flight.
/// REQUIRES: dst and src do not overlap; both aligned to sizeof(T).
template <class T, bool Streaming = streaming_hints>
KVACTOR_KERNEL_FN void copy_chunk(T* __restrict__ dst,
                                  const T* __restrict__ src, std::int64_t n,
                                  int lane, int width) {
  const std::int64_t step = std::int64_t{width} * copy_unroll;
  for (std::int64_t base = lane; base < n; base += step) {
    T v[copy_unroll];
    KVACTOR_UNROLL
    for (int u = 0; u < copy_unroll; ++u) {
      const std::int64_t i = base + std::int64_t{u} * width;
      if (i < n)
        v[u] = load_once<T, Streaming>(src + i);
    }
    KVACTOR_UNROLL
    for (int u = 0; u < copy_unroll; ++u) {
      const std::int64_t i = base + std::int64_t{u} * width;
      if (i < n)
        store_once<T, Streaming>(dst + i, v[u]);
    }
  }
}

// -- copy_blocks ----------------------------------------------------------------------

/// Planes of one pair each CUDA block of copy_blocks copies, one after the
/// other (gpu_bench sweeps it, "copy_blocks kernel N planes/CTA": on the
/// H200 1 was best, 64 lost 1.5 %).
constexpr std::int64_t copy_planes_per_cta = 1;

/// Grid: (pairs, 2 * num_layers planes / planes_per_cta), each clamped,
/// strided over both.
constexpr grid_dims copy_blocks_grid(
  std::int64_t num_pairs, std::int64_t num_planes,
  std::int64_t planes_per_cta = copy_planes_per_cta) {
  const std::int64_t per = planes_per_cta < 1 ? 1 : planes_per_cta;
  return {clamp_grid(num_pairs, max_grid_x),
          clamp_grid((num_planes + per - 1) / per, max_grid_y)};
}

/// CUDA block (p, q) copies pair p's block in plane q: one chunk of
/// block_bytes (32 KiB for 16 tokens x 8 heads x 128 fp16 = one round of 8
/// int4 per thread).
template <class T, bool Streaming = streaming_hints>
KVACTOR_KERNEL_FN void copy_blocks_thread(
  thread_pos at,
  char* pool,                           // [num_planes][num_blocks][block_bytes]
  const block_pair* __restrict__ pairs, // [num_pairs]
  std::int64_t num_pairs, std::int64_t num_planes, std::int64_t plane_bytes,
  std::int64_t block_bytes) {
  const std::int64_t n = block_bytes / static_cast<std::int64_t>(sizeof(T));
  for (std::int64_t p = at.block_x; p < num_pairs; p += at.grid_x) {
    const block_pair bp = pairs[p];
    const std::int64_t src = std::int64_t{bp.src} * block_bytes;
    const std::int64_t dst = std::int64_t{bp.dst} * block_bytes;
    for (std::int64_t q = at.block_y; q < num_planes; q += at.grid_y) {
      char* plane = pool + q * plane_bytes;
      copy_chunk<T, Streaming>(reinterpret_cast<T*>(plane + dst),
                               reinterpret_cast<const T*>(plane + src), n,
                               static_cast<int>(at.thread), threads_per_block);
    }
  }
}

// -- write_slots ----------------------------------------------------------------------

/// Rows each warp of write_slots moves, one after the other (gpu_bench
/// sweeps it, "write_slots kernel N rows/warp": on the H200 1 was best or
/// equal, 8 lost 10 %).
constexpr std::int64_t write_rows_per_warp = 1;

/// Grid: one warp per rows_per_warp rows (2 rows per token: K and V),
/// clamped, strided.
constexpr grid_dims write_slots_grid(
  std::int64_t num_tokens, std::int64_t rows_per_warp = write_rows_per_warp) {
  const std::int64_t per = (rows_per_warp < 1 ? 1 : rows_per_warp)
                           * warps_per_block;
  return {clamp_grid((2 * num_tokens + per - 1) / per, max_grid_x), 1};
}

/// Each warp moves one row r: token r / 2's K (r even) or V (r odd), to
/// slot slots[r / 2] (block * block_size + offset; a row of a plane is at
/// slot * row_bytes). Slot -1 skips the token (padding). EarlySlot: a row
/// of one round loads its bytes before it needs its slot (launch_write_slots
/// says why); a skipped token's loads are then wasted.
template <class T, bool Streaming = streaming_hints, bool EarlySlot = true>
KVACTOR_KERNEL_FN void write_slots_thread(
  thread_pos at,
  char* __restrict__ k_plane,             // [num_blocks * block_size][row_bytes]
  char* __restrict__ v_plane,             // [num_blocks * block_size][row_bytes]
  const char* __restrict__ key,           // [num_tokens][num_heads][head_dim]
  const char* __restrict__ value,         // [num_tokens][num_heads][head_dim]
  const std::int64_t* __restrict__ slots, // [num_tokens]
  std::int64_t num_tokens, std::int64_t row_bytes) {
  const int lane = static_cast<int>(at.thread % 32);
  const std::int64_t n = row_bytes / static_cast<std::int64_t>(sizeof(T));
  const std::int64_t rows = 2 * num_tokens;
  const std::int64_t stride = std::int64_t{at.grid_x} * warps_per_block;
  for (std::int64_t r = std::int64_t{at.block_x} * warps_per_block
                        + at.thread / 32;
       r < rows; r += stride) {
    const std::int64_t t = r >> 1;
    const bool is_v = (r & 1) != 0;
    if constexpr (EarlySlot) {
      if (n <= std::int64_t{32} * copy_unroll) {
        // A row of one round: the slot's load and the row's loads all go
        // out before either is needed, so their latencies overlap.
        const std::int64_t slot = slots[t];
        const T* src = reinterpret_cast<const T*>((is_v ? value : key)
                                                  + t * row_bytes);
        T v[copy_unroll];
        KVACTOR_UNROLL
        for (int u = 0; u < copy_unroll; ++u) {
          const std::int64_t i = lane + std::int64_t{u} * 32;
          if (i < n)
            v[u] = load_once<T, Streaming>(src + i);
        }
        if (slot < 0)
          continue;
        T* dst = reinterpret_cast<T*>((is_v ? v_plane : k_plane)
                                      + slot * row_bytes);
        KVACTOR_UNROLL
        for (int u = 0; u < copy_unroll; ++u) {
          const std::int64_t i = lane + std::int64_t{u} * 32;
          if (i < n)
            store_once<T, Streaming>(dst + i, v[u]);
        }
        continue;
      }
    }
    const std::int64_t slot = slots[t];
    if (slot < 0)
      continue;
    const char* src = (is_v ? value : key) + t * row_bytes;
    char* dst = (is_v ? v_plane : k_plane) + slot * row_bytes;
    copy_chunk<T, Streaming>(reinterpret_cast<T*>(dst),
                             reinterpret_cast<const T*>(src), n, lane, 32);
  }
}

// -- write_layers ---------------------------------------------------------------------

/// Grid: write_slots_grid's x, one row of CUDA blocks per layer (at most
/// max_grid_y: the launcher launches more layers in further grids).
constexpr grid_dims write_layers_grid(std::int64_t num_tokens,
                                      std::int64_t num_layers) {
  return {write_slots_grid(num_tokens).x, clamp_grid(num_layers, max_grid_y)};
}

/// Row y of CUDA blocks does write_slots for the grid's layer y: its K
/// plane 2 * y planes past first_plane, its V plane right after that, its
/// rows y * layer_stride past key and value.
template <class T, bool Streaming = streaming_hints>
KVACTOR_KERNEL_FN void write_layers_thread(
  thread_pos at,
  char* __restrict__ first_plane, // [layers][2][num_blocks * block_size][row_bytes]
  std::int64_t plane_bytes,
  const char* __restrict__ key,   // [layers] x layer_stride: [num_tokens][row_bytes]
  const char* __restrict__ value, // the same
  std::int64_t layer_stride, const std::int64_t* __restrict__ slots,
  std::int64_t num_tokens, std::int64_t row_bytes) {
  const std::int64_t y = at.block_y;
  char* k_plane = first_plane + y * 2 * plane_bytes;
  write_slots_thread<T, Streaming, true>(
    at, k_plane, k_plane + plane_bytes, key + y * layer_stride,
    value + y * layer_stride, slots, num_tokens, row_bytes);
}

// -- gather_blocks --------------------------------------------------------------------

/// The list blocks a gather of `num_tokens` tokens reads.
constexpr std::int64_t gather_chunks(std::int64_t num_list,
                                     std::int64_t num_tokens,
                                     std::int64_t block_size) {
  return num_list < (num_tokens + block_size - 1) / block_size
           ? num_list
           : (num_tokens + block_size - 1) / block_size;
}

/// Grid: (chunks, 2: K and V), x clamped and strided.
constexpr grid_dims gather_blocks_grid(std::int64_t num_chunks) {
  return {clamp_grid(num_chunks, max_grid_x), 2};
}

/// CUDA block (j, kv) copies the first min(block_size, num_tokens - j *
/// block_size) rows of list block j of the K (kv = 0) or V plane: one
/// contiguous run, to rows j * block_size.. of the output.
template <class T, bool Streaming = streaming_hints>
KVACTOR_KERNEL_FN void gather_blocks_thread(
  thread_pos at,
  const char* __restrict__ k_plane,         // [num_blocks][block_size][row_bytes]
  const char* __restrict__ v_plane,         // [num_blocks][block_size][row_bytes]
  const std::uint32_t* __restrict__ blocks, // [num_chunks]
  char* __restrict__ key_out,               // [num_tokens][num_heads][head_dim]
  char* __restrict__ value_out,             // [num_tokens][num_heads][head_dim]
  std::int64_t num_chunks, std::int64_t num_tokens, std::int64_t block_size,
  std::int64_t row_bytes) {
  const std::int64_t block_bytes = block_size * row_bytes;
  const bool is_v = at.block_y == 1;
  for (std::int64_t j = at.block_x; j < num_chunks; j += at.grid_x) {
    const std::int64_t first = j * block_size;
    const std::int64_t left = num_tokens - first;
    const std::int64_t rows = left < block_size ? left : block_size;
    const std::int64_t src = std::int64_t{blocks[j]} * block_bytes;
    copy_chunk<T, Streaming>(
      reinterpret_cast<T*>((is_v ? value_out : key_out) + first * row_bytes),
      reinterpret_cast<const T*>((is_v ? v_plane : k_plane) + src),
      rows * row_bytes / static_cast<std::int64_t>(sizeof(T)),
      static_cast<int>(at.thread), threads_per_block);
  }
}

// -- swap_runs --------------------------------------------------------------------------

/// CUDA blocks a swap kernel uses at most by default: enough bytes in flight
/// (16 x 32 KiB per round) to cover PCIe's latency at its full bandwidth,
/// few enough that attention kernels keep nearly every SM (gpu_bench
/// sweeps it, "swap_in kernel N CTAs": on the H200 4 moved 87 %, 8 and
/// more 93 % of pinned memcpy bandwidth).
constexpr std::int64_t swap_ctas = 16;

/// Grid: (CUDA blocks), at most max_ctas, strided over the (run, plane)
/// pieces.
constexpr grid_dims swap_runs_grid(std::int64_t num_pieces,
                                   std::int64_t max_ctas = swap_ctas) {
  return {clamp_grid(num_pieces, max_ctas < 1 ? 1 : max_ctas), 1};
}

/// The pieces of a swap: piece w is run w / num_planes in plane w %
/// num_planes, count * block_bytes contiguous bytes on either side (the
/// planes of one run are neighbouring pieces). Device and host sides have
/// the same layout but their own number of blocks per plane
/// (`*_plane_bytes`). One CUDA block per piece
/// at a time; `to_host` picks the direction. The host side is pinned memory
/// the GPU reads and writes over PCIe (zero-copy).
template <class T>
KVACTOR_KERNEL_FN void swap_runs_thread(
  thread_pos at,
  char* device_pool,            // [num_planes][device blocks][block_bytes]
  char* host_tier,              // [num_planes][host blocks][block_bytes]
  const swap_run* __restrict__ runs, // [num_runs]
  std::int64_t num_runs, std::int64_t num_planes,
  std::int64_t device_plane_bytes, std::int64_t host_plane_bytes,
  std::int64_t block_bytes, bool to_host) {
  const std::int64_t pieces = num_runs * num_planes;
  for (std::int64_t w = at.block_x; w < pieces; w += at.grid_x) {
    const swap_run run = runs[w / num_planes];
    const std::int64_t q = w % num_planes;
    char* dev = device_pool + q * device_plane_bytes
                + std::int64_t{run.device_first} * block_bytes;
    char* host = host_tier + q * host_plane_bytes
                 + std::int64_t{run.host_first} * block_bytes;
    const std::int64_t n = std::int64_t{run.count} * block_bytes
                           / static_cast<std::int64_t>(sizeof(T));
    copy_chunk(reinterpret_cast<T*>(to_host ? host : dev),
               reinterpret_cast<const T*>(to_host ? dev : host), n,
               static_cast<int>(at.thread), threads_per_block);
  }
}

} // namespace kvactor::detail::kernel

#undef KVACTOR_KERNEL_FN
#undef KVACTOR_UNROLL
