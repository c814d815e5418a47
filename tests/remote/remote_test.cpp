// Distribution: a second process (this binary re-executed with --serve)
// starts a cache and publishes its manager on 127.0.0.1 through CAF's
// middleman; the tests connect with remote_actor and drive it with typed
// requests, checking that tables, stats (tenants included), step results and
// errors (code and context) cross the wire intact, that a type mismatch is
// refused with sec::unexpected_message and changes nothing, and that a
// remote owner's requests are reclaimed when it goes. Both processes
// register kvactor's types. The server is killed and reaped on every path.
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/sec.hpp>

#include "kvactor/actors/kv_cache_manager.hpp"
#include "kvactor/config/cache_config.hpp"
#include "kvactor/messages/error.hpp"
#include "kvactor/messages/registration.hpp"
#include "printers.hpp"
#include "server.hpp"

using namespace kvactor;
using kvtest::serve;
using kvtest::server_config;
using kvtest::server_process;

namespace {


/// Ends the test binary if a test hangs (a lost reply, a stuck shutdown).
class watchdog {
public:
  watchdog() {
    thread_ = std::thread([this] {
      std::unique_lock<std::mutex> lock{mtx_};
      if (!cv_.wait_for(lock, std::chrono::seconds{90}, [this] { return done_; })) {
        std::fprintf(stderr, "\n*** watchdog: remote test hung ***\n");
        std::fflush(stderr);
        std::_Exit(124); // the server dies with us (PR_SET_PDEATHSIG)
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
  std::mutex mtx_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

constexpr auto reply_timeout = std::chrono::seconds{10};

/// A server process and a client actor system connected to its manager.
struct remote_fixture {
  watchdog guard; // first: watches the whole setup and teardown
  server_process server;
  cache_config cfg = server_config();
  caf::actor_system_config sys_cfg;
  std::optional<caf::actor_system> sys;
  kv_cache_manager_actor mgr;

  remote_fixture() {
    add_message_types(sys_cfg);
    sys_cfg.load<caf::io::middleman>();
    sys.emplace(sys_cfg);
    auto m = sys->middleman().remote_actor<kv_cache_manager_actor>(
      "127.0.0.1", server.port());
    BOOST_REQUIRE_MESSAGE(m, "remote_actor: "
                               << (m ? std::string{} : sys->render(m.error())));
    mgr = *m;
  }

  ~remote_fixture() {
    mgr = nullptr;
    sys.reset();
  }

  allocation_request req(request_id id, std::uint64_t tokens,
                         std::vector<token_id> prompt = {}) const {
    allocation_request r;
    r.id = id;
    r.initial_tokens = prompt.empty() ? tokens : prompt.size();
    r.max_sequence_length = 64;
    r.num_layers = cfg.model.num_layers;
    r.num_heads = cfg.model.num_kv_heads;
    r.head_dim = cfg.model.head_dim;
    r.dtype = cfg.model.dtype;
    r.prompt = std::move(prompt);
    return r;
  }

  /// One typed request; fails the test on an error.
  template <class... Rs, class... Ts>
  std::tuple<Rs...> ask(caf::scoped_actor& self, Ts... xs) {
    std::optional<std::tuple<Rs...>> out;
    self->request(mgr, reply_timeout, xs...)
      .receive([&](Rs&... ys) { out.emplace(std::move(ys)...); },
               [&](caf::error& err) {
                 BOOST_FAIL("remote request failed: " << render(err));
               });
    BOOST_REQUIRE(out);
    return std::move(*out);
  }

  /// One typed request that must fail; returns its error.
  template <class... Rs, class... Ts>
  caf::error ask_error(caf::scoped_actor& self, Ts... xs) {
    caf::error out;
    self->request(mgr, reply_timeout, xs...)
      .receive([&](Rs&...) { BOOST_ERROR("request succeeded, expected an error"); },
               [&](caf::error& err) { out = std::move(err); });
    return out;
  }

  cache_manager_stats stats(caf::scoped_actor& self) {
    return std::get<0>(ask<cache_manager_stats>(self, stats_atom::value));
  }
};

std::vector<token_id> iota_tokens(token_id first, std::size_t n) {
  std::vector<token_id> out(n);
  for (std::size_t i = 0; i < n; ++i)
    out[i] = first + static_cast<token_id>(i);
  return out;
}

bool is_error(const caf::error& err, errc code, const std::string& part) {
  return has_code(err, code) && render(err).find(part) != std::string::npos;
}

} // namespace

BOOST_FIXTURE_TEST_SUITE(remote, remote_fixture)

BOOST_AUTO_TEST_CASE(requests_and_replies_cross_the_wire_intact) {
  caf::scoped_actor self{*sys};
  auto s0 = stats(self);
  BOOST_TEST(s0.total_blocks == 64u);
  BOOST_TEST(s0.free_blocks == 64u);
  BOOST_TEST(s0.block_size == 4u);
  // Allocate with a prompt; a second request shares its full blocks.
  auto prompt = iota_tokens(100, 10);
  auto [h1, t1] = ask<request_handle_actor, block_table>(
    self, allocate_atom::value, req(1, 0, prompt));
  BOOST_TEST(static_cast<bool>(h1));
  BOOST_TEST((h1.node() != sys->node()), "the handle actor lives remotely");
  BOOST_TEST(t1.num_tokens == 10u);
  BOOST_TEST(t1.block_size == 4u);
  BOOST_REQUIRE_EQUAL(t1.blocks.size(), 3u);
  auto prompt2 = iota_tokens(100, 8);
  prompt2.push_back(7);
  auto [h2, t2] = ask<request_handle_actor, block_table>(
    self, allocate_atom::value, req(2, 0, prompt2));
  BOOST_REQUIRE_EQUAL(t2.blocks.size(), 3u);
  BOOST_TEST(t2.blocks[0] == t1.blocks[0]);
  BOOST_TEST(t2.blocks[1] == t1.blocks[1]);
  BOOST_TEST(t2.blocks[2] != t1.blocks[2]);
  // Extend through the manager, append, and ask the handle actor directly.
  auto [t1b] = ask<block_table>(self, extend_atom::value, request_id{1},
                                std::uint64_t{3});
  BOOST_TEST(t1b.num_tokens == 13u);
  BOOST_REQUIRE_EQUAL(t1b.blocks.size(), 4u);
  BOOST_TEST((std::equal(t1.blocks.begin(), t1.blocks.end(), t1b.blocks.begin())));
  auto [t2b] = ask<block_table>(self, append_atom::value, request_id{2},
                                iota_tokens(9, 5));
  BOOST_TEST(t2b.num_tokens == 14u);
  self->request(h1, reply_timeout, table_atom::value)
    .receive([&](block_table& t) { BOOST_TEST(t == t1b); },
             [&](caf::error& err) { BOOST_FAIL(render(err)); });
  self->request(h2, reply_timeout, info_atom::value)
    .receive(
      [&](request_info& info) {
        BOOST_TEST(info.request.id == 2u);
        BOOST_TEST(info.request.max_sequence_length == 64u);
        BOOST_TEST(info.request.num_heads == 2u);
        BOOST_TEST(info.cache_id != 0u);
      },
      [&](caf::error& err) { BOOST_FAIL(render(err)); });
  auto [table_of_2] = ask<block_table>(self, table_atom::value, request_id{2});
  BOOST_TEST(table_of_2 == t2b);
  // Stats, tenants included.
  auto s1 = stats(self);
  BOOST_TEST(s1.active_caches == 2u);
  BOOST_TEST(s1.free_blocks == 64u - 4u - 2u);
  BOOST_TEST(s1.used_memory_bytes == 6u * (s1.total_memory_bytes / 64u));
  BOOST_TEST(s1.prefix_hit_tokens == 8u);
  BOOST_TEST(s1.prefix_query_tokens == 19u);
  BOOST_TEST(s1.cache_hit_rate == 8.0 / 19.0);
  BOOST_REQUIRE_EQUAL(s1.tenants.size(), 2u);
  BOOST_TEST(s1.tenants[0].name == "default");
  BOOST_TEST(s1.tenants[0].blocks_used == 6u);
  BOOST_TEST(s1.tenants[0].active_requests == 2u);
  BOOST_TEST(s1.tenants[1].name == "batch");
  BOOST_TEST(s1.tenants[1].max_blocks == 8u);
  BOOST_TEST(s1.tenants[1].blocks_used == 0u);
  // A step: free 2, extend 1, admit 3 for tenant batch.
  step_request step;
  step.frees = {2};
  step.extends = {extend_op{1, 4}};
  auto r3 = req(3, 6);
  r3.tenant = "batch";
  step.admits = {r3};
  auto [res] = ask<step_result>(self, step_atom::value, step);
  BOOST_TEST(res.freed == std::vector<request_id>{2},
             boost::test_tools::per_element());
  BOOST_REQUIRE_EQUAL(res.changed.size(), 1u);
  BOOST_TEST(res.changed[0].id == 1u);
  BOOST_TEST(res.changed[0].num_tokens == 17u);
  BOOST_TEST(res.changed[0].first == 4u);
  BOOST_REQUIRE_EQUAL(res.admitted.size(), 1u);
  BOOST_TEST(res.admitted[0].id == 3u);
  BOOST_TEST(res.admitted[0].table.num_tokens == 6u);
  BOOST_TEST(res.admitted[0].table.blocks.size() == 2u);
  BOOST_TEST(res.failed.empty());
  BOOST_TEST(!res.admission_blocked);
  auto s2 = stats(self);
  BOOST_TEST(s2.active_caches == 2u);
  BOOST_TEST(s2.tenants[1].blocks_used == 2u);
  BOOST_TEST(s2.tenants[1].active_requests == 1u);
  // Deallocate everything; full blocks stay cached, all count as free.
  auto [released1] = ask<std::uint32_t>(self, free_atom::value, request_id{1});
  BOOST_TEST(released1 >= 1u);
  ask<std::uint32_t>(self, free_atom::value, request_id{3});
  auto s3 = stats(self);
  BOOST_TEST(s3.active_caches == 0u);
  BOOST_TEST(s3.free_blocks == 64u);
  BOOST_TEST(s3.cached_blocks >= 2u);
  auto [all] = ask<std::vector<handle_entry>>(self, list_atom::value);
  BOOST_TEST(all.empty());
  auto [gc] = ask<cache_gc_stats>(self, gc_atom::value);
  BOOST_TEST(gc.caches_freed == 0u);
}

BOOST_AUTO_TEST_CASE(the_step_lane_reaches_the_pool_across_the_wire) {
  caf::scoped_actor self{*sys};
  auto [lane] = ask<step_actor>(self, step_atom::value);
  BOOST_REQUIRE(lane);
  auto lane_step = [&](const step_request& step) {
    step_result out;
    self->request(lane, reply_timeout, step_atom::value, step)
      .receive([&](step_result& r) { out = std::move(r); },
               [&](caf::error& err) {
                 BOOST_FAIL("lane step failed: " << render(err));
               });
    return out;
  };
  step_request admit;
  admit.admits = {req(1, 6), req(2, 3)};
  auto res = lane_step(admit);
  BOOST_REQUIRE_EQUAL(res.admitted.size(), 2u);
  // The manager's registry followed before the reply.
  auto [h, info] = ask<request_handle_actor, request_info>(
    self, lookup_atom::value, request_id{1});
  BOOST_TEST(info.cache_id == res.admitted[0].cache_id);
  BOOST_TEST(stats(self).active_caches == 2u);
  // A probe crosses too: a prompt's cached tokens, here none (nothing
  // admitted had a prompt), an unknown tenant named.
  std::vector<token_id> prompt(12, 7);
  auto stranger = req(4, 0, prompt);
  stranger.tenant = "nobody";
  self->request(lane, reply_timeout, probe_atom::value,
                std::vector<allocation_request>{req(3, 0, prompt)})
    .receive(
      [&](std::vector<std::uint64_t>& n) {
        BOOST_TEST(n == (std::vector<std::uint64_t>{0}),
                   boost::test_tools::per_element());
      },
      [&](caf::error& err) { BOOST_FAIL("probe failed: " << render(err)); });
  self->request(lane, reply_timeout, probe_atom::value,
                std::vector<allocation_request>{stranger})
    .receive([&](std::vector<std::uint64_t>&) { BOOST_FAIL("probed a stranger"); },
             [&](caf::error& err) {
               BOOST_TEST(render(err).find("nobody") != std::string::npos);
             });
  step_request end;
  end.frees = {1, 2};
  res = lane_step(end);
  BOOST_TEST(res.freed == (std::vector<request_id>{1, 2}),
             boost::test_tools::per_element());
  BOOST_TEST(stats(self).active_caches == 0u);
  BOOST_TEST(stats(self).free_blocks == 64u);
}

BOOST_AUTO_TEST_CASE(errors_cross_the_wire_with_code_and_context) {
  caf::scoped_actor self{*sys};
  ask<request_handle_actor, block_table>(self, allocate_atom::value, req(1, 5));
  auto before = stats(self);
  auto dup = ask_error<request_handle_actor, block_table>(
    self, allocate_atom::value, req(1, 5));
  BOOST_TEST(dup.category() == error_category);
  BOOST_TEST(is_error(dup, errc::duplicate_request, "request 1 is already allocated"),
             render(dup));
  auto unknown = ask_error<block_table>(self, extend_atom::value,
                                        request_id{77}, std::uint64_t{1});
  BOOST_TEST(is_error(unknown, errc::unknown_request, "request 77"),
             render(unknown));
  auto free_unknown = ask_error<std::uint32_t>(self, free_atom::value,
                                               request_id{77});
  BOOST_TEST(is_error(free_unknown, errc::unknown_request, "request 77"),
             render(free_unknown));
  auto nobody = req(2, 4);
  nobody.tenant = "nobody";
  auto tenant = ask_error<request_handle_actor, block_table>(
    self, allocate_atom::value, nobody);
  BOOST_TEST(is_error(tenant, errc::unknown_tenant, "tenant 'nobody'"),
             render(tenant));
  auto over = req(3, 9 * 4);
  over.tenant = "batch";
  auto quota = ask_error<request_handle_actor, block_table>(
    self, allocate_atom::value, over);
  BOOST_TEST(is_error(quota, errc::exceeds_capacity, "max_blocks 8"),
             render(quota));
  auto too_long = ask_error<request_handle_actor, block_table>(
    self, allocate_atom::value, req(4, 65));
  BOOST_TEST(is_error(too_long, errc::exceeds_max_sequence_length,
                      "max_sequence_length 64"),
             render(too_long));
  auto shape = req(5, 4);
  shape.head_dim = 16;
  auto bad_shape = ask_error<request_handle_actor, block_table>(
    self, allocate_atom::value, shape);
  BOOST_TEST(is_error(bad_shape, errc::invalid_request, "head_dim 16"),
             render(bad_shape));
  auto past = ask_error<block_table>(self, extend_atom::value, request_id{1},
                                     std::uint64_t{60});
  BOOST_TEST(is_error(past, errc::exceeds_max_sequence_length,
                      "max_sequence_length 64"),
             render(past));
  // Errors inside a reply value: a step's failed operations.
  step_request step;
  step.frees = {88};
  step.extends = {extend_op{1, 100}};
  auto [res] = ask<step_result>(self, step_atom::value, step);
  BOOST_REQUIRE_EQUAL(res.failed.size(), 2u);
  BOOST_TEST(res.failed[0].id == 88u);
  BOOST_TEST(is_error(res.failed[0].error, errc::unknown_request, "request 88"),
             render(res.failed[0].error));
  BOOST_TEST(res.failed[1].id == 1u);
  BOOST_TEST(is_error(res.failed[1].error, errc::exceeds_max_sequence_length,
                      "request 1"),
             render(res.failed[1].error));
  // Nothing changed.
  auto after = stats(self);
  BOOST_TEST(after.free_blocks == before.free_blocks);
  BOOST_TEST(after.active_caches == before.active_caches);
  auto [t] = ask<block_table>(self, table_atom::value, request_id{1});
  BOOST_TEST(t.num_tokens == 5u);
}

BOOST_AUTO_TEST_CASE(a_type_mismatch_is_refused_and_changes_nothing) {
  caf::scoped_actor self{*sys};
  ask<request_handle_actor, block_table>(self, allocate_atom::value, req(1, 5));
  auto before = stats(self);
  // The typed interface rules these out at compile time; a dynamically
  // typed peer can still send them.
  auto untyped = caf::actor_cast<caf::actor>(mgr);
  auto refused = [&](auto... xs) {
    caf::error out;
    self->request(untyped, reply_timeout, xs...)
      .receive([&](int) { BOOST_ERROR("an int reply?"); },
               [&](caf::error& err) { out = std::move(err); });
    return out;
  };
  auto e1 = refused(allocate_atom::value, std::string{"not a request"});
  BOOST_TEST((e1 == caf::sec::unexpected_message), render(e1));
  auto e2 = refused(extend_atom::value, std::string{"1"}, 5);
  BOOST_TEST((e2 == caf::sec::unexpected_message), render(e2));
  auto e3 = refused(free_atom::value); // missing its argument
  BOOST_TEST((e3 == caf::sec::unexpected_message), render(e3));
  auto e4 = refused(std::string{"stats"});
  BOOST_TEST((e4 == caf::sec::unexpected_message), render(e4));
  // Still serving, and nothing changed.
  auto after = stats(self);
  BOOST_TEST(after.free_blocks == before.free_blocks);
  BOOST_TEST(after.active_caches == before.active_caches);
  BOOST_TEST(after.allocation_count == before.allocation_count);
  auto [t] = ask<block_table>(self, table_atom::value, request_id{1});
  BOOST_TEST(t.num_tokens == 5u);
}

BOOST_AUTO_TEST_CASE(requests_of_a_remote_owner_are_reclaimed_when_it_goes) {
  {
    caf::scoped_actor owner{*sys};
    ask<request_handle_actor, block_table>(owner, allocate_atom::value,
                                           req(1, 9));
    ask<request_handle_actor, block_table>(owner, allocate_atom::value,
                                           req(2, 4));
    BOOST_TEST(stats(owner).active_caches == 2u);
  }
  caf::scoped_actor self{*sys};
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds{10};
  cache_manager_stats s;
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds{20});
    s = stats(self);
  } while (s.active_caches != 0 && std::chrono::steady_clock::now() < until);
  BOOST_TEST(s.active_caches == 0u);
  BOOST_TEST(s.free_blocks == 64u);
}

BOOST_AUTO_TEST_CASE(a_peer_without_kvactor_types_cannot_connect) {
  caf::scoped_actor self{*sys};
  ask<request_handle_actor, block_table>(self, allocate_atom::value, req(1, 5));
  auto before = stats(self);
  {
    // A client that forgot add_message_types: the interface it expects
    // names unregistered types, so the middleman refuses the handle.
    caf::actor_system_config bare_cfg;
    bare_cfg.load<caf::io::middleman>();
    caf::actor_system bare{bare_cfg};
    auto typed = bare.middleman().remote_actor<kv_cache_manager_actor>(
      "127.0.0.1", server.port());
    BOOST_REQUIRE(!typed);
    BOOST_TEST((typed.error() == caf::sec::unexpected_actor_messaging_interface),
               bare.render(typed.error()).substr(0, 200));
    // Nor is a dynamically typed handle to a typed actor handed out.
    auto untyped = bare.middleman().remote_actor("127.0.0.1", server.port());
    BOOST_REQUIRE(!untyped);
    BOOST_TEST((untyped.error() == caf::sec::unexpected_actor_messaging_interface),
               bare.render(untyped.error()).substr(0, 200));
  }
  auto after = stats(self);
  BOOST_TEST(after.active_caches == before.active_caches);
  BOOST_TEST(after.free_blocks == before.free_blocks);
}

BOOST_AUTO_TEST_SUITE_END()

bool init_unit_test() {
  boost::unit_test::framework::master_test_suite().p_name.value
    = "kvactor_remote_tests";
  return true;
}

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--serve") == 0)
    return serve(argv[2]);
  return boost::unit_test::unit_test_main(&init_unit_test, argc, argv);
}
