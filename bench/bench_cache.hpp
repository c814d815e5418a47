// bench_cache: the cache a benchmark drives - an actor system configured
// for it (configure(): its workers, its scheduler) and the cache started
// there. A cache that does not start is reported on stderr, prefixed with
// the benchmark's name, and leaves `mgr` empty: main returns 1.
//
//   kvactor::bench::bench_cache cache{"scale", cfg};
//   if (!cache.mgr) return 1;
#pragma once

#include <iostream>
#include <memory>
#include <optional>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include "kvactor/actors/kv_cache_manager.hpp"
#include "kvactor/messages/error.hpp"

namespace kvactor::bench {

class bench_cache {
  // Declared first: the system is made from it, and goes before it.
  caf::actor_system_config sys_cfg_;

  static caf::actor_system_config& configured(caf::actor_system_config& sys_cfg,
                                              const cache_config& cfg) {
    configure(sys_cfg, cfg);
    return sys_cfg;
  }

public:
  /// `store`: a storage of the caller's own (kv_cache_manager::start's);
  /// null, the one cfg.storage names.
  bench_cache(const char* bench, const cache_config& cfg,
              std::shared_ptr<storage> store = nullptr)
    : sys{configured(sys_cfg_, cfg)} {
    auto started = kv_cache_manager::start(sys, cfg, std::move(store));
    if (started)
      mgr.emplace(std::move(*started));
    else
      std::cerr << bench << ": cannot start the cache: "
                << render(started.error()) << '\n';
  }

  caf::actor_system sys;
  /// Empty if the cache did not start; stops the cache first as it goes.
  std::optional<kv_cache_manager> mgr;
};

} // namespace kvactor::bench
