// A facade caller whose call waits on device work that never completes (a
// stalled GPU) hears the stall, naming the work, after device_timeout_ms -
// not a timeout of its own - and later calls hear that the cache stopped and
// why. The storage is the actor tests' slow host backend, brought through
// kv_cache_manager::start's storage argument: its work completes only when
// told, never here.
#include <chrono>

#include "../actors/slow_storage.hpp"
#include "fixture.hpp"

using namespace kvtest;

namespace {

/// True if `err` is what a call waiting on the stalled work gets:
/// shutting_down naming the stall - the device actor tells the manager
/// before it answers anyone, so the manager's stop answers the call first.
bool names_the_stall(const caf::error& err, const char* work) {
  return is_error(err, errc::shutting_down, {work, "the GPU looks stalled"});
}

} // namespace

BOOST_FIXTURE_TEST_SUITE(facade_stall, watchdog)

BOOST_AUTO_TEST_CASE(a_call_waiting_on_stalled_work_hears_the_stall) {
  auto cfg = small_config();
  cfg.num_host_blocks = 8;
  cfg.device_timeout_ms = 200;
  caf::actor_system_config sys_cfg;
  configure(sys_cfg, cfg);
  caf::actor_system sys{sys_cfg};
  auto store = kvactor::test::make_slow(cfg);
  {
    auto m = kv_cache_manager::start(sys, cfg, store);
    BOOST_REQUIRE_MESSAGE(m, why(m));
    m->set_timeout(std::chrono::seconds{20}); // far past the stall's 200 ms
    auto h = m->allocate(make_request(cfg, 1, 6));
    BOOST_REQUIRE_MESSAGE(h, why(h));
    auto other = m->allocate(make_request(cfg, 3, 2));
    BOOST_REQUIRE_MESSAGE(other, why(other));
    auto err = m->swap_out(1);
    BOOST_TEST(names_the_stall(err, "swap-out of 2 blocks not complete after"),
               render(err));
    BOOST_TEST(render(err).find("swap-out of request 1") != std::string::npos,
               render(err));
    // The cache stopped: later calls say so, and why.
    KV_CHECK_ERROR(error_of(m->allocate(make_request(cfg, 2, 4))),
                   errc::shutting_down, "its device actor ended",
                   "swap-out of 2 blocks not complete after");
    BOOST_TEST(!(*h)->is_valid());
    // So do an extend (through the request's handle actor, to the pool)
    // and a step (to the pool): the pool too heard before the caller did.
    auto grown = m->extend(**other, 1);
    BOOST_TEST(grown, "an extend after the stall succeeded");
    auto step = m->step(step_request{});
    BOOST_TEST(!step, "a step after the stall succeeded");
    if (!step)
      KV_CHECK_ERROR(step.error(), errc::shutting_down, "its device actor ended");
  }
}

BOOST_AUTO_TEST_CASE(a_storage_of_the_wrong_layout_is_refused_at_start) {
  auto cfg = small_config();
  caf::actor_system_config sys_cfg;
  configure(sys_cfg, cfg);
  caf::actor_system sys{sys_cfg};
  auto other = cfg;
  other.model.head_dim = 16;
  auto m = kv_cache_manager::start(sys, cfg, kvactor::test::make_slow(other));
  KV_CHECK_ERROR(error_of(std::move(m)), errc::invalid_config,
                 "the storage has 2 layers, blocks of 4 tokens x 2 heads x 16");
}

BOOST_AUTO_TEST_CASE(a_pool_sized_at_start_is_checked_against_the_reservations) {
  // num_gpu_blocks 0: the storage decides the count (device memory); what
  // depends on it is checked then, worded "FIELD: what" as parse_config's.
  auto cfg = small_config(8);
  caf::actor_system_config sys_cfg;
  configure(sys_cfg, cfg);
  caf::actor_system sys{sys_cfg};
  auto sized = cfg;
  sized.num_gpu_blocks = 0;
  sized.storage = "auto"; // host needs a count
  sized.tenants[0].reserved_blocks = 100;
  auto m = kv_cache_manager::start(sys, sized, kvactor::test::make_slow(cfg));
  auto err = error_of(std::move(m));
  KV_CHECK_ERROR(err, errc::invalid_config, "reserved blocks of all tenants",
                 "(with the pool sized to 8 blocks from device memory)");
  BOOST_TEST(context_of(err).rfind("tenants[0].reserved_blocks: ", 0) == 0,
             context_of(err));
  // Within the count it starts.
  sized.tenants[0].reserved_blocks = 8;
  BOOST_TEST(bool{kv_cache_manager::start(sys, sized, kvactor::test::make_slow(cfg))});
}

BOOST_AUTO_TEST_SUITE_END()
