// Test helpers of gpu_tests: a host and a cuda storage of one layout holding
// the same random bytes, compared after both ran the same operations.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/device/storage.hpp"
#include "kvactor/messages/error.hpp"

namespace kvactor::test {

/// Precondition of every GPU case: skips it with a clear message.
struct gpu_present {
  boost::test_tools::assertion_result operator()(boost::unit_test::test_unit_id) const {
    boost::test_tools::assertion_result r{cuda_device_available()};
    r.message() << "no CUDA device: skipped";
    return r;
  }
};

/// A fresh seed per run (KVACTOR_TEST_SEED repeats one), logged.
std::uint64_t test_seed();

/// The error of a failed expected, "" otherwise.
template <class T>
std::string why(const caf::expected<T>& x) {
  return x ? std::string{} : render(x.error());
}

storage_layout make_layout(std::uint32_t layers, std::uint32_t blocks,
                           std::uint32_t block_size, std::uint32_t heads,
                           std::uint32_t dim, kvactor::dtype dt,
                           std::uint32_t host_blocks);

/// fp16 and bf16 shapes at several block sizes and head counts, and two odd
/// ones (15- and 4-byte rows) that exercise the narrow-vector paths.
std::vector<storage_layout> test_shapes();

/// Bytes of one token of K or V.
inline std::size_t row_bytes(const storage_layout& l) {
  return std::size_t{l.num_heads} * l.head_dim * l.elem_bytes();
}

void fill_random(void* p, std::size_t n, std::mt19937_64& rng);

/// Waits until earlier cudaMemcpy uploads from pageable memory reached the
/// device (they may return before their DMA finished).
void landed();

/// A device buffer (cudaMalloc), freed on scope exit.
struct device_buffer {
  explicit device_buffer(std::size_t n);
  ~device_buffer();
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  void upload(const std::vector<std::uint8_t>& from);
  std::vector<std::uint8_t> download() const;
  void* data = nullptr;
  std::size_t size = 0;
};

/// Two backends with equal contents: `host` is the oracle for `cuda`.
struct twin {
  twin(const storage_layout& l, std::mt19937_64& rng);

  /// True if the device pools and the host tiers of both are byte-equal;
  /// reports the first difference as (tier, layer, K/V, block). Waits for all
  /// of cuda's work first.
  bool same(const std::string& what);

  /// As same(), but waits for `last` alone (wait_one, not every ticket)
  /// and reads the device pools on a stream of its own, not synchronising
  /// the device: equal only if `last`'s completion covered every earlier
  /// op that wrote what it compares (e.g. a write chain's kernels finish
  /// in stream order).
  bool same_after(ticket last, const std::string& what);

  storage_layout layout;
  std::unique_ptr<storage> host;
  std::unique_ptr<storage> cuda;

private:
  /// Compares `dev` (cuda's device pools, read back) and the host tiers.
  bool same_as(const std::vector<std::uint8_t>& dev, const std::string& what);
};

} // namespace kvactor::test
