// LLTM cell: the CUDA kernels for small and medium problems (see use_small_path), where a
// training step is bound by host-side launch overhead rather than by the GPU.
//
// forward, one launch (small_forward_kernel): a block owns kFwdRows batch rows and
//   kFwdCols state columns j, i.e. gate_weights columns j, S + j and 2S + j. It computes
//   those gate pre-activations with a shared-memory tiled GEMM that reads X[b, k]
//   straight from old_h (k < S) and input (k >= S), adds the bias, applies the cell's
//   pointwise math in registers and writes new_h, new_cell and gate_weights. The blocks of
//   the first column tile also write X (they read every element of it exactly once).
//
// backward, two launches: the cuBLAS path's pointwise kernel (lltm_cuda.cu) writes d_gates
//   and d_old_cell, then small_backward_kernel computes every parameter and input gradient
//   from d_gates with two block roles:
//   - d_X role (the first dx_blocks blocks; none without d_old_h and d_input): a block owns
//     kDxRows batch rows x kDxCols columns of X: d_X = d_gates @ weights = [d_old_h, d_input],
//     reducing over the 3S gate columns in chunks. Its tiles cover only the
//     wanted halves' columns, and each column goes straight to its own output.
//   - parameter role (none without d_weights and d_bias): a block owns kPN gate columns
//     (rows of weights) x kPK columns of X: d_weights = d_gates^T @ X, reducing over the
//     batch rows in chunks; the blocks of the first column tile also sum the
//     d_gates they staged into d_bias. Without d_weights there is one block per gate
//     column tile and no GEMM.
//   Every sum runs in a fixed order inside one block: no atomics, results deterministic.
//   (Recomputing d_gates inside the GEMM blocks instead would save the pointwise launch
//   but cost about a third more instructions in the GEMM loops, since every column tile
//   would redo the transcendental math: more than a launch's host time at medium sizes.)
//
// The GEMMs run on one of two register tiles (below): SimtTile, FMAs in every thread, or
// MmaTile, tensor cores (sm_80 and newer; float32, float16, bfloat16), chosen by the host.
//
// Precision: inputs are widened to fused_ops::opmath_t (float for half types, double for
// float64) when staged into shared memory; all sums run in that type. SimtTile's products
// too; MmaTile's products are exact (half types) or float32-accurate (3xTF32).
// Index math is 32-bit: use_small_path sends only problems whose every tensor has fewer
// than 2^31 elements here, and no offset below is formed for a row or column outside the
// problem (those are tested first), so none passes a tensor's size.
//
// This header holds only device code and its constants, in three files by role: the tiles,
// staging layouts and shared-memory plans (lltm_cuda_small_tiles.cuh), the forward kernel
// (lltm_cuda_small_fwd.cuh) and the backward kernel (lltm_cuda_small_bwd.cuh), which this one
// includes; lltm_cuda_small.cu launches them, and tests/test_lltm.py compiles them as host C++
// to run the kernels on a CPU (no GPU needed).
#pragma once

#include "lltm/lltm_cuda_small_tiles.cuh"
#include "lltm/lltm_cuda_small_fwd.cuh"
#include "lltm/lltm_cuda_small_bwd.cuh"
