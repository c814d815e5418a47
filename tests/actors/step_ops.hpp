// Helpers of the step tests (step_test.cpp, preempt_test.cpp): a step's
// extend made short, and the failure a step reply reports for a request.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kvactor/messages/step.hpp"

namespace kvactor::test {

inline extend_op grow(request_id id, std::uint32_t n) {
  extend_op op;
  op.id = id;
  op.num_tokens = n;
  return op;
}

inline const op_failure* failure_of(const step_result& r, request_id id) {
  auto i = std::find_if(r.failed.begin(), r.failed.end(),
                        [&](auto& f) { return f.id == id; });
  return i == r.failed.end() ? nullptr : &*i;
}

} // namespace kvactor::test
