// kvactor's CUDA kernels and the batched swap copy (launchers: kernels.hpp).
// Layout (storage.hpp): pool = [num_layers][2 (K, V)][num_blocks][block_size]
// [num_heads][head_dim]; a "plane" is one layer's K or V pool, a "row" one
// token of one plane (row_bytes), a block of a plane block_bytes contiguous.
#include "kvactor/device/kernels.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <string>
#include <vector>

#include "kvactor/device/kernel_bodies.hpp"
#include "kvactor/device/kernels.cuh"
#include "kvactor/device/swap_copies.hpp"

namespace kvactor::detail {

namespace {

using kernel::thread_pos;
using kernel::threads_per_block;

__device__ __forceinline__ thread_pos here() {
  return {blockIdx.x, blockIdx.y, gridDim.x, gridDim.y, threadIdx.x};
}

dim3 as_dim3(kernel::grid_dims g) {
  return dim3(static_cast<unsigned>(g.x), static_cast<unsigned>(g.y));
}

// Byte movers ask for 4 resident blocks per SM (at most 64 registers): with
// 8 x 16 B loads per thread that is 128 KiB in flight per SM. Block: 256
// threads. Each kernel's grid (kernel::*_grid) and the work of each thread
// (kernel::*_thread), with the shapes of their arguments, are in
// kernel_bodies.hpp, where the CPU tests run them.

template <class T, bool Streaming>
__global__ void __launch_bounds__(threads_per_block, 4) copy_blocks_kernel(
  char* pool, const block_pair* __restrict__ pairs, std::int64_t num_pairs,
  std::int64_t num_planes, std::int64_t plane_bytes, std::int64_t block_bytes) {
  kernel::copy_blocks_thread<T, Streaming>(here(), pool, pairs, num_pairs,
                                           num_planes, plane_bytes,
                                           block_bytes);
}

// Programmatic dependent launch (Hopper on): a kernel launched with
// cudaLaunchAttributeProgrammaticStreamSerialization may be scheduled while
// the kernel before it in the stream still runs, once that one's CUDA
// blocks all called let_dependents_launch(). wait_for_prior_grids()
// (griddepcontrol.wait) then holds it until the grid right before it in
// the stream finished and that grid's writes are visible - that one grid
// alone. It covers every earlier grid only because each grid finishes
// after the one before it: a kernel launched with the attribute calls the
// wait before it exits (every one here does, write_slots_kernel), and a
// plain launch starts only once everything before it completed. A kernel
// launched with the attribute that skipped the wait would break this for
// every kernel after it. Called before touching memory, the wait keeps
// stream order exactly, and only the launch's latency overlaps; called
// last (write_overlap::work), the kernel's work overlaps the earlier
// kernels' while it still finishes after them. No-ops before sm_90.
__device__ __forceinline__ void let_dependents_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void wait_for_prior_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/// Launched with programmatic dependent launch or without
/// (launch_write_slots): without, the wait returns at once. `wait_first`:
/// wait for the earlier kernels before the work (write_overlap::launch) or
/// after it (write_overlap::work). Every kernel before the next one in
/// stream order has then either finished or, in work mode, not let the
/// next one launch before it itself launched: a work-mode kernel overlaps
/// at most the kernels back to the last one that waited first.
template <class T, bool EarlySlot>
__global__ void __launch_bounds__(threads_per_block, 4) write_slots_kernel(
  char* __restrict__ k_plane, char* __restrict__ v_plane,
  const char* __restrict__ key, const char* __restrict__ value,
  const std::int64_t* __restrict__ slots, std::int64_t num_tokens,
  std::int64_t row_bytes, bool wait_first) {
  // A kernel that waits first lets the next one launch only once it waited:
  // a next kernel in work mode may then overlap this one, never the ones
  // before it (write_chain.hpp's chain starts here).
  if (wait_first)
    wait_for_prior_grids();
  let_dependents_launch();
  kernel::write_slots_thread<T, streaming_hints, EarlySlot>(
    here(), k_plane, v_plane, key, value, slots, num_tokens, row_bytes);
  if (!wait_first)
    wait_for_prior_grids();
}

/// A plain launch: never lets the next kernel launch early.
template <class T>
__global__ void __launch_bounds__(threads_per_block, 4) write_layers_kernel(
  char* __restrict__ first_plane, std::int64_t plane_bytes,
  const char* __restrict__ key, const char* __restrict__ value,
  std::int64_t layer_stride, const std::int64_t* __restrict__ slots,
  std::int64_t num_tokens, std::int64_t row_bytes) {
  kernel::write_layers_thread<T>(here(), first_plane, plane_bytes, key, value,
                                 layer_stride, slots, num_tokens, row_bytes);
}

template <class T, bool Streaming>
__global__ void __launch_bounds__(threads_per_block, 4) gather_blocks_kernel(
  const char* __restrict__ k_plane, const char* __restrict__ v_plane,
  const std::uint32_t* __restrict__ blocks, char* __restrict__ key_out,
  char* __restrict__ value_out, std::int64_t num_chunks,
  std::int64_t num_tokens, std::int64_t block_size, std::int64_t row_bytes) {
  kernel::gather_blocks_thread<T, Streaming>(here(), k_plane, v_plane, blocks,
                                             key_out, value_out, num_chunks,
                                             num_tokens, block_size,
                                             row_bytes);
}

template <class T>
__global__ void __launch_bounds__(threads_per_block, 4) swap_runs_kernel(
  char* device_pool, char* host_tier, const swap_run* __restrict__ runs,
  std::int64_t num_runs, std::int64_t num_planes,
  std::int64_t device_plane_bytes, std::int64_t host_plane_bytes,
  std::int64_t block_bytes, bool to_host) {
  kernel::swap_runs_thread<T>(here(), device_pool, host_tier, runs, num_runs,
                              num_planes, device_plane_bytes, host_plane_bytes,
                              block_bytes, to_host);
}

__device__ __forceinline__ std::uint64_t mix64(std::uint64_t x) {
  // splitmix64's finaliser: a bijection, so distinct offsets never collide.
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Grid: up to 4096 blocks, strided. Block: 256. Word i gets mix64(seed + i);
// a byte-granular tail (or an unaligned dst) gets the low byte of the hash.
__global__ void fill_random_kernel(
  unsigned char* __restrict__ dst,  // [bytes]
  std::int64_t bytes, std::uint64_t seed) {
  const std::int64_t stride = std::int64_t{gridDim.x} * blockDim.x;
  const std::int64_t tid = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const bool aligned = reinterpret_cast<std::uintptr_t>(dst) % 8 == 0;
  const std::int64_t words = aligned ? bytes / 8 : 0;
  auto* w = reinterpret_cast<std::uint64_t*>(dst);
  for (std::int64_t i = tid; i < words; i += stride)
    w[i] = mix64(seed + static_cast<std::uint64_t>(i));
  for (std::int64_t i = words * 8 + tid; i < bytes; i += stride)
    dst[i] = static_cast<unsigned char>(
      mix64(~seed + static_cast<std::uint64_t>(i)));
}

unsigned grid_of(std::int64_t work, std::int64_t cap) {
  return static_cast<unsigned>(kernel::clamp_grid(work, cap));
}

cudaStream_t as_stream(void* s) {
  return static_cast<cudaStream_t>(s);
}

int last_error() {
  return static_cast<int>(cudaGetLastError());
}

/// programmatic_launch_ok's answer per device: 0 unknown, 1 no, 2 yes.
std::array<std::atomic<int>, 64> programmatic_known{};

/// The current device's entry in programmatic_known (its number in `dev`),
/// or null: no device to ask (an error that is not sticky: the launch
/// reports what is), or one past the table.
std::atomic<int>* programmatic_entry(int& dev) {
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  if (dev < 0 || dev >= static_cast<int>(programmatic_known.size()))
    return nullptr;
  return &programmatic_known[static_cast<std::size_t>(dev)];
}

/// The cudaError_t of the first refused launch (programmatic_launch_refusal),
/// cudaSuccess while none was.
std::atomic<int> first_refusal{cudaSuccess};

/// A driver refused the launch attribute on the current device with `err`:
/// no further launch there asks for it (nor pays a failed launch first),
/// and the first such error is kept.
void programmatic_launch_refused(cudaError_t err) {
  int none = cudaSuccess;
  first_refusal.compare_exchange_strong(none, static_cast<int>(err),
                                        std::memory_order_relaxed);
  int dev = 0;
  if (auto* known = programmatic_entry(dev))
    known->store(1, std::memory_order_relaxed);
}

} // namespace

/// Whether write_slots may be launched with programmatic dependent launch
/// on the current device: the device has it (compute capability 9.0 on)
/// and the code it runs was compiled for it. PTX of an older target (a
/// build for "80" run on an H200, JIT-compiled there) lacks the kernel's
/// griddepcontrol.wait, and launched that way would not wait for the
/// kernel before it (nor, in write_overlap::work, finish after it). Asked
/// once per device.
bool programmatic_launch_ok() {
  int dev = 0;
  auto* known = programmatic_entry(dev);
  if (known == nullptr)
    return false;
  if (int k = known->load(std::memory_order_relaxed))
    return k == 2;
  int major = 0;
  cudaFuncAttributes a{};
  const bool asked =
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev)
      == cudaSuccess
    && cudaFuncGetAttributes(&a, write_slots_kernel<int4, true>)
         == cudaSuccess;
  if (!asked) {
    cudaGetLastError(); // not sticky; asked again at the next launch
    return false;
  }
  const bool ok = major >= 9 && a.ptxVersion >= 90;
  // Unless a refusal came meanwhile (another thread's launch): it stays.
  int unknown = 0;
  if (!known->compare_exchange_strong(unknown, ok ? 2 : 1,
                                      std::memory_order_relaxed))
    return unknown == 2;
  return ok;
}

std::string programmatic_launch_refusal() {
  const auto err = static_cast<cudaError_t>(
    first_refusal.load(std::memory_order_relaxed));
  if (err == cudaSuccess)
    return {};
  return std::string{cudaGetErrorName(err)} + " (" + cudaGetErrorString(err)
         + ")";
}

int launch_copy_blocks(const pool_geometry& pool, const block_pair* pairs,
                       std::size_t num_pairs, void* stream,
                       int planes_per_cta, bool streaming) {
  if (num_pairs == 0)
    return 0;
  const auto block_bytes = static_cast<std::int64_t>(pool.block_bytes());
  const auto planes = std::int64_t{2} * pool.num_layers;
  const auto grid = as_dim3(kernel::copy_blocks_grid(
    static_cast<std::int64_t>(num_pairs), planes,
    planes_per_cta > 0 ? planes_per_cta : kernel::copy_planes_per_cta));
  const auto bits = address_bits(pool.base) | pool.block_bytes();
  return with_vector_type(bits, [&](auto tag) {
    using T = decltype(tag);
    auto k = streaming ? copy_blocks_kernel<T, true>
                       : copy_blocks_kernel<T, false>;
    k<<<grid, threads_per_block, 0, as_stream(stream)>>>(
      static_cast<char*>(pool.base), pairs,
      static_cast<std::int64_t>(num_pairs), planes,
      block_bytes * pool.num_blocks, block_bytes);
    return last_error();
  });
}

int launch_write_slots(const pool_geometry& pool, std::uint32_t layer,
                       const void* key, const void* value,
                       const std::int64_t* slots, std::size_t num_tokens,
                       void* stream, int rows_per_warp,
                       write_overlap overlap, bool early_slot) {
  if (num_tokens == 0)
    return 0;
  const auto plane_bytes = pool.block_bytes() * pool.num_blocks;
  auto k_plane = static_cast<char*>(pool.base) + std::size_t{layer} * 2 * plane_bytes;
  auto v_plane = k_plane + plane_bytes;
  const auto grid = as_dim3(kernel::write_slots_grid(
    static_cast<std::int64_t>(num_tokens),
    rows_per_warp > 0 ? rows_per_warp : kernel::write_rows_per_warp));
  const auto bits = address_bits(pool.base) | pool.row_bytes
                    | address_bits(key) | address_bits(value);
  const bool pdl = overlap != write_overlap::none && programmatic_launch_ok();
  // Without the attribute the kernel waits for nothing either way.
  const bool wait_first = overlap != write_overlap::work;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(threads_per_block);
  cfg.stream = as_stream(stream);
  cfg.attrs = &attr;
  cfg.numAttrs = pdl ? 1 : 0;
  return with_vector_type(bits, [&](auto tag) {
    using T = decltype(tag);
    auto launch = [&](auto kernel_fn) {
      auto go = [&] {
        return cudaLaunchKernelEx(&cfg, kernel_fn, k_plane, v_plane,
                                  static_cast<const char*>(key),
                                  static_cast<const char*>(value), slots,
                                  static_cast<std::int64_t>(num_tokens),
                                  static_cast<std::int64_t>(pool.row_bytes),
                                  wait_first);
      };
      auto err = go();
      if (err != cudaSuccess && cfg.numAttrs > 0) {
        // A driver that refuses the attribute: without it (the kernel's
        // wait then returns at once; stream order is the plain one), and
        // without it from now on if that launch works, the refusal kept
        // (programmatic_launch_refusal). A sticky error fails the second
        // launch the same way, and the caller gets that.
        const auto refusal = err;
        cudaGetLastError();
        cfg.numAttrs = 0;
        err = go();
        if (err == cudaSuccess)
          programmatic_launch_refused(refusal);
      }
      return static_cast<int>(err);
    };
    return early_slot ? launch(write_slots_kernel<T, true>)
                      : launch(write_slots_kernel<T, false>);
  });
}

int launch_write_layers(const pool_geometry& pool, std::uint32_t first_layer,
                        std::uint32_t num_layers, const void* key,
                        const void* value, std::size_t layer_stride,
                        const std::int64_t* slots, std::size_t num_tokens,
                        void* stream) {
  if (num_tokens == 0 || num_layers == 0)
    return 0;
  const auto plane_bytes = pool.block_bytes() * pool.num_blocks;
  // The stride moves the rows' addresses only past the first layer.
  const auto bits = address_bits(pool.base) | pool.row_bytes
                    | address_bits(key) | address_bits(value)
                    | (num_layers > 1 ? layer_stride : 0);
  constexpr auto max_y = static_cast<std::uint32_t>(kernel::max_grid_y);
  return with_vector_type(bits, [&](auto tag) {
    using T = decltype(tag);
    for (std::uint32_t done = 0; done < num_layers;) {
      const auto now = std::min(num_layers - done, max_y);
      const auto grid = kernel::write_layers_grid(
        static_cast<std::int64_t>(num_tokens), now);
      auto first_plane = static_cast<char*>(pool.base)
                         + std::size_t{first_layer + done} * 2 * plane_bytes;
      auto k = static_cast<const char*>(key) + std::size_t{done} * layer_stride;
      auto v = static_cast<const char*>(value) + std::size_t{done} * layer_stride;
      write_layers_kernel<T><<<as_dim3(grid),
                               threads_per_block, 0, as_stream(stream)>>>(
        first_plane, static_cast<std::int64_t>(plane_bytes), k, v,
        static_cast<std::int64_t>(layer_stride), slots,
        static_cast<std::int64_t>(num_tokens),
        static_cast<std::int64_t>(pool.row_bytes));
      if (auto err = last_error())
        return err;
      done += now;
    }
    return 0;
  });
}

int launch_gather_blocks(const pool_geometry& pool, std::uint32_t layer,
                         const std::uint32_t* blocks, std::size_t num_list,
                         std::size_t num_tokens, void* key_out,
                         void* value_out, void* stream, bool streaming) {
  if (num_tokens == 0)
    return 0;
  const auto bs = static_cast<std::int64_t>(pool.block_size);
  const auto chunks = kernel::gather_chunks(
    static_cast<std::int64_t>(num_list), static_cast<std::int64_t>(num_tokens),
    bs);
  const auto plane_bytes = pool.block_bytes() * pool.num_blocks;
  auto k_plane = static_cast<const char*>(pool.base) + std::size_t{layer} * 2 * plane_bytes;
  auto v_plane = k_plane + plane_bytes;
  const auto grid = as_dim3(kernel::gather_blocks_grid(chunks));
  const auto bits = address_bits(pool.base) | pool.row_bytes
                    | address_bits(key_out) | address_bits(value_out);
  return with_vector_type(bits, [&](auto tag) {
    using T = decltype(tag);
    auto k = streaming ? gather_blocks_kernel<T, true>
                       : gather_blocks_kernel<T, false>;
    k<<<grid, threads_per_block, 0, as_stream(stream)>>>(
      k_plane, v_plane, blocks, static_cast<char*>(key_out),
      static_cast<char*>(value_out), chunks,
      static_cast<std::int64_t>(num_tokens), bs,
      static_cast<std::int64_t>(pool.row_bytes));
    return last_error();
  });
}

// The copy engines' share of a swap, its long runs (swap_plan.hpp's
// split_runs; short runs go to the swap kernel above). Why one
// cudaMemcpy2DAsync per run: copy engines move the bytes without SM time,
// and one call moves a run's 2 * num_layers planes at once. The engines pay
// per row of such a copy, though: on the H200, rows of 32 KiB moved at
// 0.71-0.77 of pinned bandwidth, rows of 128 KiB and more at 0.92-1.0.
// vLLM's one cudaMemcpyAsync per block per plane also pays a call each.
// When a plane is wider than cudaDevAttrMaxPitch (2^31 - 1 bytes on Hopper: a
// large pool), 2D copies are refused; then every (run, plane) piece goes in
// one cudaMemcpyBatchAsync, still one call for the whole swap.
int launch_swap(const pool_geometry& pool, void* host_base,
                std::uint32_t num_host_blocks, const swap_run* runs,
                std::size_t num_runs, swap_direction dir,
                std::size_t max_pitch, void* stream) {
  const bool to_host = dir == swap_direction::device_to_host;
  const auto kind = to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice;
  auto dst_base = static_cast<char*>(to_host ? host_base : pool.base);
  auto src_base = static_cast<const char*>(to_host ? pool.base : host_base);
  const auto copies = swap_copies(pool, num_host_blocks, runs, num_runs, dir);
  std::vector<void*> dsts;
  std::vector<const void*> srcs;
  std::vector<std::size_t> sizes;
  for (const auto& c : copies) {
    if (c.dpitch <= max_pitch && c.spitch <= max_pitch) {
      auto err = cudaMemcpy2DAsync(dst_base + c.dst, c.dpitch, src_base + c.src,
                                   c.spitch, c.width, c.height, kind,
                                   as_stream(stream));
      if (err != cudaSuccess)
        return static_cast<int>(err);
      continue;
    }
    for (std::size_t q = 0; q < c.height; ++q) {
      dsts.push_back(dst_base + c.dst + q * c.dpitch);
      srcs.push_back(src_base + c.src + q * c.spitch);
      sizes.push_back(c.width);
    }
  }
  if (dsts.empty())
    return 0;
  // The pieces are disjoint, so their order within the batch is free; the
  // batch as a whole is in stream order, and so are its sources' reads.
  cudaMemcpyAttributes attr{};
  attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  std::size_t first = 0;
  auto err = cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(),
                                  dsts.size(), &attr, &first, 1,
                                  as_stream(stream));
  if (err == cudaSuccess)
    return 0;
  if (err != cudaErrorNotSupported && err != cudaErrorCallRequiresNewerDriver)
    return static_cast<int>(err);
  // No batch API here: one cudaMemcpyAsync per piece. Clear the refusal
  // first (it is not sticky), so that later launch checks do not see it.
  cudaGetLastError();
  for (std::size_t i = 0; i < dsts.size(); ++i)
    if ((err = cudaMemcpyAsync(dsts[i], srcs[i], sizes[i], kind,
                               as_stream(stream)))
        != cudaSuccess)
      return static_cast<int>(err);
  return 0;
}

