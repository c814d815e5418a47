// writer_race: does pressure.preempt_grace_ms keep a supervisor victim's
// late K/V writes out of other requests' blocks? (README, "The
// supervisor's preemption", quotes its figures.)
//
// T threads share one host-storage cache through the kv_cache_manager
// facade. Each thread loops: allocate a request of a random length, fetch
// its block table and its paged K/V views, write every token's K and V
// (slowly: a sleep after each token, like a forward pass that takes a
// while, never checking validity in between - as a model's pass does not),
// read everything back through the same views, then ask the handle
// (checked_table, a round trip to the pool) whether the request is still
// live and holds the same blocks. Mismatches in a request that is still
// live at the end are corruption by someone else; mismatches in a request
// that was preempted are its own legitimate loss and only reported apart.
//
// Every K/V row (one token, one layer, K or V: heads*head_dim 32-bit words)
// is: word0 = request id, word1 = token | layer << 16 | kv << 24, the rest a
// hash of all of them - so a foreign row says who wrote it.
//
// usage: writer_race GRACE_MS [key=value ...]
//   threads=4 requests=400 (per thread) blocks=48 min_tokens=16
//   max_tokens=200 sleep_us=50 (after each token written) seed=1
//   critical=0.95 (pressure.critical)
#include <algorithm>
#include <cerrno>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <kvactor/actors/kv_cache_handle.hpp>
#include <kvactor/actors/kv_cache_manager.hpp>
#include <kvactor/config/cache_config.hpp>
#include <kvactor/messages/error.hpp>
#include <kvactor/messages/types.hpp>

