// Names of the protocol's enums, and the device check of an admission.
#include "kvactor/messages/protocol.hpp"

#include "kvactor/messages/error.hpp"

namespace kvactor {

const char* to_string(end_reason x) noexcept {
  switch (x) {
    case end_reason::deallocated: return "deallocated";
    case end_reason::preempted: return "preempted";
    case end_reason::reclaimed: return "reclaimed";
    case end_reason::shutdown: return "shutdown";
    case end_reason::discarded: return "discarded";
  }
  return "unknown";
}

const char* to_string(topic x) noexcept {
  switch (x) {
    case topic::pressure: return "pressure";
    case topic::lifecycle: return "lifecycle";
    case topic::kv_events: return "kv_events";
  }
  return "unknown";
}

namespace {

/// to_string(x), but a cpu with an index other than 0 names it: "cpu"
/// alone left a refusal of cpu:1 by a cache on cpu saying no difference.
std::string spell(const device& x) {
  if (x.kind == device_kind::cpu && x.index != 0)
    return "cpu:" + std::to_string(x.index);
  return to_string(x);
}

} // namespace

caf::error check_device(const storage_info& store, const allocation_request& req) {
  // An enum off the wire is whatever integer the peer sent: named as a
  // device, a kind past cuda read as one that differs from the cache's in
  // nothing shown ("device cpu:0 but the cache lives on cpu"), and storage
  // "none" took it.
  if (req.device.kind > device_kind::cuda)
    return make_error(errc::invalid_request,
                      "request " + std::to_string(req.id) + ": device kind "
                        + std::to_string(static_cast<int>(req.device.kind))
                        + " is not one of cpu, cuda (0-1)");
  if (store.kind == "none" || req.device == store.device)
    return caf::none;
  return make_error(errc::invalid_request,
                    "request " + std::to_string(req.id) + ": device "
                      + spell(req.device) + " but the cache lives on "
                      + spell(store.device));
}

} // namespace kvactor
