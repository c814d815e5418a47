// Launchers of kvactor's CUDA kernels and batched copies, in plain C++ (no
// CUDA types: streams pass as void*), callable from code that never sees a
// CUDA header. Defined in kernels.cu; only built with KVACTOR_HAVE_CUDA.
//
// Every launcher enqueues on `stream` (a cudaStream_t), never synchronizes and
// returns the launch's cudaError_t as an int (0 = success); a fault while the
// work runs surfaces later, at the next event query or synchronisation.
// All byte-moving work is dtype-agnostic: it moves the widest vectors (up to
// 16 bytes) that the sizes and pointers' alignment allow.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kvactor::detail {

/// Whether the byte movers load and store with evict-first hints
/// (ld/st.global.cs) rather than plain ones. Measured on the H200
/// (gpu_bench, bench/HISTORY.md): copy_blocks moved 93 % of the
/// device-to-device memcpy bandwidth with plain ones in every run, 89 %
/// with the hints in five runs of six; gather_blocks 94 % and 92 % against
/// 91 % and 88 %; write_slots within 1 % either way, but its early slot
/// read (launch_write_slots) spilled registers with the hints (runs 5 and
/// 9), and it has no choice since.
constexpr bool streaming_hints = false;

/// Where and how big the device pools are (storage.hpp's layout):
///   base: [num_layers][2 (K, V)][num_blocks][block_size][num_heads][head_dim]
/// row_bytes = num_heads * head_dim * element size (one token of K or V).
struct pool_geometry {
  void* base = nullptr;
  std::uint32_t num_layers = 0;
  std::uint32_t num_blocks = 0;
  std::uint32_t block_size = 0;
  std::size_t row_bytes = 0;

  std::size_t block_bytes() const noexcept {
    return std::size_t{block_size} * row_bytes;
  }
};

/// One block copy; layout-compatible with kvactor::block_copy.
struct block_pair {
  std::uint32_t src;
  std::uint32_t dst;
};

/// `count` consecutive device blocks from `device_first` paired with as many
/// consecutive host-tier blocks from `host_first`.
struct swap_run {
  std::uint32_t device_first;
  std::uint32_t host_first;
  std::uint32_t count;
};

enum class swap_direction : std::uint8_t { device_to_host, host_to_device };

/// Copies, for each pair, the K and V block of every layer: one launch for the
/// whole batch. REQUIRES: `pairs` in device memory, [num_pairs]; ids below
/// num_blocks; destinations distinct and not sources. `planes_per_cta`: how
/// many of a pair's 2 * num_layers planes one CUDA block copies (0: the
/// measured default, kernel_bodies.hpp's copy_planes_per_cta; gpu_bench
/// sweeps it). `streaming`: evict-first loads and stores (ld/st.cs) or
/// plain ones (streaming_hints; gpu_bench compares the two).
int launch_copy_blocks(const pool_geometry& pool, const block_pair* pairs,
                       std::size_t num_pairs, void* stream,
                       int planes_per_cta = 0,
                       bool streaming = streaming_hints);

/// How a write_slots kernel overlaps the kernel before it in its stream:
/// programmatic dependent launch (sm_90 on; without it every mode is none).
enum class write_overlap : std::uint8_t {
  /// A plain launch: it starts once the kernel before it finished.
  none,
  /// Launched while the kernel before it runs; waits for the kernels before
  /// it to finish before it touches memory, and only then lets the next
  /// kernel launch. Stream order holds exactly; only the launch's latency
  /// overlaps.
  launch,
  /// Launched while the kernel before it runs, works at once and lets the
  /// next kernel launch at once; waits for the kernels before it only
  /// before it exits, so kernels still finish in stream order (an event
  /// after it still covers everything before it). It may overlap every
  /// kernel back to the last one launched otherwise (its chain), so only
  /// for a write that none of them touches or feeds: another layer of the
  /// same mapping, right after write_slots kernels of other layers
  /// (write_chain.hpp). A forward pass's layers then overlap one kernel's
  /// tail with the next one's start.
  work,
};

/// Whether write_slots kernels launched now (on the current device) use
/// programmatic dependent launch: compute capability 9.0 on, and kernels
/// compiled for it (an older target's PTX lacks the waits). Without it
/// every write_overlap is a plain launch. Asked of the device once; false
/// from then on if a driver refuses the launch attribute there (the launch
/// goes without it).
bool programmatic_launch_ok();

/// Why programmatic_launch_ok() went false after a launch: the CUDA error
/// (name and text) of the first launch with the attribute that a driver
/// refused, on any device, when the launch then went without it; empty if
/// none was refused. A device that lacks it (compute capability below 9.0,
/// or no sm_90 code) refuses nothing: empty too.
std::string programmatic_launch_refusal();