namespace {

using clk = std::chrono::steady_clock;

struct options {
  std::uint64_t grace_ms = 0;
  unsigned threads = 4;
  unsigned requests = 400;
  std::uint64_t blocks = 48;
  unsigned min_tokens = 16;
  unsigned max_tokens = 200;
  unsigned sleep_us = 50;
  unsigned seed = 1;
  double critical = 0.95;
};

constexpr std::uint32_t num_layers = 2;
constexpr std::uint32_t num_heads = 2;
constexpr std::uint32_t head_dim = 8;
constexpr std::uint32_t block_size = 16;
constexpr std::uint32_t row_words = num_heads * head_dim; // fp32: 4 bytes each

std::uint32_t mix(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return static_cast<std::uint32_t>(x);
}

std::uint32_t expected_word(std::uint32_t rid, std::uint32_t tok,
                            std::uint32_t layer, std::uint32_t kv,
                            std::uint32_t w) {
  std::uint32_t tag = tok | layer << 16 | kv << 24;
  if (w == 0)
    return rid;
  if (w == 1)
    return tag;
  return mix((std::uint64_t{rid} << 32 | tag) * 31 + w);
}

// Pointer to word 0 of token `tok`'s row in `v` (layout [blocks, block_size,
// heads, head_dim], strides in elements); words of the row are addressed
// through heads/head_dim strides.
struct row_ref {
  std::uint32_t* base;
  std::int64_t s2, s3;
  std::uint32_t& at(std::uint32_t w) const {
    return base[(w / head_dim) * s2 + (w % head_dim) * s3];
  }
};

row_ref row(const kvactor::tensor_view& v, kvactor::block_id blk,
            std::uint32_t off) {
  auto* p = static_cast<std::uint32_t*>(v.data);
  return {p + static_cast<std::int64_t>(blk) * v.strides[0]
            + static_cast<std::int64_t>(off) * v.strides[1],
          v.strides[2], v.strides[3]};
}

struct totals {
  std::atomic<std::uint64_t> requests{0};      // allocated and written
  std::atomic<std::uint64_t> live_requests{0}; // live at the end (checked)
  std::atomic<std::uint64_t> tokens_checked{0};   // tokens of live requests
  std::atomic<std::uint64_t> corrupt_tokens{0};   // mismatches, live requests
  std::atomic<std::uint64_t> corrupt_requests{0};
  std::atomic<std::uint64_t> corrupt_by_victim{0}; // foreign row from a victim
  std::atomic<std::uint64_t> ended_requests{0};  // preempted when checked
  std::atomic<std::uint64_t> ended_tokens{0};
  std::atomic<std::uint64_t> ended_mismatch_tokens{0}; // own loss, not counted
  std::atomic<std::uint64_t> ended_before_write{0}; // table/view failed
  std::atomic<std::uint64_t> unclear{0};      // checked_table other error
  std::atomic<std::uint64_t> valid_flag_disagree{0};
  std::atomic<std::uint64_t> alloc_retries{0}; // out_of_blocks/quota, retried
  std::atomic<std::uint64_t> alloc_other_errors{0};
  std::atomic<std::uint64_t> dealloc_unknown{0};
  std::atomic<std::uint64_t> max_pass_us{0}; // views taken .. check done
  std::atomic<std::uint64_t> sum_pass_us{0};
};

std::mutex victims_mtx;
std::set<std::uint32_t> victims; // request ids found ended at check time
std::vector<std::uint32_t> foreign_rows; // word0 of each foreign row read

void worker(kvactor::kv_cache_manager& mgr, const options& opt, unsigned t,
            totals& tot) {
  std::mt19937 rng(opt.seed * 1000003u + t);
  std::uniform_int_distribution<unsigned> len(opt.min_tokens, opt.max_tokens);
  for (unsigned n = 0; n < opt.requests; ++n) {
    auto rid = static_cast<std::uint32_t>((t + 1) * 1000000u + n);
    kvactor::allocation_request req;
    req.id = rid;
    req.initial_tokens = len(rng);
    req.max_sequence_length = 256;
    req.num_layers = num_layers;
    req.num_heads = num_heads;
    req.head_dim = head_dim;
    req.dtype = kvactor::dtype::fp32;
    std::shared_ptr<kvactor::kv_cache_handle> h;
    for (;;) {
      auto r = mgr.allocate(req);
      if (r) {
        h = std::move(*r);
        break;
      }
      if (kvactor::has_code(r.error(), kvactor::errc::out_of_blocks)
          || kvactor::has_code(r.error(), kvactor::errc::quota_exceeded)) {
        ++tot.alloc_retries;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        continue;
      }
      ++tot.alloc_other_errors;
      std::fprintf(stderr, "allocate %u: %s\n", rid,
                   kvactor::render(r.error()).c_str());
      std::exit(2);
    }
    ++tot.requests;
    // The table and the views, as a forward pass would take them.
    auto tab = h->checked_table();
    std::vector<kvactor::tensor_view> kv; // layer-major: K0 V0 K1 V1
    caf::error why = tab ? caf::error{} : tab.error();
    for (std::uint32_t l = 0; !why && l < num_layers; ++l) {
      auto k = h->key_cache(l);
      auto v = h->value_cache(l);
      if (!k || !v) {
        why = !k ? k.error() : v.error();
        break;
      }
      if (!*k || !*v) {
        std::fprintf(stderr, "no views: storage none?\n");
        std::exit(2);
      }
      kv.push_back(**k);
      kv.push_back(**v);
    }
    if (why) {
      // Preempted before its pass began: nothing written, nothing to check.
      if (kvactor::has_code(why, kvactor::errc::invalid_handle)) {
        ++tot.ended_before_write;
      } else {
        ++tot.unclear;
        std::fprintf(stderr, "request %u: table/view failed: %s\n", rid,
                     kvactor::render(why).c_str());
      }
      (void) mgr.deallocate(rid);
      continue;
    }
    auto pass_start = clk::now();
    const auto& blocks = tab->blocks;
    auto ntok = static_cast<std::uint32_t>(tab->num_tokens);
    // The pass: write every token's K and V, a sleep after each token.
    for (std::uint32_t i = 0; i < ntok; ++i) {
      auto blk = blocks[i / block_size];
      for (std::uint32_t l = 0; l < num_layers; ++l)
        for (std::uint32_t p = 0; p < 2; ++p) {
          auto r = row(kv[l * 2 + p], blk, i % block_size);
          for (std::uint32_t w = 0; w < row_words; ++w)
            r.at(w) = expected_word(rid, i, l, p, w);
        }
      if (opt.sleep_us > 0)
        std::this_thread::sleep_for(std::chrono::microseconds(opt.sleep_us));
    }
    // Read everything back.
    std::uint64_t bad = 0;
    std::vector<std::uint32_t> foreign; // writers of foreign rows
    for (std::uint32_t i = 0; i < ntok; ++i) {
      auto blk = blocks[i / block_size];
      bool tok_bad = false;
      for (std::uint32_t l = 0; l < num_layers; ++l)
        for (std::uint32_t p = 0; p < 2; ++p) {
          auto r = row(kv[l * 2 + p], blk, i % block_size);
          bool row_bad = false;
          for (std::uint32_t w = 0; w < row_words; ++w)
            if (r.at(w) != expected_word(rid, i, l, p, w))
              row_bad = true;
          if (row_bad) {
            tok_bad = true;
            foreign.push_back(r.at(0));
          }
        }
      bad += tok_bad;
    }
    // Only now: is the request still live, with the same blocks? A round
    // trip to the pool (checked_table), not just the local flag.
    auto after = h->checked_table();
    bool flag = h->is_valid();
    auto pass_us = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(clk::now()
                                                            - pass_start)
        .count());
    tot.sum_pass_us += pass_us;
    for (auto m = tot.max_pass_us.load();
         pass_us > m && !tot.max_pass_us.compare_exchange_weak(m, pass_us);) {
    }
    if (after && after->blocks == blocks) {
      if (!flag)
        ++tot.valid_flag_disagree; // ended between the two calls
      ++tot.live_requests;
      tot.tokens_checked += ntok;
      if (bad > 0) {
        ++tot.corrupt_requests;
        tot.corrupt_tokens += bad;
        std::lock_guard<std::mutex> g{victims_mtx};
        foreign_rows.insert(foreign_rows.end(), foreign.begin(), foreign.end());
        std::fprintf(stderr,
                     "corrupt: request %u (%u tokens) %" PRIu64
                     " bad tokens; foreign row writers:",
                     rid, ntok, bad);
        std::set<std::uint32_t> who(foreign.begin(), foreign.end());
        for (auto f : who)
          std::fprintf(stderr, " %u", f);
        std::fprintf(stderr, "\n");
      }
    } else if (!after
               && kvactor::has_code(after.error(), kvactor::errc::invalid_handle)) {
      ++tot.ended_requests;
      tot.ended_tokens += ntok;
      tot.ended_mismatch_tokens += bad;
      std::lock_guard<std::mutex> g{victims_mtx};
      victims.insert(rid);
    } else {
      ++tot.unclear;
      std::fprintf(stderr, "request %u: check unclear: %s\n", rid,
                   after ? "table changed"
                         : kvactor::render(after.error()).c_str());
    }
    if (auto err = mgr.deallocate(rid)) {
      if (kvactor::has_code(err, kvactor::errc::unknown_request))
        ++tot.dealloc_unknown;
      else
        std::fprintf(stderr, "deallocate %u: %s\n", rid,
                     kvactor::render(err).c_str());
    }
  }
}

