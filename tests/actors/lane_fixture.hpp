// The step lane tests' fixture (step_lane_test.cpp, step_lane_steppers_test.cpp):
// a cache whose step lane, the address the manager hands out, is at hand, and
// steps sent along it to the pool alone or through the whole scheduler.
#pragma once

#include <chrono>
#include <utility>

#include <caf/all.hpp>

#include "fixture.hpp"
#include "kvactor/actors/step_lane.hpp"

namespace kvactor::test {

struct lane_fixture : cache_fixture {
  explicit lane_fixture(cache_config config = small_config())
    : cache_fixture(std::move(config)) {
    auto got = ask<step_actor>(mgr, step_atom::value);
    BOOST_REQUIRE_MESSAGE(got, outcome(got));
    lane = *got;
  }

  caf::expected<step_result> lane_step(caf::scoped_actor& from,
                                       step_request req) {
    auto res = ask_from<step_result>(from, lane, step_atom::value,
                                     std::move(req));
    if (!res)
      return std::move(res.error());
    return std::move(std::get<0>(*res));
  }

  /// Sends `req` to the lane and runs only the pool: the manager has not
  /// seen the step's effects yet when this returns the reply.
  step_result pool_only_step(step_request req) {
    self->send(lane, step_atom::value, std::move(req));
    BOOST_REQUIRE(sched.prioritize(pool));
    sched.run_once();
    step_result out;
    bool got = false;
    self->receive([&](step_result& r) { out = std::move(r); got = true; },
                  caf::after(std::chrono::seconds(0)) >> [] {});
    BOOST_REQUIRE_MESSAGE(got, "the pool did not reply in its own job");
    return out;
  }

  step_actor lane;
};

} // namespace kvactor::test
