// soak_seeds: more seeds for the seeded model tests, on demand. The suite
// runs each model test on its few fixed seeds (minutes on 2 cores); to hunt
// for rarer interleavings, run a test binary with KVACTOR_SOAK=N and it also
// runs N more seeds, from KVACTOR_SOAK_FROM (default 1000) on, with the
// same checks but for the coverage ones (a seed that happens to miss an
// outcome is not a defect). A failure names its seed; rerun that one with
// KVACTOR_SOAK=1 KVACTOR_SOAK_FROM=<seed>.
//
//   KVACTOR_SOAK=200 build/tests/unit_tests --run_test=block_pool_model_suite
#pragma once

#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

namespace kvactor::test {

inline std::uint64_t soak_env(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0')
    return fallback;
  try {
    std::size_t used = 0;
    auto n = std::stoull(v, &used);
    if (used == std::string{v}.size())
      return n;
  } catch (const std::exception&) {
  }
  throw std::invalid_argument(std::string{name} + "=" + v
                              + ": not a non-negative integer");
}

/// The extra seeds KVACTOR_SOAK asks for (none if unset).
inline std::vector<std::uint64_t> soak_seeds() {
  auto n = soak_env("KVACTOR_SOAK", 0);
  auto from = soak_env("KVACTOR_SOAK_FROM", 1000);
  std::vector<std::uint64_t> out;
  for (std::uint64_t i = 0; i < n; ++i)
    out.push_back(from + i);
  return out;
}

} // namespace kvactor::test
