// The check of a C shim call's error code, replacing the stable headers' own. setup.py
// includes this header first in every C++ and CUDA source of the package (-include), so that
// torch's inline stable wrappers (torch/csrc/stable/ops.h, tensor.h, library.h) use it too.
//
// Why: the stable headers' check (torch::stable::detail::throw_exception) formats the source
// line into a std::stringstream. On the lent GPU machine (torch 2.11 built with
// gcc-toolset-13) formatting a number through the stream's locale crashes (see checks.h), so
// any failing shim call there, a CUDA allocation that runs out of memory included, was a
// segmentation fault instead of a Python exception (tests/test_cuda_faults.py found it). This
// check builds its message with std::string and std::to_string (no locale) and throws
// std::runtime_error (RuntimeError in Python), as the stable check does. Where the running
// torch has torch_exception_get_what_without_backtrace (2.13 on; looked up at run time), the
// message starts with torch's own text, e.g. the allocator's "CUDA out of memory. ...".
#pragma once

#include <torch/csrc/stable/macros.h>  // STABLE_TORCH_ERROR_CODE_CHECK (torch >= 2.13 headers)
#include <torch/headeronly/util/shim_utils.h>  // TORCH_ERROR_CODE_CHECK (every release)

#include <stdexcept>
#include <string>

namespace fused_ops {

[[noreturn]] inline void raise_shim_error(const char* call, const char* file, int line) {
  std::string where = std::string(call) + " failed at " + file + ":" + std::to_string(line);
#ifdef TORCH_DYNAMIC_VERSION_CALL_2_13_0  // headers of torch >= 2.13: ask the running torch
  const char* what = TORCH_DYNAMIC_VERSION_CALL_2_13_0(
      torch_exception_get_what_without_backtrace,
      torch::stable::detail::torch_shim_bc_const_char_ptr);
  if (what != nullptr) throw std::runtime_error(std::string(what) + " (" + where + ")");
#endif
  throw std::runtime_error(where);
}

}  // namespace fused_ops

#undef STABLE_TORCH_ERROR_CODE_CHECK
#define STABLE_TORCH_ERROR_CODE_CHECK(call)                          \
  if ((call) != TORCH_SUCCESS) {                                     \
    ::fused_ops::raise_shim_error(#call, __FILE__, __LINE__);        \
  }
// The same check's older name (torch/headeronly/util/shim_utils.h; the stable wrappers of
// torch < 2.13 use it).
#undef TORCH_ERROR_CODE_CHECK
#define TORCH_ERROR_CODE_CHECK(call) STABLE_TORCH_ERROR_CODE_CHECK(call)
