// embed: the smallest useful program on kvactor's public headers - start a
// cache on host storage, allocate a request, extend it, deallocate it and
// print the figures; then two requests with one prompt, the second finding
// the first's blocks cached. Exits non-zero if any step fails.
#include <cstdlib>
#include <iostream>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/sec.hpp>

#include <kvactor/actors/kv_cache_manager.hpp>
#include <kvactor/config/cache_config.hpp>
#include <kvactor/messages/error.hpp>
#include <kvactor/messages/types.hpp>

namespace {

void print(const char* what, const kvactor::cache_manager_stats& s) {
  std::cout << what << ": " << s.active_caches << " requests, "
            << s.total_blocks - s.free_blocks << " of " << s.total_blocks
            << " blocks used, " << s.cached_blocks << " cached, "
            << s.used_memory_bytes << " of " << s.total_memory_bytes
            << " bytes, pressure " << kvactor::to_string(s.pressure) << '\n';
}

int fail(const char* what, const caf::error& err) {
  std::cerr << "embed: " << what << " failed: " << kvactor::render(err) << '\n';
  return EXIT_FAILURE;
}

// The facade lives in here: it must go before the actor system does.
int run(caf::actor_system& sys, const kvactor::cache_config& cfg) {
  auto mgr = kvactor::kv_cache_manager::start(sys, cfg);
  if (!mgr)
    return fail("start", mgr.error());
  kvactor::allocation_request req;
  req.id = 1;
  req.initial_tokens = 40;
  req.max_sequence_length = 1024;
  req.num_layers = cfg.model.num_layers;
  req.num_heads = cfg.model.num_kv_heads;
  req.head_dim = cfg.model.head_dim;
  req.dtype = cfg.model.dtype;
  auto h = mgr->allocate(req);
  if (!h)
    return fail("allocate", h.error());
  std::cout << "allocated request 1: " << (*h)->num_tokens() << " tokens in "
            << (*h)->table().blocks.size() << " blocks\n";
  if (auto err = mgr->extend(**h, 30))
    return fail("extend", err);
  auto t = (*h)->table();
  std::cout << "extended by 30: " << t.num_tokens << " tokens in "
            << t.blocks.size() << " blocks\n";
  if (t.num_tokens != 70 || t.blocks.size() != (70 + cfg.block_size - 1) / cfg.block_size)
    return fail("extend", caf::make_error(caf::sec::invalid_argument));
  print("stats", mgr->stats());
  if (auto err = mgr->deallocate(1))
    return fail("deallocate", err);
  std::cout << "deallocated request 1; handle valid: "
            << ((*h)->is_valid() ? "yes" : "no") << '\n';
  auto s = mgr->stats();
  print("stats", s);
  if (s.active_caches != 0 || s.free_blocks != s.total_blocks)
    return fail("deallocate", caf::make_error(caf::sec::invalid_argument));
  // Prefix caching: a prompt's full blocks stay cached after its request
  // ends; the next request with the same prefix finds them, and its
  // handle says how many prompt tokens the model need not compute.
  req.prompt.resize(40);
  for (std::size_t i = 0; i < req.prompt.size(); ++i)
    req.prompt[i] = static_cast<kvactor::token_id>(1000 + i);
  for (kvactor::request_id id : {2, 3}) {
    req.id = id;
    auto p = mgr->allocate(req);
    if (!p)
      return fail("allocate", p.error());
    auto st = (*p)->checked_stats(); // stats() would answer 0 on a failure
    if (!st)
      return fail("stats", st.error());
    auto hits = st->prefix_hit_tokens;
    std::cout << "request " << id << ": " << hits << " of "
              << req.prompt.size() << " prompt tokens found cached\n";
    if (auto err = mgr->deallocate(id))
      return fail("deallocate", err);
    // Request 3 finds request 2's first two blocks (the last prompt token
    // is always computed, and it lies in the third).
    if (hits != (id == 2 ? 0 : 2 * cfg.block_size))
      return fail("prefix caching", caf::make_error(caf::sec::invalid_argument));
  }
  std::cout << "embed: ok\n";
  return EXIT_SUCCESS;
}

} // namespace

int main() {
  kvactor::cache_config cfg;
  cfg.storage = "host";
  cfg.num_gpu_blocks = 64;
  cfg.model.num_layers = 4;
  cfg.model.num_kv_heads = 4;
  cfg.model.head_dim = 64;
  cfg.model.dtype = kvactor::dtype::fp16;
  cfg.gc_interval_ms = 0;
  caf::actor_system_config sys_cfg;
  kvactor::configure(sys_cfg, cfg);
  caf::actor_system sys{sys_cfg};
  return run(sys, cfg);
}
