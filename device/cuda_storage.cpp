// Storage kind "cuda": memory, streams, ordering and tickets around the
// kernels of kernels.cu (cuda_storage.hpp); waiting for tickets and the
// wake: cuda_storage_wait.cpp.
#include "kvactor/device/cuda_storage.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>

#include <caf/error.hpp>
#include <cuda_runtime_api.h>

#include "kvactor/config/cache_limits.hpp"
#include "kvactor/device/cuda_device_guard.hpp"
#include "kvactor/device/kernels.hpp"
#include "kvactor/device/validate.hpp"
#include "kvactor/messages/error.hpp"

namespace kvactor {

namespace {

std::string cuda_text(cudaError_t err) {
  return std::string{cudaGetErrorName(err)} + " (" + cudaGetErrorString(err)
         + ")";
}

caf::error device_failure(std::string text) {
  return make_error(errc::device_failure, std::move(text));
}

/// A fraction as %g prints it: 1e-09, not std::to_string's 0.000000.
std::string fraction_text(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

/// Device memory a pool sized from gpu_memory_utilization leaves free.
constexpr std::size_t kv_headroom = std::size_t{128} << 20;

} // namespace

int detail::cuda_device_count(std::string& why) noexcept {
  int n = 0;
  auto err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    cudaGetLastError(); // not sticky: leave no trace for later checks
    why = cuda_text(err);
    return 0;
  }
  if (n == 0)
    why = "no CUDA device";
  return n;
}

caf::expected<std::unique_ptr<storage>>
cuda_storage::make(const storage_options& opts) {
  std::string why;
  auto count = detail::cuda_device_count(why);
  if (count == 0)
    return device_failure("storage cuda: no CUDA device answers: " + why);
  if (opts.device_index < 0 || opts.device_index >= count)
    return device_failure("storage cuda: no device " + std::to_string(opts.device_index)
                          + " (" + std::to_string(count) + " present)");
  // Everything below runs on the storage's device; the caller's thread (the
  // spawn_kv_cache caller's) gets its own device back on return. Declared
  // before `self`, so a storage that fails init is destroyed on the device.
  detail::cuda_device_guard on_device;
  if (auto err = on_device.enter(opts.device_index))
    return device_failure("storage cuda: cudaSetDevice("
                          + std::to_string(opts.device_index)
                          + "): " + cuda_text(static_cast<cudaError_t>(err)));
  auto layout = opts.layout;
  if (layout.num_blocks == 0) {
    auto util = opts.gpu_memory_utilization;
    if (!(util > 0 && util <= 1))
      return make_error(errc::invalid_config,
                        "gpu_memory_utilization must be in (0, 1]: "
                          + std::to_string(util));
    if (auto err = detail::check_layout(layout, false))
      return err;
    std::size_t free_bytes = 0;
    std::size_t total_bytes = 0;
    if (auto err = cudaMemGetInfo(&free_bytes, &total_bytes)) {
      cudaGetLastError(); // as in fail(): leave no trace for launch checks
      return device_failure("storage cuda: cudaMemGetInfo: " + cuda_text(err));
    }
    // What the pool may take: the fraction asked for, but never the last
    // kv_headroom bytes, which the upload ring, the kernels' launches and
    // the context's own allocations need after the pool (with 1.0 the pool
    // would leave less than a block and start would fail later).
    auto usable = std::min(util * static_cast<double>(free_bytes),
                           static_cast<double>(free_bytes)
                             - static_cast<double>(kv_headroom));
    auto blocks = std::floor(std::max(usable, 0.0)
                             / static_cast<double>(layout.bytes_per_block()));
    // No more than a config may name (validate() checks the sized
    // config again, after the bookkeeping below was allocated).
    blocks = std::min(blocks, static_cast<double>(max_num_blocks));
    if (blocks < 1)
      return device_failure("storage cuda: gpu_memory_utilization "
                            + fraction_text(util) + " of "
                            + std::to_string(free_bytes)
                            + " free bytes, less "
                            + std::to_string(kv_headroom)
                            + " kept free, holds no block of "
                            + std::to_string(layout.bytes_per_block())
                            + " bytes");
    layout.num_blocks = static_cast<std::uint32_t>(blocks);
  }
  if (auto err = detail::check_layout(layout, true))
    return err;
  // The host-side bookkeeping (hazards, slot planner: some 50 bytes a
  // block) comes before any cudaMalloc: a mistaken block count fails here,
  // as an error naming it, not as an exception out of spawn_kv_cache.
  std::unique_ptr<cuda_storage> self;
  try {
    self.reset(new cuda_storage(layout, opts.device_index));
  } catch (const std::bad_alloc&) {
    return device_failure("storage cuda: no host memory for the bookkeeping of "
                          + std::to_string(layout.num_blocks) + " device and "
                          + std::to_string(layout.num_host_blocks)
                          + " host blocks");
  }
  if (auto err = self->init())
    return err;
  return std::unique_ptr<storage>{std::move(self)};
}

cuda_storage::cuda_storage(storage_layout layout, int device)
  : storage(layout),
    device_(device),
    slots_(layout.num_blocks, layout.block_size),
    uploads_(tickets_),
    device_hazards_(layout.num_blocks, num_streams),
    host_hazards_(layout.num_host_blocks, num_streams),
    chain_(layout.num_layers) {
}

caf::error cuda_storage::init() {
  const auto dev_bytes = layout_.device_bytes();
  void* p = nullptr;
  if (auto err = cudaMalloc(&p, dev_bytes)) {
    cudaGetLastError();
    return device_failure("storage cuda: cudaMalloc of " + std::to_string(dev_bytes)
                          + " bytes (" + std::to_string(layout_.num_blocks)
                          + " blocks x " + std::to_string(layout_.bytes_per_block())
                          + " bytes) failed: " + cuda_text(err));
  }
  pools_ = static_cast<std::byte*>(p);
  if (layout_.num_host_blocks > 0) {
    const auto host_bytes = layout_.host_bytes();
    if (auto err = cudaHostAlloc(&p, host_bytes, cudaHostAllocDefault)) {
      cudaGetLastError();
      return device_failure("storage cuda: cudaHostAlloc of "
                            + std::to_string(host_bytes) + " bytes ("
                            + std::to_string(layout_.num_host_blocks)
                            + " host blocks) failed: " + cuda_text(err));
    }
    host_tier_ = static_cast<std::byte*>(p);
    // Zeroed as the pools below are, for the same reason (cudaHostAlloc
    // promises no contents): host memory, so a plain memset.
    // NOTE: one thread at some GB/s - about 0.1 s per GiB of host tier,
    // once at start.
    std::memset(host_tier_, 0, host_bytes);
  }
  if (auto err = detail::preload_kernels())
    return fail(err, "cudaFuncGetAttributes (loading the kernels)");
  for (auto& s : streams_)
    if (auto err = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking))
      return fail(err, "cudaStreamCreate");
  for (auto& s : notifiers_)
    if (auto err = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking))
      return fail(err, "cudaStreamCreate(notifier)");
  // The pools start zeroed, as the host backend's do (its zero pages), and
  // so does the host tier (above): a block nobody wrote reads the same on
  // both, the host backend being the reference. On a stream of ours and
  // waited for there - not the whole device, whose other work in the
  // process is none of ours. (An H200 writes about 3 TB/s: some 40 ms for
  // its whole memory, once.)
  if (auto err = cudaMemsetAsync(pools_, 0, dev_bytes, streams_[0]))
    return fail(err, "cudaMemsetAsync (zeroing the pools)");
  if (auto err = cudaStreamSynchronize(streams_[0]))
    return fail(err, "cudaStreamSynchronize (zeroing the pools)");
  // Slots that hold the largest batch the layout allows without growing: a
  // copy of num_blocks pairs or a write to every slot (8 bytes each), a
  // gather of num_blocks blocks (4 bytes each); the ring caps this.
  const auto ring_slot = detail::upload_ring::initial_capacity(
    std::size_t{8} * layout_.num_blocks * layout_.block_size);
  if (auto err = uploads_.init(device_, std::size_t{8} * layout_.num_blocks
                                          * layout_.block_size)) {
    // The sizes, as for the pools: this can fail when they took the rest.
    auto what = "upload ring (" + std::to_string(detail::upload_ring::num_slots)
                + " slots x " + std::to_string(ring_slot)
                + " bytes, pinned and on the device)";
    return fail(err, what.c_str());
  }
  // The swap kernel's runs: a run per host block at most.
  if (layout_.num_host_blocks > 0)
    for (auto& ring : swap_uploads_)
      if (auto err = ring.init(device_, sizeof(detail::swap_run)
                                          * layout_.num_host_blocks)) {
        auto what = "swap upload ring ("
                    + std::to_string(detail::upload_ring::num_slots)
                    + " slots x "
                    + std::to_string(detail::upload_ring::initial_capacity(
                      sizeof(detail::swap_run) * layout_.num_host_blocks))
                    + " bytes, pinned and on the device)";
        return fail(err, what.c_str());
      }
  int pitch = 0;
  if (auto err = cudaDeviceGetAttribute(&pitch, cudaDevAttrMaxPitch, device_))
    return fail(err, "cudaDeviceGetAttribute(MaxPitch)");
  max_pitch_ = static_cast<std::size_t>(pitch);
  return caf::none;
}