bool parse(int argc, char** argv, options& o) {
  if (argc < 2)
    return false;
  // Whole numbers only: "abc" or "12x" is refused, not read as 0 or 12.
  auto whole = [](const std::string& v, std::uint64_t& out) {
    char* end = nullptr;
    errno = 0;
    out = std::strtoull(v.c_str(), &end, 10);
    return !v.empty() && v[0] != '-' && errno == 0 && *end == '\0';
  };
  if (!whole(argv[1], o.grace_ms))
    return false;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    auto eq = a.find('=');
    if (eq == std::string::npos)
      return false;
    auto k = a.substr(0, eq);
    auto v = a.substr(eq + 1);
    std::uint64_t n = 0;
    if (k != "critical" && (!whole(v, n) || n > 1000000000))
      return false;
    auto u = static_cast<unsigned>(n);
    if (k == "threads") o.threads = u;
    else if (k == "requests") o.requests = u;
    else if (k == "blocks") o.blocks = u;
    else if (k == "min_tokens") o.min_tokens = u;
    else if (k == "max_tokens") o.max_tokens = u;
    else if (k == "sleep_us") o.sleep_us = u;
    else if (k == "seed") o.seed = u;
    else if (k == "critical") {
      char* end = nullptr;
      o.critical = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0')
        return false;
    }
    else return false;
  }
  return o.threads > 0 && o.min_tokens > 0 && o.min_tokens <= o.max_tokens
         && o.max_tokens <= 256;
}