/// Scatters token i's K and V rows (key, value: [num_tokens, num_heads,
/// head_dim], device-accessible) of layer `layer` into slot slots[i]; -1
/// skips. REQUIRES: `slots` in device memory; every slot -1 or in range.
/// `rows_per_warp`: rows (one token's K or V) each warp moves (0: the
/// measured default, kernel_bodies.hpp's write_rows_per_warp).
/// Loads and stores as streaming_hints says. `overlap`: see write_overlap.
/// `early_slot`: a row of one round (at most 32 lanes x 8 vectors: 4 KiB
/// with 16-byte vectors) reads its slot and its bytes at once, rather than
/// the slot first. Measured on the H200 for 4096 tokens x 8 heads a layer
/// (kernels of 8 us, one wave, whose fixed latencies weigh), 32 layers back
/// to back: 0.65 of memcpy bandwidth with neither, 0.74 with every layer
/// in write_overlap::launch, 0.77 with the early slot as well (session 38,
/// when a launch-mode kernel let the next one launch before it waited).
/// The storage now launches a pass's next layers in write_overlap::work,
/// and a launch-mode kernel waits first: neither measured yet; gpu_bench
/// compares the modes.
int launch_write_slots(const pool_geometry& pool, std::uint32_t layer,
                       const void* key, const void* value,
                       const std::int64_t* slots, std::size_t num_tokens,
                       void* stream, int rows_per_warp = 0,
                       write_overlap overlap = write_overlap::launch,
                       bool early_slot = true);

/// launch_write_slots for the `num_layers` layers from `first_layer` in one
/// launch (grid: write_slots' x, one row of CUDA blocks per layer, in
/// launches of at most 65535 layers): layer first_layer + i's rows at
/// key + i * layer_stride and value + i * layer_stride. For a batch of
/// every layer's K/V at once, where per-layer kernels would each pay their
/// launch and tail. A plain launch, ordered after everything before it;
/// the storage never queues a write_overlap::work kernel right behind it
/// (a write_slots after it starts a new chain). REQUIRES: as
/// launch_write_slots, for every layer; with num_layers > 1, layer_stride
/// at least num_tokens rows (0 is not "packed" here: every layer would
/// read layer 0's rows).
int launch_write_layers(const pool_geometry& pool, std::uint32_t first_layer,
                        std::uint32_t num_layers, const void* key,
                        const void* value, std::size_t layer_stride,
                        const std::int64_t* slots, std::size_t num_tokens,
                        void* stream);

/// Copies the first `num_tokens` tokens of `blocks` ([num_list], device
/// memory) of layer `layer` into key_out and value_out ([num_tokens,
/// num_heads, head_dim], device-accessible).
/// REQUIRES: num_tokens <= num_list * block_size; ids in range.
int launch_gather_blocks(const pool_geometry& pool, std::uint32_t layer,
                         const std::uint32_t* blocks, std::size_t num_list,
                         std::size_t num_tokens, void* key_out,
                         void* value_out, void* stream,
                         bool streaming = streaming_hints);

/// Moves every layer's K and V of each run between the device pools and the
/// host tier (`host_base`: the same layout with `num_host_blocks`, pinned).
/// One cudaMemcpy2DAsync per run covers all 2 * num_layers planes (rows of
/// count * block_bytes, one pitch per side); if a pitch exceeds `max_pitch`
/// (cudaDevAttrMaxPitch) every (run, plane) piece goes in one
/// cudaMemcpyBatchAsync instead (one cudaMemcpyAsync per piece only where the
/// runtime or driver lacks the batch API). `runs` is host memory and may be
/// reused on return.
int launch_swap(const pool_geometry& pool, void* host_base,
                std::uint32_t num_host_blocks, const swap_run* runs,
                std::size_t num_runs, swap_direction dir,
                std::size_t max_pitch, void* stream);

/// The same moves as launch_swap by a kernel instead of the copy engines:
/// the GPU reads and writes the pinned host tier directly (zero-copy over
/// PCIe), one CUDA block per (run, plane) piece at a time, at most
/// `max_ctas` CUDA blocks (0: kernel_bodies.hpp's swap_ctas). For short
/// runs, where each copy-engine copy costs more than its bytes.
/// REQUIRES: `runs` in device memory, [num_runs]; `host_base` pinned.
int launch_swap_kernel(const pool_geometry& pool, void* host_base,
                       std::uint32_t num_host_blocks, const swap_run* runs,
                       std::size_t num_runs, swap_direction dir, void* stream,
                       int max_ctas = 0);

/// Fills `bytes` bytes at `dst` (device-accessible) with pseudo-random bytes
/// derived from `seed` (a hash of the offset: no two 8-byte words alike).
/// For tests and benchmarks.
int launch_fill_random(void* dst, std::size_t bytes, std::uint64_t seed,
                       void* stream);

/// Loads every kernel above into the current device's context now. CUDA
/// loads kernels lazily (CUDA_MODULE_LOADING=LAZY, Linux's default since
/// 12.2), at their first launch, and a load may wait for the context's
/// streams - behind a long swap, or forever behind a stream a test or a
/// benchmark holds at a host function. cuda_storage::init calls this once.
int preload_kernels();

/// cudaGetErrorString for a code these launchers return.
const char* cuda_error_text(int err) noexcept;

} // namespace kvactor::detail
