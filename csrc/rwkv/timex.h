// RWKV TimeX: the input checks that the CPU and CUDA kernels share.
//
//   w (C, T), k (B, C, T) -> out (B, C, T)
//   out[b, c, t] = eps + sum_{u <= t} w[c, T-1-(t-u)] * k[b, c, u]
//
// Backward, with g = grad_out:
//   grad_k[b, c, u]     = sum_{t >= u} w[c, T-1-(t-u)] * g[b, c, t]
//   grad_w[c, T-1-s]    = sum_b sum_{t >= s} g[b, c, t] * k[b, c, t-s]
#pragma once

#include <cstdint>
#include <limits>

#include "common/checks.h"

namespace rwkv {

// w (C, T) and k (B, C, T): ranks, floating dtype, one device and dtype, matching C and T,
// and sizes that the kernels' 32-bit tile arithmetic can hold.
inline void check_timex_inputs(const fused_ops::Tensor& w, const fused_ops::Tensor& k) {
  fused_ops::check_rank(w, "w", 2);
  fused_ops::check_rank(k, "k", 3);
  fused_ops::check_floating(k, "k");
  fused_ops::check_same_device_and_dtype(k, "k", {{&w, "w"}});
  fused_ops::check_size(w, "w", 0, k.size(1), "channels C, from k.shape[1]");
  fused_ops::check_size(w, "w", 1, k.size(2), "length T, from k.shape[2]");
  constexpr int64_t limit = std::numeric_limits<int32_t>::max() / 2;
  FUSED_OPS_CHECK_VALUE(k.size(0) <= limit && k.size(1) <= limit && k.size(2) <= limit,
                        "k's sizes must each be at most ", fused_ops::num(limit), ", got shape ",
                        fused_ops::shape_str(k));
}

// timex_backward's grad_out must be shaped like k, on its device, with its dtype.
inline void check_timex_grad(const fused_ops::Tensor& grad_out, const fused_ops::Tensor& w,
                             const fused_ops::Tensor& k) {
  check_timex_inputs(w, k);
  fused_ops::check_rank(grad_out, "grad_out", 3);
  fused_ops::check_same_device_and_dtype(k, "k", {{&grad_out, "grad_out"}});
  for (int64_t d = 0; d < 3; ++d) {
    fused_ops::check_size(grad_out, "grad_out", d, k.size(d), "from k.shape");
  }
}

}  // namespace rwkv
