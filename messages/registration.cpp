// Message type names and the error renderer of kvactor.
#include "kvactor/messages/registration.hpp"

#include <chrono>
#include <cstring>

#include <caf/actor_system_config.hpp>
#include <caf/defaults.hpp>
#include <caf/thread_hook.hpp>
#include <caf/timespan.hpp>

#ifdef __linux__
#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "kvactor/actors/caf_scheduler.hpp"
#include "kvactor/messages/error.hpp"
#include "kvactor/messages/interfaces.hpp"
#include "kvactor/messages/protocol.hpp"
#include "kvactor/messages/step.hpp"
#include "kvactor/messages/types.hpp"

namespace kvactor {

void add_message_types(caf::actor_system_config& cfg) {
  // add_message_type<T> also registers std::vector<T> (and stream<T>), as
  // "std::vector<NAME>": the vectors listed by hand below are of integers
  // and pairs, whose element types are not registered themselves.
  cfg.add_message_type<device_kind>("kvactor::device_kind")
    .add_message_type<device>("kvactor::device")
    .add_message_type<dtype>("kvactor::dtype")
    .add_message_type<priority>("kvactor::priority")
    .add_message_type<memory_pressure>("kvactor::memory_pressure")
    .add_message_type<allocation_request>("kvactor::allocation_request")
    .add_message_type<block_table>("kvactor::block_table")
    .add_message_type<block_copy>("kvactor::block_copy")
    .add_message_type<block_move>("kvactor::block_move")
    .add_message_type<tenant_usage>("kvactor::tenant_usage")
    .add_message_type<cache_manager_stats>("kvactor::cache_manager_stats")
    .add_message_type<cache_gc_stats>("kvactor::cache_gc_stats")
    .add_message_type<cache_handle_stats>("kvactor::cache_handle_stats")
    .add_message_type<extend_op>("kvactor::extend_op")
    .add_message_type<draft_verdict>("kvactor::draft_verdict")
    .add_message_type<step_request>("kvactor::step_request")
    .add_message_type<table_delta>("kvactor::table_delta")
    .add_message_type<admission>("kvactor::admission")
    .add_message_type<op_failure>("kvactor::op_failure")
    .add_message_type<step_result>("kvactor::step_result")
    .add_message_type<step_effects>("kvactor::step_effects")
    .add_message_type<end_reason>("kvactor::end_reason")
    .add_message_type<topic>("kvactor::topic")
    .add_message_type<request_info>("kvactor::request_info")
    .add_message_type<extension>("kvactor::extension")
    .add_message_type<pool_usage>("kvactor::pool_usage")
    .add_message_type<pressure_event>("kvactor::pressure_event")
    .add_message_type<request_ended>("kvactor::request_ended")
    .add_message_type<pool_stats>("kvactor::pool_stats")
    .add_message_type<slot_write>("kvactor::slot_write")
    .add_message_type<gathered_kv>("kvactor::gathered_kv")
    .add_message_type<storage_info>("kvactor::storage_info")
    .add_message_type<kv_event>("kvactor::kv_event")
    .add_message_type<kv_event_batch>("kvactor::kv_event_batch")
    .add_message_type<std::vector<request_id>>("kvactor::request_ids")
    .add_message_type<std::vector<std::pair<std::uint64_t, block_id>>>(
      "kvactor::index_entries")
    .add_message_type<handle_entry>("kvactor::handle_entry")
    .add_message_type<std::vector<token_id>>("kvactor::token_ids")
    .add_message_type<std::vector<block_id>>("kvactor::block_ids")
    .add_message_type<std::vector<std::pair<request_id, std::uint64_t>>>(
      "kvactor::live_requests")
    .add_message_type<request_handle_actor>("kvactor::request_handle_actor")
    .add_message_type<supervisor_actor>("kvactor::supervisor_actor")
    .add_message_type<block_pool_actor>("kvactor::block_pool_actor")
    .add_message_type<step_actor>("kvactor::step_actor")
    .add_message_type<device_actor>("kvactor::device_actor")
    .add_message_type<kv_cache_manager_actor>("kvactor::kv_cache_manager_actor");
  cfg.add_error_category(error_category, [](std::uint8_t code, caf::atom_value,
                                            const caf::message& ctx) {
    return render(caf::error{code, error_category, ctx});
  });
}

namespace {

/// Runs the clock threads at the lowest priority (nice 19). Stock CAF 0.17
/// wakes its clock thread whenever an actor quits; the quiet scheduler's
/// only for timers, but a woken clock thread at normal priority preempts a
/// worker or a caller waiting for a reply - on two cores that cost the next
/// operation ~15 us. At nice 19 it still runs whenever a core has room;
/// only timers (GC ticks, pin expiry) may fire a little late on a saturated
/// machine.
class clock_thread_priority : public caf::thread_hook {
public:
  void init(caf::actor_system&) override {
    // nop
  }

  void thread_started() override {
#ifdef __linux__
    char name[16] = {};
    if (pthread_getname_np(pthread_self(), name, sizeof(name)) == 0
        && (std::strcmp(name, "caf.clock") == 0
            || std::strcmp(name, detail::quiet_clock_thread_name) == 0))
      setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 19);
#endif
  }

  void thread_terminates() override {
    // nop
  }
};

} // namespace

void tune_for_latency(caf::actor_system_config& cfg) {
  // Workers spin through the aggressive phase longer and never take the
  // moderate phase's 50 us naps, so a message from a non-actor thread is
  // picked up in microseconds; idle workers still end up asleep. With one
  // worker, 2000 attempts (~20 us): longer spinning cost throughput (scale
  // at 100,000 live requests 3.2 against 2.6-2.8 us per operation). With
  // more, ~150 us (20000): the facade's calls go to the workers in turn,
  // and at 2000 the one not called last was asleep at the next call
  // (extend p50 15 us instead of 5; allocate 17 instead of 9.4) - while
  // every actor exit woke CAF's clock thread, the VM's CPUs had stayed
  // awake. (Since day 19 only one worker fewer than the cores polls at a
  // time, and calls go to the one awake: see actors/caf_worker_policy.hpp.)
  auto workers = caf::get_or(cfg, "scheduler.max-threads",
                             caf::defaults::scheduler::max_threads);
  cfg.set("work-stealing.aggressive-poll-attempts",
          workers <= 1 ? 2000 : 20000);
  cfg.set("work-stealing.moderate-poll-attempts", 0);
  // Sleeping workers wake to steal every 100 ms, not CAF's 10: on two
  // cores, three sleepers' 300 wake-ups a second each took a core from
  // the spinning caller or the worker serving it (with the scheduler's
  // hint that stays on the last poller, facade extend p99 with default
  // workers fell from 46-52 us to 9-16 over 10 alternated runs, day 20).
  // A job stranded behind a long one waits for it to end, for a polling
  // worker to steal it, or for a sleeper's steal: 100 ms per random pick.
  cfg.set("work-stealing.relaxed-sleep-duration",
          caf::timespan{std::chrono::milliseconds{100}});
  // Workers run actors in the order they woke (none starves under load),
  // and actors quitting no longer wake the clock thread; timers still do.
  detail::install_caf_scheduler(cfg);
  cfg.add_thread_hook<clock_thread_priority>();
}

} // namespace kvactor