cuda_storage::~cuda_storage() {
  // Errors are ignored here: a failed device cannot be cleaned up better.
  // The notifiers wait on the work streams' events and their callbacks use
  // the wake box: synchronising them (which returns once every queued host
  // function returned) before anything is destroyed means no callback runs
  // on a dead object. After a fault CUDA calls no more and returns the
  // error at once - one that had started may still run, so the box stays.
  // The destroying thread (the facade owner's, say) works on device_ until
  // the members' own cleanup (upload ring, ticket events) is done too, then
  // gets its device back: exit_device_ is the first member, destroyed last.
  exit_device_.enter(device_);
  // A stalled GPU (mark_stalled) whose work still runs: synchronising would
  // hang the destroying thread, and freeing what the work may still touch
  // would hand it to someone else. Everything is left to the process.
  if (stalled_->load() && busy()) {
    (void) wake_box_.release();
    uploads_.abandon();
    for (auto& r : swap_uploads_)
      r.abandon();
    return;
  }
  for (auto s : streams_)
    if (s != nullptr)
      cudaStreamSynchronize(s);
  bool callbacks_done = true;
  for (auto s : notifiers_)
    if (s != nullptr && cudaStreamSynchronize(s) != cudaSuccess)
      callbacks_done = false;
  if (!callbacks_done)
    (void) wake_box_.release(); // see wake_box
  for (auto s : notifiers_)
    if (s != nullptr)
      cudaStreamDestroy(s);
  for (auto s : streams_)
    if (s != nullptr)
      cudaStreamDestroy(s);
  cudaFree(pools_);
  cudaFreeHost(host_tier_);
}

