// Storage kind "host": the reference backend. The layout of storage.hpp in
// plain host memory, every operation done synchronously with memcpy, so every
// data path is testable without a GPU and the CUDA backend has an oracle.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "kvactor/device/storage.hpp"

namespace kvactor {

/// Owns two zero-initialised host allocations: the "device" pools
/// (device_bytes()) and, separately, the host tier (host_bytes(), none when
/// num_host_blocks is 0). Operations validate the whole batch first, then
/// copy, and are complete when they return: done() (so finished()) is always
/// true, and wait() (so wait_one()) never fails. write_slots and gather_blocks
/// take pointers into ordinary host memory. The wake function, if set, is
/// called inline, on the caller's thread, by every operation that issues a
/// ticket, before it returns.
/// Thread-safety: as storage.
class host_storage final : public storage {
public:
  /// Allocates both tiers; device_failure naming the bytes asked for if the
  /// memory is not there. REQUIRES: the layout passed detail::check_layout
  /// with num_blocks > 0 (make_storage does it).
  static caf::expected<std::unique_ptr<storage>> make(storage_layout layout);

  ~host_storage() override;

  storage_kind kind() const noexcept override {
    return storage_kind::host;
  }
  kvactor::device where() const noexcept override {
    return {};
  }
  void* layer_base(std::uint32_t layer) noexcept override;
  void* host_layer_base(std::uint32_t layer) noexcept override;

  caf::expected<ticket> copy_blocks(const std::vector<block_copy>& pairs) override;
  caf::expected<ticket> swap_out(const std::vector<block_move>& moves) override;
  caf::expected<ticket> swap_in(const std::vector<block_move>& moves) override;
  caf::expected<ticket>
  write_slots(std::uint32_t layer, const void* key, const void* value,
              const std::int64_t* slot_mapping, std::size_t num_tokens) override;
  caf::expected<ticket>
  gather_blocks(std::uint32_t layer, const std::vector<block_id>& blocks,
                std::size_t num_tokens, void* key_out, void* value_out) override;

  bool done(ticket) override {
    return true;
  }
  caf::error wait(ticket) override {
    return caf::none;
  }
  void set_wake(std::function<void()> wake) override {
    wake_ = std::move(wake);
  }

private:
  host_storage(storage_layout layout, std::byte* pools, std::byte* host_tier);

  /// Start of layer `layer`'s K (kv = 0) or V (kv = 1) pool in `base`, a tier
  /// of `blocks` blocks.
  std::byte* plane(std::byte* base, std::uint32_t blocks, std::uint32_t layer,
                   std::uint32_t kv) const noexcept;

  /// Copies every layer's K and V of block `from` in tier `src` to block `to`
  /// in tier `dst`.
  void move_block(std::byte* dst, std::uint32_t dst_blocks, block_id to,
                  std::byte* src, std::uint32_t src_blocks, block_id from);

  ticket complete();

  std::byte* pools_;     // [num_layers][2][num_blocks][block_size][heads][dim]
  std::byte* host_tier_; // same with num_host_blocks, or nullptr
  ticket next_ticket_ = 1;
  std::function<void()> wake_;
};

} // namespace kvactor
