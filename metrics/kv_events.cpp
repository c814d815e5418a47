// kv_event_batch -> vLLM-style KV event JSON.
#include "kvactor/metrics/kv_events.hpp"

#include <nlohmann/json.hpp>

namespace kvactor {

nlohmann::json to_json(const kv_event_batch& batch) {
  auto events = nlohmann::json::array();
  for (auto& e : batch.events) {
    nlohmann::json j;
    j["type"] = e.stored ? "BlockStored" : "BlockRemoved";
    j["block_hashes"] = nlohmann::json::array({e.block_hash});
    if (e.stored) {
      j["parent_block_hash"] = e.parent_hash == 0
                                 ? nlohmann::json(nullptr)
                                 : nlohmann::json(e.parent_hash);
      j["token_ids"] = e.token_ids;
      j["block_size"] = batch.block_size;
      j["lora_id"] = nullptr;
      j["lora_name"] = nullptr;
    }
    j["medium"] = "GPU";
    j["tenant"] = e.tenant;
    events.push_back(std::move(j));
  }
  return nlohmann::json{
    {"ts", batch.ts}, {"seq", batch.seq}, {"events", std::move(events)}};
}

} // namespace kvactor