void* cuda_storage::layer_base(std::uint32_t layer) noexcept {
  if (layer >= layout_.num_layers)
    return nullptr;
  return pools_ + std::size_t{layer} * layout_.layer_bytes(layout_.num_blocks);
}

void* cuda_storage::host_layer_base(std::uint32_t layer) noexcept {
  if (host_tier_ == nullptr || layer >= layout_.num_layers)
    return nullptr;
  return host_tier_
         + std::size_t{layer} * layout_.layer_bytes(layout_.num_host_blocks);
}

detail::pool_geometry cuda_storage::geometry() const noexcept {
  return {pools_, layout_.num_layers, layout_.num_blocks, layout_.block_size,
          layout_.block_bytes() / layout_.block_size};
}

caf::error cuda_storage::usable() {
  if (!failed_.empty())
    return device_failure(failed_);
  // Left current on purpose (no guard): ops and waits come from the device
  // actor's own thread (detached by default), which works on device_ alone;
  // switching back after every op would cost two runtime calls per op.
  if (auto err = cudaSetDevice(device_))
    return fail(err, "cudaSetDevice");
  return caf::none;
}

caf::error cuda_storage::upload_failed(int err, const char* what,
                                       std::size_t bytes) {
  if (err != cudaErrorMemoryAllocation)
    return fail(err, what);
  cudaGetLastError(); // not sticky: not this thread's next launch's error
  return device_failure(std::string{"storage cuda: "} + what + ": no memory to stage "
                        + std::to_string(bytes) + " bytes ("
                        + cuda_text(static_cast<cudaError_t>(err))
                        + "); nothing was launched");
}

caf::error cuda_storage::fail(int err, const std::string& what) {
  // The error now lives in failed_. Take it off the runtime's last error
  // too: a failed init step (stream or event creation, the upload ring's
  // cudaHostAlloc) is not sticky, and left there it would be reported by
  // the next launch check on this thread (kernels.cu's cudaGetLastError()),
  // of another storage made after this one failed, as that launch's own.
  // A sticky error stays whatever is done here.
  cudaGetLastError();
  if (failed_.empty())
    failed_ = std::string{"storage cuda: "} + what + ": "
              + cuda_text(static_cast<cudaError_t>(err));
  return device_failure(failed_);
}

