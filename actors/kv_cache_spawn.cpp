// spawn_kv_cache: assembles a cache - its storage (made from the config, or
// brought by the caller and checked against it), the device actor, the block
// pool and the manager (which spawns the supervisor).
#include "kvactor/actors/kv_cache_manager_actor.hpp"

#include <memory>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "kvactor/actors/block_pool.hpp"
#include "kvactor/actors/device_actor.hpp"
#include "kvactor/actors/kv_cache_manager_state.hpp"
#include "kvactor/messages/error.hpp"

namespace kvactor {

storage_options storage_options_for(const cache_config& cfg) {
  storage_options opts;
  opts.kind = cfg.storage;
  opts.layout.num_layers = cfg.model.num_layers;
  opts.layout.num_blocks = static_cast<std::uint32_t>(cfg.num_gpu_blocks);
  opts.layout.block_size = cfg.block_size;
  opts.layout.num_heads = cfg.model.num_kv_heads;
  opts.layout.head_dim = cfg.model.head_dim;
  opts.layout.dtype = cfg.model.dtype;
  opts.layout.num_host_blocks = static_cast<std::uint32_t>(cfg.num_host_blocks);
  opts.gpu_memory_utilization = cfg.gpu_memory_utilization;
  opts.device_index = cfg.device_index;
  return opts;
}

namespace {

/// None if a storage brought by the caller (`have`) has the layout the
/// config asks for (`want`; num_blocks 0: any pool size).
caf::error check_layout(const storage_layout& have, const storage_layout& want) {
  auto same = have.num_layers == want.num_layers
              && have.block_size == want.block_size
              && have.num_heads == want.num_heads
              && have.head_dim == want.head_dim && have.dtype == want.dtype
              && (want.num_blocks == 0 || have.num_blocks == want.num_blocks)
              && have.num_host_blocks == want.num_host_blocks;
  if (same)
    return caf::none;
  auto text = [](const storage_layout& l) {
    return std::to_string(l.num_layers) + " layers, blocks of "
           + std::to_string(l.block_size) + " tokens x "
           + std::to_string(l.num_heads) + " heads x "
           + std::to_string(l.head_dim) + " " + to_string(l.dtype) + ", "
           + std::to_string(l.num_blocks) + " device and "
           + std::to_string(l.num_host_blocks) + " host blocks";
  };
  return make_error(errc::invalid_config,
                    "spawn_options.store: the storage has " + text(have)
                      + "; the config asks for " + text(want));
}

} // namespace

caf::expected<cache_system> spawn_kv_cache(caf::actor_system& sys,
                                           const cache_config& cfg,
                                           spawn_options spawn_opts) {
  if (auto err = validate(cfg))
    return err;
  auto opts = storage_options_for(cfg);
  cache_system out;
  if (spawn_opts.store) {
    if (auto err = check_layout(spawn_opts.store->layout(), opts.layout))
      return err;
    out.store = std::move(spawn_opts.store);
  } else {
    auto made = make_storage(opts);
    if (!made)
      return std::move(made.error());
    out.store = std::shared_ptr<storage>{std::move(*made)};
  }
  auto& lay = out.store->layout();
  if (cfg.num_gpu_blocks == 0) {
    // Sized from the device's memory: what depends on the count (the
    // tenants' reservations, the watermark) is checked now.
    auto sized = cfg;
    sized.num_gpu_blocks = lay.num_blocks;
    // "FIELD: what" first, as every config error reads (the simulator
    // finds the field's line in the scenario by it).
    if (auto err = validate(sized))
      return make_error(errc::invalid_config,
                        context_of(err) + " (with the pool sized to "
                          + std::to_string(lay.num_blocks)
                          + " blocks from device memory)");
  }
  storage_info info{to_string(out.store->kind()), out.store->where(),
                    lay.num_blocks, lay.num_host_blocks, lay.bytes_per_block()};
  out.device = spawn_device_actor(
    sys, out.store, spawn_opts.detached_device,
    std::chrono::milliseconds{cfg.device_timeout_ms});
  auto pool_index = std::make_shared<detail::index_hint>();
  auto pool = spawn_block_pool(sys, cfg, lay.num_blocks, out.device, pool_index);
  if (!pool) {
    caf::anon_send_exit(out.device, caf::exit_reason::user_shutdown);
    return std::move(pool.error());
  }
  out.pool = std::move(*pool);
  out.manager = sys.spawn(detail::manager_fun, cfg, info, out.device, out.pool,
                          std::move(pool_index));
  // Before anyone can step the pool: its steps' effects reach the registry.
  // Before any work reaches the device: a stall tells the manager and the
  // pool first.
  auto mgr = caf::actor_cast<caf::actor>(out.manager);
  caf::anon_send(out.pool, registry_atom::value, mgr, info);
  caf::anon_send(out.device, registry_atom::value, mgr,
                 caf::actor_cast<caf::actor>(out.pool));
  return out;
}

} // namespace kvactor
