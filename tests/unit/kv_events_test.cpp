// KV events as JSON (metrics/kv_events.cpp): every field of vLLM's structs -
// EventBatch{ts, events}, BlockStored{block_hashes, parent_block_hash,
// token_ids, block_size, lora_id, medium, lora_name}, BlockRemoved{
// block_hashes, medium} - by name, with kvactor's seq and tenant beside.
#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "kvactor/metrics/kv_events.hpp"

using namespace kvactor;

BOOST_AUTO_TEST_SUITE(kv_events_json)

BOOST_AUTO_TEST_CASE(a_batch_has_vllms_fields_by_name) {
  kv_event_batch batch;
  batch.seq = 7;
  batch.block_size = 4;
  batch.ts = 1764460000.25;
  batch.events = {kv_event{true, 11, 0, 2, "a", {1, 2, 3, 4}},
                  kv_event{true, 12, 11, 3, "a", {5, 6, 7, 8}},
                  kv_event{false, 11, 0, 2, "a", {}}};
  auto j = to_json(batch);
  BOOST_TEST(j["ts"].get<double>() == 1764460000.25);
  BOOST_TEST(j["seq"].get<std::uint64_t>() == 7u);
  BOOST_REQUIRE(j["events"].size() == 3u);
  auto& first = j["events"][0];
  BOOST_TEST(first["type"] == "BlockStored");
  BOOST_TEST(first["block_hashes"] == nlohmann::json::array({11}));
  BOOST_TEST(first["parent_block_hash"].is_null()); // first of its chain
  BOOST_TEST(first["token_ids"] == nlohmann::json::array({1, 2, 3, 4}));
  BOOST_TEST(first["block_size"] == 4);
  BOOST_TEST(first["lora_id"].is_null());
  BOOST_TEST(first["lora_name"].is_null());
  BOOST_TEST(first["medium"] == "GPU");
  BOOST_TEST(first["tenant"] == "a");
  BOOST_TEST(j["events"][1]["parent_block_hash"] == 11);
  auto& removed = j["events"][2];
  BOOST_TEST(removed["type"] == "BlockRemoved");
  BOOST_TEST(removed["block_hashes"] == nlohmann::json::array({11}));
  BOOST_TEST(removed["medium"] == "GPU");
  BOOST_TEST(!removed.contains("token_ids"));
}

BOOST_AUTO_TEST_SUITE_END()