int launch_swap_kernel(const pool_geometry& pool, void* host_base,
                       std::uint32_t num_host_blocks, const swap_run* runs,
                       std::size_t num_runs, swap_direction dir, void* stream,
                       int max_ctas) {
  if (num_runs == 0)
    return 0;
  const auto bb = pool.block_bytes();
  const auto planes = std::int64_t{2} * pool.num_layers;
  const auto grid = as_dim3(kernel::swap_runs_grid(
    static_cast<std::int64_t>(num_runs) * planes,
    max_ctas > 0 ? max_ctas : kernel::swap_ctas));
  const auto bits = address_bits(pool.base) | address_bits(host_base) | bb;
  return with_vector_type(bits, [&](auto tag) {
    using T = decltype(tag);
    swap_runs_kernel<T><<<grid, threads_per_block, 0, as_stream(stream)>>>(
      static_cast<char*>(pool.base), static_cast<char*>(host_base), runs,
      static_cast<std::int64_t>(num_runs), planes,
      static_cast<std::int64_t>(bb * pool.num_blocks),
      static_cast<std::int64_t>(bb * num_host_blocks),
      static_cast<std::int64_t>(bb),
      dir == swap_direction::device_to_host);
    return last_error();
  });
}

int launch_fill_random(void* dst, std::size_t bytes, std::uint64_t seed,
                       void* stream) {
  if (bytes == 0)
    return 0;
  const auto work = static_cast<std::int64_t>(bytes / 8 + 1);
  fill_random_kernel<<<grid_of((work + threads_per_block - 1)
                                 / threads_per_block,
                               4096),
                       threads_per_block, 0, as_stream(stream)>>>(
    static_cast<unsigned char*>(dst), static_cast<std::int64_t>(bytes), seed);
  return last_error();
}

