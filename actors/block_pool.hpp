// The block pool actor: the one owner of block-level truth. Every decision
// about who gets a block is made here, in one message (lookup and pin of a
// cached prefix included); the state and the decisions themselves are
// detail::block_pool_core, this actor serializes access to it, has the
// device make copy-on-write copies (holding both blocks meanwhile) and
// reports usage crossings to the supervisor and index changes as KV events.
#pragma once

#include <cstdint>
#include <memory>

#include <caf/expected.hpp>

#include "kvactor/config/cache_config.hpp"
#include "kvactor/messages/interfaces.hpp"

namespace caf {
class actor_system;
} // namespace caf

namespace kvactor {

namespace detail {
class index_hint;
} // namespace detail

/// Spawns a pool of `num_blocks` blocks for `cfg`; `device` copies blocks
/// for copy-on-write (the pool replies to an extend or step that copied only
/// once the device has). `hint`, if any, gets the pool's id index for the
/// actor in front of the pool to prefetch from (index_hint.hpp).
/// invalid_config naming the block counts, and nothing spawned, when the
/// host lacks the memory for the pool's bookkeeping.
/// REQUIRES: validate(cfg) passed; num_blocks <= max_num_blocks.
caf::expected<block_pool_actor>
spawn_block_pool(caf::actor_system& sys, const cache_config& cfg,
                 std::uint32_t num_blocks, device_actor device,
                 std::shared_ptr<detail::index_hint> hint = {});

} // namespace kvactor
