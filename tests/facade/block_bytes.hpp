// Facade tests' view of a handle's KV bytes: a block of one layer's K or V
// pool as floats, filled with a pattern unique to (seed, layer, K/V,
// element), and compared block against block in every layer.
#pragma once

#include <cstdint>
#include <cstring>

#include <boost/test/unit_test.hpp>

#include "kvactor/actors/kv_cache_handle.hpp"

namespace kvtest {

using namespace kvactor;

/// Block `b` of the plane `v` (one layer's K or V pool) as floats.
inline float* block_of(const tensor_view& v, block_id b) {
  return static_cast<float*>(v.data) + b * v.strides[0];
}

/// Fills block `b` of every layer's K and V with a pattern unique to
/// (seed, layer, K/V, element).
inline void fill_block(kv_cache_handle& h, block_id b, float seed) {
  for (std::uint32_t l = 0; l < h.num_layers(); ++l) {
    auto k = h.key_cache(l);
    auto v = h.value_cache(l);
    BOOST_REQUIRE(k && *k && v && *v);
    auto n = (*k)->strides[0];
    for (std::int64_t i = 0; i < n; ++i) {
      block_of(**k, b)[i] = seed + 1000.0f * l + static_cast<float>(i);
      block_of(**v, b)[i] = -(seed + 1000.0f * l + static_cast<float>(i));
    }
  }
}

/// True if block `x` equals block `y` in every layer's K and V.
inline bool same_block(kv_cache_handle& h, block_id x, block_id y) {
  for (std::uint32_t l = 0; l < h.num_layers(); ++l)
    for (auto view : {h.key_cache(l), h.value_cache(l)}) {
      auto& v = **view;
      auto bytes = static_cast<std::size_t>(v.strides[0]) * sizeof(float);
      if (std::memcmp(block_of(v, x), block_of(v, y), bytes) != 0)
        return false;
    }
  return true;
}

} // namespace kvtest
