// Storage kind "none": bookkeeping only, for simulating models too large to
// back with memory. Batches are validated exactly as elsewhere and complete
// at once; there are no bytes to write or read.
#pragma once

#include <functional>
#include <memory>

#include "kvactor/device/storage.hpp"

namespace kvactor {

/// Holds no memory. copy_blocks and swaps are validated (invalid_request on a
/// bad batch) and complete immediately; write_slots and gather_blocks always
/// fail with invalid_request ("storage none holds no data"). done() (so
/// finished()) is always true; wait() (so wait_one()) never fails.
/// The wake function, if set, is called inline, on the caller's thread, by
/// every operation that issues a ticket, before the ticket is returned.
/// Thread-safety: as storage.
class null_storage final : public storage {
public:
  /// REQUIRES: the layout passed detail::check_layout (make_storage does it).
  explicit null_storage(storage_layout layout) : storage(layout) {
  }

  storage_kind kind() const noexcept override {
    return storage_kind::none;
  }
  kvactor::device where() const noexcept override {
    return {};
  }
  void* layer_base(std::uint32_t) noexcept override {
    return nullptr;
  }
  void* host_layer_base(std::uint32_t) noexcept override {
    return nullptr;
  }

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
  ticket complete();

  ticket next_ticket_ = 1;
  std::function<void()> wake_;
};

} // namespace kvactor
