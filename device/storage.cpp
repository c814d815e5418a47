// Choosing and making a storage backend (storage.hpp): kind names, the auto
// rule, and the checks every kind shares.
#include "kvactor/device/storage.hpp"

#include <cstddef>
#include <new>
#include <string>

#include "kvactor/device/host_storage.hpp"
#include "kvactor/device/null_storage.hpp"
#include "kvactor/device/validate.hpp"
#include "kvactor/messages/error.hpp"

#if KVACTOR_HAVE_CUDA
#  include "kvactor/device/cuda_storage.hpp"
#endif

namespace kvactor {

const char* to_string(storage_kind x) noexcept {
  switch (x) {
    case storage_kind::none: return "none";
    case storage_kind::host: return "host";
    case storage_kind::cuda: return "cuda";
  }
  return "unknown";
}

namespace {

thread_local bool waking = false;

} // namespace

bool storage::in_wake() noexcept {
  return waking;
}

namespace detail {

wake_scope::wake_scope() noexcept {
  waking = true;
}

wake_scope::~wake_scope() {
  waking = false;
}

} // namespace detail

bool cuda_device_available() noexcept {
#if KVACTOR_HAVE_CUDA
  std::string why;
  return detail::cuda_device_count(why) > 0;
#else
  return false;
#endif
}

caf::expected<std::unique_ptr<storage>>
make_storage(const storage_options& opts) {
  auto kind = opts.kind;
  if (kind == "auto") {
    kind = cuda_device_available() ? "cuda" : "host";
    // Only cuda sizes the pool from memory; say so by the config's names.
    if (kind == "host" && opts.layout.num_blocks == 0)
      return make_error(errc::invalid_config,
                        "num_gpu_blocks: storage 'auto' found no CUDA device "
                        "and fell back to 'host', which needs a block count "
                        "(num_gpu_blocks > 0); 0 sizes the pool from GPU "
                        "memory only");
  }
  if (kind == "none") {
    if (auto err = detail::check_layout(opts.layout, true))
      return err;
    return std::unique_ptr<storage>{new null_storage(opts.layout)};
  }
  if (kind == "host") {
    if (auto err = detail::check_layout(opts.layout, true))
      return err;
    return host_storage::make(opts.layout);
  }
  if (kind == "cuda") {
#if KVACTOR_HAVE_CUDA
    return cuda_storage::make(opts);
#else
    return make_error(errc::device_failure,
                      "storage cuda: kvactor was built without CUDA");
#endif
  }
  return make_error(errc::invalid_config,
                    "storage: unknown kind (none, host, cuda, auto): "
                      + opts.kind);
}

caf::expected<ticket>
storage::write_layers(std::uint32_t first_layer, std::uint32_t num_layers,
                      const void* key, const void* value,
                      std::size_t layer_stride,
                      const std::int64_t* slot_mapping,
                      std::size_t num_tokens) {
  // The whole batch first: past this, a layer's write fails only when the
  // backend itself failed (device_failure), which fails all its work.
  if (auto err = detail::check_write_layers(layout_, first_layer, num_layers,
                                            key, value, layer_stride,
                                            slot_mapping, num_tokens))
    return err;
  const auto stride = layer_stride != 0 ? layer_stride
                                        : num_tokens * layout_.row_bytes();
  auto k = static_cast<const std::byte*>(key);
  auto v = static_cast<const std::byte*>(value);
  caf::expected<ticket> last{ticket{0}};
  for (std::uint32_t i = 0; i < num_layers; ++i) {
    last = write_slots(first_layer + i, num_tokens > 0 ? k + i * stride : k,
                       num_tokens > 0 ? v + i * stride : v, slot_mapping,
                       num_tokens);
    if (!last)
      return last;
  }
  return last;
}

std::shared_ptr<std::uint8_t> storage::host_buffer(std::size_t bytes) {
  return std::shared_ptr<std::uint8_t>(new (std::nothrow) std::uint8_t[bytes],
                                       std::default_delete<std::uint8_t[]>());
}

} // namespace kvactor
