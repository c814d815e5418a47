// lifecycle: a guided tour of kvactor through its blocking facade -
// allocation, prefix reuse, chunked prefill, speculative decoding's draft
// tokens, extension with copy-on-write, pressure changes, GC and
// deallocation - printing what the cache did at each step.
//
//   lifecycle [--config FILE]     (default: the embedded config)
#include <algorithm>
#include <chrono>
#include <cstring>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <nlohmann/json.hpp>

#include "kvactor/actors/kv_cache_manager.hpp"
#include "kvactor/config/cache_config.hpp"
#include "kvactor/messages/error.hpp"
#include "kvactor/metrics/stats_table.hpp"

using namespace kvactor;

namespace {

std::string blocks_of(const block_table& t) {
  std::string out = "[";
  for (std::size_t i = 0; i < t.blocks.size(); ++i) {
    if (i > 0)
      out += ' ';
    out += std::to_string(t.blocks[i]);
  }
  return out + "] " + std::to_string(t.num_tokens) + " tokens";
}

allocation_request request_for(const cache_config& cfg, request_id id,
                                std::vector<token_id> prompt) {
  allocation_request req;
  req.id = id;
  req.max_sequence_length = 4096;
  req.num_layers = cfg.model.num_layers;
  req.num_heads = cfg.model.num_kv_heads;
  req.head_dim = cfg.model.head_dim;
  req.dtype = cfg.model.dtype;
  req.prompt = std::move(prompt);
  return req;
}

std::vector<token_id> tokens(token_id first, std::size_t n) {
  std::vector<token_id> out(n);
  for (std::size_t i = 0; i < n; ++i)
    out[i] = first + static_cast<token_id>(i);
  return out;
}

int fail(const char* what, const caf::error& err) {
  std::cerr << what << ": " << render(err) << '\n';
  return 1;
}

int run(caf::actor_system& sys, const cache_config& cfg) {
  auto started = kv_cache_manager::start(sys, cfg);
  if (!started)
    return fail("start", started.error());
  auto& mgr = *started;
  auto& eff = mgr.config();
  std::cout << "kvactor lifecycle: " << eff.num_gpu_blocks << " blocks of "
            << eff.block_size << " tokens on storage '" << eff.storage
            << "', model " << eff.model.num_layers << " layers x "
            << eff.model.num_kv_heads << " heads x " << eff.model.head_dim
            << " dims\n\n";
  // The callback runs on a thread of its own: collect, print at the end of
  // each step.
  auto seen = std::make_shared<std::vector<memory_pressure>>();
  auto seen_mtx = std::make_shared<std::mutex>();
  mgr.set_pressure_callback([seen, seen_mtx](memory_pressure level) {
    std::lock_guard<std::mutex> guard{*seen_mtx};
    seen->push_back(level);
  });
  auto print_pressure = [&] {
    // Give the callback thread a moment to catch up with the last change.
    std::this_thread::sleep_for(std::chrono::milliseconds{20});
    std::lock_guard<std::mutex> guard{*seen_mtx};
    std::cout << "   pressure callbacks:";
    if (seen->empty())
      std::cout << " none";
    for (auto level : *seen)
      std::cout << ' ' << to_string(level);
    std::cout << '\n';
    seen->clear();
  };

  // 1. A request with a 100-token prompt: 64 system tokens + 36 of its own.
  auto system_prompt = tokens(1000, 64);
  auto prompt_a = system_prompt;
  auto own_a = tokens(5000, 36);
  prompt_a.insert(prompt_a.end(), own_a.begin(), own_a.end());
  auto a = mgr.allocate(request_for(eff, 1, prompt_a));
  if (!a)
    return fail("allocate 1", a.error());
  std::cout << "1. allocate request 1 (100-token prompt):      "
            << blocks_of((*a)->table()) << '\n';

  // 2. Same system prompt: its 4 full blocks are shared, not recomputed.
  auto prompt_b = system_prompt;
  auto own_b = tokens(7000, 20);
  prompt_b.insert(prompt_b.end(), own_b.begin(), own_b.end());
  auto b = mgr.allocate(request_for(eff, 2, prompt_b));
  if (!b)
    return fail("allocate 2", b.error());
  std::cout << "2. allocate request 2 (same system prompt):    "
            << blocks_of((*b)->table()) << "  <- first 4 blocks shared\n";

  // 2b. Chunked prefill: the whole 120-token prompt is looked up (its 64
  //     system tokens are cached), but only the hits and one 16-token chunk
  //     are admitted; each later chunk comes with its token ids, as the
  //     step that computes it would send them, and only then can another
  //     prompt find its blocks.
  auto prompt_d = system_prompt;
  auto own_d = tokens(9000, 56);
  prompt_d.insert(prompt_d.end(), own_d.begin(), own_d.end());
  auto chunked = request_for(eff, 5, prompt_d);
  chunked.prefill_chunk = 16;
  auto d = mgr.allocate(chunked);
  if (!d)
    return fail("allocate 5", d.error());
  std::cout << "   allocate request 5 in chunks of 16 tokens:  "
            << blocks_of((*d)->table()) << "  <- 64 cached + 16\n";
  for (auto at = (*d)->table().num_tokens; at < prompt_d.size(); at += 16) {
    auto end = std::min<std::size_t>(at + 16, prompt_d.size());
    if (auto err = mgr.append(**d, {prompt_d.begin() + at, prompt_d.begin() + end}))
      return fail("append 5", err);
  }
  std::cout << "   its next chunks appended:                   "
            << blocks_of((*d)->table()) << '\n';

  // 2c. Speculative decoding: the verifier's input is the last sampled
  //     token and 11 draft tokens; the drafts get slots but stay out of the
  //     prefix index. The verifier keeps 3: the other 8 go, and the block
  //     that held only rejected drafts goes back to the pool.
  if (auto err = mgr.append(**d, tokens(20000, 12), 11))
    return fail("append drafts 5", err);
  std::cout << "   append 1 token + 11 drafts:                 "
            << blocks_of((*d)->table()) << '\n';
  if (auto err = mgr.settle_drafts(**d, 3))
    return fail("settle drafts 5", err);
  std::cout << "   the verifier keeps 3 drafts:                "
            << blocks_of((*d)->table()) << "  <- 8 rejected, a block freed\n";
  if (auto err = mgr.deallocate(5))
    return fail("deallocate 5", err);

  // 3. Fork request 1; the child appends into the shared last block, which
  //    is copied first (copy-on-write) - bytes included.
  auto marker = std::string{"kvactor-cow-marker"};
  auto t1 = (*a)->table();
  if (auto view = (*a)->key_cache(0); view && *view) {
    auto& v = **view;
    auto row = v.strides[0] * size_of(v.dtype); // bytes per block
    std::memcpy(static_cast<char*>(v.data) + t1.blocks.back() * row,
                marker.data(), marker.size());
  }
  auto c = mgr.fork(1, 3);
  if (!c)
    return fail("fork", c.error());
  std::cout << "3. fork request 3 from 1:                      "
            << blocks_of((*c)->table()) << '\n';
  if (auto err = mgr.extend(**c, 1))
    return fail("extend 3", err);
  auto t3 = (*c)->table();
  std::cout << "   extend request 3 by 1 token:                " << blocks_of(t3)
            << "  <- last block copied\n";
  if (auto view = (*c)->key_cache(0); view && *view) {
    auto& v = **view;
    auto row = v.strides[0] * size_of(v.dtype);
    bool same = std::memcmp(static_cast<char*>(v.data) + t3.blocks.back() * row,
                            marker.data(), marker.size())
                == 0;
    std::cout << "   the copy holds request 1's bytes:           "
              << (same ? "yes" : "NO") << '\n';
  }

  // 3b. Swap request 2 to the host tier and back: the bytes survive, the
  //     blocks may change.
  auto t2 = (*b)->table();
  auto marker2 = std::string{"kvactor-swap-marker"};
  if (auto view = (*b)->value_cache(eff.model.num_layers - 1); view && *view) {
    auto& v = **view;
    auto row = v.strides[0] * size_of(v.dtype);
    std::memcpy(static_cast<char*>(v.data) + t2.blocks.back() * row,
                marker2.data(), marker2.size());
  }
  if (auto err = mgr.swap_out(2))
    return fail("swap_out", err);
  std::cout << "   swap request 2 out: swapped? "
            << ((*b)->is_swapped() ? "yes" : "no") << ", host blocks free "
            << mgr.stats().host_free_blocks << '\n';
  if (auto err = mgr.swap_in(2))
    return fail("swap_in", err);
  auto t2b = (*b)->table();
  std::cout << "   swap it back in:                            " << blocks_of(t2b);
  if (auto view = (*b)->value_cache(eff.model.num_layers - 1); view && *view) {
    auto& v = **view;
    auto row = v.strides[0] * size_of(v.dtype);
    bool same = std::memcmp(static_cast<char*>(v.data) + t2b.blocks.back() * row,
                            marker2.data(), marker2.size())
                == 0;
    std::cout << "  <- bytes intact: " << (same ? "yes" : "NO");
  }
  std::cout << '\n';

  // 4. Fill the pool: pressure rises through its levels; at critical the
  //    supervisor preempts the newest requests (lowest priority first) until
  //    usage is back under the high mark, and their handles turn invalid.
  std::cout << "4. allocate fifteen 256-token requests (16 blocks each)\n";
  std::vector<std::pair<request_id, std::shared_ptr<kv_cache_handle>>> bulk;
  for (request_id id = 10; id < 25; ++id) {
    auto req = request_for(eff, id, {});
    req.initial_tokens = 256;
    auto h = mgr.allocate(req);
    if (!h) {
      std::cout << "   request " << id << " refused: " << render(h.error())
                << '\n';
      continue;
    }
    bulk.emplace_back(id, *h);
  }
  print_pressure();
  std::cout << "   preempted by the supervisor:";
  for (auto& [id, h] : bulk)
    if (!h->is_valid())
      std::cout << ' ' << id;
  auto after = mgr.stats();
  std::cout << "\n   now " << (after.total_blocks - after.free_blocks)
            << " blocks in use, pressure " << to_string(after.pressure) << '\n';
  // A request that could never stay live - its blocks alone would reach
  // critical pressure - is refused up front (exceeds_capacity), not
  // admitted and preempted at once, nor left waiting for ever.
  auto refused = request_for(eff, 99, {});
  refused.initial_tokens = 4096;
  auto r = mgr.allocate(refused);
  std::cout << "   a 4096-token request: "
            << (r ? std::string{"admitted?!"} : render(r.error())) << '\n';

  // 5. GC: nothing leaked, so it reclaims no request; the invariant holds.
  auto g = mgr.gc();
  if (!g)
    return fail("gc", g.error());
  std::cout << "5. gc: " << g->caches_freed << " requests and "
            << g->blocks_reclaimed << " blocks reclaimed in " << g->gc_time_ms
            << " ms (invariant checked)\n";

  // 6. Deallocate: blocks return, the prompt's full blocks stay cached.
  for (auto& [id, h] : bulk)
    if (h->is_valid())
      if (auto err = mgr.deallocate(id))
        return fail("deallocate", err);
  for (request_id id : {request_id{1}, request_id{2}, request_id{3}})
    if (auto err = mgr.deallocate(id))
      return fail("deallocate", err);
  std::cout << "6. deallocate everything; handle 1 valid? "
            << ((*a)->is_valid() ? "yes" : "no") << "; deallocate 1 again: "
            << render(mgr.deallocate(1)) << '\n';
  auto again = mgr.allocate(request_for(eff, 4, prompt_a));
  if (!again)
    return fail("allocate 4", again.error());
  auto st = mgr.stats();
  std::cout << "   request 4 with request 1's prompt reuses its cached blocks: "
            << blocks_of((*again)->table()) << '\n';
  print_pressure();
  std::cout << '\n';
  std::cout << format_table(st);
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  std::string path;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--config") == 0 && i + 1 < argc) {
      path = argv[++i];
    } else {
      std::cerr << "usage: lifecycle [--config FILE]\n";
      return 2;
    }
  }
  auto cfg = path.empty()
               ? parse_config(nlohmann::json::parse(default_config_json()))
               : load_config(path);
  if (!cfg)
    return fail("config", cfg.error());
  caf::actor_system_config sys_cfg;
  configure(sys_cfg, *cfg);
  caf::actor_system sys{sys_cfg};
  return run(sys, *cfg);
}
