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
/// cached block only on a 128-bit collision (never by chance), unlike
/// vLLM's 64-bit Python hash. The hash is fast, not cryptographic: anyone
/// who knows a namespace's seed can search for colliding prompts (see
/// hash_block), so tenants that share a namespace without trusting each
/// other give it a secret name (namespace_seed) - where vLLM offers SHA-256.
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

/// XXH3's final mix: every input bit reaches every output bit.
inline std::uint64_t avalanche(std::uint64_t h) noexcept {
  h ^= h >> 37;
  h *= 0x165667919e3779f9ull;
  return h ^ (h >> 32);
}

/// The keys chunk `c` (tokens 4c..4c+3) of a block is folded with: its
/// words x and y are xored with x_lo and y_lo in the lo lane, x_hi and y_hi
/// in the hi lane. Four per chunk for the first four chunks (the default
/// 16-token block); later chunks reuse them offset by a multiple of an odd
/// constant, so no two chunks share keys.
struct chunk_keys {
  std::uint64_t x_lo, y_lo, x_hi, y_hi;
};
inline chunk_keys keys_of(block_hash parent, std::size_t c) noexcept {
  static constexpr std::uint64_t key[16] = {
    0x239eed24c2c063ffull, 0xf768064f958507adull, 0x55113dc30e9a8df5ull,
    0x5966eb44e0c67745ull, 0x4ca82984fcb042d9ull, 0xb9c48cb01720800full,
    0xd6c93f01a9f18631ull, 0xa83c546dbc4d13ddull, 0xa3966023df2d5c05ull,
    0xace970fccddba417ull, 0x4fe2c4e12b5eadadull, 0x00633256e25fe71dull,
    0x34c6049fa9998119ull, 0xe66c0e9819428e8bull, 0xa62d2465be71c2d9ull,
    0x3c19c840d9f9bacdull};
  const std::uint64_t* k = key + (c & 3) * 4;
  std::uint64_t off = (c >> 2) * 0x165667b19e3779f9ull;
  return {k[0] + off + parent.lo, k[1] + off - parent.lo,
          k[2] + off + parent.hi, k[3] + off - parent.hi};
}

/// Hash of a block of `n` tokens whose predecessor hashed to `parent`.
/// Deterministic across processes and runs, so a router outside the process
/// can compute the same hashes from a prompt.
///
/// XXH3-128's shape: every 16 bytes (4 tokens) are folded by one
/// 64x64->128 multiply per lane, with keys of their position, and the
/// products summed - with the raw words too (y into lo, x into hi, as XXH3
/// does), so a word that zeroes a product (x equal to its key) cannot make
/// the other word vanish: without them, chunks zeroing both lanes' products
/// collided in all 128 bits for the asking. Now a collision takes a
/// birthday search over a 64-bit lane, about 2^32 hashes, for someone who
/// knows the seed - as with the earlier wyhash-style chain. Each lane
/// follows its own half of the parent: mixing the halves would stop a
/// collision of `lo` alone from carrying down the chain, but it doubled the
/// cost here (the lanes' chains no longer overlap), and such a collision
/// only costs a cache slot (`hi` is checked on every hit). The multiplies
/// are independent, so a 16-token block costs the latency of one multiply
/// and a few adds (about 9 ns here) rather than a chain of eight per lane
/// (18 ns, the earlier loop).
inline block_hash hash_block(block_hash parent, const token_id* tokens,
                             std::size_t n) noexcept {
  constexpr std::uint64_t p1 = 0x9e3779b185ebca87ull;
  constexpr std::uint64_t p2 = 0xc2b2ae3d27d4eb4full;
  // The length enters the sums, so a zero-padded tail differs from zeros.
  std::uint64_t a = parent.lo ^ (n * p1);
  std::uint64_t b = parent.hi ^ (n * p2);
  auto fold = [&](std::uint64_t x, std::uint64_t y, std::size_t c) {
    auto k = keys_of(parent, c);
    a += mum(x ^ k.x_lo, y ^ k.y_lo) + y;
    b += mum(x ^ k.x_hi, y ^ k.y_hi) + x;
  };
  std::size_t i = 0;
  std::size_t c = 0;
  for (; i + 4 <= n; i += 4, ++c) {
    std::uint64_t x;
    std::uint64_t y;
    std::memcpy(&x, tokens + i, sizeof(x));
    std::memcpy(&y, tokens + i + 2, sizeof(y));
    fold(x, y, c);
  }
  if (i < n) {
    token_id pad[4] = {0, 0, 0, 0};
    std::memcpy(pad, tokens + i, (n - i) * sizeof(token_id));
    std::uint64_t x;
    std::uint64_t y;
    std::memcpy(&x, pad, sizeof(x));
    std::memcpy(&y, pad + 2, sizeof(y));
    fold(x, y, c);
  }
  return {avalanche(a), avalanche(b)};
}

/// The root of a namespace's chain: tenants with different namespaces never
/// produce the same block hashes, so they can neither hit nor time each
/// other's cached prefixes. A name kept secret (16 random characters, say,
/// shared with the router alone) keeps the seed, and so every chain, out of
/// the tenants' reach: none can search for prompts colliding with another's.
inline block_hash namespace_seed(const std::string& name) noexcept {
  // FNV-1a over the name, then mixed into both lanes.
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return {mum(h, 0x9e3779b97f4a7c15ull), mum(h ^ 0x5851f42d4c957f2dull, 0x2545f4914f6cdd1dull)};
}

/// A namespace's root under a request's cache salt (allocation_request::
/// cache_salt; 0 leaves it as it is). Not a hash_block output, so no prompt
/// under one salt can reach another salt's chain.
inline block_hash salted_seed(block_hash seed, std::uint64_t salt) noexcept {
  if (salt == 0)
    return seed;
  return {avalanche(mum(seed.lo ^ salt, 0xa0761d6478bd642full) ^ seed.hi),
          avalanche(mum(seed.hi ^ salt, 0xe7037ed1a0b428dbull) ^ seed.lo)};
}

} // namespace kvactor::detail
