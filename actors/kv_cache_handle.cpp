// kv_cache_handle: validity, table and stats round trips, tensor views.
#include "kvactor/actors/kv_cache_handle.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>

#include <caf/sec.hpp>

#include "kvactor/actors/facade_core.hpp"
#include "kvactor/actors/incarnation_error.hpp"
#include "kvactor/device/zero_pages.hpp"

namespace kvactor {

namespace {

using detail::ended_error;

/// A dead handle actor means the request ended.
caf::error as_handle_error(caf::error err, request_id id) {
  if (err == caf::sec::request_receiver_down)
    return ended_error(id);
  return err;
}

/// A zeroed buffer of `bytes` for a contiguous snapshot, or null if the
/// memory cannot be had. A view fills only the rows its request holds, and
/// zero pages (zero_pages.hpp) leave the rest untouched.
std::shared_ptr<std::uint8_t> snapshot_buffer(std::size_t bytes) {
  bytes = std::max<std::size_t>(bytes, 1); // a view owns a buffer, if empty
  auto* p = allocate_zero_pages(bytes);
  if (p == nullptr)
    return nullptr;
  try {
    return {reinterpret_cast<std::uint8_t*>(p), [bytes](std::uint8_t* q) {
              release_zero_pages(reinterpret_cast<std::byte*>(q), bytes);
            }};
  } catch (const std::bad_alloc&) { // the constructor released `p`
    return nullptr;
  }
}

/// Layer `layer` of the tokens `h`'s request holds, gathered from its
/// blocks in one round trip: the pool sends the gather to the device with
/// the table as it is then, so the blocks are read before anyone they go
/// to next can write them.
caf::expected<gathered_kv> gather_own(detail::facade_core& core,
                                      const kv_cache_handle& h,
                                      std::uint32_t layer) {
  auto cache_id = core.incarnation(*h.slot());
  if (!cache_id)
    return std::move(cache_id.error());
  auto got = core.ask<gathered_kv>(core.cache().pool, gather_atom::value,
                                   h.id(), *cache_id, layer);
  if (got)
    return std::move(std::get<0>(*got));
  auto& err = got.error();
  if (err.category() == error_category || err == caf::sec::request_timeout)
    return std::move(err); // the cache's own words; a timeout as promised
  if (err == caf::sec::request_receiver_down) // the pool or the device went
    return h.is_valid() ? make_error(errc::shutting_down,
                                     "request " + std::to_string(h.id())
                                       + ": the cache stopped during its "
                                         "contiguous view")
                        : ended_error(h.id());
  return make_error(errc::device_failure,
                    "request " + std::to_string(h.id()) + ": gathering layer "
                      + std::to_string(layer)
                      + " for its contiguous view failed: " + render(err));
}

/// `h`'s table, asked of the pool with its incarnation, as the facade's
/// extends are: the handle actor would only relay it, a hop more to and
/// from an actor gone cold among thousands, on a call an engine makes for
/// every request every step. An ended incarnation is invalid_handle, also
/// when the id names a newer request by now; the pool gone, shutting_down.
caf::expected<block_table> table_from_pool(detail::facade_core& core,
                                           const kv_cache_handle& h) {
  auto cache_id = core.incarnation(*h.slot());
  if (!cache_id)
    return std::move(cache_id.error());
  auto res = core.ask<block_table>(core.cache().pool, table_atom::value,
                                   h.id(), *cache_id);
  if (!res)
    return std::move(res.error());
  return std::move(std::get<0>(*res));
}

} // namespace

// -- kv_cache_handle ----------------------------------------------------------------

bool kv_cache_handle::is_valid() const noexcept {
  return slot_->valid.load() && !core_.expired();
}

caf::error kv_cache_handle::check_live() const {
  if (!is_valid())
    return ended_error(id());
  return caf::none;
}

caf::expected<std::shared_ptr<detail::facade_core>>
kv_cache_handle::view_core(std::uint32_t layer) const {
  if (auto err = check_live())
    return err;
  if (layer >= num_layers())
    return make_error(errc::invalid_request,
                      "request " + std::to_string(id()) + ": layer "
                        + std::to_string(layer) + " >= num_layers "
                        + std::to_string(num_layers()));
  auto core = core_.lock();
  if (!core) // the facade went since check_live()
    return ended_error(id());
  return core;
}

block_table kv_cache_handle::table() const {
  auto core = core_.lock();
  if (!core || !slot_->valid)
    return block_table{{}, 0, core ? core->config().block_size : 0};
  auto res = table_from_pool(*core, *this);
  if (!res)
    return block_table{{}, 0, core->config().block_size};
  return std::move(*res);
}

caf::expected<block_table> kv_cache_handle::checked_table() const {
  if (auto err = check_live())
    return err;
  auto core = core_.lock();
  if (!core) // the facade went since check_live(), and the request with it
    return ended_error(id());
  return table_from_pool(*core, *this);
}

bool kv_cache_handle::is_swapped() const {
  auto core = core_.lock();
  if (!core || !slot_->valid)
    return false;
  auto res = core->ask<request_handle_actor, request_info>(
    core->cache().manager, lookup_atom::value, id());
  // This incarnation's state, not a newer one's under the same id.
  return res && std::get<0>(*res) == slot_->actor && std::get<1>(*res).swapped;
}

std::uint64_t kv_cache_handle::num_tokens() const {
  return table().num_tokens;
}

cache_handle_stats kv_cache_handle::stats() const {
  auto core = core_.lock();
  if (!core || !slot_->valid)
    return {};
  auto res = core->ask<cache_handle_stats>(slot_->actor, stats_atom::value);
  return res ? std::get<0>(*res) : cache_handle_stats{};
}

caf::expected<cache_handle_stats> kv_cache_handle::checked_stats() const {
  if (auto err = check_live())
    return err;
  auto core = core_.lock();
  if (!core) // the facade went since check_live(), and the request with it
    return ended_error(id());
  auto res = core->ask<cache_handle_stats>(slot_->actor, stats_atom::value);
  if (!res)
    return as_handle_error(std::move(res.error()), id());
  return std::get<0>(*res);
}

// -- paged ----------------------------------------------------------------------------

caf::expected<std::optional<tensor_view>>
paged_kv_cache_handle::view(std::uint32_t layer, view_part part) const {
  auto got_core = view_core(layer);
  if (!got_core)
    return std::move(got_core.error());
  auto& core = *got_core;
  auto& store = *core->cache().store;
  auto base = static_cast<std::uint8_t*>(store.layer_base(layer));
  if (base == nullptr)
    return std::optional<tensor_view>{};
  auto& lay = store.layout();
  tensor_view v;
  v.owner = core->cache().store; // the pools outlive an exported view
  v.device = store.where();
  v.dtype = lay.dtype;
  v.shape = {lay.num_blocks, lay.block_size, lay.num_heads, lay.head_dim};
  if (part == view_part::both)
    v.shape.insert(v.shape.begin(), 2);
  v.strides = tensor_view::contiguous_strides(v.shape);
  v.data = base + (part == view_part::values ? std::size_t{lay.num_blocks} * lay.block_bytes() : 0);
  return std::optional<tensor_view>{std::move(v)};
}

std::shared_ptr<kv_cache_handle> paged_kv_cache_handle::clone_handle() const {
  return std::make_shared<paged_kv_cache_handle>(slot_, core_);
}

// -- contiguous -----------------------------------------------------------------------

contiguous_kv_cache_handle::contiguous_kv_cache_handle(
  std::shared_ptr<detail::request_slot> slot,
  std::weak_ptr<detail::facade_core> core)
  : kv_cache_handle(std::move(slot), std::move(core)) {
}

caf::expected<std::optional<tensor_view>>
contiguous_kv_cache_handle::view(std::uint32_t layer, view_part part) const {
  auto got_core = view_core(layer);
  if (!got_core)
    return std::move(got_core.error());
  auto& core = *got_core;
  auto& store = *core->cache().store;
  if (store.kind() == storage_kind::none)
    return std::optional<tensor_view>{};
  auto got = gather_own(*core, *this, layer);
  if (!got)
    return std::move(got.error());
  auto& kv = *got;
  auto& lay = store.layout();
  auto row = std::size_t{lay.num_heads} * lay.head_dim * lay.elem_bytes();
  if (auto err = check_length(id(), max_sequence_length(), row))
    return err;
  auto max_len = static_cast<std::size_t>(max_sequence_length());
  // A fresh snapshot per call, owned by the view: an earlier view (or its
  // DLPack export) keeps its own, whatever happens to this handle. Only the
  // rows the gather fills are touched (snapshot_buffer): the rest of the
  // 2 x max_sequence_length rows cost address space, not page faults and
  // zeroing (a 32k-token model's rows for a short request: ~128 MiB).
  auto bytes = 2 * max_len * row; // no overflow: check_length
  auto buf = snapshot_buffer(bytes);
  if (!buf)
    return make_error(errc::invalid_request,
                      "request " + std::to_string(id())
                        + ": a contiguous snapshot of max_sequence_length "
                        + std::to_string(max_len) + " needs "
                        + std::to_string(bytes)
                        + " bytes of host memory, more than could be had");
  // An empty request gathers nothing: no copy from a vector's null data.
  if (!kv.keys.empty())
    std::memcpy(buf.get(), kv.keys.data(), kv.keys.size());
  if (!kv.values.empty())
    std::memcpy(buf.get() + max_len * row, kv.values.data(), kv.values.size());
  tensor_view v;
  v.device = kvactor::device{};
  v.dtype = lay.dtype;
  v.shape = {static_cast<std::int64_t>(max_len), lay.num_heads, lay.head_dim};
  if (part == view_part::both)
    v.shape.insert(v.shape.begin(), 2);
  v.strides = tensor_view::contiguous_strides(v.shape);
  v.data = buf.get() + (part == view_part::values ? max_len * row : 0);
  v.owner = std::move(buf);
  return std::optional<tensor_view>{std::move(v)};
}

caf::error contiguous_kv_cache_handle::check_length(request_id id,
                                                   std::uint64_t max_len,
                                                   std::uint64_t row) {
  constexpr std::uint64_t limit = std::numeric_limits<std::int64_t>::max();
  if (row == 0 || max_len <= limit / 2 / row)
    return caf::none;
  return make_error(errc::invalid_request,
                    "request " + std::to_string(id) + ": max_sequence_length "
                      + std::to_string(max_len)
                      + " is too long for the contiguous layout (its buffer of "
                        "2 x max_sequence_length x "
                      + std::to_string(row) + " bytes would not fit int64)");
}

std::shared_ptr<kv_cache_handle> contiguous_kv_cache_handle::clone_handle() const {
  return std::make_shared<contiguous_kv_cache_handle>(slot_, core_);
}

} // namespace kvactor
