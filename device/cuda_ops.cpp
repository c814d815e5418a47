// Storage kind "cuda": the operations: validate, order against other
// streams, stage metadata, launch, record the ticket (cuda_storage.hpp).
#include "kvactor/device/cuda_storage.hpp"

#include <string>

#include <caf/error.hpp>
#include <cuda_runtime_api.h>

#include "kvactor/device/swap_plan.hpp"
#include "kvactor/device/validate.hpp"
#include "kvactor/messages/error.hpp"

namespace kvactor {

static_assert(sizeof(block_copy) == sizeof(detail::block_pair)
                && offsetof(block_copy, src) == offsetof(detail::block_pair, src)
                && offsetof(block_copy, dst) == offsetof(detail::block_pair, dst),
              "copy pairs are uploaded as they are");

caf::expected<ticket>
cuda_storage::copy_blocks(const std::vector<block_copy>& pairs) {
  constexpr auto role = stream_role::compute;
  if (auto err = usable())
    return err;
  if (auto err = detail::check_copy(layout_, pairs))
    return err;
  detail::hazard_tracker::waits w{};
  for (auto& p : pairs) {
    device_hazards_.need_read(p.src, stream_of(role), w);
    device_hazards_.need_write(p.dst, stream_of(role), w);
  }
  if (auto err = order(w, role))
    return err;
  if (!pairs.empty()) {
    void* dev = nullptr;
    auto stream = streams_[stream_of(role)];
    if (auto err = uploads_.stage(pairs.data(), pairs.size() * sizeof(block_copy),
                                  stream, dev))
      return upload_failed(err, "copy_blocks upload",
                           pairs.size() * sizeof(block_copy));
    if (auto err = detail::launch_copy_blocks(
          geometry(), static_cast<const detail::block_pair*>(dev), pairs.size(),
          stream))
      return fail(err, "copy_blocks launch ("
                            + std::to_string(pairs.size()) + " pairs)");
  }
  auto t = submit(role);
  if (!t)
    return t;
  if (!pairs.empty())
    uploads_.consumed(*t);
  for (auto& p : pairs) {
    device_hazards_.note_read(p.src, stream_of(role), *t);
    device_hazards_.note_write(p.dst, stream_of(role), *t);
  }
  return t;
}

caf::expected<ticket>
cuda_storage::swap_out(const std::vector<block_move>& moves) {
  return swap(moves, detail::swap_direction::device_to_host);
}

caf::expected<ticket>
cuda_storage::swap_in(const std::vector<block_move>& moves) {
  return swap(moves, detail::swap_direction::host_to_device);
}

caf::expected<ticket> cuda_storage::swap(const std::vector<block_move>& moves,
                                         detail::swap_direction dir) {
  const bool out = dir == detail::swap_direction::device_to_host;
  const auto role = out ? stream_role::device_to_host
                        : stream_role::host_to_device;
  const auto s = stream_of(role);
  if (auto err = usable())
    return err;
  if (auto err = detail::check_swap(layout_, moves, out ? "swap_out"
                                                        : "swap_in"))
    return err;
  // Out reads device blocks and writes host blocks; in the other way round.
  auto& src = out ? device_hazards_ : host_hazards_;
  auto& dst = out ? host_hazards_ : device_hazards_;
  auto src_of = [out](const block_move& m) {
    return out ? m.device_block : m.host_block;
  };
  auto dst_of = [out](const block_move& m) {
    return out ? m.host_block : m.device_block;
  };
  detail::hazard_tracker::waits w{};
  for (auto& m : moves) {
    src.need_read(src_of(m), s, w);
    dst.need_write(dst_of(m), s, w);
  }
  if (auto err = order(w, role))
    return err;
  // Short runs by the swap kernel, long ones by the copy engines, one after
  // the other on the direction's stream (swap_plan.hpp says why).
  const auto split = detail::split_runs(detail::coalesce_moves(moves),
                                        layout_.block_bytes());
  const auto& short_runs = split.by_kernel;
  const auto& long_runs = split.by_copy_engine;
  const char* op = out ? "swap_out" : "swap_in";
  auto& ring = swap_uploads_[out ? 0 : 1];
  auto sizes = [&] {
    return std::to_string(moves.size()) + " blocks: "
           + std::to_string(short_runs.size()) + " runs by the kernel, "
           + std::to_string(long_runs.size()) + " by copy engines; "
           + std::to_string(layout_.block_bytes())
           + "-byte blocks per layer and part";
  };
  if (!short_runs.empty()) {
    void* dev = nullptr;
    const auto bytes = short_runs.size() * sizeof(detail::swap_run);
    if (auto err = ring.stage(short_runs.data(), bytes, streams_[s], dev))
      return upload_failed(err, out ? "swap_out upload" : "swap_in upload",
                           bytes);
    if (auto err = detail::launch_swap_kernel(
          geometry(), host_tier_, layout_.num_host_blocks,
          static_cast<const detail::swap_run*>(dev), short_runs.size(), dir,
          streams_[s]))
      return fail(err, std::string{op} + " kernel launch (" + sizes() + ")");
  }
  if (auto err = detail::launch_swap(geometry(), host_tier_,
                                     layout_.num_host_blocks, long_runs.data(),
                                     long_runs.size(), dir, max_pitch_,
                                     streams_[s])) {
    // The work before the failed copy may be queued: let it land before
    // the failure lets the pool give these blocks to others (an error path:
    // blocking here is fine; what it returns, fail() reports anyway).
    cudaStreamSynchronize(streams_[s]);
    return fail(err, std::string{op} + " copy (" + sizes() + ")");
  }
  auto t = submit(role);
  if (!t)
    return t;
  if (!short_runs.empty())
    ring.consumed(*t);
  for (auto& m : moves) {
    src.note_read(src_of(m), s, *t);
    dst.note_write(dst_of(m), s, *t);
  }
  return t;
}

caf::error cuda_storage::check_inputs(const char* op, const void* key,
                                      const void* value,
                                      std::size_t num_tokens) {
  if (num_tokens == 0)
    return caf::none;
  if (auto err = check_accessible(key, op, "key"))
    return err;
  return check_accessible(value, op, "value");
}

caf::error cuda_storage::order_planned_writes() {
  constexpr auto role = stream_role::compute;
  detail::hazard_tracker::waits w{};
  for (auto b : slots_.blocks())
    device_hazards_.need_write(b, stream_of(role), w);
  return order(w, role);
}

caf::error cuda_storage::stage_mapping(const char* what,
                                       const std::int64_t* slot_mapping,
                                       std::size_t num_tokens, void*& dev) {
  const auto bytes = num_tokens * sizeof(std::int64_t);
  if (auto err = uploads_.stage(slots_.mapping(slot_mapping), bytes,
                                streams_[stream_of(stream_role::compute)], dev))
    return upload_failed(err, what, bytes);
  return caf::none;
}

caf::expected<ticket>
cuda_storage::write_slots(std::uint32_t layer, const void* key,
                          const void* value, const std::int64_t* slot_mapping,
                          std::size_t num_tokens) {
  constexpr auto role = stream_role::compute;
  constexpr const char* op = "write_slots";
  const auto s = stream_of(role);
  if (auto err = usable())
    return err;
  // A forward pass writes every layer with the same mapping: checked and
  // planned for the first layer, recognised by one memcmp after that.
  const bool planned = slot_mapping != nullptr
                       && slots_.same_as_last(slot_mapping, num_tokens);
  if (auto err = detail::check_write(layout_, layer, key, value, slot_mapping,
                                     num_tokens, !planned))
    return err;
  if (auto err = check_inputs(op, key, value, num_tokens))
    return err;
  // The pass's next layer: the mapping the last write wrote, and no op
  // since touched a device block (writes_pending) or staged an upload. Its
  // blocks' hazards are then that write's, on this stream: nothing to wait
  // for, and one ticket renewed instead of every block's. Its mapping is
  // still on the device. And its kernel may overlap the ones before it,
  // which write other layers (write_chain.hpp).
  const bool next_layer = planned && written_plan_ == slots_.plans()
                          && device_hazards_.writes_pending(s)
                          && uploads_.stages() == mapping_stage_;
  // One pass: the blocks written (hazards per block, not per token) and,
  // if a slot is named twice, the mapping in which its last token wins.
  if (!planned)
    slots_.plan(slot_mapping, num_tokens);
  if (!next_layer) {
    if (auto err = order_planned_writes())
      return err;
  }
  const void* dev = next_layer ? mapping_dev_ : nullptr;
  bool overlapped = false;
  if (num_tokens > 0) {
    auto stream = streams_[s];
    if (next_layer) {
      overlapped = chain_.join(layer);
    } else {
      void* staged = nullptr;
      if (auto err = stage_mapping("write_slots upload", slot_mapping,
                                   num_tokens, staged))
        return err;
      dev = staged;
      chain_.restart(layer);
    }
    if (auto err = detail::launch_write_slots(
          geometry(), layer, key, value, static_cast<const std::int64_t*>(dev),
          num_tokens, stream, 0,
          overlapped ? detail::write_overlap::work
                     : detail::write_overlap::launch))
      return fail(err, "write_slots launch (layer " + std::to_string(layer)
                            + ", " + std::to_string(num_tokens) + " tokens)");
  }
  auto t = submit(role);
  if (!t)
    return t;
  if (num_tokens > 0)
    uploads_.consumed(*t); // also the reused slot: stages() unchanged
  if (next_layer) {
    device_hazards_.renew_writes(*t);
    ++next_layers_.reused;
    next_layers_.overlapped += overlapped;
  } else {
    const auto blocks = slots_.blocks();
    device_hazards_.note_writes(blocks.begin(), blocks.size(), s, *t);
    written_plan_ = slots_.plans();
    mapping_dev_ = dev;
    mapping_stage_ = uploads_.stages();
  }
  return t;
}

caf::expected<ticket>
cuda_storage::write_layers(std::uint32_t first_layer, std::uint32_t num_layers,
                           const void* key, const void* value,
                           std::size_t layer_stride,
                           const std::int64_t* slot_mapping,
                           std::size_t num_tokens) {
  constexpr auto role = stream_role::compute;
  constexpr const char* op = "write_layers";
  const auto s = stream_of(role);
  if (auto err = usable())
    return err;
  const bool planned = slot_mapping != nullptr
                       && slots_.same_as_last(slot_mapping, num_tokens);
  if (auto err = detail::check_write_layers(layout_, first_layer, num_layers,
                                            key, value, layer_stride,
                                            slot_mapping, num_tokens, !planned))
    return err;
  if (auto err = check_inputs(op, key, value, num_tokens))
    return err;
  if (!planned)
    slots_.plan(slot_mapping, num_tokens);
  if (auto err = order_planned_writes())
    return err;
  const auto stride = layer_stride != 0 ? layer_stride
                                        : num_tokens * layout_.row_bytes();
  if (num_tokens > 0) {
    void* dev = nullptr;
    if (auto err = stage_mapping("write_layers upload", slot_mapping,
                                 num_tokens, dev))
      return err;
    if (auto err = detail::launch_write_layers(
          geometry(), first_layer, num_layers, key, value, stride,
          static_cast<const std::int64_t*>(dev), num_tokens, streams_[s])) {
      // Launched in pieces of at most 65535 layers: the pieces before the
      // one that failed may be queued. Let them land before the failure is
      // answered, as a swap's failed copy does (an error path: blocking is
      // fine).
      cudaStreamSynchronize(streams_[s]);
      return fail(err, "write_layers launch (layers "
                         + std::to_string(first_layer) + " + "
                         + std::to_string(num_layers) + ", "
                         + std::to_string(num_tokens) + " tokens)");
    }
  }
  auto t = submit(role);
  if (!t)
    return t;
  if (num_tokens > 0)
    uploads_.consumed(*t);
  const auto blocks = slots_.blocks();
  device_hazards_.note_writes(blocks.begin(), blocks.size(), s, *t);
  // Not one layer of a pass: a write_slots of this mapping next takes the
  // first layer's path (its chain would not know the layers written here).
  written_plan_ = 0;
  return t;
}

caf::expected<ticket>
cuda_storage::gather_blocks(std::uint32_t layer,
                            const std::vector<block_id>& blocks,
                            std::size_t num_tokens, void* key_out,
                            void* value_out) {
  constexpr auto role = stream_role::compute;
  constexpr const char* op = "gather_blocks";
  if (auto err = usable())
    return err;
  if (auto err = detail::check_gather(layout_, layer, blocks, num_tokens,
                                      key_out, value_out))
    return err;
  if (num_tokens > 0) {
    if (auto err = check_accessible(key_out, op, "key_out"))
      return err;
    if (auto err = check_accessible(value_out, op, "value_out"))
      return err;
  }
  const auto used = (num_tokens + layout_.block_size - 1) / layout_.block_size;
  detail::hazard_tracker::waits w{};
  for (std::size_t j = 0; j < used; ++j)
    device_hazards_.need_read(blocks[j], stream_of(role), w);
  if (auto err = order(w, role))
    return err;
  if (used > 0) {
    void* dev = nullptr;
    auto stream = streams_[stream_of(role)];
    if (auto err = uploads_.stage(blocks.data(), used * sizeof(block_id),
                                  stream, dev))
      return upload_failed(err, "gather_blocks upload",
                           used * sizeof(block_id));
    if (auto err = detail::launch_gather_blocks(
          geometry(), layer, static_cast<const std::uint32_t*>(dev), used,
          num_tokens, key_out, value_out, stream))
      return fail(err, "gather_blocks launch (layer " + std::to_string(layer)
                            + ", " + std::to_string(used) + " blocks, "
                            + std::to_string(num_tokens) + " tokens)");
  }
  auto t = submit(role);
  if (!t)
    return t;
  if (used > 0)
    uploads_.consumed(*t);
  for (std::size_t j = 0; j < used; ++j)
    device_hazards_.note_read(blocks[j], stream_of(role), *t);
  return t;
}

} // namespace kvactor
