// Whole-batch validation shared by every storage backend (validate.hpp).
#include "kvactor/device/validate.hpp"

#include <algorithm>
#include <limits>
#include <string>

#include "kvactor/messages/error.hpp"

namespace kvactor::detail {

namespace {

caf::error bad(const char* op, const char* what, const std::string& value) {
  std::string text = op;
  text += ": ";
  text += what;
  text += ": ";
  text += value;
  return make_error(errc::invalid_request, std::move(text));
}

std::string id_text(std::uint64_t id, const char* limit_name,
                    std::uint64_t limit) {
  return std::to_string(id) + " (" + limit_name + " " + std::to_string(limit)
         + ")";
}

/// The first value that occurs twice in `ids` (sorted in place), if any.
bool first_duplicate(std::vector<block_id>& ids, block_id& dup) {
  std::sort(ids.begin(), ids.end());
  auto i = std::adjacent_find(ids.begin(), ids.end());
  if (i == ids.end())
    return false;
  dup = *i;
  return true;
}

caf::error check_layer(const storage_layout& layout, std::uint32_t layer,
                       const char* op) {
  if (layer >= layout.num_layers)
    return bad(op, "layer out of range",
               id_text(layer, "num_layers", layout.num_layers));
  return caf::none;
}

} // namespace

caf::error check_copy(const storage_layout& layout,
                      const std::vector<block_copy>& pairs) {
  constexpr const char* op = "copy_blocks";
  std::vector<block_id> dsts;
  dsts.reserve(pairs.size());
  for (auto& p : pairs) {
    if (p.src >= layout.num_blocks)
      return bad(op, "source block out of range",
                 id_text(p.src, "num_blocks", layout.num_blocks));
    if (p.dst >= layout.num_blocks)
      return bad(op, "destination block out of range",
                 id_text(p.dst, "num_blocks", layout.num_blocks));
    dsts.push_back(p.dst);
  }
  block_id dup = 0;
  if (first_duplicate(dsts, dup))
    return bad(op, "destination block repeated", std::to_string(dup));
  for (auto& p : pairs)
    if (std::binary_search(dsts.begin(), dsts.end(), p.src))
      return bad(op, "block is both a source and a destination",
                 std::to_string(p.src));
  return caf::none;
}

caf::error check_swap(const storage_layout& layout,
                      const std::vector<block_move>& moves, const char* op) {
  std::vector<block_id> dev;
  std::vector<block_id> host;
  dev.reserve(moves.size());
  host.reserve(moves.size());
  for (auto& m : moves) {
    if (m.device_block >= layout.num_blocks)
      return bad(op, "device block out of range",
                 id_text(m.device_block, "num_blocks", layout.num_blocks));
    if (m.host_block >= layout.num_host_blocks)
      return bad(op, "host block out of range",
                 id_text(m.host_block, "num_host_blocks",
                         layout.num_host_blocks));
    dev.push_back(m.device_block);
    host.push_back(m.host_block);
  }
  block_id dup = 0;
  if (first_duplicate(dev, dup))
    return bad(op, "device block repeated", std::to_string(dup));
  if (first_duplicate(host, dup))
    return bad(op, "host block repeated", std::to_string(dup));
  return caf::none;
}

namespace {

/// check_write's rules past the layer, errors naming `op`.
caf::error check_write_rows(const char* op, const storage_layout& layout,
                            const void* key, const void* value,
                            const std::int64_t* slot_mapping,
                            std::size_t num_tokens, bool check_slots) {
  if (num_tokens == 0)
    return caf::none;
  if (key == nullptr || value == nullptr || slot_mapping == nullptr)
    return bad(op, "null pointer for",
               key == nullptr     ? "key"
               : value == nullptr ? "value"
                                  : "slot_mapping");
  if (!check_slots)
    return caf::none;
  const auto num_slots = std::int64_t{layout.num_blocks} * layout.block_size;
  // s in [-1, num_slots) iff s + 1 in [0, num_slots], one unsigned compare;
  // or-ed over the batch without an early exit, the loop vectorises (it
  // runs before every launch of thousands of tokens).
  const auto limit = static_cast<std::uint64_t>(num_slots);
  bool out_of_range = false;
  for (std::size_t i = 0; i < num_tokens; ++i)
    out_of_range |= static_cast<std::uint64_t>(slot_mapping[i]) + 1 > limit;
  if (!out_of_range)
    return caf::none;
  for (std::size_t i = 0;; ++i) {
    auto s = slot_mapping[i];
    if (s < -1 || s >= num_slots)
      return bad(op, "slot out of range",
                 std::to_string(s) + " at token " + std::to_string(i)
                   + " (num_slots " + std::to_string(num_slots) + ")");
  }
}

} // namespace

caf::error check_write(const storage_layout& layout, std::uint32_t layer,
                       const void* key, const void* value,
                       const std::int64_t* slot_mapping,
                       std::size_t num_tokens, bool check_slots) {
  constexpr const char* op = "write_slots";
  if (auto err = check_layer(layout, layer, op))
    return err;
  return check_write_rows(op, layout, key, value, slot_mapping, num_tokens,
                          check_slots);
}

caf::error check_write_layers(const storage_layout& layout,
                              std::uint32_t first_layer,
                              std::uint32_t num_layers, const void* key,
                              const void* value, std::size_t layer_stride,
                              const std::int64_t* slot_mapping,
                              std::size_t num_tokens, bool check_slots) {
  constexpr const char* op = "write_layers";
  if (num_layers == 0)
    return bad(op, "no layers", "num_layers 0");
  if (first_layer >= layout.num_layers
      || num_layers > layout.num_layers - first_layer)
    return bad(op, "layers out of range",
               std::to_string(first_layer) + " + "
                 + std::to_string(num_layers) + " (num_layers "
                 + std::to_string(layout.num_layers) + ")");
  if (num_tokens == 0)
    return caf::none; // no rows: no stride to check, nothing to read
  // check_layout keeps 2 * num_layers * block bytes below 2^63, so a
  // layer's rows times the layers stay far below 2^128.
  using u128 = unsigned __int128;
  const auto rows = u128{num_tokens} * layout.row_bytes();
  if (layer_stride != 0 && layer_stride < rows)
    return bad(op, "layer stride shorter than a layer's rows",
               std::to_string(layer_stride) + " bytes for "
                 + std::to_string(num_tokens) + " tokens of "
                 + std::to_string(layout.row_bytes()) + " bytes");
  // The last layer's rows must be addressable from key and value.
  const auto stride = layer_stride != 0 ? u128{layer_stride} : rows;
  if (stride * (num_layers - 1) + rows
      > u128{std::numeric_limits<std::ptrdiff_t>::max()})
    return bad(op, "layers' rows past the address space",
               std::to_string(num_layers) + " layers of "
                 + std::to_string(num_tokens) + " tokens, layer stride "
                 + std::to_string(layer_stride));
  return check_write_rows(op, layout, key, value, slot_mapping, num_tokens,
                          check_slots);
}

caf::error check_gather_request(const storage_layout& layout,
                                std::uint32_t layer,
                                const std::vector<block_id>& blocks,
                                std::size_t num_tokens) {
  constexpr const char* op = "gather_blocks";
  if (auto err = check_layer(layout, layer, op))
    return err;
  for (auto b : blocks)
    if (b >= layout.num_blocks)
      return bad(op, "block out of range",
                 id_text(b, "num_blocks", layout.num_blocks));
  const auto capacity = std::uint64_t{blocks.size()} * layout.block_size;
  if (num_tokens > capacity)
    return bad(op, "more tokens than the blocks hold",
               std::to_string(num_tokens) + " (capacity "
                 + std::to_string(capacity) + ")");
  // Block ids may repeat (a read of one block twice is harmless), so the
  // bound above alone lets block 0 named a million times ask for a staging
  // buffer - which the device actor keeps for good - of any size. No
  // request holds more tokens than the pool.
  const auto pool = std::uint64_t{layout.num_blocks} * layout.block_size;
  if (num_tokens > pool)
    return bad(op, "more tokens than the pool holds",
               std::to_string(num_tokens) + " (num_blocks * block_size "
                 + std::to_string(pool) + ")");
  return caf::none;
}

caf::error check_gather(const storage_layout& layout, std::uint32_t layer,
                        const std::vector<block_id>& blocks,
                        std::size_t num_tokens, const void* key_out,
                        const void* value_out) {
  constexpr const char* op = "gather_blocks";
  if (auto err = check_gather_request(layout, layer, blocks, num_tokens))
    return err;
  if (num_tokens > 0 && (key_out == nullptr || value_out == nullptr))
    return bad(op, "null pointer for",
               key_out == nullptr ? "key_out" : "value_out");
  return caf::none;
}

caf::error check_layout(const storage_layout& layout, bool need_blocks) {
  auto fail = [](const char* what, std::uint64_t value) {
    return make_error(errc::invalid_config,
                      std::string{"storage layout: "} + what + ": "
                        + std::to_string(value));
  };
  if (layout.num_layers == 0)
    return fail("num_layers must be positive", layout.num_layers);
  if (layout.block_size == 0 || (layout.block_size & (layout.block_size - 1)) != 0)
    return fail("block_size must be a power of two", layout.block_size);
  if (layout.num_heads == 0)
    return fail("num_heads must be positive", layout.num_heads);
  if (layout.head_dim == 0)
    return fail("head_dim must be positive", layout.head_dim);
  if (layout.elem_bytes() == 0)
    return fail("unknown dtype", static_cast<std::uint64_t>(layout.dtype));
  if (need_blocks && layout.num_blocks == 0)
    return fail("num_blocks must be positive for this storage kind",
                layout.num_blocks);
  if (layout.num_blocks == no_block || layout.num_host_blocks == no_block)
    return fail("too many blocks", std::max(layout.num_blocks,
                                            layout.num_host_blocks));
  // Every byte offset must fit in int64 (kernels and slot ids use it); the
  // products are taken in long double so that they cannot wrap here.
  constexpr auto limit = static_cast<long double>(
    std::numeric_limits<std::int64_t>::max());
  const long double block = static_cast<long double>(layout.block_size)
                            * layout.num_heads * layout.head_dim
                            * layout.elem_bytes();
  const long double blocks = std::max<std::uint32_t>(
    {layout.num_blocks, layout.num_host_blocks, 1u});
  if (2.0L * layout.num_layers * block * blocks > limit)
    return fail("layout too large for 64-bit offsets", layout.num_blocks);
  return caf::none;
}

} // namespace kvactor::detail
