// Storage kind "host": the reference backend, plain memcpy (host_storage.hpp).
#include "kvactor/device/host_storage.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "kvactor/device/validate.hpp"
#include "kvactor/device/zero_pages.hpp"
#include "kvactor/messages/error.hpp"

namespace kvactor {

namespace {

caf::error no_memory(const char* what, std::size_t bytes) {
  return make_error(errc::device_failure,
                    std::string{"host storage: cannot allocate "} + what + ": "
                      + std::to_string(bytes) + " bytes");
}

} // namespace

caf::expected<std::unique_ptr<storage>>
host_storage::make(storage_layout layout) {
  // Zero pages: a big pool costs no time until it is touched.
  auto pools = allocate_zero_pages(layout.device_bytes());
  if (pools == nullptr)
    return no_memory("device pools", layout.device_bytes());
  std::byte* tier = nullptr;
  if (layout.num_host_blocks > 0) {
    tier = allocate_zero_pages(layout.host_bytes());
    if (tier == nullptr) {
      release_zero_pages(pools, layout.device_bytes());
      return no_memory("host tier", layout.host_bytes());
    }
  }
  return std::unique_ptr<storage>{new host_storage(layout, pools, tier)};
}

host_storage::host_storage(storage_layout layout, std::byte* pools,
                           std::byte* host_tier)
  : storage(layout), pools_(pools), host_tier_(host_tier) {
}

host_storage::~host_storage() {
  release_zero_pages(pools_, layout_.device_bytes());
  release_zero_pages(host_tier_, layout_.host_bytes());
}

void* host_storage::layer_base(std::uint32_t layer) noexcept {
  if (layer >= layout_.num_layers)
    return nullptr;
  return plane(pools_, layout_.num_blocks, layer, 0);
}

void* host_storage::host_layer_base(std::uint32_t layer) noexcept {
  if (host_tier_ == nullptr || layer >= layout_.num_layers)
    return nullptr;
  return plane(host_tier_, layout_.num_host_blocks, layer, 0);
}

std::byte* host_storage::plane(std::byte* base, std::uint32_t blocks,
                               std::uint32_t layer,
                               std::uint32_t kv) const noexcept {
  return base + (std::size_t{layer} * 2 + kv) * blocks * layout_.block_bytes();
}

void host_storage::move_block(std::byte* dst, std::uint32_t dst_blocks,
                              block_id to, std::byte* src,
                              std::uint32_t src_blocks, block_id from) {
  const auto bb = layout_.block_bytes();
  for (std::uint32_t layer = 0; layer < layout_.num_layers; ++layer)
    for (std::uint32_t kv = 0; kv < 2; ++kv)
      std::memcpy(plane(dst, dst_blocks, layer, kv) + std::size_t{to} * bb,
                  plane(src, src_blocks, layer, kv) + std::size_t{from} * bb,
                  bb);
}

ticket host_storage::complete() {
  auto t = next_ticket_++;
  if (wake_)
    wake_();
  return t;
}

caf::expected<ticket>
host_storage::copy_blocks(const std::vector<block_copy>& pairs) {
  if (auto err = detail::check_copy(layout_, pairs))
    return err;
  // Sources and destinations are disjoint (checked), so order is irrelevant.
  for (auto& p : pairs)
    move_block(pools_, layout_.num_blocks, p.dst, pools_, layout_.num_blocks,
               p.src);
  return complete();
}

caf::expected<ticket>
host_storage::swap_out(const std::vector<block_move>& moves) {
  if (auto err = detail::check_swap(layout_, moves, "swap_out"))
    return err;
  for (auto& m : moves)
    move_block(host_tier_, layout_.num_host_blocks, m.host_block, pools_,
               layout_.num_blocks, m.device_block);
  return complete();
}

caf::expected<ticket>
host_storage::swap_in(const std::vector<block_move>& moves) {
  if (auto err = detail::check_swap(layout_, moves, "swap_in"))
    return err;
  for (auto& m : moves)
    move_block(pools_, layout_.num_blocks, m.device_block, host_tier_,
               layout_.num_host_blocks, m.host_block);
  return complete();
}

caf::expected<ticket>
host_storage::write_slots(std::uint32_t layer, const void* key,
                          const void* value, const std::int64_t* slot_mapping,
                          std::size_t num_tokens) {
  if (auto err = detail::check_write(layout_, layer, key, value, slot_mapping,
                                     num_tokens))
    return err;
  // Within a block, tokens are rows of row bytes, so slot s (block b, offset
  // o) starts at b * block_bytes + o * row = s * row.
  const auto row = layout_.block_bytes() / layout_.block_size;
  auto k_plane = plane(pools_, layout_.num_blocks, layer, 0);
  auto v_plane = plane(pools_, layout_.num_blocks, layer, 1);
  auto k_in = static_cast<const std::byte*>(key);
  auto v_in = static_cast<const std::byte*>(value);
  for (std::size_t i = 0; i < num_tokens; ++i) {
    auto s = slot_mapping[i];
    if (s < 0)
      continue;
    std::memcpy(k_plane + static_cast<std::size_t>(s) * row, k_in + i * row,
                row);
    std::memcpy(v_plane + static_cast<std::size_t>(s) * row, v_in + i * row,
                row);
  }
  return complete();
}

caf::expected<ticket>
host_storage::gather_blocks(std::uint32_t layer,
                            const std::vector<block_id>& blocks,
                            std::size_t num_tokens, void* key_out,
                            void* value_out) {
  if (auto err = detail::check_gather(layout_, layer, blocks, num_tokens,
                                      key_out, value_out))
    return err;
  const auto row = layout_.block_bytes() / layout_.block_size;
  auto k_plane = plane(pools_, layout_.num_blocks, layer, 0);
  auto v_plane = plane(pools_, layout_.num_blocks, layer, 1);
  auto k_out = static_cast<std::byte*>(key_out);
  auto v_out = static_cast<std::byte*>(value_out);
  // A block's first n tokens are one contiguous run of n rows.
  for (std::size_t first = 0, j = 0; first < num_tokens;
       first += layout_.block_size, ++j) {
    auto n = std::min<std::size_t>(layout_.block_size, num_tokens - first);
    auto src = std::size_t{blocks[j]} * layout_.block_bytes();
    std::memcpy(k_out + first * row, k_plane + src, n * row);
    std::memcpy(v_out + first * row, v_plane + src, n * row);
  }
  return complete();
}

} // namespace kvactor
