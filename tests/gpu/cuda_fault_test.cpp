// A sticky CUDA fault while requesters wait on the cache's device work: an
// illegal address, from a kernel on a stream of the test's own, with a
// swap-out and a copy-on-write copy queued behind gates on the storage's
// streams. Each waiter gets device_failure naming its request and what was
// undone, no call hangs, later work fails at once, and no block changed
// owner. The device-level twin of the host tests in
// tests/actors/device_fault_test.cpp, which inject the fault instead.
//
// A sticky fault spoils the process's CUDA context for good, so the suite
// is disabled by default: it runs alone, in a process of its own
// (`gpu_tests --run_test=cuda_fault_suite`), as tests/gpu/device_check.sh
// runs it.
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "twin.hpp"

#if KVACTOR_HAVE_CUDA

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <cuda_runtime_api.h>

#include "cache_under_test.hpp"
#include "kvactor/device/cuda_storage.hpp"
#include "kvactor/device/kernels.hpp"
#include "stream_gate.hpp"

using namespace kvactor;
using namespace kvactor::test;

BOOST_AUTO_TEST_SUITE(cuda_fault_suite, *boost::unit_test::precondition(gpu_present{})
                                          * boost::unit_test::disabled())

BOOST_AUTO_TEST_CASE(a_sticky_fault_answers_every_waiter_and_moves_no_block) {
  caf::actor_system_config sys_cfg;
  add_message_types(sys_cfg);
  caf::actor_system sys{sys_cfg};
  cache_under_test c{sys, small_cache_config("cuda", dtype::fp16)};
  BOOST_REQUIRE((c.cache.store->where().kind == device_kind::cuda));
  auto& cuda = static_cast<cuda_storage&>(*c.cache.store);
  // 1 (40 tokens: 3 blocks) will be swapped out; 4 forks 3 (the same
  // size, its last block half full), so extending 4 copies that block.
  std::vector<token_id> prompt(40);
  for (std::size_t i = 0; i < prompt.size(); ++i)
    prompt[i] = static_cast<token_id>(i);
  auto t1 = c.allocate(1, prompt);
  c.write(t1, 0, 40, 1);
  for (auto& tok : prompt)
    tok += 1000; // 3 shares no prefix with 1
  auto t3 = c.allocate(3, prompt);
  c.write(t3, 0, 40, 3);
  auto t4 = c.fork(3, 4);
  auto before = c.ask<cache_manager_stats>(c.cache.manager, stats_atom::value);
  // Work queued from here waits behind the gates: it cannot have run when
  // the fault comes.
  auto stream = [&](cuda_storage::stream_role r) {
    return static_cast<cudaStream_t>(cuda.native_stream(r));
  };
  stream_gate out_gate{stream(cuda_storage::stream_role::device_to_host)};
  stream_gate compute_gate{stream(cuda_storage::stream_role::compute)};
  // The swap first: the pool serves nothing else while a copy-on-write
  // copy is in flight, so the other order would queue the swap after the
  // fault.
  auto swap = c.self->request(c.cache.manager, patience, swap_out_atom::value,
                              request_id{1});
  auto extend = c.self->request(c.cache.manager, patience, extend_atom::value,
                                request_id{4}, std::uint64_t{1});
  // Both reach the device actor within a few message hops; if either came
  // later, it would be refused at once instead - with the same answer.
  std::this_thread::sleep_for(std::chrono::milliseconds{300});
  // The fault: a write to an address no allocation has.
  cudaStream_t own = nullptr;
  BOOST_REQUIRE(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking) == cudaSuccess);
  BOOST_REQUIRE(detail::launch_fill_random(reinterpret_cast<void*>(std::uintptr_t{256}),
                                           4096, 1, own)
                == 0);
  auto fault = cudaStreamSynchronize(own);
  BOOST_TEST_MESSAGE("the fault: " << cudaGetErrorString(fault));
  BOOST_REQUIRE(fault != cudaSuccess);
  // Each waiter is answered (within `patience`) with device_failure, naming
  // its request and that it was undone.
  std::string swapped = "no reply";
  swap.receive([&](std::uint32_t n) { swapped = "swapped " + std::to_string(n); },
               [&](caf::error& err) { swapped = render(err); });
  std::string extended = "no reply";
  extend.receive([&](block_table& t) { extended = "extended to " + std::to_string(t.num_tokens); },
                 [&](caf::error& err) { extended = render(err); });
  BOOST_TEST_MESSAGE("swap-out of 1: " << swapped);
  BOOST_TEST_MESSAGE("extend of 4: " << extended);
  BOOST_TEST(swapped.rfind("kvactor: device_failure (swap-out of request 1 undone", 0) == 0u,
             swapped);
  BOOST_TEST(extended.rfind("kvactor: device_failure (extend of request 4 undone", 0) == 0u,
             extended);
  // Later work fails at once.
  std::string wrote = "no reply";
  c.self->request(c.cache.device, patience, write_atom::value,
                  c.layer_write(t1, 0, 0, 1, 5))
    .receive([&](std::uint32_t n) { wrote = "wrote " + std::to_string(n); },
             [&](caf::error& err) { wrote = render(err); });
  BOOST_TEST(wrote.rfind("kvactor: device_failure", 0) == 0u, wrote);
  // No block changed owner: 1 and 4 hold what they held, and the counts
  // are as before.
  BOOST_TEST(c.ask<block_table>(c.cache.manager, table_atom::value, request_id{1}).blocks
             == t1.blocks);
  auto t4_after = c.ask<block_table>(c.cache.manager, table_atom::value, request_id{4});
  BOOST_TEST(t4_after.blocks == t4.blocks);
  BOOST_TEST(t4_after.num_tokens == 40u);
  auto after = c.ask<cache_manager_stats>(c.cache.manager, stats_atom::value);
  BOOST_TEST(after.free_blocks == before.free_blocks);
  BOOST_TEST(after.host_free_blocks == before.host_free_blocks);
  BOOST_TEST(after.swap_out_count == before.swap_out_count);
  BOOST_TEST(after.blocks_allocated == before.blocks_allocated);
  BOOST_TEST(c.ask<bool>(c.cache.pool, check_atom::value));
  // The requests can still be freed: bookkeeping needs no device.
  BOOST_TEST(c.ask<std::uint32_t>(c.cache.manager, free_atom::value, request_id{1}) == 3u);
  BOOST_TEST(c.ask<bool>(c.cache.pool, check_atom::value));
  cudaStreamDestroy(own);
}

BOOST_AUTO_TEST_SUITE_END()

#endif // KVACTOR_HAVE_CUDA
