// spawn_fn: spawns a test's function-based actor (a lambda taking its self
// pointer) with one unused argument. CAF 0.17 keeps a spawned function's
// arguments in a tuple it allocates only for arguments: spawned with none,
// it binds a reference to the null tuple (UBSan: "reference binding to null
// pointer", in init_fun_factory.hpp), harmless but noise in every sanitizer
// run. The library's own spawns pass arguments already.
#pragma once

#include <utility>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>

template <class F>
caf::actor spawn_fn(caf::actor_system& sys, F fn) {
  return sys.spawn(
    [fn](caf::event_based_actor* self, int) mutable { return fn(self); }, 0);
}
