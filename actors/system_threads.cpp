// system_threads: a thread hook records, on each thread an actor system
// starts, which system started it (system_threads.hpp).
#include "kvactor/actors/system_threads.hpp"

#include <cstring>

#ifdef __linux__
#include <pthread.h>
#endif

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/thread_hook.hpp>

namespace kvactor::detail {

namespace {

/// The system that started the calling thread; null on every other thread.
thread_local const caf::actor_system* started_by = nullptr;

class system_thread_mark : public caf::thread_hook {
public:
  // A config may serve several systems, one after the other: each calls
  // init just before it starts its threads (in its constructor), so the
  // threads it starts read its own address.
  void init(caf::actor_system& sys) override {
    sys_ = &sys;
  }

  // Detached actors' threads call this too: CAF 0.17 names them
  // "caf.actor" first (its workers "caf.multiplexer", its clock
  // "caf.clock"); they are the embedder's to block on, so stay unmarked.
  void thread_started() override {
#ifdef __linux__
    char name[16] = {};
    if (pthread_getname_np(pthread_self(), name, sizeof(name)) == 0
        && std::strcmp(name, "caf.actor") != 0)
      started_by = sys_;
#endif
  }

  void thread_terminates() override {
    started_by = nullptr;
  }

private:
  const caf::actor_system* sys_ = nullptr;
};

} // namespace

void mark_system_threads(caf::actor_system_config& cfg) {
  cfg.add_thread_hook<system_thread_mark>();
}

bool on_system_thread(const caf::actor_system& sys) noexcept {
  return started_by == &sys;
}

} // namespace kvactor::detail
