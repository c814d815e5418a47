// The whole cache on the CUDA backend, driven through its actors on CAF's
// threaded scheduler, beside the same cache on the host backend: K/V written
// through the device actor, a fork and a copy-on-write extend, a swap out and
// back in through the manager's two phases, then every request's layers
// gathered and compared byte for byte. This reaches what the storage tests
// do not: the device actor over CUDA (completion wakes from the notifier
// streams, per-ticket replies, pinned staging), the pool's copy-on-write
// copies and the manager's swaps, with the device actor detached as in use.
#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include "kvactor/actors/kv_cache_manager_actor.hpp"
#include "kvactor/messages/registration.hpp"
#include "twin.hpp"

using namespace kvactor;
using namespace kvactor::test;

namespace {

constexpr auto patience = std::chrono::seconds(30);

cache_config config_for(const std::string& storage, dtype dt) {
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
  cache_system cache;
  caf::scoped_actor self;

  cache_under_test(caf::actor_system& s, const cache_config& cfg)
    : sys(s), self(s) {
    auto started = spawn_kv_cache(sys, cfg);
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

  block_table allocate(const cache_config& cfg, request_id id, std::vector<token_id> prompt) {
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

  /// Writes tokens [first, last) of `table` in every layer: rows drawn from
  /// `seed`, the same for both caches.
  void write(const cache_config& cfg, const block_table& table,
             std::uint64_t first, std::uint64_t last, std::uint64_t seed) {
    auto row = std::size_t{cfg.model.num_kv_heads} * cfg.model.head_dim
               * size_of(cfg.model.dtype);
    for (std::uint32_t layer = 0; layer < cfg.model.num_layers; ++layer) {
      std::mt19937_64 rng{seed * 1000 + layer};
      slot_write w;
      w.layer = layer;
      for (auto i = first; i < last; ++i)
        w.slots.push_back(static_cast<std::int64_t>(table.slot(i)));
      w.keys.resize((last - first) * row);
      w.values.resize((last - first) * row);
      fill_random(w.keys.data(), w.keys.size(), rng);
      fill_random(w.values.data(), w.values.size(), rng);
      BOOST_TEST(ask<std::uint32_t>(cache.device, write_atom::value, std::move(w))
                 == last - first);
    }
  }

  /// Every layer of request `id`, keys then values, as the cache holds them.
  std::vector<std::uint8_t> contents(const cache_config& cfg, request_id id) {
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

/// The same operations on `c`; returns requests 1 and 2's contents.
std::vector<std::vector<std::uint8_t>> exercise(cache_under_test& c,
                                                const cache_config& cfg,
                                                std::uint64_t seed) {
  std::vector<token_id> prompt(40);
  for (std::size_t i = 0; i < prompt.size(); ++i)
    prompt[i] = static_cast<token_id>(seed % 1000 + i);
  // Request 1: 40 tokens (2.5 blocks), written; 2 forks it and extends
  // into the shared, half-full last block: the pool has it copied first.
  auto t1 = c.allocate(cfg, 1, prompt);
  c.write(cfg, t1, 0, 40, seed);
  c.fork(1, 2);
  auto t2 = c.ask<block_table>(c.cache.manager, extend_atom::value, request_id{2},
                               std::uint64_t{5});
  BOOST_TEST(t2.blocks.back() != t1.blocks.back()); // its own copy
  c.write(cfg, t2, 40, 45, seed + 1);
  // Request 1 goes to the host tier and comes back into other blocks.
  BOOST_TEST(c.ask<std::uint32_t>(c.cache.manager, swap_out_atom::value,
                                  request_id{1})
             == t1.blocks.size());
  auto back = c.ask<block_table>(c.cache.manager, swap_in_atom::value, request_id{1});
  BOOST_TEST(back.num_tokens == 40u);
  return {c.contents(cfg, 1), c.contents(cfg, 2)};
}

} // namespace

BOOST_AUTO_TEST_SUITE(cache_on_cuda_suite, *boost::unit_test::precondition(gpu_present{}))

BOOST_AUTO_TEST_CASE(cache_on_cuda_holds_the_same_bytes_as_on_host) {
  auto seed = test_seed();
  caf::actor_system_config sys_cfg;
  add_message_types(sys_cfg);
  caf::actor_system sys{sys_cfg};
  for (auto dt : {dtype::fp16, dtype::bf16}) {
    BOOST_TEST_CONTEXT("dtype " << to_string(dt)) {
      auto host_cfg = config_for("host", dt);
      auto cuda_cfg = config_for("cuda", dt);
      cache_under_test host{sys, host_cfg};
      cache_under_test cuda{sys, cuda_cfg};
      BOOST_TEST((cuda.cache.store->where().kind == device_kind::cuda));
      auto want = exercise(host, host_cfg, seed);
      auto got = exercise(cuda, cuda_cfg, seed);
      BOOST_REQUIRE(want.size() == got.size());
      for (std::size_t r = 0; r < want.size(); ++r) {
        BOOST_TEST(!want[r].empty());
        BOOST_TEST((got[r] == want[r]), "request " << r + 1 << ": the cuda cache's "
                                                  "bytes differ from the host's");
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
