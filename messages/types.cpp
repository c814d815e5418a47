// Names and sizes of the protocol's enums.
#include "kvactor/messages/types.hpp"

namespace kvactor {

const char* to_string(device_kind x) noexcept {
  switch (x) {
    case device_kind::cpu: return "cpu";
    case device_kind::cuda: return "cuda";
  }
  return "unknown";
}

const char* to_string(dtype x) noexcept {
  switch (x) {
    case dtype::fp32: return "fp32";
    case dtype::fp16: return "fp16";
    case dtype::bf16: return "bf16";
    case dtype::fp8_e4m3: return "fp8_e4m3";
    case dtype::int8: return "int8";
  }
  return "unknown";
}

const char* to_string(priority x) noexcept {
  switch (x) {
    case priority::low: return "low";
    case priority::normal: return "normal";
    case priority::high: return "high";
    case priority::critical: return "critical";
  }
  return "unknown";
}

const char* to_string(memory_pressure x) noexcept {
  switch (x) {
    case memory_pressure::low: return "low";
    case memory_pressure::medium: return "medium";
    case memory_pressure::high: return "high";
    case memory_pressure::critical: return "critical";
  }
  return "unknown";
}

std::size_t size_of(dtype x) noexcept {
  switch (x) {
    case dtype::fp32: return 4;
    case dtype::fp16:
    case dtype::bf16: return 2;
    case dtype::fp8_e4m3:
    case dtype::int8: return 1;
  }
  return 0;
}

namespace {

template <class Enum, std::size_t N>
bool parse_enum(const std::string& str, const Enum (&values)[N], Enum& out) {
  for (auto x : values)
    if (str == to_string(x)) {
      out = x;
      return true;
    }
  return false;
}

} // namespace

bool from_string(const std::string& str, dtype& out) {
  static constexpr dtype all[] = {dtype::fp32, dtype::fp16, dtype::bf16,
                                  dtype::fp8_e4m3, dtype::int8};
  return parse_enum(str, all, out);
}

bool from_string(const std::string& str, priority& out) {
  static constexpr priority all[] = {priority::low, priority::normal,
                                     priority::high, priority::critical};
  return parse_enum(str, all, out);
}

std::string to_string(const device& x) {
  if (x.kind == device_kind::cpu)
    return "cpu";
  return std::string{to_string(x.kind)} + ':' + std::to_string(x.index);
}

bool operator==(const allocation_request& x, const allocation_request& y) {
  return x.id == y.id && x.initial_tokens == y.initial_tokens
         && x.max_sequence_length == y.max_sequence_length
         && x.num_layers == y.num_layers && x.num_heads == y.num_heads
         && x.head_dim == y.head_dim && x.device == y.device
         && x.dtype == y.dtype && x.priority == y.priority
         && x.tenant == y.tenant && x.prompt == y.prompt
         && x.expected_output_tokens == y.expected_output_tokens
         && x.prefill_chunk == y.prefill_chunk && x.cache_salt == y.cache_salt;
}

allocation_request without_prompt(const allocation_request& req) {
  allocation_request out;
  out.id = req.id;
  out.initial_tokens = req.prompt.empty() ? req.initial_tokens : req.prompt.size();
  out.max_sequence_length = req.max_sequence_length;
  out.num_layers = req.num_layers;
  out.num_heads = req.num_heads;
  out.head_dim = req.head_dim;
  out.device = req.device;
  out.dtype = req.dtype;
  out.priority = req.priority;
  out.tenant = req.tenant;
  out.expected_output_tokens = req.expected_output_tokens;
  out.prefill_chunk = req.prefill_chunk;
  out.cache_salt = req.cache_salt;
  return out;
}

} // namespace kvactor
