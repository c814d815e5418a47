// Storage kind "none": validation and tickets, no bytes (null_storage.hpp).
#include "kvactor/device/null_storage.hpp"

#include "kvactor/device/validate.hpp"
#include "kvactor/messages/error.hpp"

namespace kvactor {

namespace {

caf::error no_data() {
  return make_error(errc::invalid_request, "storage none holds no data");
}

} // namespace

ticket null_storage::complete() {
  auto t = next_ticket_++;
  if (wake_)
    wake_();
  return t;
}

caf::expected<ticket>
null_storage::copy_blocks(const std::vector<block_copy>& pairs) {
  if (auto err = detail::check_copy(layout_, pairs))
    return err;
  return complete();
}

caf::expected<ticket>
null_storage::swap_out(const std::vector<block_move>& moves) {
  if (auto err = detail::check_swap(layout_, moves, "swap_out"))
    return err;
  return complete();
}

caf::expected<ticket>
null_storage::swap_in(const std::vector<block_move>& moves) {
  if (auto err = detail::check_swap(layout_, moves, "swap_in"))
    return err;
  return complete();
}

caf::expected<ticket> null_storage::write_slots(std::uint32_t, const void*,
                                                const void*,
                                                const std::int64_t*,
                                                std::size_t) {
  return no_data();
}

caf::expected<ticket>
null_storage::gather_blocks(std::uint32_t, const std::vector<block_id>&,
                            std::size_t, void*, void*) {
  return no_data();
}

} // namespace kvactor
