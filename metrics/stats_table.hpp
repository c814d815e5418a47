// The manager's figures as a plain-text table, for terminals and logs.
#pragma once

#include <string>

#include "kvactor/messages/types.hpp"

namespace kvactor {

/// Two columns (figure, value), then one row per tenant.
std::string format_table(const cache_manager_stats& x);

} // namespace kvactor
