// Entry point of actor_tests and the shared fixture's implementation.
#define BOOST_TEST_MODULE kvactor_actor_tests
#include <boost/test/unit_test.hpp>

#include "fixture.hpp"

#include <algorithm>
#include <cstring>

#include <caf/all.hpp>

#include "kvactor/messages/registration.hpp"

namespace kvactor::test {

// -- outcomes ------------------------------------------------------------------

std::string outcome(const caf::error& err) {
  if (!err)
    return "ok";
  if (err.category() == error_category)
    return to_string(static_cast<errc>(err.code()));
  if (err.category() == caf::atom("system"))
    return caf::to_string(static_cast<caf::sec>(err.code()));
  return render(err);
}

caf::error no_reply(const std::string& what) {
  return caf::make_error(caf::sec::request_timeout, "no reply to " + what);
}

// -- building blocks -----------------------------------------------------------

cache_config small_config() {
  cache_config cfg;
  cfg.block_size = 4;
  cfg.model.num_layers = 2;
  cfg.model.num_kv_heads = 2;
  cfg.model.head_dim = 8;
  cfg.model.dtype = dtype::fp16;
  cfg.storage = "host";
  cfg.num_gpu_blocks = 64;
  cfg.gc_interval_ms = 0;
  // Tests fill the pool on purpose; the supervisor's own preemption at
  // critical pressure has tests of its own (supervisor_test.cpp).
  cfg.pressure.preempt_at_critical = false;
  tenant_config b;
  b.name = "b";
  cfg.tenants = {tenant_config{}, b};
  return cfg;
}

cache_config lazy_config() {
  auto cfg = small_config();
  cfg.pressure.evict_cached_at_high = false;
  return cfg;
}

cache_config host_tier_config() {
  auto cfg = small_config();
  cfg.num_host_blocks = 8;
  return cfg;
}

cache_config timer_config() {
  auto cfg = small_config();
  cfg.gc_interval_ms = 50;
  return cfg;
}

allocation_request make_request(const cache_config& cfg, request_id id,
                                std::uint64_t tokens, std::uint64_t max_len) {
  allocation_request req;
  req.id = id;
  req.initial_tokens = tokens;
  req.max_sequence_length = max_len;
  req.num_layers = cfg.model.num_layers;
  req.num_heads = cfg.model.num_kv_heads;
  req.head_dim = cfg.model.head_dim;
  req.dtype = cfg.model.dtype;
  return req;
}

allocation_request make_prompt_request(const cache_config& cfg, request_id id,
                                       std::vector<token_id> prompt,
                                       std::uint64_t max_len) {
  auto req = make_request(cfg, id, prompt.size(), max_len);
  req.prompt = std::move(prompt);
  return req;
}

std::vector<token_id> make_tokens(std::size_t n, std::uint32_t seed) {
  std::vector<token_id> out(n);
  std::uint32_t x = seed * 2654435761u + 12345u;
  for (auto& t : out) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    t = static_cast<token_id>(x % 50000u);
  }
  return out;
}

std::uint64_t blocks_for(std::uint64_t tokens, std::uint64_t block_size) {
  return (tokens + block_size - 1) / block_size;
}

system_config_holder::system_config_holder() {
  add_message_types(sys_cfg);
  sys_cfg.set("scheduler.policy", caf::atom("testing"));
  sys_cfg.set("logger.file-verbosity", caf::atom("quiet"));
  sys_cfg.set("logger.console-verbosity", caf::atom("quiet"));
}

// -- the fixture -----------------------------------------------------------------

namespace {

/// The actor named `name` among the scheduler's pending jobs, if any.
template <class Handle>
Handle find_job(caf::scheduler::test_coordinator& sched, const char* name) {
  for (auto* job : sched.jobs) {
    auto* a = dynamic_cast<caf::local_actor*>(job);
    if (a != nullptr && std::strcmp(a->name(), name) == 0)
      return caf::actor_cast<Handle>(caf::strong_actor_ptr{a->ctrl()});
  }
  return Handle{};
}

} // namespace

