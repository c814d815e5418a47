// admission_order: the order in which one workload's waiting requests are
// admitted. "arrival" keeps the queue as it is; "cached_prefix" admits the
// requests whose prompts the prefix cache holds most of first (SGLang's
// longest-prefix-match), so that requests sharing a prefix run while it is
// cached rather than after it was evicted. Pure: no actors, no cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvactor::sim {

enum class admission_order : std::uint8_t { arrival, cached_prefix };

const char* to_string(admission_order x) noexcept;

/// "arrival" or "cached_prefix"; nothing for any other text.
std::optional<admission_order> admission_order_from(const std::string& text);

/// One waiting request as the ordering sees it.
struct admission_candidate {
  std::uint64_t cached_tokens = 0; ///< prompt tokens the probe found cached
  std::uint64_t waited = 0;        ///< steps since it arrived
};

/// The order to admit `queue` (a workload's waiting requests, in queue
/// order) in under "cached_prefix", as indices into `queue`: first those
/// that waited at least `starvation_steps` (the starvation guard: a
/// request nobody shares a prefix with is not passed over for ever), the
/// longest-waiting first; then the rest, most cached tokens first. Ties
/// go to the longer wait (arrival order), then to queue order. A stable
/// sort: with equal counts and waits the queue stays as it is.
/// REQUIRES: starvation_steps >= 1.
std::vector<std::size_t>
cached_prefix_order(const std::vector<admission_candidate>& queue,
                    std::uint64_t starvation_steps);

} // namespace kvactor::sim