int run(caf::actor_system& sys, const kvactor::cache_config& cfg,
        const options& opt) {
  auto mgr = kvactor::kv_cache_manager::start(sys, cfg);
  if (!mgr) {
    std::fprintf(stderr, "start: %s\n", kvactor::render(mgr.error()).c_str());
    return 2;
  }
  totals tot;
  std::atomic<bool> stop{false};
  std::uint64_t max_draining = 0, max_used = 0, samples = 0,
                samples_draining = 0;
  std::map<std::string, std::uint64_t> levels;
  std::thread sampler([&] {
    while (!stop.load()) {
      auto s = mgr->stats();
      ++samples;
      max_draining = std::max(max_draining, s.draining_blocks);
      samples_draining += s.draining_blocks > 0;
      max_used = std::max(max_used, s.total_blocks - s.free_blocks
                                      - s.draining_blocks);
      ++levels[kvactor::to_string(s.pressure)];
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  auto t0 = clk::now();
  std::vector<std::thread> ths;
  for (unsigned t = 0; t < opt.threads; ++t)
    ths.emplace_back(worker, std::ref(*mgr), std::cref(opt), t, std::ref(tot));
  for (auto& th : ths)
    th.join();
  auto secs = std::chrono::duration<double>(clk::now() - t0).count();
  stop = true;
  sampler.join();
  auto s = mgr->stats();
  // Who wrote the foreign rows? Attributed after every thread finished, so
  // each victim has been recorded by then.
  std::uint64_t rows_victim = 0, rows_other = 0;
  for (auto f : foreign_rows)
    (victims.count(f) ? rows_victim : rows_other) += 1;
  tot.corrupt_by_victim = rows_victim;
  std::printf("grace_ms=%" PRIu64 " threads=%u requests/thread=%u blocks=%" PRIu64
              " tokens=%u..%u sleep_us=%u seed=%u critical=%.2f\n",
              opt.grace_ms, opt.threads, opt.requests, opt.blocks,
              opt.min_tokens, opt.max_tokens, opt.sleep_us, opt.seed,
              opt.critical);
  auto passes = tot.live_requests.load() + tot.ended_requests.load()
                + tot.unclear.load();
  std::printf("wall_s=%.1f pass_ms(write+read+check): mean=%.1f max=%.1f\n",
              secs, passes ? tot.sum_pass_us.load() / 1000.0 / passes : 0.0,
              tot.max_pass_us.load() / 1000.0);
  std::printf("requests=%" PRIu64 " live_at_check=%" PRIu64
              " ended_at_check=%" PRIu64 " ended_before_write=%" PRIu64
              " unclear=%" PRIu64 " valid_flag_lagging=%" PRIu64 "\n",
              tot.requests.load(), tot.live_requests.load(),
              tot.ended_requests.load(), tot.ended_before_write.load(),
              tot.unclear.load(), tot.valid_flag_disagree.load());
  std::printf("tokens_checked=%" PRIu64 " CORRUPT_TOKENS=%" PRIu64
              " corrupt_requests=%" PRIu64 " foreign_rows=%zu (written by a "
              "preempted request: %" PRIu64 ", by anyone else: %" PRIu64 ")\n",
              tot.tokens_checked.load(), tot.corrupt_tokens.load(),
              tot.corrupt_requests.load(), foreign_rows.size(), rows_victim,
              rows_other);
  std::printf("victims_tokens=%" PRIu64 " victims_mismatched_tokens=%" PRIu64
              " (own loss, not counted)\n",
              tot.ended_tokens.load(), tot.ended_mismatch_tokens.load());
  std::printf("preemption_count=%" PRIu64 " allocation_count=%" PRIu64
              " allocation_failures=%" PRIu64 " alloc_retries=%" PRIu64
              " dealloc_unknown=%" PRIu64 "\n",
              s.preemption_count, s.allocation_count, s.allocation_failures,
              tot.alloc_retries.load(), tot.dealloc_unknown.load());
  std::printf("stats_samples=%" PRIu64 " max_draining_blocks=%" PRIu64
              " samples_with_draining=%" PRIu64 " max_used_blocks=%" PRIu64
              " end: free=%" PRIu64 " draining=%" PRIu64 " active=%" PRIu64 "\n",
              samples, max_draining, samples_draining, max_used, s.free_blocks,
              s.draining_blocks, s.active_caches);
  std::printf("pressure samples:");
  for (auto& [k, v] : levels)
    std::printf(" %s=%" PRIu64, k.c_str(), v);
  std::printf("\n");
  return tot.corrupt_tokens.load() == 0 ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
  options opt;
  if (!parse(argc, argv, opt)) {
    std::fprintf(stderr,
                 "usage: writer_race GRACE_MS [threads=N requests=N blocks=N "
                 "min_tokens=N max_tokens=N sleep_us=N seed=N critical=F]\n");
    return 2;
  }
  kvactor::cache_config cfg;
  cfg.storage = "host";
  cfg.num_gpu_blocks = opt.blocks;
  cfg.block_size = block_size;
  cfg.model.num_layers = num_layers;
  cfg.model.num_kv_heads = num_heads;
  cfg.model.head_dim = head_dim;
  cfg.model.dtype = kvactor::dtype::fp32;
  cfg.scheduler_threads = 2;
  cfg.prefix_caching = true; // no prompts: nothing is hashed or shared
  cfg.pressure.preempt_at_critical = true;
  cfg.pressure.preempt_grace_ms = opt.grace_ms;
  cfg.pressure.critical = opt.critical;
  caf::actor_system_config sys_cfg;
  kvactor::configure(sys_cfg, cfg);
  caf::actor_system sys{sys_cfg};
  return run(sys, cfg, opt);
}
