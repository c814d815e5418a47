// Shared fixture of the actor tests: a small cache on CAF's deterministic
// scheduler, message helpers that send, run the scheduler and collect the
// reply (never blocking: a missing reply is an error, not a hang), and the
// accounting invariant checked (through the supervisor's GC) after each test.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <ostream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/after.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/scoped_actor.hpp>

#include <boost/test/unit_test.hpp>

#include "kvactor/actors/kv_cache_manager_actor.hpp"
#include "kvactor/config/cache_config.hpp"
#include "kvactor/messages/error.hpp"
#include "kvactor/messages/interfaces.hpp"

#include "printers.hpp"

namespace kvactor::test {

// -- outcomes ------------------------------------------------------------------

/// "ok", an errc name ("out_of_blocks"), a caf::sec name
/// ("unexpected_message") or the rendered error: comparable and printable.
std::string outcome(const caf::error& err);

template <class T>
std::string outcome(const caf::expected<T>& x) {
  return x ? std::string{"ok"} : outcome(x.error());
}

/// x's value, or `fallback` if it holds an error.
template <class T, class U>
T value_or(const caf::expected<T>& x, U&& fallback) {
  return x ? *x : T(std::forward<U>(fallback));
}

/// x's value, or the test fails: where a fallback would equal what the
/// test expects (a zero count, a flag off), value_or could not fail.
template <class T>
T must(caf::expected<T> x) {
  BOOST_REQUIRE_MESSAGE(x, "expected a value, got " << outcome(x));
  return std::move(*x);
}

/// The error a helper returns when no reply arrived.
caf::error no_reply(const std::string& what);

// -- building blocks -----------------------------------------------------------

/// Block size 4, 64 blocks, 2 layers x 2 heads x 8 dims fp16, host storage,
/// GC only on demand, tenants "default" and "b" (no quotas).
cache_config small_config();

/// An allocation for `cfg`'s model: `tokens` unnamed tokens.
allocation_request make_request(const cache_config& cfg, request_id id,
                                std::uint64_t tokens,
                                std::uint64_t max_len = 256);

/// An allocation whose initial tokens are `prompt`.
allocation_request make_prompt_request(const cache_config& cfg, request_id id,
                                       std::vector<token_id> prompt,
                                       std::uint64_t max_len = 256);

/// `n` token ids from a seed: equal seeds give equal sequences.
std::vector<token_id> make_tokens(std::size_t n, std::uint32_t seed);

std::uint64_t blocks_for(std::uint64_t tokens, std::uint64_t block_size);

/// An allocate or fork reply.
struct allocated {
  request_handle_actor handle;
  block_table table;
};

/// Base holding the system config, so it is ready before the system.
struct system_config_holder {
  system_config_holder();
  caf::actor_system_config sys_cfg;
};

// -- the fixture -----------------------------------------------------------------

class cache_fixture : public system_config_holder {
public:
  /// `store`: a storage to run on instead of the one `config` names.
  explicit cache_fixture(cache_config config = small_config(),
                         std::shared_ptr<storage> store = nullptr);
  ~cache_fixture();

  cache_fixture(const cache_fixture&) = delete;
  cache_fixture& operator=(const cache_fixture&) = delete;

  caf::actor_system sys;
  caf::scheduler::test_coordinator& sched;
  /// Sends every helper's message, hence owns every request it allocates.
  caf::scoped_actor self;
  cache_config cfg;
  cache_system cache;
  kv_cache_manager_actor mgr;
  /// The pool (cache_system exposes it).
  block_pool_actor pool;
  /// Found on the scheduler's job queue (the manager does not expose it).
  supervisor_actor sup;
  /// Bytes per block of the storage (all layers, K and V).
  std::uint64_t bytes_per_block = 0;
  /// In the destructor: check the pool's invariant, then run GC (which
  /// checks it again after its sweep) and require that it found no orphan;
  /// off for tests that stop the cache themselves.
  bool check_on_exit = true;

  /// Runs every pending job.
  void run() {
    sched.run();
  }

  /// Runs every job but `held`'s until only that one (or none) is left:
  /// holds one actor back to force an interleaving.
  void run_except(const caf::actor_addr& held);

  /// Exits the manager (user_shutdown) and runs until everything stopped.
  void shutdown();

  /// Sends (x...) from `from` to `dest`, runs the scheduler and receives one
  /// reply of types Ts... or an error; no reply at all is an error too.
  template <class... Ts, class Dest, class... Args>
  caf::expected<std::tuple<Ts...>> ask_from(caf::scoped_actor& from,
                                            const Dest& dest, Args&&... xs) {
    from->send(dest, std::forward<Args>(xs)...);
    run();
    return reply_to<Ts...>(from);
  }

  /// The one reply of types Ts... (or error) waiting at `to`; no reply at
  /// all is an error too.
  template <class... Ts>
  caf::expected<std::tuple<Ts...>> reply_to(caf::scoped_actor& to) {
    caf::expected<std::tuple<Ts...>> result{no_reply("ask")};
    to->receive(
      [&](Ts&... ys) { result = std::make_tuple(std::move(ys)...); },
      [&](caf::error& err) { result = std::move(err); },
      caf::after(std::chrono::seconds(0)) >> [] {});
    return result;
  }

