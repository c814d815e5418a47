// The device actor's own messages on the host backend: writes, gathers,
// copies and swaps byte for byte, and bad batches that change nothing.
#include "fixture.hpp"
#include "slow_storage.hpp"

#include <caf/all.hpp>

using namespace kvactor;
using namespace kvactor::test;

BOOST_FIXTURE_TEST_SUITE(lifecycle, cache_fixture)

BOOST_AUTO_TEST_CASE(device_actor_writes_gathers_copies_and_rejects_bad_batches) {
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
  // Copy a's blocks over b's: b then reads like a.
  std::vector<block_copy> pairs{{a->table.blocks[0], b->table.blocks[0]},
                                {a->table.blocks[1], b->table.blocks[1]}};
  BOOST_TEST(value_or(ask<std::uint32_t>(cache.device, copy_atom::value, pairs), 0u) == 2u);
  auto ga = gather(1, a->table);
  auto gb = gather(1, b->table);
  BOOST_REQUIRE(ga && gb);
  BOOST_TEST(ga->keys == gb->keys);
  BOOST_TEST(ga->values == gb->values);
  BOOST_TEST(ga->num_tokens == 8u);
  BOOST_TEST(ga->layer == 1u);
  // Slots of -1 are skipped, and the reply counts what was written.
  slot_write skip;
  skip.layer = 1;
  skip.slots = {-1, static_cast<std::int64_t>(b->table.slot(0)), -1};
  skip.keys.assign(3 * row_bytes(), 9);
  skip.values.assign(3 * row_bytes(), 9);
  BOOST_TEST(value_or(ask<std::uint32_t>(cache.device, write_atom::value, skip), 9u) == 1u);
  skip.slots = {-1, -1, -1};
  BOOST_TEST(value_or(ask<std::uint32_t>(cache.device, write_atom::value, skip), 9u) == 0u);
  // Bad batches: out-of-range ids, a destination that is also a source,
  // sizes that do not match, too many tokens to gather, a bad layer.
  std::vector<block_copy> bad_ids{{0, 64}};
  BOOST_TEST(outcome(ask<std::uint32_t>(cache.device, copy_atom::value, bad_ids)) == "invalid_request");
  std::vector<block_copy> chained{{0, 1}, {1, 2}};
  BOOST_TEST(outcome(ask<std::uint32_t>(cache.device, copy_atom::value, chained)) == "invalid_request");
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
  // No host tier configured: swapping fails.
  std::vector<block_move> moves{{a->table.blocks[0], 0}};
  BOOST_TEST(outcome(ask<std::uint32_t>(cache.device, swap_out_atom::value, moves)) == "invalid_request");
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

BOOST_AUTO_TEST_CASE(device_actor_swaps_blocks_out_and_back_byte_for_byte) {
  cache_fixture f{host_tier_config()};
  auto a = f.allocate(1, 8);
  BOOST_REQUIRE(a);
  for (std::uint32_t layer = 0; layer < 2; ++layer)
    BOOST_REQUIRE(f.write_tokens(a->table, layer, 0, 8, 11));
  auto before0 = f.gather(0, a->table);
  auto before1 = f.gather(1, a->table);
  BOOST_REQUIRE(before0 && before1);
  std::vector<block_move> out{{a->table.blocks[0], 5}, {a->table.blocks[1], 2}};
  BOOST_TEST(value_or(f.ask<std::uint32_t>(f.cache.device, swap_out_atom::value, out), 0u) == 2u);
  // Closed to writes until the pool's second phase says the blocks were
  // let go (sent here as the pool: the device takes it from no one else).
  BOOST_TEST(outcome(f.write_tokens(a->table, 0, 0, 8, 99)) == "invalid_request");
  caf::send_as(f.cache.pool, f.cache.device, swap_out_atom::value,
               settle_atom::value,
               std::vector<block_id>{a->table.blocks[0], a->table.blocks[1]});
  // Overwrite the device blocks, then swap back into two other blocks.
  BOOST_REQUIRE(f.write_tokens(a->table, 0, 0, 8, 99));
  auto b = f.allocate(2, 8);
  BOOST_REQUIRE(b);
  std::vector<block_move> in{{b->table.blocks[0], 5}, {b->table.blocks[1], 2}};
  BOOST_TEST(value_or(f.ask<std::uint32_t>(f.cache.device, swap_in_atom::value, in), 0u) == 2u);
  auto after0 = f.gather(0, b->table);
  auto after1 = f.gather(1, b->table);
  BOOST_REQUIRE(after0 && after1);
  BOOST_TEST(after0->keys == before0->keys);
  BOOST_TEST(after0->values == before0->values);
  BOOST_TEST(after1->keys == before1->keys);
  BOOST_TEST(after1->values == before1->values);
  std::vector<block_move> bad{{0, 8}};
  BOOST_TEST(outcome(f.ask<std::uint32_t>(f.cache.device, swap_in_atom::value, bad)) == "invalid_request");
}
