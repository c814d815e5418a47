// DLPack export: the managed tensor owns copies of shape and strides.
#include "kvactor/messages/dlpack.hpp"

#include <memory>
#include <string>

#include "kvactor/messages/error.hpp"

namespace kvactor {

namespace {

struct dl_context {
  DLManagedTensor tensor;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;
  std::shared_ptr<void> owner; ///< the view's memory, until the deleter
};

} // namespace

DLDevice to_dl_device(const device& dev) noexcept {
  DLDevice out;
  out.device_type = dev.kind == device_kind::cuda ? kDLCUDA : kDLCPU;
  out.device_id = dev.kind == device_kind::cuda ? dev.index : 0;
  return out;
}

DLDataType to_dl_dtype(dtype type) noexcept {
  DLDataType out;
  out.code = kDLOpaqueHandle;
  out.bits = 0; // no dtype we know: to_dlpack refuses it
  out.lanes = 1;
  switch (type) {
    case dtype::fp32:
      out.code = kDLFloat;
      out.bits = 32;
      break;
    case dtype::fp16:
      out.code = kDLFloat;
      out.bits = 16;
      break;
    case dtype::bf16:
      out.code = kDLBfloat;
      out.bits = 16;
      break;
    case dtype::fp8_e4m3:
      out.code = kDLUInt;
      out.bits = 8;
      break;
    case dtype::int8:
      out.code = kDLInt;
      out.bits = 8;
      break;
  }
  return out;
}

caf::expected<DLManagedTensor*> to_dlpack(const tensor_view& view) {
  if (view.data == nullptr || view.shape.empty()
      || view.strides.size() != view.shape.size())
    return make_error(errc::invalid_request,
                      "to_dlpack: the view has no data or inconsistent "
                      "shape and strides");
  auto type = to_dl_dtype(view.dtype);
  if (type.bits == 0)
    return make_error(errc::invalid_request,
                      "to_dlpack: the view's dtype ("
                        + std::to_string(static_cast<int>(view.dtype))
                        + ") is none kvactor knows");
  auto ctx = std::make_unique<dl_context>();
  ctx->shape = view.shape;
  ctx->strides = view.strides;
  ctx->owner = view.owner;
  auto& t = ctx->tensor.dl_tensor;
  t.data = view.data;
  t.device = to_dl_device(view.device);
  t.ndim = static_cast<std::int32_t>(view.shape.size());
  t.dtype = type;
  t.shape = ctx->shape.data();
  t.strides = ctx->strides.data();
  t.byte_offset = 0;
  ctx->tensor.manager_ctx = ctx.get();
  ctx->tensor.deleter = [](DLManagedTensor* self) {
    delete static_cast<dl_context*>(self->manager_ctx);
  };
  return &ctx.release()->tensor;
}

} // namespace kvactor
