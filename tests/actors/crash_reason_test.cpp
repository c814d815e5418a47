// A cache actor that throws ends with an error naming it and what was
// thrown (actors/crash_reason.hpp), not CAF's bare runtime_error: the
// manager stops the cache with that text, so a caller learns why.
#include "fixture.hpp"
#include "slow_storage.hpp"

#include <stdexcept>
#include <string>

#include <caf/all.hpp>

#include "kvactor/actors/crash_reason.hpp"
#include "spawn_fn.hpp"

using namespace kvactor;
using namespace kvactor::test;

namespace {

/// Why an actor that installs name_crashes and then throws `thrown` on
/// its first message ends, as its down message says.
template <class Throw>
std::string end_of_one_that_throws(Throw thrown) {
  cache_fixture f;
  auto victim = spawn_fn(f.sys, [thrown](caf::event_based_actor* self) {
    detail::name_crashes(self, "test actor");
    return caf::behavior{[thrown](int) { thrown(); }};
  });
  f.self->monitor(victim);
  f.self->send(victim, 1);
  f.run();
  std::string why = "still running";
  f.self->receive([&](caf::down_msg& dm) { why = render(dm.reason); },
                  caf::after(std::chrono::seconds(0)) >> [] {});
  return why;
}

} // namespace

BOOST_AUTO_TEST_SUITE(crash_reason)

BOOST_AUTO_TEST_CASE(a_crash_names_the_actor_and_what_was_thrown) {
  BOOST_TEST(end_of_one_that_throws([] { throw std::runtime_error("boom"); })
             == "kvactor: shutting_down (test actor: crashed: boom)");
  BOOST_TEST(end_of_one_that_throws([] { throw 42; })
             == "kvactor: shutting_down (test actor: crashed: an unknown exception)");
}

BOOST_AUTO_TEST_CASE(a_device_that_throws_stops_the_cache_naming_it) {
  // The slow storage throws at the swap's submission: the device actor
  // crashes, and the manager stops the cache with the crash in its reason
  // - the swap's caller hears it.
  cache_fixture f{host_tier_config(), make_slow(host_tier_config())};
  f.check_on_exit = false;
  BOOST_REQUIRE(f.allocate(1, 6));
  auto& store = static_cast<slow_storage&>(*f.cache.store);
  store.throw_next();
  f.self->monitor(f.mgr);
  f.self->send(f.mgr, swap_out_atom::value, request_id{1});
  f.run();
  std::string swap = "no reply", end = "running";
  for (bool more = true; more;)
    f.self->receive([&](std::uint32_t) { swap = "ok"; },
                    [&](caf::error& err) { swap = render(err); },
                    [&](caf::down_msg& dm) { end = render(dm.reason); },
                    caf::after(std::chrono::seconds(0)) >> [&] { more = false; });
  const std::string crash = "its device actor ended (kvactor: device_failure "
                            "(device actor: crashed: slow_storage: thrown as "
                            "the test asked))";
  BOOST_TEST(end.find(crash) != std::string::npos, end);
  BOOST_TEST(swap.find(crash) != std::string::npos, swap);
}

BOOST_AUTO_TEST_SUITE_END()