cache_fixture::cache_fixture(cache_config config, std::shared_ptr<storage> store)
  : sys(sys_cfg),
    sched(dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler())),
    self(sys),
    cfg(std::move(config)) {
  spawn_options opts;
  opts.detached_device = false;
  opts.store = std::move(store);
  auto started = spawn_kv_cache(sys, cfg, opts);
  if (!started)
    BOOST_FAIL("spawn_kv_cache failed: " << render(started.error()));
  cache = std::move(*started);
  mgr = cache.manager;
  run();
  pool = cache.pool;
  // The manager keeps the supervisor to itself: catch it on the job queue
  // while the manager's gc request to it waits there.
  self->send(mgr, gc_atom::value);
  sched.run_once();
  sup = find_job<supervisor_actor>(sched, "kvactor.supervisor");
  run();
  self->receive([](cache_gc_stats&) {}, [](caf::error&) {},
                caf::after(std::chrono::seconds(0)) >> [] {});
  if (!pool || !sup)
    BOOST_FAIL("could not find the pool or the supervisor on the job queue");
  auto info = ask<storage_info>(cache.device, info_atom::value);
  if (!info)
    BOOST_FAIL("device info failed: " << render(info.error()));
  bytes_per_block = info->bytes_per_block;
}

cache_fixture::~cache_fixture() {
  if (check_on_exit && !stopped_) {
    // The pool's own check first: GC changes the pool (evicts, expires
    // pins, sweeps orphans) before it checks, and would hide what the
    // test left behind.
    auto ok = ask<bool>(pool, check_atom::value);
    if (!ok)
      BOOST_ERROR("accounting invariant after the test: "
                  << render(ok.error()));
    auto res = gc();
    if (!res)
      BOOST_ERROR("GC after the test: " << render(res.error()));
    else
      BOOST_CHECK_MESSAGE(res->caches_freed == 0u,
                          "GC after the test reclaimed "
                            << res->caches_freed
                            << " request(s) the registry did not know");
  }
  shutdown();
}

void cache_fixture::shutdown() {
  if (stopped_)
    return;
  stopped_ = true;
  caf::anon_send_exit(mgr, caf::exit_reason::user_shutdown);
  run();
}

// -- the manager's messages -----------------------------------------------------

caf::expected<allocated> cache_fixture::allocate(const allocation_request& req) {
  return allocate_from(self, req);
}

caf::expected<allocated>
cache_fixture::allocate_from(caf::scoped_actor& from,
                             const allocation_request& req) {
  auto res = ask_from<request_handle_actor, block_table>(from, mgr,
                                                         allocate_atom::value,
                                                         req);
  if (!res)
    return std::move(res.error());
  return allocated{std::move(std::get<0>(*res)), std::move(std::get<1>(*res))};
}

caf::expected<allocated> cache_fixture::allocate(request_id id,
                                                 std::uint64_t tokens,
                                                 std::uint64_t max_len) {
  return allocate(make_request(cfg, id, tokens, max_len));
}

caf::expected<block_table> cache_fixture::extend(request_id id,
                                                 std::uint64_t n) {
  return ask<block_table>(mgr, extend_atom::value, id, n);
}

caf::expected<block_table> cache_fixture::append(request_id id,
                                                 std::vector<token_id> tokens) {
  return ask<block_table>(mgr, append_atom::value, id, std::move(tokens));
}

caf::expected<std::uint32_t> cache_fixture::free(request_id id) {
  return ask<std::uint32_t>(mgr, free_atom::value, id);
}

caf::expected<allocated> cache_fixture::fork(request_id parent,
                                             request_id child) {
  auto res = ask_from<request_handle_actor, block_table>(self, mgr,
                                                         fork_atom::value,
                                                         parent, child);
  if (!res)
    return std::move(res.error());
  return allocated{std::move(std::get<0>(*res)), std::move(std::get<1>(*res))};
}

