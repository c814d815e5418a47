// write_chain (device/write_chain.hpp): which write_slots kernels may run
// together. Two kernels of one chain never write the same layer.
#include <cstdint>
#include <random>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/device/write_chain.hpp"

using kvactor::detail::write_chain;

BOOST_AUTO_TEST_SUITE(write_chain_suite)

BOOST_AUTO_TEST_CASE(a_pass_overlaps_every_layer_after_the_first) {
  write_chain c{4};
  BOOST_TEST(!c.join(0)); // no chain yet: waits, and starts one
  BOOST_TEST(c.join(1));
  c.restart(0);           // a new mapping
  for (std::uint32_t layer = 1; layer < 4; ++layer)
    BOOST_TEST(c.join(layer));
  BOOST_TEST(!c.join(2)); // the same layer again: must not race the first
  BOOST_TEST(c.join(0));  // the new chain holds layer 2 alone
  BOOST_TEST(c.join(3));
  BOOST_TEST(!c.join(0));
}

namespace {

/// The launch semantics of kernels.hpp's write_overlap, modelled: for each
/// kernel of a stream, the first kernel that may still run when it works.
/// A kernel launches once the one before it let it: a work-mode kernel
/// lets the next launch as it starts, a launch-mode one once it waited for
/// every kernel before it - unless `trigger_first`, the order the kernel
/// had before review (let the next launch, then wait). It works at once
/// (work mode), or once every kernel before it finished (launch mode).
std::vector<std::size_t> overlaps_from(const std::vector<bool>& waits,
                                       bool trigger_first) {
  std::vector<std::size_t> launched(waits.size(), 0), works(waits.size(), 0);
  for (std::size_t j = 0; j < waits.size(); ++j) {
    // The first kernel that may still run when j launches.
    if (j > 0)
      launched[j] = waits[j - 1] && !trigger_first ? j - 1 : launched[j - 1];
    works[j] = waits[j] ? j : launched[j];
  }
  return works;
}

/// The kernels' modes as cuda_storage decides them: a write after another
/// op (or with a new mapping) restarts the chain, a next layer joins it.
/// `restart[j]`: whether write j follows another op or a new mapping.
std::vector<bool> modes(write_chain& c, const std::vector<std::uint32_t>& layers,
                        const std::vector<bool>& restart) {
  std::vector<bool> waits(layers.size());
  for (std::size_t j = 0; j < layers.size(); ++j) {
    if (restart[j]) {
      c.restart(layers[j]);
      waits[j] = true;
    } else {
      waits[j] = !c.join(layers[j]);
    }
  }
  return waits;
}

/// Whether two kernels that may run together write one layer.
bool races(const std::vector<std::uint32_t>& layers,
           const std::vector<bool>& waits, bool trigger_first) {
  const auto from = overlaps_from(waits, trigger_first);
  for (std::size_t j = 0; j < layers.size(); ++j)
    for (std::size_t i = from[j]; i < j; ++i)
      if (layers[i] == layers[j])
        return true;
  return false;
}

} // namespace

BOOST_AUTO_TEST_CASE(kernels_that_may_run_together_write_distinct_layers) {
  // Seeded random write sequences (a new mapping or another op now and
  // then, otherwise next layers of random, often repeated, layers), the
  // modes write_chain gives them, and the model above: no two kernels that
  // may run together write one layer.
  std::mt19937_64 rng{39};
  for (int run = 0; run < 200; ++run) {
    const std::uint32_t num_layers = 1 + static_cast<std::uint32_t>(rng() % 6);
    write_chain c{num_layers};
    std::vector<std::uint32_t> layers(1 + rng() % 60);
    std::vector<bool> restart(layers.size());
    for (std::size_t j = 0; j < layers.size(); ++j) {
      layers[j] = static_cast<std::uint32_t>(rng() % num_layers);
      restart[j] = j == 0 || rng() % 8 == 0;
    }
    const auto waits = modes(c, layers, restart);
    BOOST_REQUIRE_MESSAGE(!races(layers, waits, false),
                          "run " << run << ": two kernels of one layer may "
                                            "run together");
  }
}

BOOST_AUTO_TEST_CASE(the_model_catches_a_head_that_lets_the_next_launch_early) {
  // Layers x, y, x, y with one mapping: the second x restarts the chain
  // and the second y joins it. Had the chain's head let the second y
  // launch before it waited, that y could race the first y.
  write_chain c{2};
  const std::vector<std::uint32_t> layers{0, 1, 0, 1};
  const auto waits = modes(c, layers, {true, false, false, false});
  BOOST_TEST((waits == std::vector<bool>{true, false, true, false}));
  BOOST_TEST(!races(layers, waits, false));
  BOOST_TEST(races(layers, waits, true));
}

BOOST_AUTO_TEST_SUITE_END()
