// Shared helpers of facade_tests: small configs and requests, a started cache
// on CAF's threaded scheduler, a watchdog that fails a hanging test instead of
// blocking CI (printers: ../printers.hpp).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include "kvactor/actors/kv_cache_manager.hpp"
#include "kvactor/config/cache_config.hpp"
#include "kvactor/messages/error.hpp"
#include "kvactor/messages/types.hpp"

#include "printers.hpp"

namespace kvtest {

using namespace kvactor;

/// Tokens per block, blocks and model of the small caches the tests use.
/// One block: 4 tokens x 2 heads x 8 dims x 4 bytes = 256 bytes per layer's
/// K (or V); bytes_per_block = 2 layers x 2 x 256 = 1024.
constexpr std::uint32_t test_block_size = 4;
constexpr std::uint64_t test_bytes_per_block = 1024;

inline cache_config small_config(std::uint64_t blocks = 64,
                                 std::string storage = "host") {
  cache_config cfg;
  cfg.block_size = test_block_size;
  cfg.model.num_layers = 2;
  cfg.model.num_kv_heads = 2;
  cfg.model.head_dim = 8;
  cfg.model.dtype = dtype::fp32;
  cfg.storage = std::move(storage);
  cfg.num_gpu_blocks = blocks;
  cfg.gc_interval_ms = 0; // GC only on demand: figures stay predictable
  cfg.scheduler_threads = 4;
  return cfg;
}

/// A request matching `cfg`'s model.
inline allocation_request make_request(const cache_config& cfg, request_id id,
                                       std::uint64_t tokens,
                                       std::uint64_t max_len = 256,
                                       std::vector<token_id> prompt = {}) {
  allocation_request req;
  req.id = id;
  req.initial_tokens = prompt.empty() ? tokens : prompt.size();
  req.max_sequence_length = max_len;
  req.num_layers = cfg.model.num_layers;
  req.num_heads = cfg.model.num_kv_heads;
  req.head_dim = cfg.model.head_dim;
  req.dtype = cfg.model.dtype;
  req.prompt = std::move(prompt);
  return req;
}

/// `n` token ids first, first + 1, ...
inline std::vector<token_id> iota_tokens(token_id first, std::size_t n) {
  std::vector<token_id> out(n);
  for (std::size_t i = 0; i < n; ++i)
    out[i] = first + static_cast<token_id>(i);
  return out;
}

/// The error text of a failed expected, "" for a value.
template <class T>
std::string why(const caf::expected<T>& x) {
  return x ? std::string{} : render(x.error());
}

/// True if `err` has kvactor code `code` and its rendering contains every
/// one of `parts` (the context names what was wrong).
inline bool is_error(const caf::error& err, errc code,
                     std::initializer_list<const char*> parts = {}) {
  if (!has_code(err, code))
    return false;
  auto text = render(err);
  for (auto p : parts)
    if (text.find(p) == std::string::npos)
      return false;
  return true;
}

#define KV_CHECK_ERROR(expr, code, ...)                                        \
  do {                                                                         \
    caf::error kv_err_ = (expr);                                               \
    BOOST_TEST(kvtest::is_error(kv_err_, code, {__VA_ARGS__}),                 \
               #expr << " gave '" << kvactor::render(kv_err_)                  \
                     << "', expected " << kvactor::to_string(code));           \
  } while (false)

/// The error of an expected that must have failed (none if it did not).
template <class T>
caf::error error_of(caf::expected<T> x) {
  if (x)
    return caf::none;
  return std::move(x.error());
}

/// A polling wait: true once `pred` holds, false after `limit` (long: on a
/// loaded 2-core CI machine a few messages can take seconds; the watchdog
/// still ends a real hang).
inline bool eventually(const std::function<bool()>& pred,
                       std::chrono::milliseconds limit
                       = std::chrono::seconds{30}) {
  auto until = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > until)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds{2});
  }
  return true;
}

/// A handle's figures, or the test fails (stats() would read zeros - and
/// a zero hit count must mean "nothing cached", not "no answer").
inline cache_handle_stats stats_of(const kv_cache_handle& h) {
  auto s = h.checked_stats();
  BOOST_REQUIRE_MESSAGE(s, "stats of request " << h.id() << ": " << why(s));
  return *s;
}

