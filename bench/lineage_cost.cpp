// lineage_cost: what the pool's write lineage (actors/write_lineage.hpp)
// costs its hot paths and what a discard's scan costs, on the pool core
// alone (no actors). Every request decodes one named token at a time,
// round robin, as a serving loop's steps extend them.
//
//   lineage_cost [--requests N (4096)] [--steps N (64)] [--chain N (256)]
//                [--discards N (256)] [--pool-kib N (64)]
//
// Prints one JSON line per case:
//  - "plain": requests with prompts of their own (nothing taken on): the
//    decode path as it was before the lineage;
//  - "acquired": every request hit the prompt of one live root request (as
//    a shared system prompt's first writer still running): each takes its
//    epoch on, and each block it starts records it; then the root's
//    discard, which scans the pool;
//  - "restarted": requests back from a swap (a later epoch each);
//  - "chain": request k's prompt is request k-1's plus a block, all live -
//    each takes on every earlier one (the worst case: sets grow with the
//    chain); setup (the admissions), decode, and the head's discard;
//  - "batch": a failed pass's step discarding `discards` requests whose
//    epochs forks took on, in a pool of `pool-kib` Ki blocks: one scan.
// Numbers are wall time on whatever machine runs it; compare runs on the
// same machine in the same session.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_options.hpp"
#include "kvactor/actors/block_pool_core.hpp"

using namespace kvactor;
using clk = std::chrono::steady_clock;