caf::error cuda_storage::order(const detail::hazard_tracker::waits& w,
                               stream_role role) {
  const auto self = stream_of(role);
  for (std::size_t s = 0; s < num_streams; ++s) {
    if (s == self || w[s] == 0)
      continue;
    if (auto ev = tickets_.event(w[s]))
      if (auto err = cudaStreamWaitEvent(streams_[self], ev, 0))
        return fail(err, "cudaStreamWaitEvent");
  }
  return caf::none;
}

caf::expected<ticket> cuda_storage::submit(stream_role role) {
  auto stream = streams_[stream_of(role)];
  // A failure here leaves the op's work queued with no ticket that anyone
  // will wait for: let it land before the failure lets the pool give its
  // blocks to others (an error path, as swap()'s: blocking here is fine).
  auto failed = [&](int err, const char* what) {
    cudaStreamSynchronize(stream);
    return fail(err, what);
  };
  const auto t = next_ticket_;
  if (auto err = tickets_.record(t, stream))
    return failed(err, "cudaEventRecord");
  ++next_ticket_;
  if (has_wake_) {
    // On the notifier, after the op's event: the work stream's next op need
    // not wait for CUDA's callback thread. The notifier waits for the record
    // seen now, so the event may be reused once t completes.
    auto notifier = notifiers_[stream_of(role)];
    if (auto err = cudaStreamWaitEvent(notifier, tickets_.event(t), 0))
      return failed(err, "cudaStreamWaitEvent(notifier)");
    if (auto err = cudaLaunchHostFunc(notifier, &cuda_storage::on_complete,
                                      wake_box_.get()))
      return failed(err, "cudaLaunchHostFunc");
  }
  if (auto err = tickets_.trim())
    return failed(err, "cudaEventQuery");
  return t;
}

caf::error cuda_storage::check_accessible(const void* p, const char* op,
                                          const char* what) {
  // The first byte only: whether the allocation holds all the rows the op
  // will touch is the caller's promise (cuda_storage.hpp).
  if (p == nullptr)
    return caf::none;
  cudaPointerAttributes attr{};
  if (auto err = cudaPointerGetAttributes(&attr, p)) {
    cudaGetLastError();
    return make_error(errc::invalid_request, std::string{op} + ": " + what
                                               + " is not a CUDA pointer: "
                                               + cuda_text(err));
  }
  if (attr.type == cudaMemoryTypeUnregistered)
    return make_error(errc::invalid_request,
                      std::string{op} + ": " + what
                        + " is pageable host memory: pass device or pinned "
                          "memory");
  // Another GPU's memory would fault inside the kernel (a sticky error
  // failing the storage for good) rather than be refused here.
  if (attr.type == cudaMemoryTypeDevice && attr.device != device_)
    return make_error(errc::invalid_request,
                      std::string{op} + ": " + what + " is memory of device "
                        + std::to_string(attr.device) + ", not of device "
                        + std::to_string(device_));
  return caf::none;
}

std::shared_ptr<std::uint8_t> cuda_storage::host_buffer(std::size_t bytes) {
  void* p = nullptr;
  // The caller's thread may never have named a device: without this, the
  // allocation would make a context on device 0. The guard gives the thread
  // its own device back on return (it took a failure off the last error).
  detail::cuda_device_guard on_device;
  if (on_device.enter(device_) != cudaSuccess)
    return nullptr;
  if (cudaHostAlloc(&p, bytes, cudaHostAllocDefault) != cudaSuccess) {
    cudaGetLastError(); // a failed allocation is not a sticky device error
    return nullptr;
  }
  // Freed on whichever thread drops the last reference (a fresh one, when
  // the device actor dies in a wake): on the storage's device too, or a
  // thread that never named one would start device 0's context.
  // After a stall it is leaked: cudaFreeHost would wait for the device.
  auto dev = device_;
  return std::shared_ptr<std::uint8_t>(static_cast<std::uint8_t*>(p),
                                       [dev, stalled = stalled_](std::uint8_t* x) {
                                         if (stalled->load())
                                           return;
                                         detail::cuda_device_guard guard;
                                         guard.enter(dev);
                                         cudaFreeHost(x);
                                       });
}

} // namespace kvactor
