// The device actor: the only actor that touches K/V memory or a CUDA stream.
// It owns a storage backend (device/storage.hpp), submits each batch, and
// replies once the work completed - so nobody else ever waits on the GPU. It
// runs detached (its own thread): a blocking wait here never stalls the
// scheduler's workers.
#pragma once

#include <memory>

#include "kvactor/device/storage.hpp"
#include "kvactor/messages/interfaces.hpp"

namespace caf {
class actor_system;
} // namespace caf

namespace kvactor {

/// Spawns the device actor over `store` (shared with the facade, which serves
/// in-process tensor views of the same memory). `detached` false only for
/// tests on CAF's deterministic scheduler.
device_actor spawn_device_actor(caf::actor_system& sys,
                                std::shared_ptr<storage> store,
                                bool detached = true);

} // namespace kvactor
