// Helpers the block pool core's unit tests share: requests, token runs,
// error names, the invariant as text.
#pragma once

#include <numeric>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "kvactor/actors/block_pool_core.hpp"
#include "kvactor/messages/error.hpp"

namespace kvactor::test {

/// Whether block `b` is in `pool`'s prefix index.
inline bool in_index(const detail::block_pool_core& pool, block_id b) {
  bool found = false;
  pool.for_each_indexed([&](std::uint64_t, block_id x) { found |= x == b; });
  return found;
}

/// `a` then `b`.
inline std::vector<token_id> cat(std::vector<token_id> a,
                                 const std::vector<token_id>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

/// first, first + 1, ..., n tokens.
inline std::vector<token_id> run(token_id first, std::size_t n) {
  std::vector<token_id> out(n);
  std::iota(out.begin(), out.end(), first);
  return out;
}

/// A request for `n` tokens without a prompt, for the 2-layer, 2-head,
/// 8-dim fp16 model the pool core tests configure.
inline allocation_request tokens_req(request_id id, std::uint64_t n,
                                     std::string tenant_name = "",
                                     std::uint64_t max_len = 1000) {
  allocation_request req;
  req.id = id;
  req.initial_tokens = n;
  req.max_sequence_length = max_len;
  req.num_layers = 2;
  req.num_heads = 2;
  req.head_dim = 8;
  req.dtype = dtype::fp16;
  req.tenant = std::move(tenant_name);
  return req;
}

/// A request with a prompt (initial_tokens left 0: the prompt's length).
inline allocation_request prompt_req(request_id id, std::vector<token_id> prompt,
                                     std::string tenant_name = "",
                                     std::uint64_t max_len = 1000) {
  auto req = tokens_req(id, 0, std::move(tenant_name), max_len);
  req.prompt = std::move(prompt);
  return req;
}

/// A prompt request admitted in chunks of `chunk` (prefill_chunk).
inline allocation_request chunked(request_id id, std::vector<token_id> prompt,
                                  std::uint64_t chunk,
                                  std::string tenant_name = "") {
  auto req = prompt_req(id, std::move(prompt), std::move(tenant_name));
  req.prefill_chunk = chunk;
  return req;
}

/// The tokens [from, to) of `p`.
inline std::vector<token_id> part(const std::vector<token_id>& p,
                                  std::size_t from, std::size_t to) {
  return {p.begin() + from, p.begin() + to};
}

/// "ok", or the errc's name (or render() for a foreign error).
inline std::string code(const caf::error& err) {
  if (!err)
    return "ok";
  if (err.category() != error_category)
    return render(err);
  return to_string(static_cast<errc>(err.code()));
}

template <class T>
std::string code(const caf::expected<T>& x) {
  return x ? "ok" : code(x.error());
}

/// The blocks in `pool`'s prefix index.
inline std::set<block_id> indexed_blocks(const detail::block_pool_core& pool) {
  std::set<block_id> out;
  pool.for_each_indexed([&](std::uint64_t, block_id b) { out.insert(b); });
  return out;
}

/// "ok", or the broken invariant.
inline std::string invariant(const detail::block_pool_core& pool) {
  auto err = pool.check_invariant();
  return err ? render(err) : "ok";
}

} // namespace kvactor::test
