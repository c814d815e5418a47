// admission_order: the cached_prefix ordering (see the header).
#include "admission_order.hpp"

#include <algorithm>
#include <numeric>

namespace kvactor::sim {

const char* to_string(admission_order x) noexcept {
  return x == admission_order::cached_prefix ? "cached_prefix" : "arrival";
}

std::optional<admission_order> admission_order_from(const std::string& text) {
  if (text == "arrival")
    return admission_order::arrival;
  if (text == "cached_prefix")
    return admission_order::cached_prefix;
  return std::nullopt;
}

std::vector<std::size_t>
cached_prefix_order(const std::vector<admission_candidate>& queue,
                    std::uint64_t starvation_steps) {
  std::vector<std::size_t> out(queue.size());
  std::iota(out.begin(), out.end(), std::size_t{0});
  auto starving = [&](const admission_candidate& c) {
    return c.waited >= starvation_steps;
  };
  std::stable_sort(out.begin(), out.end(), [&](std::size_t i, std::size_t j) {
    auto& x = queue[i];
    auto& y = queue[j];
    if (starving(x) != starving(y))
      return starving(x);
    // Among the starving the cache does not count: oldest first.
    if (!starving(x) && x.cached_tokens != y.cached_tokens)
      return x.cached_tokens > y.cached_tokens;
    return x.waited > y.waited;
  });
  return out;
}

} // namespace kvactor::sim
