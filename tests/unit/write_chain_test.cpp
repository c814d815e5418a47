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

BOOST_AUTO_TEST_CASE(no_two_kernels_of_a_chain_write_one_layer) {
  // Seeded random writes: a new mapping (restart) now and then, otherwise
  // joins of random layers. The model: the layers written since the last
  // kernel that waited. join must say true exactly when its layer is not
  // among them.
  std::mt19937_64 rng{39};
  for (int run = 0; run < 50; ++run) {
    const std::uint32_t layers = 1 + static_cast<std::uint32_t>(rng() % 8);
    write_chain c{layers};
    std::vector<bool> in_chain(layers, false);
    bool started = false;
    for (int i = 0; i < 300; ++i) {
      const auto layer = static_cast<std::uint32_t>(rng() % layers);
      if (rng() % 10 == 0) {
        c.restart(layer);
        in_chain.assign(layers, false);
        in_chain[layer] = true;
        started = true;
        continue;
      }
      const bool may = started && !in_chain[layer];
      BOOST_REQUIRE_EQUAL(c.join(layer), may);
      if (!may)
        in_chain.assign(layers, false);
      in_chain[layer] = true;
      started = true;
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