caf::expected<bool> cache_fixture::can_alloc(const allocation_request& req) {
  return ask<bool>(mgr, can_alloc_atom::value, req);
}

caf::expected<cache_manager_stats> cache_fixture::stats() {
  return ask<cache_manager_stats>(mgr, stats_atom::value);
}

caf::expected<cache_gc_stats> cache_fixture::gc() {
  return ask<cache_gc_stats>(mgr, gc_atom::value);
}

caf::expected<std::pair<request_handle_actor, request_info>>
cache_fixture::lookup(request_id id) {
  auto res = ask_from<request_handle_actor, request_info>(self, mgr,
                                                          lookup_atom::value,
                                                          id);
  if (!res)
    return std::move(res.error());
  return std::make_pair(std::move(std::get<0>(*res)),
                        std::move(std::get<1>(*res)));
}

caf::expected<std::vector<handle_entry>> cache_fixture::list() {
  return ask<std::vector<handle_entry>>(mgr, list_atom::value);
}

caf::expected<block_table> cache_fixture::table(request_id id) {
  return ask<block_table>(mgr, table_atom::value, id);
}

void cache_fixture::run_except(const caf::actor_addr& held) {
  auto& jobs = sched.jobs;
  for (;;) {
    auto i = std::find_if(jobs.begin(), jobs.end(), [&](caf::resumable* r) {
      auto a = dynamic_cast<caf::abstract_actor*>(r);
      return a == nullptr || a->address() != held;
    });
    if (i == jobs.end())
      return;
    auto job = *i;
    jobs.erase(i);
    jobs.push_front(job);
    sched.run_once();
  }
}

caf::expected<step_result> cache_fixture::step(step_request req) {
  return ask<step_result>(mgr, step_atom::value, std::move(req));
}

caf::expected<admission> cache_fixture::orphan(const allocation_request& req) {
  // As the manager passing the allocate on with self as the next stage:
  // the pool sees the manager as the sender and answers self.
  caf::actor_cast<caf::abstract_actor*>(pool)->enqueue(
    caf::make_mailbox_element(caf::actor_cast<caf::strong_actor_ptr>(mgr),
                              caf::make_message_id(),
                              {caf::actor_cast<caf::strong_actor_ptr>(self)},
                              allocate_atom::value, req),
    nullptr);
  run();
  auto res = reply_to<admission>(self);
  if (!res)
    return std::move(res.error());
  return std::move(std::get<0>(*res));
}

caf::expected<std::uint32_t> cache_fixture::preempt(request_id id) {
  return preempt_from(self, id);
}

caf::expected<std::uint32_t>
cache_fixture::preempt_from(caf::scoped_actor& from, request_id id) {
  auto res = ask_from<std::uint32_t>(from, mgr, preempt_atom::value, id);
  if (!res)
    return std::move(res.error());
  return std::get<0>(*res);
}

void cache_fixture::subscribe(topic t, caf::scoped_actor& sub) {
  self->send(mgr, subscribe_atom::value, t, caf::actor_cast<caf::actor>(sub));
  run();
}

void cache_fixture::unsubscribe(topic t, caf::scoped_actor& sub) {
  self->send(mgr, unsubscribe_atom::value, t, caf::actor_cast<caf::actor>(sub));
  run();
}

// -- a handle actor's messages ----------------------------------------------------

caf::expected<block_table>
cache_fixture::handle_table(const request_handle_actor& h) {
  return ask<block_table>(h, table_atom::value);
}

caf::expected<block_table>
cache_fixture::handle_extend(const request_handle_actor& h, std::uint64_t n) {
  return ask<block_table>(h, extend_atom::value, n);
}

caf::expected<block_table>
cache_fixture::handle_append(const request_handle_actor& h,
                             std::vector<token_id> tokens) {
  return ask<block_table>(h, append_atom::value, std::move(tokens));
}

