// The host storage tests' helpers (host_storage_test.cpp,
// write_layers_test.cpp): a layout from its dimensions, a host storage of
// it, random bytes, and the text of a failed expected.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>

#include <boost/test/unit_test.hpp>

#include "kvactor/device/storage.hpp"
#include "kvactor/messages/error.hpp"

namespace kvactor::test::host_storage_tests {

/// The error of a failed expected, "" otherwise (error() of a value is UB).
template <class T>
std::string why(const caf::expected<T>& x) {
  return x ? std::string{} : render(x.error());
}

inline storage_layout layout_of(std::uint32_t layers, std::uint32_t blocks,
                                std::uint32_t block_size, std::uint32_t heads,
                                std::uint32_t dim, kvactor::dtype dt,
                                std::uint32_t host_blocks) {
  storage_layout l;
  l.num_layers = layers;
  l.num_blocks = blocks;
  l.block_size = block_size;
  l.num_heads = heads;
  l.head_dim = dim;
  l.dtype = dt;
  l.num_host_blocks = host_blocks;
  return l;
}

inline std::unique_ptr<storage> make_host(const storage_layout& l) {
  storage_options opts;
  opts.kind = "host";
  opts.layout = l;
  auto st = make_storage(opts);
  BOOST_REQUIRE_MESSAGE(st, why(st));
  return std::move(*st);
}

inline void fill_random(std::uint8_t* p, std::size_t n, std::mt19937_64& rng) {
  for (std::size_t i = 0; i < n; ++i)
    p[i] = static_cast<std::uint8_t>(rng() >> 56);
}

} // namespace kvactor::test::host_storage_tests