/// Fails the whole binary if not destroyed within `limit`: a hang (shutdown,
/// a lost reply) ends the test run with a message instead of blocking CI.
/// Used as the fixture of every suite; nothing here asserts off the main
/// thread.
class watchdog {
public:
  explicit watchdog(std::chrono::seconds limit = std::chrono::seconds{60})
    : name_(boost::unit_test::framework::current_test_case().p_name.get()) {
    thread_ = std::thread([this, limit] {
      std::unique_lock<std::mutex> lock{mtx_};
      if (!cv_.wait_for(lock, limit, [this] { return done_; })) {
        std::fprintf(stderr, "\n*** watchdog: test '%s' hung for %llds ***\n",
                     name_.c_str(), static_cast<long long>(limit.count()));
        std::fflush(stderr);
        std::_Exit(124);
      }
    });
  }

  ~watchdog() {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

private:
  std::string name_;
  std::mutex mtx_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

/// Runs `f` on a thread of its own and waits at most `limit` for it: false
/// (and the thread left behind, detached) if it did not finish. For code
/// that must not hang, such as a shutdown.
bool finishes_within(std::chrono::milliseconds limit, std::function<void()> f);

/// An actor system configured for kvactor and a cache started in it. The
/// facade is destroyed before the system (the documented order).
struct cache_fixture {
  explicit cache_fixture(cache_config c = small_config()) : cfg(std::move(c)) {
    configure(sys_cfg, cfg);
    sys.emplace(sys_cfg);
    auto started = kv_cache_manager::start(*sys, cfg);
    BOOST_REQUIRE_MESSAGE(started, why(started));
    mgr.emplace(std::move(*started));
  }

  ~cache_fixture() {
    // First: a test's callback may capture its locals, declared after the
    // fixture and gone by now - and the check's GC changes the level.
    if (mgr)
      mgr->set_pressure_callback(nullptr);
    if (mgr && check_at_end)
      check_accounting();
    mgr.reset();
    sys.reset();
  }

  /// The end-of-test check: a GC pass, which verifies the pool's invariant
  /// (every block free, cached or owned, exactly once) after its sweep,
  /// and which must find no request the test lost track of. A test that
  /// stops the cache itself clears `check_at_end`.
  void check_accounting() {
    auto g = mgr->gc();
    if (!g)
      BOOST_ERROR("end-of-test gc: " << why(g));
    else
      BOOST_TEST(g->caches_freed == 0u,
                 "end-of-test gc reclaimed " << g->caches_freed
                                             << " request(s) nobody held");
  }

  kv_cache_manager& m() {
    return *mgr;
  }

  allocation_request req(request_id id, std::uint64_t tokens,
                         std::uint64_t max_len = 256,
                         std::vector<token_id> prompt = {}) const {
    return make_request(cfg, id, tokens, max_len, std::move(prompt));
  }

  /// Allocates or fails the test.
  std::shared_ptr<kv_cache_handle> alloc(const allocation_request& r) {
    auto h = mgr->allocate(r);
    BOOST_REQUIRE_MESSAGE(h, "allocate " << r.id << ": " << why(h));
    return *h;
  }

  /// The manager's figures, or the test fails (stats() would read zeros).
  cache_manager_stats checked_stats() {
    auto s = mgr->checked_stats();
    BOOST_REQUIRE_MESSAGE(s, "stats: " << why(s));
    return *s;
  }

  /// Blocks held by requests (total less free, cached blocks counting as
  /// free); 0 once idle.
  std::uint64_t used_blocks() {
    auto s = checked_stats();
    return s.total_blocks - s.free_blocks;
  }

  /// Allocates prompt_of(id) again, for each id from 1 below
  /// answered.size() (as request 100 + id), and frees it: it must hit
  /// cached blocks where answered[id], none where not - a request nobody
  /// received (its reply came after its caller gave up) leaves no block
  /// in the prefix index, nobody having written its K/V.
  template <class PromptOf>
  void expect_hits_only_if_answered(const std::vector<bool>& answered,
                                    PromptOf prompt_of) {
    for (request_id id = 1; id < answered.size(); ++id) {
      auto h = m().allocate(req(100 + id, 0, 8192, prompt_of(id)));
      BOOST_REQUIRE_MESSAGE(h, why(h));
      const auto hit = stats_of(**h).prefix_hit_tokens;
      BOOST_TEST((answered[id] ? hit > 0u : hit == 0u),
                 "request " << id << (answered[id] ? " answered" : " not")
                            << ": " << hit << " tokens hit");
      BOOST_REQUIRE(!m().deallocate(100 + id));
    }
  }

  cache_config cfg;
  bool check_at_end = true;
  caf::actor_system_config sys_cfg;
  std::optional<caf::actor_system> sys;
  std::optional<kv_cache_manager> mgr;
};

} // namespace kvtest