caf::expected<cache_handle_stats>
cache_fixture::handle_stats(const request_handle_actor& h) {
  return ask<cache_handle_stats>(h, stats_atom::value);
}

caf::expected<request_info>
cache_fixture::handle_info(const request_handle_actor& h) {
  return ask<request_info>(h, info_atom::value);
}

caf::expected<std::uint32_t>
cache_fixture::handle_free(const request_handle_actor& h) {
  return ask<std::uint32_t>(h, free_atom::value);
}

// -- the device actor's messages ----------------------------------------------------

std::size_t cache_fixture::row_bytes() const {
  return std::size_t{cfg.model.num_kv_heads} * cfg.model.head_dim
         * size_of(cfg.model.dtype);
}

namespace {

std::uint8_t pattern(std::uint32_t seed, std::uint32_t layer, std::uint64_t i,
                     std::size_t j) {
  auto x = (seed * 131u + layer * 31u + static_cast<std::uint32_t>(i) * 7u
            + static_cast<std::uint32_t>(j))
           * 2654435761u;
  return static_cast<std::uint8_t>(x >> 24);
}

} // namespace

caf::expected<std::uint32_t>
cache_fixture::write_tokens(const block_table& table, std::uint32_t layer,
                            std::uint64_t first, std::uint64_t tokens,
                            std::uint32_t seed) {
  slot_write w;
  w.layer = layer;
  auto row = row_bytes();
  for (auto i = first; i < first + tokens; ++i) {
    w.slots.push_back(static_cast<std::int64_t>(table.slot(i)));
    for (std::size_t j = 0; j < row; ++j) {
      w.keys.push_back(pattern(seed, layer, i, j));
      w.values.push_back(pattern(seed + 1, layer, i, j));
    }
  }
  return ask<std::uint32_t>(cache.device, write_atom::value, std::move(w));
}

caf::expected<gathered_kv> cache_fixture::gather(std::uint32_t layer,
                                                 const block_table& table) {
  return ask<gathered_kv>(cache.device, gather_atom::value, layer,
                          table.blocks, table.num_tokens);
}

// -- reading what arrived -----------------------------------------------------------

std::vector<pressure_event>
cache_fixture::pressure_events(caf::scoped_actor& sub) {
  std::vector<pressure_event> out;
  bool more = true;
  while (more)
    sub->receive([&](pressure_atom, pressure_event& ev) { out.push_back(ev); },
                 caf::after(std::chrono::seconds(0)) >> [&] { more = false; });
  return out;
}

std::vector<request_ended> cache_fixture::ended_events(caf::scoped_actor& sub) {
  std::vector<request_ended> out;
  bool more = true;
  while (more)
    sub->receive([&](ended_atom, request_ended& ev) { out.push_back(ev); },
                 caf::after(std::chrono::seconds(0)) >> [&] { more = false; });
  return out;
}

std::vector<request_ended>
cache_fixture::preempt_notices(caf::scoped_actor& sub) {
  std::vector<request_ended> out;
  bool more = true;
  while (more)
    sub->receive([&](preempt_atom, request_ended& ev) { out.push_back(ev); },
                 caf::after(std::chrono::seconds(0)) >> [&] { more = false; });
  return out;
}

bool cache_fixture::received_down(caf::scoped_actor& sub,
                                  const caf::actor_addr& h) {
  auto& seen = downs_[sub->address()];
  bool more = true;
  while (more)
    sub->receive([&](caf::down_msg& dm) { seen.insert(dm.source); },
                 caf::after(std::chrono::seconds(0)) >> [&] { more = false; });
  return seen.erase(h) > 0;
}

std::uint64_t cache_fixture::used_blocks() {
  auto s = stats();
  if (!s)
    BOOST_FAIL("stats failed: " << render(s.error()));
  return s->total_blocks - s->free_blocks;
}

} // namespace kvactor::test
