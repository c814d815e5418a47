// Helpers the block pool core's unit tests share: token runs, error names,
// the invariant as text.
#pragma once

#include <numeric>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "kvactor/actors/block_pool_core.hpp"
#include "kvactor/messages/error.hpp"

namespace kvactor::test {

/// first, first + 1, ..., n tokens.
inline std::vector<token_id> run(token_id first, std::size_t n) {
  std::vector<token_id> out(n);
  std::iota(out.begin(), out.end(), first);
  return out;
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

/// "ok", or the broken invariant.
inline std::string invariant(const detail::block_pool_core& pool) {
  auto err = pool.check_invariant();
  return err ? render(err) : "ok";
}

} // namespace kvactor::test