namespace {

double ms_since(clk::time_point t0) {
  return std::chrono::duration<double, std::milli>(clk::now() - t0).count();
}

cache_config config(std::uint32_t host_blocks) {
  cache_config cfg;
  cfg.block_size = 16;
  cfg.model = model_config{2, 2, 8, dtype::fp16};
  cfg.storage = "none";
  cfg.pressure.preempt_at_critical = false;
  cfg.tenants = {tenant_config{}};
  cfg.num_host_blocks = host_blocks;
  return cfg;
}

allocation_request request(request_id id, std::vector<token_id> prompt) {
  allocation_request req;
  req.id = id;
  req.max_sequence_length = 1u << 20;
  req.num_layers = 2;
  req.num_heads = 2;
  req.head_dim = 8;
  req.prompt = std::move(prompt);
  return req;
}

[[noreturn]] void fail(const char* what, std::size_t i) {
  std::fprintf(stderr, "lineage_cost: %s %zu failed\n", what, i);
  std::exit(1);
}

/// Decodes `steps` tokens for each of ids [first, first + n), round robin;
/// ns per extend.
double decode(detail::block_pool_core& pool, request_id first, std::size_t n,
              int steps) {
  auto t0 = clk::now();
  for (int s = 0; s < steps; ++s)
    for (std::size_t i = 0; i < n; ++i) {
      auto t = static_cast<token_id>((i * 7919 + s) % 30000 + 1);
      if (!pool.extend(first + i, 1, &t))
        fail("extend of request", first + i);
    }
  return ms_since(t0) * 1e6 / (double(steps) * double(n));
}

std::vector<token_id> run_of(token_id from, std::size_t n) {
  std::vector<token_id> out(n);
  for (std::size_t i = 0; i < n; ++i)
    out[i] = from + static_cast<token_id>(i);
  return out;
}

void decode_case(const char* name, std::size_t n, int steps) {
  bool acquired = std::strcmp(name, "acquired") == 0;
  bool restarted = std::strcmp(name, "restarted") == 0;
  detail::block_pool_core pool(config(restarted ? 1u << 18 : 0), 1u << 18);
  auto root = run_of(1000000, 64);
  if (acquired && !pool.allocate(request(1000000, root)))
    fail("allocate of the root", 0);
  for (std::size_t i = 0; i < n; ++i) {
    auto own = run_of(static_cast<token_id>(i * 100 + 1), acquired ? 17 : 64);
    auto prompt = own;
    if (acquired) {
      prompt = root;
      prompt.insert(prompt.end(), own.begin(), own.end());
    }
    if (!pool.allocate(request(1 + i, prompt)))
      fail("allocate", i);
    if (restarted) {
      auto cid = pool.find(1 + i)->cache_id;
      if (!pool.swap_out_begin(1 + i) || !pool.swap_out_done(1 + i, cid, true)
          || !pool.swap_in_begin(1 + i) || !pool.swap_in_done(1 + i, cid, true))
        fail("swap of request", i);
    }
  }
  auto ns = decode(pool, 1, n, steps);
  std::printf("{\"case\":\"%s\",\"requests\":%zu,\"steps\":%d,"
              "\"ns_per_extend\":%.1f",
              name, n, steps, ns);
  if (acquired) {
    auto t0 = clk::now();
    if (!pool.discard(1000000))
      fail("discard of the root", 0);
    std::printf(",\"root_discard_ms\":%.3f,\"index_after\":%zu", ms_since(t0),
                static_cast<std::size_t>(pool.index_size()));
  }
  std::printf("}\n");
}

void chain_case(std::size_t n, int steps) {
  detail::block_pool_core pool(config(0), 1u << 18);
  auto prompt = run_of(1000000, 64);
  auto t0 = clk::now();
  for (std::size_t i = 0; i < n; ++i) {
    auto more = run_of(static_cast<token_id>(i * 16 + 1), 16);
    prompt.insert(prompt.end(), more.begin(), more.end());
    auto p = prompt;
    p.push_back(7);
    if (!pool.allocate(request(1 + i, p)))
      fail("allocate in the chain", i);
  }
  auto setup = ms_since(t0);
  auto ns = decode(pool, 1, n, steps);
  auto t1 = clk::now();
  if (!pool.discard(1))
    fail("discard of the chain's head", 0);
  std::printf("{\"case\":\"chain\",\"requests\":%zu,\"steps\":%d,"
              "\"setup_ms\":%.1f,\"ns_per_extend\":%.1f,\"head_discard_ms\":"
              "%.3f}\n",
              n, steps, setup, ns, ms_since(t1));
}

void batch_case(std::size_t n, std::uint32_t kib) {
  detail::block_pool_core pool(config(0), kib << 10);
  for (std::size_t i = 0; i < n; ++i) {
    if (!pool.allocate(request(1 + i, run_of(static_cast<token_id>(i * 2000 + 1),
                                             64 * 16))))
      fail("allocate", i);
    if (!pool.fork(1 + i, 1000000 + i)) // the fork takes its epoch on
      fail("fork", i);
  }
  step_request step;
  for (std::size_t i = 0; i < n; ++i)
    step.discards.push_back(1 + i);
  auto t0 = clk::now();
  auto r = pool.run_step(step);
  auto ms = ms_since(t0);
  if (r.freed.size() != n)
    fail("step discarding", n);
  std::printf("{\"case\":\"batch\",\"discards\":%zu,\"pool_blocks\":%u,"
              "\"step_ms\":%.2f}\n",
              n, kib << 10, ms);
}

} // namespace

int main(int argc, char** argv) {
  std::size_t requests = 4096, chain = 256, discards = 256;
  int steps = 64;
  std::uint32_t kib = 64;
  using kvactor::bench::count;
  if (!kvactor::bench::parse_options(
        argc, argv,
        "usage: lineage_cost [--requests N] [--steps N] [--chain N] "
        "[--discards N] [--pool-kib N] (each at least 1)\n",
        [&](const std::string& k, const std::string& v) {
          if (k == "--requests")
            requests = count(v, 1 << 20, 1);
          else if (k == "--steps")
            steps = static_cast<int>(count(v, 1 << 20, 1));
          else if (k == "--chain")
            chain = count(v, 1 << 16, 1);
          else if (k == "--discards")
            discards = count(v, 1 << 20, 1);
          else if (k == "--pool-kib") // blocks = kib << 10, a 32-bit count
            kib = static_cast<std::uint32_t>(count(v, (1u << 22) - 1, 1));
          else
            return false;
          return true;
        }))
    return 2;
  for (auto name : {"plain", "acquired", "restarted"})
    decode_case(name, requests, steps);
  chain_case(chain, steps);
  batch_case(discards, kib);
  return 0;
}
