// The device actor's own messages on the host backend: writes, gathers,
// copies and swaps byte for byte, and bad batches that change nothing. In a
// cache, copies are the pool's and swaps the manager's: from anyone else
// they are refused. Copies and swaps byte for byte are a device's alone
// (bare_device.hpp); through the cache: fork_test.cpp, gather_test.cpp.
#include "bare_device.hpp"
#include "fixture.hpp"
#include "slow_storage.hpp"

#include <caf/all.hpp>

using namespace kvactor;
using namespace kvactor::test;

BOOST_FIXTURE_TEST_SUITE(lifecycle, cache_fixture)

BOOST_AUTO_TEST_CASE(device_actor_writes_gathers_and_takes_no_copy_or_swap_from_a_client) {
  auto info = ask<storage_info>(cache.device, info_atom::value);
  BOOST_REQUIRE(info);
  BOOST_TEST(info->kind == "host");
  BOOST_TEST(info->num_blocks == 64u);
  BOOST_TEST(info->bytes_per_block == bytes_per_block);
  BOOST_TEST((info->device == device{device_kind::cpu, 0}));
  auto a = allocate(1, 8);
  auto b = allocate(2, 8);
  BOOST_REQUIRE(a && b);
  BOOST_REQUIRE(value_or(write_tokens(a->table, 1, 0, 8, 3), 0u) == 8u);
  auto ga = gather(1, a->table);
  auto gb = gather(1, b->table);
  BOOST_REQUIRE(ga && gb);
  BOOST_TEST(ga->keys != gb->keys); // b's blocks were never written
  BOOST_TEST(ga->num_tokens == 8u);
  BOOST_TEST(ga->layer == 1u);
  // Copies are the pool's work, swaps the manager's: from this test's
  // actor - a client, as a writer is - they are refused, and b still
  // reads as it did. A swap-out sent so would close a's blocks to writes.
  std::vector<block_copy> pairs{{a->table.blocks[0], b->table.blocks[0]},
                                {a->table.blocks[1], b->table.blocks[1]}};
  auto copied = ask<std::uint32_t>(cache.device, copy_atom::value, pairs);
  BOOST_TEST(outcome(copied) == "invalid_request");
  BOOST_TEST(render(copied.error()).find(
               "copy of 2 block pairs from an actor that is not this cache's pool")
               != std::string::npos,
             render(copied.error()));
  std::vector<block_move> out{{a->table.blocks[0], 0}};
  for (auto swapped : {ask<std::uint32_t>(cache.device, swap_out_atom::value, out),
                       ask<std::uint32_t>(cache.device, swap_in_atom::value, out)}) {
    BOOST_TEST(outcome(swapped) == "invalid_request");
    BOOST_TEST(render(swapped.error()).find("not this cache's manager")
                 != std::string::npos,
               render(swapped.error()));
  }
  auto gb_after = gather(1, b->table);
  BOOST_REQUIRE(gb_after);
  BOOST_TEST(gb_after->keys == gb->keys);
  BOOST_REQUIRE(value_or(write_tokens(a->table, 1, 0, 8, 3), 0u) == 8u); // open
  // Slots of -1 are skipped, and the reply counts what was written.
  slot_write skip;
  skip.layer = 1;
  skip.slots = {-1, static_cast<std::int64_t>(b->table.slot(0)), -1};
  skip.keys.assign(3 * row_bytes(), 9);
  skip.values.assign(3 * row_bytes(), 9);
  BOOST_TEST(value_or(ask<std::uint32_t>(cache.device, write_atom::value, skip), 9u) == 1u);
  skip.slots = {-1, -1, -1};
  BOOST_TEST(value_or(ask<std::uint32_t>(cache.device, write_atom::value, skip), 9u) == 0u);
  // Bad batches: sizes that do not match, too many tokens to gather, a
  // bad layer.
  slot_write short_write;
  short_write.slots = {0, 1};
  short_write.keys.resize(row_bytes());
  short_write.values.resize(2 * row_bytes());
  BOOST_TEST(outcome(ask<std::uint32_t>(cache.device, write_atom::value, short_write)) == "invalid_request");
  slot_write bad_slot;
  bad_slot.slots = {64 * 4};
  bad_slot.keys.resize(row_bytes());
  bad_slot.values.resize(row_bytes());
  BOOST_TEST(outcome(ask<std::uint32_t>(cache.device, write_atom::value, bad_slot)) == "invalid_request");
  BOOST_TEST(outcome(ask<gathered_kv>(cache.device, gather_atom::value, std::uint32_t{0},
                                      a->table.blocks, std::uint64_t{9}))
             == "invalid_request");
  BOOST_TEST(outcome(ask<gathered_kv>(cache.device, gather_atom::value, std::uint32_t{2},
                                      a->table.blocks, std::uint64_t{8}))
             == "invalid_request");
  BOOST_TEST(outcome(ask<gathered_kv>(cache.device, gather_atom::value, std::uint32_t{0},
                                      std::vector<block_id>{0, 64}, std::uint64_t{8}))
             == "invalid_request");
  // Ids may repeat, but not to ask for more tokens than the pool holds
  // (each gather's staging is kept for good).
  BOOST_TEST(outcome(ask<gathered_kv>(cache.device, gather_atom::value, std::uint32_t{0},
                                      std::vector<block_id>(65, 0), std::uint64_t{65 * 4}))
             == "invalid_request");
  BOOST_TEST(outcome(ask<gathered_kv>(cache.device, gather_atom::value, std::uint32_t{0},
                                      std::vector<block_id>(64, 0), std::uint64_t{64 * 4}))
             == "ok");
  // A bad batch changed nothing.
  auto ga2 = gather(1, a->table);
  BOOST_REQUIRE(ga2);
  BOOST_TEST(ga2->keys == ga->keys);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_CASE(storage_none_refuses_writes_and_gathers_before_staging) {
  // Refused by the device actor itself, before a staging buffer (which
  // only grows) is made for bytes that have nowhere to go: storage none,
  // with a GPU's timing, counts the buffers asked for.
  auto cfg = small_config();
  cfg.storage = "none";
  auto opts = storage_options_for(cfg);
  auto made = make_storage(opts);
  BOOST_REQUIRE(made);
  auto store = std::make_shared<slow_storage>(std::move(*made));
  cache_fixture f{cfg, store};
  auto a = f.allocate(1, 8);
  BOOST_REQUIRE(a);
  auto w = f.write_tokens(a->table, 0, 0, 8, 1);
  BOOST_REQUIRE(!w);
  BOOST_TEST(render(w.error()).find("slot_write: storage none holds no data")
               != std::string::npos,
             render(w.error()));
  auto g = f.gather(0, a->table);
  BOOST_REQUIRE(!g);
  BOOST_TEST(render(g.error()).find("gather: storage none holds no data")
               != std::string::npos,
             render(g.error()));
  BOOST_TEST(store->host_buffers_asked == 0u);
}

namespace {

/// One token's K/V (each byte `fill`, values `fill + 1`) in the first
/// slot of block `b` of `layer`, on a bare device: written and answered.
void write_one(bare_device& f, std::uint32_t layer, block_id b, std::uint8_t fill) {
  auto w = f.one_slot_in(b);
  w.layer = layer;
  w.keys.assign(w.keys.size(), fill);
  w.values.assign(w.values.size(), static_cast<std::uint8_t>(fill + 1));
  f.self->send(f.dev, write_atom::value, w);
  f.run();
  BOOST_REQUIRE(f.replies() == std::vector<std::string>{"1"});
}

/// Block `b`'s first token of `layer`, keys then values.
std::vector<std::uint8_t> first_token(bare_device& f, std::uint32_t layer, block_id b) {
  auto g = f.ask<gathered_kv>(f.dev, gather_atom::value, layer,
                              std::vector<block_id>{b}, std::uint64_t{1});
  BOOST_REQUIRE(g);
  auto out = g->keys;
  out.insert(out.end(), g->values.begin(), g->values.end());
  return out;
}

/// Sends `xs...` to the bare device, lets its work complete, and returns
/// the replies.
template <class... Ts>
std::vector<std::string> done(bare_device& f, Ts&&... xs) {
  f.self->send(f.dev, std::forward<Ts>(xs)...);
  f.run();
  f.store->complete();
  f.run();
  return f.replies();
}

} // namespace

BOOST_FIXTURE_TEST_CASE(a_device_alone_copies_byte_for_byte_and_rejects_bad_copies,
                        bare_device) {
  using strings = std::vector<std::string>;
  for (std::uint32_t layer = 0; layer < 2; ++layer)
    write_one(*this, layer, 1, static_cast<std::uint8_t>(10 + layer));
  BOOST_TEST(first_token(*this, 1, 2) != first_token(*this, 1, 1));
  BOOST_TEST(done(*this, copy_atom::value, std::vector<block_copy>{{1, 2}})
             == strings{"1"});
  for (std::uint32_t layer = 0; layer < 2; ++layer)
    BOOST_TEST(first_token(*this, layer, 2) == first_token(*this, layer, 1));
  // Out-of-range ids, a destination that is also a source: refused at
  // once, nothing submitted, nothing copied.
  auto before = first_token(*this, 0, 3);
  const block_id past = cfg.num_gpu_blocks;
  BOOST_TEST(done(*this, copy_atom::value, std::vector<block_copy>{{1, past}})
             == strings{"invalid_request"});
  BOOST_TEST(done(*this, copy_atom::value, std::vector<block_copy>{{1, 3}, {3, 4}})
             == strings{"invalid_request"});
  BOOST_TEST(store->pending() == 0u);
  BOOST_TEST(first_token(*this, 0, 3) == before);
}

BOOST_AUTO_TEST_CASE(a_device_without_a_host_tier_refuses_swaps) {
  auto cfg = small_config(); // no host blocks
  bare_device f{cfg};
  BOOST_TEST(done(f, swap_out_atom::value, std::vector<block_move>{{1, 0}})
             == std::vector<std::string>{"invalid_request"});
  BOOST_TEST(f.store->pending() == 0u);
}

BOOST_FIXTURE_TEST_CASE(device_actor_swaps_blocks_out_and_back_byte_for_byte,
                        bare_device) {
  using strings = std::vector<std::string>;
  stand_in_for_cache(); // the test's actor swaps, as the manager
  for (std::uint32_t layer = 0; layer < 2; ++layer) {
    write_one(*this, layer, 1, static_cast<std::uint8_t>(20 + layer));
    write_one(*this, layer, 3, static_cast<std::uint8_t>(30 + layer));
  }
  auto before1 = first_token(*this, 1, 1);
  auto before3 = first_token(*this, 1, 3);
  BOOST_TEST(done(*this, swap_out_atom::value,
                  std::vector<block_move>{{1, 5}, {3, 2}})
             == strings{"2"});
  // Closed to writes until the pool's second phase says the blocks were
  // let go (the pool's stand-in sends it: the device takes it from no one
  // else).
  BOOST_TEST(done(*this, write_atom::value, one_slot_in(1))
             == strings{"invalid_request"});
  caf::send_as(pool_stand_in, dev, swap_out_atom::value, settle_atom::value,
               std::vector<block_id>{1, 3});
  // Overwrite the device blocks, then swap back into two other blocks.
  write_one(*this, 1, 1, 99);
  write_one(*this, 1, 3, 99);
  BOOST_TEST(done(*this, swap_in_atom::value,
                  std::vector<block_move>{{6, 5}, {7, 2}})
             == strings{"2"});
  BOOST_TEST(first_token(*this, 1, 6) == before1);
  BOOST_TEST(first_token(*this, 1, 7) == before3);
  // A host block past the tier's 8: refused.
  BOOST_TEST(done(*this, swap_in_atom::value, std::vector<block_move>{{0, 8}})
             == strings{"invalid_request"});
}
