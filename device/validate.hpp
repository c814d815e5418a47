// Whole-batch validation shared by every storage backend: a bad batch is
// rejected with invalid_request before any backend touches memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <caf/error.hpp>

#include "kvactor/device/storage.hpp"

namespace kvactor::detail {

/// Every id below num_blocks; destinations distinct; no destination is also
/// a source. Errors read "copy_blocks: <what>: <value>".
caf::error check_copy(const storage_layout& layout,
                      const std::vector<block_copy>& pairs);

/// Device ids below num_blocks and distinct; host ids below num_host_blocks
/// and distinct. `op` names the operation in the error text.
caf::error check_swap(const storage_layout& layout,
                      const std::vector<block_move>& moves, const char* op);

/// layer < num_layers; with num_tokens > 0 the three pointers are non-null;
/// every slot is -1 or below num_blocks * block_size (unless `check_slots`
/// is false: the caller knows this mapping passed before).
caf::error check_write(const storage_layout& layout, std::uint32_t layer,
                       const void* key, const void* value,
                       const std::int64_t* slot_mapping,
                       std::size_t num_tokens, bool check_slots = true);

/// write_layers' batch: 1 <= num_layers, first_layer + num_layers within
/// the layout, check_write's rules, and with num_tokens > 0: layer_stride
/// 0 or at least num_tokens rows, and the last layer's rows addressable
/// (below PTRDIFF_MAX bytes past key and value). Errors read
/// "write_layers: <what>: <value>".
caf::error check_write_layers(const storage_layout& layout,
                              std::uint32_t first_layer,
                              std::uint32_t num_layers, const void* key,
                              const void* value, std::size_t layer_stride,
                              const std::int64_t* slot_mapping,
                              std::size_t num_tokens, bool check_slots = true);

/// layer < num_layers; every block id below num_blocks; num_tokens at most
/// blocks.size() * block_size, and at most num_blocks * block_size (the
/// pool holds no more: ids may repeat, so the first bound alone lets a
/// small message ask for any amount). (What a gather asks, before any
/// output memory is set aside for it.)
caf::error check_gather_request(const storage_layout& layout,
                                std::uint32_t layer,
                                const std::vector<block_id>& blocks,
                                std::size_t num_tokens);

/// check_gather_request, and with num_tokens > 0 the outputs are non-null.
caf::error check_gather(const storage_layout& layout, std::uint32_t layer,
                        const std::vector<block_id>& blocks,
                        std::size_t num_tokens, const void* key_out,
                        const void* value_out);

/// invalid_config unless every dimension is positive, the dtype has a size
/// and the sizes fit the 64-bit offsets the kernels use. `need_blocks`:
/// num_blocks must be positive too.
caf::error check_layout(const storage_layout& layout, bool need_blocks);

} // namespace kvactor::detail