namespace {

/// Every variant a launcher may pick, the storage's and the others
/// (gpu_bench's and the tests' direct launches, some behind a held stream).
template <class T>
cudaError_t preload_movers() {
  cudaFuncAttributes a;
  if (auto err = cudaFuncGetAttributes(&a, copy_blocks_kernel<T, true>))
    return err;
  if (auto err = cudaFuncGetAttributes(&a, copy_blocks_kernel<T, false>))
    return err;
  if (auto err = cudaFuncGetAttributes(&a, write_slots_kernel<T, true>))
    return err;
  if (auto err = cudaFuncGetAttributes(&a, write_slots_kernel<T, false>))
    return err;
  if (auto err = cudaFuncGetAttributes(&a, write_layers_kernel<T>))
    return err;
  if (auto err = cudaFuncGetAttributes(&a, swap_runs_kernel<T>))
    return err;
  if (auto err = cudaFuncGetAttributes(&a, gather_blocks_kernel<T, true>))
    return err;
  return cudaFuncGetAttributes(&a, gather_blocks_kernel<T, false>);
}

} // namespace

int preload_kernels() {
  // Every vector width with_vector_type may pick.
  for (auto err : {preload_movers<int4>(), preload_movers<int2>(),
                   preload_movers<int>(), preload_movers<short>(),
                   preload_movers<char>()})
    if (err != cudaSuccess)
      return static_cast<int>(err);
  cudaFuncAttributes a;
  return static_cast<int>(cudaFuncGetAttributes(&a, fill_random_kernel));
}

const char* cuda_error_text(int err) noexcept {
  return cudaGetErrorString(static_cast<cudaError_t>(err));
}

} // namespace kvactor::detail
