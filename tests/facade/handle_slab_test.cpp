// Handle actors live in the handles' slab (actor_storage specialized in
// request_handle.cpp): a stream of allocate / deallocate pairs takes the
// memory the previous request's ended handle left, instead of new memory
// for each.
#include <cstdint>

#include "fixture.hpp"
#include "kvactor/actors/request_handle.hpp"

using namespace kvtest;

BOOST_FIXTURE_TEST_SUITE(handle_slab, watchdog)

BOOST_AUTO_TEST_CASE(ended_handles_memory_serves_the_next_requests) {
  cache_fixture f;
  auto before = kvactor::handle_slab_counts();
  constexpr std::uint64_t n = 200;
  for (std::uint64_t id = 1; id <= n; ++id) {
    {
      auto h = f.alloc(f.req(id, 5));
      BOOST_TEST(h->is_valid());
    } // the facade's reference goes; the registry's with the request
    auto spawned = kvactor::handle_slab_counts();
    BOOST_TEST(spawned.reused + spawned.fresh - before.reused - before.fresh
               == id);
    auto err = f.m().deallocate(id);
    BOOST_REQUIRE_MESSAGE(!err, render(err));
    // Once the handle actor is gone its block is back in the slab, for the
    // next request to take.
    BOOST_REQUIRE(eventually([&] {
      return kvactor::handle_slab_counts().cached == spawned.cached + 1;
    }));
  }
  auto after = kvactor::handle_slab_counts();
  BOOST_TEST(after.reused + after.fresh - before.reused - before.fresh == n);
  // Only the first request of the stream may need new memory.
  BOOST_TEST(after.fresh - before.fresh <= 1u);
  BOOST_TEST(after.reused - before.reused >= n - 1);
}

BOOST_AUTO_TEST_SUITE_END()
