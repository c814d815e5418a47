// Chained block hashes for the prefix index: a full block's hash covers its
// tokens and, through its parent's hash, every token before it. CAF-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "kvactor/messages/types.hpp"

namespace kvactor::detail {

/// A 128-bit block hash. `lo` keys the prefix index (and is what KV events
/// publish); `hi` is checked on every hit, so two different prefixes share a
/// cached block only on a 128-bit collision (never in practice), unlike
/// vLLM's 64-bit Python hash.
struct block_hash {
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;
};

inline bool operator==(block_hash x, block_hash y) noexcept {
  return x.lo == y.lo && x.hi == y.hi;
}
inline bool operator!=(block_hash x, block_hash y) noexcept {
  return !(x == y);
}

/// wyhash's multiply-fold mixer.
inline std::uint64_t mum(std::uint64_t a, std::uint64_t b) noexcept {
  auto r = static_cast<unsigned __int128>(a) * b;
  return static_cast<std::uint64_t>(r) ^ static_cast<std::uint64_t>(r >> 64);
}

/// Hash of a block of `n` tokens whose predecessor hashed to `parent`.
/// Deterministic across processes and runs, so a router outside the process
/// can compute the same hashes from a prompt.
inline block_hash hash_block(block_hash parent, const token_id* tokens,
                             std::size_t n) noexcept {
  constexpr std::uint64_t k0 = 0xa0761d6478bd642full;
  constexpr std::uint64_t k1 = 0xe7037ed1a0b428dbull;
  constexpr std::uint64_t k2 = 0x8ebc6af09c88c6e3ull;
  constexpr std::uint64_t k3 = 0x589965cc75374cc3ull;
  std::uint64_t a = parent.lo ^ k0;
  std::uint64_t b = parent.hi ^ k2;
  std::size_t i = 0;
  for (; i + 2 <= n; i += 2) {
    std::uint64_t w;
    std::memcpy(&w, tokens + i, sizeof(w));
    a = mum(a ^ w, k1);
    b = mum(b ^ w, k3);
  }
  if (i < n) {
    auto w = static_cast<std::uint64_t>(static_cast<std::uint32_t>(tokens[i]));
    a = mum(a ^ w, k1);
    b = mum(b ^ w, k3);
  }
  a = mum(a ^ n, k1 ^ k2);
  b = mum(b ^ n, k3 ^ k0);
  return {a, b};
}

/// The root of a namespace's chain: tenants with different namespaces never
/// produce the same block hashes, so they can neither hit nor time each
/// other's cached prefixes.
inline block_hash namespace_seed(const std::string& name) noexcept {
  // FNV-1a over the name, then mixed into both lanes.
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return {mum(h, 0x9e3779b97f4a7c15ull), mum(h ^ 0x5851f42d4c957f2dull, 0x2545f4914f6cdd1dull)};
}

} // namespace kvactor::detail
