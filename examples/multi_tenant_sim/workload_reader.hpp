// workload_reader: one workload of a scenario read from its JSON object -
// arrivals, lengths, bursts, shared system prompts, conversations - with
// every error naming FILE:LINE: FIELD (json_reader). scenario.cpp reads the
// rest of the scenario and calls it for each entry of "workloads".
#pragma once

#include <string>

#include <caf/error.hpp>
#include <nlohmann/json.hpp>

#include "json_reader.hpp"
#include "scenario.hpp"

namespace kvactor::sim {

/// Reads `obj`, the workload at `path` ("workloads[2]"), of `tenant` (whose
/// name and priority it takes unless it names its own priority).
caf::error read_workload(const nlohmann::json& obj, const std::string& path,
                         const error_maker& fail, const tenant_config& tenant,
                         workload_config& out);

} // namespace kvactor::sim