  /// As ask_from(self, ...) for a single reply value.
  template <class T, class Dest, class... Args>
  caf::expected<T> ask(const Dest& dest, Args&&... xs) {
    auto res = ask_from<T>(self, dest, std::forward<Args>(xs)...);
    if (!res)
      return std::move(res.error());
    return std::move(std::get<0>(*res));
  }

  // -- the manager's messages ---------------------------------------------------

  caf::expected<allocated> allocate(const allocation_request& req);
  caf::expected<allocated> allocate_from(caf::scoped_actor& from,
                                         const allocation_request& req);
  /// allocate(make_request(cfg, id, tokens, max_len)).
  caf::expected<allocated> allocate(request_id id, std::uint64_t tokens,
                                    std::uint64_t max_len = 256);
  caf::expected<block_table> extend(request_id id, std::uint64_t n);
  caf::expected<block_table> append(request_id id, std::vector<token_id> tokens);
  caf::expected<std::uint32_t> free(request_id id);
  caf::expected<allocated> fork(request_id parent, request_id child);
  caf::expected<bool> can_alloc(const allocation_request& req);
  caf::expected<cache_manager_stats> stats();
  caf::expected<cache_gc_stats> gc();
  caf::expected<std::pair<request_handle_actor, request_info>>
  lookup(request_id id);
  caf::expected<std::vector<handle_entry>> list();
  caf::expected<block_table> table(request_id id);
  caf::expected<step_result> step(step_request req);
  caf::expected<std::uint32_t> preempt(request_id id);
  /// An orphan: a request the pool admits for the manager (the allocate
  /// arrives from the manager, its answer comes here) that the manager
  /// never registered - the case GC's sweep exists for.
  caf::expected<admission> orphan(const allocation_request& req);
  caf::expected<std::uint32_t> preempt_from(caf::scoped_actor& from,
                                            request_id id);
  void subscribe(topic t, caf::scoped_actor& sub);
  void unsubscribe(topic t, caf::scoped_actor& sub);

  // -- a handle actor's messages --------------------------------------------------

  caf::expected<block_table> handle_table(const request_handle_actor& h);
  caf::expected<block_table> handle_extend(const request_handle_actor& h,
                                           std::uint64_t n);
  caf::expected<block_table> handle_append(const request_handle_actor& h,
                                           std::vector<token_id> tokens);
  caf::expected<cache_handle_stats> handle_stats(const request_handle_actor& h);
  caf::expected<request_info> handle_info(const request_handle_actor& h);
  caf::expected<std::uint32_t> handle_free(const request_handle_actor& h);

  // -- the device actor's messages ------------------------------------------------

  /// Writes `tokens` tokens' K and V of `layer` into `table`'s slots
  /// [first, first + tokens): byte j of token i's key row is
  /// pattern(seed, layer, i, j), of its value row pattern(seed + 1, ...).
  caf::expected<std::uint32_t> write_tokens(const block_table& table,
                                            std::uint32_t layer,
                                            std::uint64_t first,
                                            std::uint64_t tokens,
                                            std::uint32_t seed);
  caf::expected<gathered_kv> gather(std::uint32_t layer,
                                    const block_table& table);
  /// Bytes of one token's K (or V) row of one layer.
  std::size_t row_bytes() const;

  // -- reading what arrived ---------------------------------------------------------

  /// Every (pressure_atom, pressure_event) waiting in `sub`'s mailbox.
  static std::vector<pressure_event> pressure_events(caf::scoped_actor& sub);
  /// Every (ended_atom, request_ended) waiting in `sub`'s mailbox.
  static std::vector<request_ended> ended_events(caf::scoped_actor& sub);
  /// Every (preempt_atom, request_ended) waiting in `sub`'s mailbox.
  static std::vector<request_ended> preempt_notices(caf::scoped_actor& sub);
  /// Whether a down_msg from `h` reached `sub` (each is reported once; the
  /// others read on the way are kept for later calls).
  bool received_down(caf::scoped_actor& sub, const caf::actor_addr& h);

  /// Blocks in use = total - free, from stats (aborts the test on error).
  std::uint64_t used_blocks();

private:
  bool stopped_ = false;
  std::map<caf::actor_addr, std::set<caf::actor_addr>> downs_;
};

/// small_config() without the supervisor's eviction of cached blocks at high
/// pressure: for tests that fill the pool and still want cached prefixes.
cache_config lazy_config();

struct lazy_fixture : cache_fixture {
  lazy_fixture() : cache_fixture(lazy_config()) {
  }
};

/// small_config() with a host tier of 8 blocks, for swapping.
cache_config host_tier_config();

/// small_config() with the supervisor's GC on a 50 ms timer (which the
/// deterministic scheduler fires on trigger_timeouts()).
cache_config timer_config();

struct timer_fixture : cache_fixture {
  timer_fixture() : cache_fixture(timer_config()) {
  }
};

} // namespace kvactor::test
