// tensor_view: an in-process view of cache memory (shape and strides in
// elements, as DLPack counts them) that keeps that memory alive. Never sent
// in a message: it holds a raw pointer that means nothing in another
// process.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kvactor/messages/types.hpp"

namespace kvactor {

struct tensor_view {
  void* data = nullptr;
  /// Keeps `data`'s memory allocated while this view, a copy of it or a
  /// DLPack export of it lives: the storage's pools for a paged view (so
  /// they outlive the cache if need be), the snapshot for a contiguous one.
  std::shared_ptr<void> owner;
  kvactor::device device;
  kvactor::dtype dtype = kvactor::dtype::fp16;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;

  /// Number of elements.
  std::int64_t numel() const noexcept {
    std::int64_t n = 1;
    for (auto d : shape)
      n *= d;
    return n;
  }

  /// Contiguous row-major strides for `shape`.
  static std::vector<std::int64_t>
  contiguous_strides(const std::vector<std::int64_t>& shape) {
    std::vector<std::int64_t> out(shape.size(), 1);
    for (auto i = shape.size(); i-- > 1;)
      out[i - 1] = out[i] * shape[i];
    return out;
  }
};

} // namespace kvactor
