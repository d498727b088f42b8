// New tensors and contiguous views for every family, through the AOTI shim rather than the
// dispatcher. torch::stable::empty and torch::stable::contiguous call aten::empty and
// aten::contiguous by name through torch_call_dispatcher: a schema lookup, the arguments
// boxed and unboxed, on every call, even when the tensor is already contiguous. An op on a
// small problem makes several such calls per call and is bound by host time, so these go
// straight to the allocator (aoti_torch_empty_strided) and ask is_contiguous first.
#pragma once

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include <cstdint>
#include <initializer_list>

#include "common/checks.h"

namespace fused_ops {

// The AOTI shim's code of a dtype that the families allocate.
inline int32_t aoti_dtype(ScalarType t) {
  switch (t) {
    case ScalarType::Float: return aoti_torch_dtype_float32();
    case ScalarType::Double: return aoti_torch_dtype_float64();
    case ScalarType::Half: return aoti_torch_dtype_float16();
    case ScalarType::BFloat16: return aoti_torch_dtype_bfloat16();
    case ScalarType::ComplexFloat: return aoti_torch_dtype_complex64();
    case ScalarType::ComplexDouble: return aoti_torch_dtype_complex128();
    case ScalarType::Byte: return aoti_torch_dtype_uint8();
    case ScalarType::Int: return aoti_torch_dtype_int32();
    default: break;
  }
  raise<std::runtime_error>("torch-fused-ops: no allocation path for dtype ",
                            std::string(torch::headeronly::toString(t)));
}

// A contiguous uninitialised tensor of the ndim sizes at `size` and the shim's dtype code
// `dtype` on the device of `on` (up to 4 dimensions: the families' largest rank is 3).
inline Tensor empty_coded(const int64_t* size, int64_t ndim, int32_t dtype, const Tensor& on) {
  constexpr int64_t kMaxDims = 4;
  FUSED_OPS_CHECK(ndim >= 1 && ndim <= kMaxDims, "torch-fused-ops: empty of ", num(ndim),
                  " dimensions");
  int64_t strides[kMaxDims];
  int64_t stride = 1;
  for (int64_t d = ndim - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= size[d];
  }
  int32_t device_type, device_index;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_device_type(on.get(), &device_type));
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_device_index(on.get(), &device_index));
  AtenTensorHandle out = nullptr;
  STABLE_TORCH_ERROR_CODE_CHECK(
      aoti_torch_empty_strided(ndim, size, strides, dtype, device_type, device_index, &out));
  return Tensor(out);
}

inline Tensor empty_coded(std::initializer_list<int64_t> size, int32_t dtype, const Tensor& on) {
  return empty_coded(size.begin(), static_cast<int64_t>(size.size()), dtype, on);
}

// A contiguous uninitialised tensor of `size` and `dtype` on the device of `on`.
inline Tensor empty(std::initializer_list<int64_t> size, ScalarType dtype, const Tensor& on) {
  return empty_coded(size, aoti_dtype(dtype), on);
}

// A contiguous uninitialised tensor of t's sizes, of `dtype`, on t's device.
inline Tensor empty_shaped(const Tensor& t, ScalarType dtype) {
  return empty_coded(t.sizes().data(), t.dim(), aoti_dtype(dtype), t);
}

// The same with like's dtype and device.
inline Tensor new_empty(std::initializer_list<int64_t> size, const Tensor& like) {
  int32_t dtype;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_dtype(like.get(), &dtype));
  return empty_coded(size, dtype, like);
}

// t itself when it is already contiguous (no dispatcher call), else a contiguous copy.
inline Tensor as_contiguous(const Tensor& t) {
  return t.is_contiguous() ? t : torch::stable::contiguous(t);
}

}  // namespace fused_ops
