// Input checks shared by every operator family. Each failure is a Python exception
// (ValueError for ranks and shapes, TypeError for dtypes, RuntimeError for devices)
// whose message names the argument and says what was expected and what was given.
//
// Rule for every message in this package: pass numbers through num() (or shape_str),
// never as int64_t/double arguments to TORCH_CHECK. Streaming a number into the
// message's std::ostringstream segfaulted on the GPU machine (torch 2.11 built with
// gcc-toolset-13, extension built with its gcc 13.3: the locale's number formatter
// crashed), while strings, dtypes and devices stream fine; std::to_string does not go
// through the locale.
#pragma once

#include <ATen/ATen.h>

#include <initializer_list>
#include <string>

namespace fused_ops {

inline std::string num(int64_t v) { return std::to_string(v); }

// "[4, 3, 1]"
inline std::string shape_str(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t d = 0; d < t.dim(); ++d) {
    s += (d ? ", " : "") + num(t.size(d));
  }
  return s + "]";
}

inline void check_rank(const at::Tensor& t, const char* name, int64_t rank) {
  TORCH_CHECK_VALUE(t.dim() == rank, name, " must be a ", num(rank), "-D tensor, got a ",
                    num(t.dim()), "-D tensor of shape ", shape_str(t));
}

inline void check_size(const at::Tensor& t, const char* name, int64_t dim, int64_t expected,
                       const char* what) {
  TORCH_CHECK_VALUE(t.size(dim) == expected, name, ".shape[", num(dim), "] must be ",
                    num(expected), " (", what, "), got shape ", shape_str(t));
}

inline void check_floating(const at::Tensor& t, const char* name) {
  TORCH_CHECK_TYPE(at::isFloatingType(t.scalar_type()), name,
                   " must be a floating-point tensor (float16, bfloat16, float32 or float64), "
                   "got ",
                   t.scalar_type());
}

// Every tensor in `others` must share `ref`'s device and dtype.
inline void check_same_device_and_dtype(
    const at::Tensor& ref, const char* ref_name,
    std::initializer_list<std::pair<const at::Tensor*, const char*>> others) {
  for (const auto& [t, name] : others) {
    TORCH_CHECK(t->device() == ref.device(), name, " is on ", t->device(), " but ", ref_name,
                " is on ", ref.device(), ": all tensors must be on the same device");
    TORCH_CHECK_TYPE(t->scalar_type() == ref.scalar_type(), name, " has dtype ",
                     t->scalar_type(), " but ", ref_name, " has dtype ", ref.scalar_type(),
                     ": all tensors must have the same dtype");
  }
}

}  // namespace fused_ops
