// A request's gather through the pool (what a contiguous view sends): the
// pool passes it to the device with the table as it is then, so it reads
// the request's bytes even if the blocks go to another request, which
// writes them, before the device gets to it. And what a gather of a
// request that is not resident, or no longer live, answers.
#include <string>
#include <vector>

#include "fixture.hpp"

using namespace kvactor;
using namespace kvactor::test;

namespace {

/// "CODE: rendered error" of a failed gather, "ok" otherwise.
std::string said(const caf::expected<gathered_kv>& x) {
  return x ? std::string{"ok"} : outcome(x) + ": " + render(x.error());
}

bool says(const caf::expected<gathered_kv>& x, const std::string& code,
          const std::string& part) {
  auto s = said(x);
  return s.rfind(code + ": ", 0) == 0 && s.find(part) != std::string::npos;
}

} // namespace

BOOST_FIXTURE_TEST_SUITE(gathers, cache_fixture)

BOOST_AUTO_TEST_CASE(a_gather_reads_its_blocks_before_their_next_owner_writes_them) {
  // 1 holds 2 blocks, written; 2 holds the other 62, so the next request
  // gets 1's blocks once 1 is freed.
  auto a = allocate(1, 8);
  BOOST_REQUIRE(a);
  BOOST_REQUIRE(write_tokens(a->table, 0, 0, 8, 1));
  BOOST_REQUIRE(allocate(2, (cfg.num_gpu_blocks - 2) * cfg.block_size));
  auto want = gather(0, a->table);
  BOOST_REQUIRE(want);
  // The gather goes through the pool to the device, which is held back: it
  // has not read anything yet.
  auto info = lookup(1);
  BOOST_REQUIRE(info);
  auto device = cache.device.address();
  self->send(pool, gather_atom::value, request_id{1}, info->second.cache_id,
             std::uint32_t{0});
  run_except(device);
  // Meanwhile 1 is freed and 3 gets its blocks and writes them (the write
  // queues at the device behind the gather).
  self->send(mgr, free_atom::value, request_id{1});
  run_except(device);
  self->send(mgr, allocate_atom::value, make_request(cfg, 3, 8, 40));
  run_except(device);
  block_table b;
  for (int n = 0; n < 2; ++n)
    self->receive([&](std::uint32_t) {}, // the free
                  [&](request_handle_actor&, block_table& t) { b = t; },
                  [&](caf::error& err) { BOOST_FAIL(render(err)); });
  BOOST_REQUIRE(b.blocks == a->table.blocks);
  slot_write w;
  w.layer = 0;
  for (std::uint64_t i = 0; i < 8; ++i)
    w.slots.push_back(static_cast<std::int64_t>(b.slot(i)));
  w.keys.assign(8 * row_bytes(), 0xBB);
  w.values.assign(8 * row_bytes(), 0xBB);
  self->send(cache.device, write_atom::value, std::move(w));
  run();
  // The gather read 1's bytes; the write came after.
  std::vector<std::string> got;
  for (int n = 0; n < 2; ++n)
    self->receive(
      [&](gathered_kv& kv) {
        got.push_back(kv.keys == want->keys && kv.values == want->values
                        ? "request 1's bytes"
                        : "other bytes");
      },
      [&](std::uint32_t n) { got.push_back("wrote " + std::to_string(n)); },
      [&](caf::error& err) { got.push_back(render(err)); });
  BOOST_TEST(got == (std::vector<std::string>{"request 1's bytes", "wrote 8"}),
             boost::test_tools::per_element());
  auto now = gather(0, b);
  BOOST_REQUIRE(now);
  BOOST_TEST(now->keys == std::vector<std::uint8_t>(8 * row_bytes(), 0xBB));
}

BOOST_AUTO_TEST_CASE(a_gather_of_an_ended_incarnation_says_it_ended) {
  auto a = allocate(1, 8);
  BOOST_REQUIRE(a);
  auto old = lookup(1);
  BOOST_REQUIRE(old);
  BOOST_REQUIRE(free(1));
  BOOST_REQUIRE(allocate(1, 8)); // a new incarnation of id 1
  auto got = ask<gathered_kv>(pool, gather_atom::value, request_id{1},
                              old->second.cache_id, std::uint32_t{0});
  BOOST_TEST(says(got, "invalid_handle",
                  "request 1's incarnation "
                    + std::to_string(old->second.cache_id) + " has ended"),
             said(got));
  // A layer out of range is refused by the pool, naming the request (the
  // device's refusal would name only the layer); a layer in range passes.
  auto cur = lookup(1);
  BOOST_REQUIRE(cur);
  const auto layers = cfg.model.num_layers;
  auto bad = ask<gathered_kv>(pool, gather_atom::value, request_id{1},
                              cur->second.cache_id, layers);
  BOOST_TEST(says(bad, "invalid_request",
                  "request 1: layer " + std::to_string(layers)
                    + " >= num_layers " + std::to_string(layers)),
             said(bad));
  auto last = ask<gathered_kv>(pool, gather_atom::value, request_id{1},
                               cur->second.cache_id, layers - 1);
  BOOST_TEST(said(last) == "ok");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(gathers_swapped)

BOOST_AUTO_TEST_CASE(a_gather_of_a_swapped_out_request_says_so) {
  cache_fixture f{host_tier_config()};
  BOOST_REQUIRE(f.allocate(1, 8));
  auto info = f.lookup(1);
  BOOST_REQUIRE(info);
  auto cache_id = info->second.cache_id;
  BOOST_REQUIRE(f.ask<std::uint32_t>(f.mgr, swap_out_atom::value, request_id{1}));
  auto got = f.ask<gathered_kv>(f.pool, gather_atom::value, request_id{1}, cache_id,
                                std::uint32_t{0});
  BOOST_TEST(says(got, "invalid_request", "request 1 is swapped out: swap it in first"),
             said(got));
  BOOST_REQUIRE(f.ask<block_table>(f.mgr, swap_in_atom::value, request_id{1}));
  auto back = f.ask<gathered_kv>(f.pool, gather_atom::value, request_id{1}, cache_id,
                                 std::uint32_t{0});
  BOOST_TEST(said(back) == "ok");
}

BOOST_AUTO_TEST_SUITE_END()
