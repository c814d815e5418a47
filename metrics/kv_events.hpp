// KV events as JSON, in the schema of vLLM's KV events (BlockStored /
// BlockRemoved, as its ZMQ publisher sends them), one batch per line, so a
// router that consumes vLLM's events can consume kvactor's.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include "kvactor/messages/protocol.hpp"

namespace kvactor {

/// {"ts": seconds, "seq": N, "events": [{"type": "BlockStored",
///   "block_hashes": [h], "parent_block_hash": p | null, "token_ids": [...],
///   "block_size": bs, "lora_id": null, "lora_name": null, "medium": "GPU",
///   "tenant": "..."},
///  {"type": "BlockRemoved", "block_hashes": [h], "medium": "GPU",
///   "tenant": "..."}]}
/// vLLM's fields and their meaning, as a JSON object per event (vLLM's own
/// wire form is msgpack arrays in field order; a bridge to it reads these
/// keys), with kvactor's "seq" and "tenant" beside them. "medium" is "GPU"
/// for every backend: the prefix index lists the primary KV pool only,
/// never the swap tier. Tenant names are valid UTF-8 (validate() checks).
nlohmann::json to_json(const kv_event_batch& batch);

} // namespace kvactor
