// Test helper of gpu_tests: one cache started on CAF's threaded scheduler
// (the device actor detached, as in use) and blocking ways to ask its
// actors - allocate, fork, write K/V through the device actor, read a
// request's layers back.
#pragma once

#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include "kvactor/actors/kv_cache_manager_actor.hpp"
#include "kvactor/messages/registration.hpp"
#include "twin.hpp"

namespace kvactor::test {

constexpr auto patience = std::chrono::seconds(30);

/// A small cache on `storage` ("host" or "cuda"): 3 layers of 4 heads x 64,
/// 256 device blocks of 16 tokens, a host tier of 64, no GC timer.
inline cache_config small_cache_config(const std::string& storage, dtype dt) {
  cache_config cfg;
  cfg.block_size = 16;
  cfg.model.num_layers = 3;
  cfg.model.num_kv_heads = 4;
  cfg.model.head_dim = 64;
  cfg.model.dtype = dt;
  cfg.storage = storage;
  cfg.num_gpu_blocks = 256;
  cfg.num_host_blocks = 64;
  cfg.gc_interval_ms = 0;
  return cfg;
}

/// One started cache and a blocking way to ask its actors.
struct cache_under_test {
  caf::actor_system& sys;
  cache_config cfg;
  cache_system cache;
  caf::scoped_actor self;

  cache_under_test(caf::actor_system& s, cache_config c, spawn_options opts = {})
    : sys(s), cfg(std::move(c)), self(s) {
    auto started = spawn_kv_cache(sys, cfg, std::move(opts));
    if (!started)
      BOOST_FAIL("spawn_kv_cache(" << cfg.storage << "): " << render(started.error()));
    cache = std::move(*started);
  }

  ~cache_under_test() {
    self->send_exit(cache.manager, caf::exit_reason::user_shutdown);
  }

  /// Asks `dest` and waits for one reply of type T (an error fails the test).
  template <class T, class Dest, class... Ts>
  T ask(const Dest& dest, Ts&&... xs) {
    T out{};
    self->request(dest, patience, std::forward<Ts>(xs)...)
      .receive([&](T& x) { out = std::move(x); },
               [&](caf::error& err) { BOOST_FAIL("request failed: " << render(err)); });
    return out;
  }

  block_table allocate(request_id id, std::vector<token_id> prompt) {
    allocation_request req;
    req.id = id;
    req.prompt = std::move(prompt);
    req.max_sequence_length = 4096;
    req.num_layers = cfg.model.num_layers;
    req.num_heads = cfg.model.num_kv_heads;
    req.head_dim = cfg.model.head_dim;
    req.dtype = cfg.model.dtype;
    req.device = cache.store->where();
    block_table table;
    self->request(cache.manager, patience, allocate_atom::value, req)
      .receive([&](request_handle_actor&, block_table& t) { table = std::move(t); },
               [&](caf::error& err) { BOOST_FAIL("allocate: " << render(err)); });
    return table;
  }

  block_table fork(request_id parent, request_id child) {
    block_table table;
    self->request(cache.manager, patience, fork_atom::value, parent, child)
      .receive([&](request_handle_actor&, block_table& t) { table = std::move(t); },
               [&](caf::error& err) { BOOST_FAIL("fork: " << render(err)); });
    return table;
  }

  /// The writes of tokens [first, last) of `table` into `layer`: rows drawn
  /// from `seed`, the same for any cache of this config.
  slot_write layer_write(const block_table& table, std::uint32_t layer,
                         std::uint64_t first, std::uint64_t last,
                         std::uint64_t seed) const {
    auto row = std::size_t{cfg.model.num_kv_heads} * cfg.model.head_dim
               * size_of(cfg.model.dtype);
    std::mt19937_64 rng{seed * 1000 + layer};
    slot_write w;
    w.layer = layer;
    for (auto i = first; i < last; ++i)
      w.slots.push_back(static_cast<std::int64_t>(table.slot(i)));
    w.keys.resize((last - first) * row);
    w.values.resize((last - first) * row);
    fill_random(w.keys.data(), w.keys.size(), rng);
    fill_random(w.values.data(), w.values.size(), rng);
    return w;
  }

  /// Writes tokens [first, last) of `table` in every layer (layer_write).
  void write(const block_table& table, std::uint64_t first, std::uint64_t last,
             std::uint64_t seed) {
    for (std::uint32_t layer = 0; layer < cfg.model.num_layers; ++layer)
      BOOST_TEST(ask<std::uint32_t>(cache.device, write_atom::value,
                                    layer_write(table, layer, first, last, seed))
                 == last - first);
  }

  /// Every layer of request `id`, keys then values, as the cache holds them.
  std::vector<std::uint8_t> contents(request_id id) {
    auto table = ask<block_table>(cache.manager, table_atom::value, id);
    std::vector<std::uint8_t> out;
    for (std::uint32_t layer = 0; layer < cfg.model.num_layers; ++layer) {
      auto kv = ask<gathered_kv>(cache.device, gather_atom::value, layer,
                                 table.blocks, table.num_tokens);
      out.insert(out.end(), kv.keys.begin(), kv.keys.end());
      out.insert(out.end(), kv.values.begin(), kv.values.end());
    }
    return out;
  }
};

} // namespace kvactor::test
