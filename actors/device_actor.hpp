// The device actor: the only actor that touches K/V memory or a CUDA stream.
// It owns a storage backend (device/storage.hpp), submits each batch, and
// replies once the work completed - so nobody else ever waits on the GPU. It
// runs detached (its own thread): a blocking wait here never stalls the
// scheduler's workers.
#pragma once

#include <chrono>
#include <memory>

#include "kvactor/device/storage.hpp"
#include "kvactor/messages/interfaces.hpp"

namespace caf {
class actor_system;
} // namespace caf

namespace kvactor {

/// Spawns the device actor over `store` (shared with the facade, which serves
/// in-process tensor views of the same memory). `detached` false only for
/// tests on CAF's deterministic scheduler. Work not complete after
/// `timeout` (0 or less: never) is a stalled GPU: every waiting requester gets
/// device_failure, and the actor quits with it (cache_config's
/// device_timeout_ms).
device_actor spawn_device_actor(caf::actor_system& sys,
                                std::shared_ptr<storage> store,
                                bool detached = true,
                                std::chrono::milliseconds timeout
                                = std::chrono::milliseconds{0});

} // namespace kvactor
