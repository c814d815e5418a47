// Test helpers of gpu_tests (twin.hpp).
#include "twin.hpp"

#if KVACTOR_HAVE_CUDA

#include <cstring>

#include <cuda_runtime_api.h>

namespace kvactor::test {

std::uint64_t test_seed() {
  std::uint64_t seed = std::random_device{}();
  if (auto env = std::getenv("KVACTOR_TEST_SEED"))
    seed = std::strtoull(env, nullptr, 10);
  BOOST_TEST_MESSAGE("seed " << seed << " (KVACTOR_TEST_SEED=" << seed
                             << " repeats this run)");
  return seed;
}

storage_layout make_layout(std::uint32_t layers, std::uint32_t blocks,
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

std::vector<storage_layout> test_shapes() {
  return {make_layout(4, 64, 16, 8, 128, dtype::fp16, 40),
          make_layout(3, 40, 8, 4, 64, dtype::bf16, 24),
          make_layout(2, 33, 32, 2, 128, dtype::fp16, 20),
          make_layout(2, 48, 16, 32, 128, dtype::bf16, 16),
          make_layout(2, 20, 4, 3, 5, dtype::fp8_e4m3, 12),
          make_layout(1, 17, 1, 1, 2, dtype::fp16, 9)};
}

void fill_random(void* p, std::size_t n, std::mt19937_64& rng) {
  auto bytes = static_cast<std::uint8_t*>(p);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    auto w = rng();
    std::memcpy(bytes + i, &w, 8);
  }
  for (; i < n; ++i)
    bytes[i] = static_cast<std::uint8_t>(rng());
}

device_buffer::device_buffer(std::size_t n) : size(n) {
  BOOST_REQUIRE(cudaMalloc(&data, n) == cudaSuccess);
}

device_buffer::~device_buffer() {
  // A kernel on the storage's streams may still read or write it: cudaFree
  // waits for the device in practice, but that is not promised.
  cudaDeviceSynchronize();
  cudaFree(data);
}

void device_buffer::upload(const std::vector<std::uint8_t>& from) {
  BOOST_REQUIRE(from.size() <= size);
  BOOST_REQUIRE(cudaMemcpy(data, from.data(), from.size(),
                           cudaMemcpyHostToDevice)
                == cudaSuccess);
  landed();
}

void landed() {
  // A cudaMemcpy from pageable memory may return once the bytes are staged,
  // before its DMA (on the legacy stream) reached the device; the storage's
  // streams are non-blocking, so nothing orders them after it. Wait for the
  // legacy stream alone: work in flight on the storage's streams (the
  // ordering tests' point) keeps running.
  BOOST_REQUIRE(cudaStreamSynchronize(cudaStreamLegacy) == cudaSuccess);
}

std::vector<std::uint8_t> device_buffer::download() const {
  std::vector<std::uint8_t> out(size);
  BOOST_REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  BOOST_REQUIRE(cudaMemcpy(out.data(), data, size, cudaMemcpyDeviceToHost)
                == cudaSuccess);
  return out;
}

twin::twin(const storage_layout& l, std::mt19937_64& rng) : layout(l) {
  storage_options opts;
  opts.layout = l;
  opts.kind = "host";
  auto h = make_storage(opts);
  BOOST_REQUIRE_MESSAGE(h, why(h));
  host = std::move(*h);
  opts.kind = "cuda";
  auto c = make_storage(opts);
  BOOST_REQUIRE_MESSAGE(c, why(c));
  cuda = std::move(*c);
  fill_random(host->layer_base(0), l.device_bytes(), rng);
  BOOST_REQUIRE(cudaMemcpy(cuda->layer_base(0), host->layer_base(0),
                           l.device_bytes(), cudaMemcpyHostToDevice)
                == cudaSuccess);
  landed();
  if (l.num_host_blocks > 0) {
    fill_random(host->host_layer_base(0), l.host_bytes(), rng);
    std::memcpy(cuda->host_layer_base(0), host->host_layer_base(0),
                l.host_bytes());
  }
}

namespace {

bool same_tier(const std::uint8_t* want, const std::uint8_t* got,
               std::size_t bytes, std::uint32_t blocks,
               const storage_layout& l, const char* tier,
               const std::string& what) {
  if (std::memcmp(want, got, bytes) == 0)
    return true;
  std::size_t i = 0;
  while (want[i] == got[i])
    ++i;
  const auto plane = i / (l.block_bytes() * blocks);
  const auto block = i % (l.block_bytes() * blocks) / l.block_bytes();
  BOOST_ERROR(what << ": " << tier << " differs first at byte " << i
                   << " (layer " << plane / 2 << (plane % 2 ? " V" : " K")
                   << ", block " << block << ")");
  return false;
}

} // namespace

bool twin::same(const std::string& what) {
  BOOST_REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  std::vector<std::uint8_t> dev(layout.device_bytes());
  BOOST_REQUIRE(cudaMemcpy(dev.data(), cuda->layer_base(0), dev.size(),
                           cudaMemcpyDeviceToHost)
                == cudaSuccess);
  return same_as(dev, what);
}

bool twin::same_after(ticket last, const std::string& what) {
  if (const auto err = cuda->wait_one(last))
    BOOST_FAIL(what << ": wait_one: " << render(err));
  // A non-blocking stream waits for no other stream (the legacy default
  // stream, which cudaMemcpy uses, would wait for blocking ones).
  cudaStream_t s = nullptr;
  BOOST_REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)
                == cudaSuccess);
  std::vector<std::uint8_t> dev(layout.device_bytes());
  const auto copied = cudaMemcpyAsync(dev.data(), cuda->layer_base(0),
                                      dev.size(), cudaMemcpyDeviceToHost, s);
  const auto synced = cudaStreamSynchronize(s);
  const auto destroyed = cudaStreamDestroy(s);
  BOOST_REQUIRE(copied == cudaSuccess && synced == cudaSuccess
                && destroyed == cudaSuccess);
  return same_as(dev, what);
}

bool twin::same_as(const std::vector<std::uint8_t>& dev,
                   const std::string& what) {
  bool ok = same_tier(static_cast<const std::uint8_t*>(host->layer_base(0)),
                      dev.data(), dev.size(), layout.num_blocks, layout,
                      "device pools", what);
  if (layout.num_host_blocks > 0)
    ok = same_tier(static_cast<const std::uint8_t*>(host->host_layer_base(0)),
                   static_cast<const std::uint8_t*>(cuda->host_layer_base(0)),
                   layout.host_bytes(), layout.num_host_blocks, layout,
                   "host tier", what)
         && ok;
  return ok;
}

} // namespace kvactor::test

#endif // KVACTOR_HAVE_CUDA
