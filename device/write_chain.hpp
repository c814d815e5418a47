// write_chain: which of a forward pass's write_slots kernels may run at the
// same time as the ones queued before them (kernels.hpp's
// write_overlap::work). CUDA-free, so its rule is unit-tested without a GPU.
//
// A forward pass writes each layer once per step, all with the same slot
// mapping. The first layer's kernel waits for everything before it
// (write_overlap::launch) and only then lets the next kernel launch; each
// next layer's kernel, queued right behind the previous one, may do its
// work at once, let the next launch at once, and wait only before it
// exits - unless some kernel of the chain wrote the same layer: two
// writes of one slot must not race, the later one must win. The chain is
// every kernel since its first: each may overlap all the others, none
// before the first; so a repeated layer anywhere in it starts a new chain.
// tests/unit/write_chain_test.cpp checks this against a model of those
// launch rules.
#pragma once

#include <cstdint>
#include <vector>

namespace kvactor::detail {

/// The layers the current chain's kernels write.
/// Thread-safety: none (the storage's caller thread only).
class write_chain {
public:
  explicit write_chain(std::uint32_t num_layers) : mark_(num_layers, 0) {
  }

  /// A write of `layer` whose kernel waits for everything before it (a new
  /// mapping, or another op in between) starts a new chain.
  /// REQUIRES: layer < num_layers.
  void restart(std::uint32_t layer) noexcept {
    mark_[layer] = ++chain_;
  }

  /// A write of `layer`, with the mapping of the chain's writes, queued
  /// right behind them: true (and `layer` joins the chain) if no kernel of
  /// the chain writes `layer`, so this one may overlap them; false if one
  /// does (or no chain started): the write must wait, and starts a new one.
  /// REQUIRES: layer < num_layers.
  bool join(std::uint32_t layer) noexcept {
    if (chain_ == 0 || mark_[layer] == chain_) {
      restart(layer);
      return false;
    }
    mark_[layer] = chain_;
    return true;
  }

private:
  std::vector<std::uint64_t> mark_; // per layer: the last chain writing it
  std::uint64_t chain_ = 0;         // the current chain (0: none yet)
};

} // namespace kvactor::detail
