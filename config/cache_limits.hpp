// cache_limits: the bounds validate() (validate_config.cpp) puts on a config's
// sizes, for readers that check their own input against what the cache will
// accept before they build a config from it (the replay's trace header).
#pragma once

#include <cstdint>

namespace kvactor {

/// block_size: a power of two in [1, max_block_size].
inline constexpr std::uint32_t max_block_size = 1024;

/// num_gpu_blocks, num_host_blocks, max_pinned_blocks and each tenant's
/// max_blocks / reserved_blocks: at most this many (the block pool needs
/// fewer than 2^31 blocks: block_pool_core.hpp).
inline constexpr std::uint64_t max_num_blocks = (std::uint64_t{1} << 31) - 1;

/// tenants: at most this many (the pool keeps a tenant index in 16 bits).
inline constexpr std::uint64_t max_tenants = 65535;

/// Whether validate() accepts `x` as block_size.
constexpr bool valid_block_size(std::uint64_t x) noexcept {
  return x != 0 && x <= max_block_size && (x & (x - 1)) == 0;
}

} // namespace kvactor
