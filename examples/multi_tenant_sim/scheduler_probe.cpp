// scheduler: the probe before a step's admissions (admission order
// "cached_prefix") - one round trip to the step lane asking how much of
// each waiting prompt the prefix cache holds, then the step.
#include <caf/event_based_actor.hpp>

#include "kvactor/messages/error.hpp"
#include "scheduler_actor.hpp"

namespace kvactor::sim::sched {

void probe_step(sched_actor* self) {
  auto& st = self->state;
  auto reqs = st.b->probe_requests();
  if (reqs.empty())
    return send_step(self, st.b->begin_step());
  ++st.out->probes;
  self->request(st.lane, reply_timeout, probe_atom::value, std::move(reqs))
    .then(
      [self](std::vector<std::uint64_t>& cached) {
        auto& b = *self->state.b;
        if (!b.order_waiting(cached)) {
          ++self->state.out->probe_failures;
          warn(self, "probe: " + std::to_string(cached.size())
                       + " counts do not answer the requests probed; this "
                         "step admits in queue order");
        }
        send_step(self, b.begin_step());
      },
      [self](caf::error& err) {
        // A waiting request that fails allocate's checks fails the probe
        // (and will fail its admission, which drops it): the step goes on
        // in queue order. Anything else - the lane gone, no reply - ends
        // the run as a failed step message would.
        if (!has_code(err, errc::invalid_request)
            && !has_code(err, errc::unknown_tenant)
            && !has_code(err, errc::exceeds_max_sequence_length))
          return finish(self, "probe: " + render(err));
        ++self->state.out->probe_failures;
        warn(self, "probe refused, this step admits in queue order: "
                     + render(err));
        send_step(self, self->state.b->begin_step());
      });
}

} // namespace kvactor::sim::sched
