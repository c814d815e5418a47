// The whole cache on the CUDA backend, driven through its actors on CAF's
// threaded scheduler, beside the same cache on the host backend: K/V written
// through the device actor, a fork and a copy-on-write extend, a swap out and
// back in through the manager's two phases, then every request's layers
// gathered and compared byte for byte. This reaches what the storage tests
// do not: the device actor over CUDA (completion wakes from the notifier
// streams, per-ticket replies, pinned staging), the pool's copy-on-write
// copies and the manager's swaps, with the device actor detached as in use.
#include <cstdint>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include "cache_under_test.hpp"

using namespace kvactor;
using namespace kvactor::test;

namespace {

/// The same operations on `c`; returns requests 1 and 2's contents.
std::vector<std::vector<std::uint8_t>> exercise(cache_under_test& c,
                                                std::uint64_t seed) {
  std::vector<token_id> prompt(40);
  for (std::size_t i = 0; i < prompt.size(); ++i)
    prompt[i] = static_cast<token_id>(seed % 1000 + i);
  // Request 1: 40 tokens (2.5 blocks), written; 2 forks it and extends
  // into the shared, half-full last block: the pool has it copied first.
  auto t1 = c.allocate(1, prompt);
  c.write(t1, 0, 40, seed);
  c.fork(1, 2);
  auto t2 = c.ask<block_table>(c.cache.manager, extend_atom::value, request_id{2},
                               std::uint64_t{5});
  BOOST_TEST(t2.blocks.back() != t1.blocks.back()); // its own copy
  c.write(t2, 40, 45, seed + 1);
  // Request 1 goes to the host tier and comes back into other blocks.
  BOOST_TEST(c.ask<std::uint32_t>(c.cache.manager, swap_out_atom::value,
                                  request_id{1})
             == t1.blocks.size());
  auto back = c.ask<block_table>(c.cache.manager, swap_in_atom::value, request_id{1});
  BOOST_TEST(back.num_tokens == 40u);
  return {c.contents(1), c.contents(2)};
}

} // namespace

BOOST_AUTO_TEST_SUITE(cache_on_cuda_suite, *boost::unit_test::precondition(gpu_present{}))

BOOST_AUTO_TEST_CASE(cache_on_cuda_holds_the_same_bytes_as_on_host) {
  auto seed = test_seed();
  caf::actor_system_config sys_cfg;
  add_message_types(sys_cfg);
  caf::actor_system sys{sys_cfg};
  for (auto dt : {dtype::fp16, dtype::bf16}) {
    BOOST_TEST_CONTEXT("dtype " << to_string(dt)) {
      cache_under_test host{sys, small_cache_config("host", dt)};
      cache_under_test cuda{sys, small_cache_config("cuda", dt)};
      BOOST_TEST((cuda.cache.store->where().kind == device_kind::cuda));
      auto want = exercise(host, seed);
      auto got = exercise(cuda, seed);
      BOOST_REQUIRE(want.size() == got.size());
      for (std::size_t r = 0; r < want.size(); ++r) {
        BOOST_TEST(!want[r].empty());
        BOOST_TEST((got[r] == want[r]), "request " << r + 1 << ": the cuda cache's "
                                                  "bytes differ from the host's");
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
