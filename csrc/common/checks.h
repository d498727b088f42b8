// Input checks and error reporting shared by every operator family, on the LibTorch stable
// ABI (torch::stable::Tensor; no ATen/c10 C++ API, so one build loads on several torch
// releases). Each failure is a Python exception whose message names the argument and says
// what was expected and what was given: ValueError (std::invalid_argument) for ranks,
// shapes and dtypes, RuntimeError (std::runtime_error) for devices and everything else.
// Nothing thrown across the stable ABI becomes a TypeError, so dtype errors are ValueErrors.
//
// Messages are concatenated strings: FUSED_OPS_CHECK* take only strings (const char*,
// std::string), and numbers go through num() or shape_str(). Streaming a number into an
// std::ostringstream segfaulted on the GPU machine (torch 2.11 built with gcc-toolset-13, an
// extension built with its gcc 13.3: the locale's number formatter crashed); std::to_string
// does not go through the locale, and a number passed directly does not compile here.
#pragma once

#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

// Headers of torch < 2.13 name the error-code check of a C shim call TORCH_ERROR_CODE_CHECK
// (a source build against such a torch; the wheel is built against 2.14's headers).
#if !defined(STABLE_TORCH_ERROR_CODE_CHECK) && defined(TORCH_ERROR_CODE_CHECK)
#define STABLE_TORCH_ERROR_CODE_CHECK TORCH_ERROR_CODE_CHECK
#endif

namespace fused_ops {

using Tensor = torch::stable::Tensor;
using torch::headeronly::ScalarType;

inline std::string num(int64_t v) { return std::to_string(v); }

// Throws Error with the parts concatenated.
template <typename Error, typename... Parts>
[[noreturn]] void raise(const Parts&... parts) {
  std::string message;
  (message.append(std::string_view(parts)), ...);
  throw Error(message);
}

}  // namespace fused_ops

// RuntimeError / ValueError with the message parts (strings) concatenated, when cond fails.
#define FUSED_OPS_CHECK(cond, ...)                                                \
  do {                                                                            \
    if (!(cond)) ::fused_ops::raise<std::runtime_error>(__VA_ARGS__);             \
  } while (0)
#define FUSED_OPS_CHECK_VALUE(cond, ...)                                          \
  do {                                                                            \
    if (!(cond)) ::fused_ops::raise<std::invalid_argument>(__VA_ARGS__);          \
  } while (0)

namespace fused_ops {

// "[4, 3, 1]"
inline std::string shape_str(const Tensor& t) {
  std::string s = "[";
  for (int64_t d = 0; d < t.dim(); ++d) {
    s += (d ? ", " : "") + num(t.size(d));
  }
  return s + "]";
}

// "Float", "Double", "Half", "BFloat16", ... (the names ATen's messages use).
inline std::string dtype_str(ScalarType type) { return torch::headeronly::toString(type); }

// "cpu", "cuda:1"
inline std::string device_str(const Tensor& t) {
  if (t.is_cpu()) return "cpu";
  if (t.is_cuda()) return "cuda:" + num(t.get_device_index());
  return "device " + num(static_cast<int64_t>(t.device().type())) + ":" +
         num(t.get_device_index());
}

inline bool same_device(const Tensor& a, const Tensor& b) {
  return a.device().type() == b.device().type() && a.get_device_index() == b.get_device_index();
}

inline bool is_floating(ScalarType type) {
  return type == ScalarType::Float || type == ScalarType::Double || type == ScalarType::Half ||
         type == ScalarType::BFloat16;
}

inline void check_rank(const Tensor& t, const char* name, int64_t rank) {
  FUSED_OPS_CHECK_VALUE(t.dim() == rank, name, " must be a ", num(rank), "-D tensor, got a ",
                        num(t.dim()), "-D tensor of shape ", shape_str(t));
}

inline void check_size(const Tensor& t, const char* name, int64_t dim, int64_t expected,
                       const char* what) {
  FUSED_OPS_CHECK_VALUE(t.size(dim) == expected, name, ".shape[", num(dim), "] must be ",
                        num(expected), " (", what, "), got shape ", shape_str(t));
}

inline void check_floating(const Tensor& t, const char* name) {
  FUSED_OPS_CHECK_VALUE(is_floating(t.scalar_type()), name,
                        " must be a floating-point tensor (float16, bfloat16, float32 or "
                        "float64), got ",
                        dtype_str(t.scalar_type()));
}

// A tensor and its argument name, for the checks that loop over several arguments. Loops
// spell the list's type (std::initializer_list<NamedTensor>{...}): nvcc 12.4's front end
// cannot deduce it from {std::pair{...}, {...}}.
using NamedTensor = std::pair<const Tensor*, const char*>;

// Every tensor in `others` must share `ref`'s device and dtype.
inline void check_same_device_and_dtype(const Tensor& ref, const char* ref_name,
                                        std::initializer_list<NamedTensor> others) {
  for (const auto& [t, name] : others) {
    FUSED_OPS_CHECK(same_device(*t, ref), name, " is on ", device_str(*t), " but ", ref_name,
                    " is on ", device_str(ref), ": all tensors must be on the same device");
    FUSED_OPS_CHECK_VALUE(t->scalar_type() == ref.scalar_type(), name, " has dtype ",
                          dtype_str(t->scalar_type()), " but ", ref_name, " has dtype ",
                          dtype_str(ref.scalar_type()), ": all tensors must have the same dtype");
  }
}

}  // namespace fused_ops
