// LLTM over a sequence: the sizes and the argument types of lltm_sequence_forward and
// lltm_sequence_backward, and their input checks (shared by the CPU and the CUDA library through
// lltm_sequence_driver.h; inline, as the driver).
#pragma once

#include <torch/csrc/stable/tensor.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <utility>
#include <vector>

#include "common/checks.h"

namespace lltm {

using Tensor = torch::stable::Tensor;

// (steps T, batch B, input_features F, state_size S) of one call.
struct SeqSizes {
  int64_t steps, batch, features, state;
};

// Which of the GEMM-computed gradients lltm_sequence_backward returns, in the forward's
// argument order: input, weights, bias (d_h0 and d_c0 come out of the recurrence and always
// come back). The schema's bool[3], as the stable boxing hands a bool list over.
using SeqGradMask = std::vector<bool>;
// An optional tensor argument of the schema (Tensor?).
using OptTensor = std::optional<Tensor>;

inline SeqSizes check_sequence_forward_args(const Tensor& input, const Tensor& weights,
                                            const Tensor& bias, const Tensor& h0,
                                            const Tensor& c0) {
  using namespace fused_ops;  // NOLINT(build/namespaces): the check_* helpers
  check_rank(input, "input", 3);
  check_rank(weights, "weights", 2);
  check_rank(bias, "bias", 1);
  check_rank(h0, "h0", 2);
  check_rank(c0, "c0", 2);
  check_floating(input, "input");
  check_same_device_and_dtype(input, "input",
                              {{&weights, "weights"}, {&bias, "bias"}, {&h0, "h0"}, {&c0, "c0"}});
  const int64_t T = input.size(0), B = input.size(1), F = input.size(2), S = h0.size(1);
  check_size(h0, "h0", 0, B, "batch size, input.shape[1]");
  check_size(c0, "c0", 0, B, "batch size, input.shape[1]");
  check_size(c0, "c0", 1, S, "state_size, from h0");
  check_size(weights, "weights", 0, 3 * S, "3 * state_size");
  check_size(weights, "weights", 1, S + F, "state_size + input_features");
  check_size(bias, "bias", 0, 3 * S, "3 * state_size");
  return {T, B, F, S};
}

// The op's gradient arguments: grad_hs either the gradient of hs (T+1, B, S) or of hs[1:] (T,
// B, S: hs[0]'s is zero), grad_h_n and grad_c_n (B, S); each may be None (zero).
inline SeqSizes check_sequence_backward_args(const OptTensor& grad_hs, const OptTensor& grad_c_n,
                                             const Tensor& input, const Tensor& weights,
                                             const Tensor& hs, const Tensor& cells,
                                             const Tensor& gates, const SeqGradMask& mask,
                                             const OptTensor& grad_h_n) {
  using namespace fused_ops;  // NOLINT(build/namespaces): the check_* helpers
  check_rank(input, "input", 3);
  check_rank(weights, "weights", 2);
  check_rank(hs, "hs", 3);
  check_rank(cells, "cells", 3);
  check_rank(gates, "gates", 3);
  check_floating(input, "input");
  check_same_device_and_dtype(input, "input",
                              {{&weights, "weights"}, {&hs, "hs"}, {&cells, "cells"},
                               {&gates, "gates"}});
  const int64_t T = input.size(0), B = input.size(1), F = input.size(2);
  FUSED_OPS_CHECK_VALUE(weights.size(1) >= F, "weights.shape[1] must be state_size + ",
                        "input_features >= ", num(F), ", got shape ", shape_str(weights));
  const int64_t S = weights.size(1) - F;
  check_size(weights, "weights", 0, 3 * S, "3 * state_size");
  for (const auto& [t, name] :
       std::initializer_list<NamedTensor>{{&hs, "hs"}, {&cells, "cells"}}) {
    check_size(*t, name, 0, T + 1, "steps + 1");
    check_size(*t, name, 1, B, "batch size, input.shape[1]");
    check_size(*t, name, 2, S, "state_size");
  }
  if (grad_hs) {
    const Tensor& g = *grad_hs;
    check_rank(g, "grad_hs", 3);
    check_same_device_and_dtype(input, "input", {{&g, "grad_hs"}});
    FUSED_OPS_CHECK_VALUE(g.size(0) == T + 1 || g.size(0) == T, "grad_hs.shape[0] must be ",
                          num(T + 1), " (steps + 1: the gradient of hs) or ", num(T),
                          " (steps: the gradient of hs[1:]), got shape ", shape_str(g));
    check_size(g, "grad_hs", 1, B, "batch size, input.shape[1]");
    check_size(g, "grad_hs", 2, S, "state_size");
  }
  using NamedOpt = std::pair<const OptTensor*, const char*>;
  for (const auto& [t, name] :
       std::initializer_list<NamedOpt>{{&grad_h_n, "grad_h_n"}, {&grad_c_n, "grad_c_n"}}) {
    if (!*t) continue;
    const Tensor& g = **t;
    check_rank(g, name, 2);
    check_same_device_and_dtype(input, "input", {{&g, name}});
    check_size(g, name, 0, B, "batch size, input.shape[1]");
    check_size(g, name, 1, S, "state_size");
  }
  check_size(gates, "gates", 0, T, "steps");
  check_size(gates, "gates", 1, B, "batch size, input.shape[1]");
  check_size(gates, "gates", 2, 3 * S, "3 * state_size");
  // The schema says bool[3] but the dispatcher does not enforce a list's length.
  FUSED_OPS_CHECK_VALUE(mask.size() == 3,
                        "output_mask must have 3 entries (input, weights, bias), got ",
                        num(static_cast<int64_t>(mask.size())));
  return {T, B, F, S};
}

}  // namespace lltm
