// One warp's tensor-core product with bfloat16 or float16 operands (mma.sync m16n8k16, float
// accumulation, sm_80 and newer) and the transposing shared-memory load (ldmatrix .trans) that
// feeds it, for the TimeX direct kernels (csrc/rwkv/timex_tc_*.cuh) and the LLTM sequence's
// half-type kernels (csrc/lltm/lltm_sequence_mma.cuh). Plain C++ apart from the PTX: with
// FUSED_OPS_EMULATE (tests/cuda_emulation.h defines it) both warp operations are emulated on
// the CPU with PTX's fragment layouts, so kernel headers that use this compile as host code
// for the emulation tests (csrc/common/mma_tf32.h does the same for .tf32).
#pragma once

#include <cstdint>
#include <type_traits>

#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Half.h>

#if defined(FUSED_OPS_EMULATE)
#define FUSED_OPS_MMA_HALF_FN inline
#else
#define FUSED_OPS_MMA_HALF_FN __device__ __forceinline__
#endif

namespace fused_ops {

// c += A (16 x 16, row-major) * B (16 x 8, column-major), one warp, T = bfloat16 or float16.
// Fragments as PTX lays them out (g = lane / 4, q = lane % 4; each register holds two
// elements, the lower k in the low half): a = A[g][2q..], A[g+8][2q..], A[g][2q+8..],
// A[g+8][2q+8..]; b = B[2q..][g], B[2q+8..][g]; c = C[g][2q], C[g][2q+1], C[g+8][2q],
// C[g+8][2q+1]. Every product of two half-type values is exact in float; the tensor cores
// add them to c with their own rounding (toward zero): callers bound the number of products
// per fragment and add fragments to their totals with ordinary float adds.
template <typename T>
FUSED_OPS_MMA_HALF_FN void mma_16816(float (&c)[4], const uint32_t (&a)[4],
                                     const uint32_t (&b)[2]) {
#if defined(FUSED_OPS_EMULATE)
  emu_mma_m16n8k16<T>(c, a, b);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<T, c10::BFloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    static_assert(std::is_same_v<T, c10::Half>, "mma_16816: bfloat16 or float16 only");
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
#else
  __trap();  // the host picks these kernels on sm_80 and newer only
#endif
}

// ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16: four 8x8 matrices of 16-bit elements, each
// transposed on the way. Lane l gives the address of row l % 8 of matrix l / 8 (16 contiguous,
// 16-byte aligned bytes in shared memory); lane (g = lane / 4, q = lane % 4) receives in r[i]
// the elements g of rows 2q (low half) and 2q + 1 (high half) of matrix i. So a matrix stored
// with the MMA's k along its rows arrives as a k-pair fragment.
FUSED_OPS_MMA_HALF_FN void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
#if defined(FUSED_OPS_EMULATE)
  emu_ldmatrix_trans(r, 4, row);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(static_cast<uint32_t>(__cvta_generic_to_shared(row))));
#else
  __trap();
#endif
}

// ldmatrix.sync.aligned.m8n8.x4.shared.b16 (not transposed): lane l gives the address of row
// l % 8 of matrix l / 8, as above; lane (g, q) receives in r[i] elements 2q (low half) and
// 2q + 1 (high half) of row g of matrix i. So a row-major 16 x 16 matrix read as matrices
// (rows 0-7, cols 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15) arrives as mma_16816's A
// fragment.
FUSED_OPS_MMA_HALF_FN void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
#if defined(FUSED_OPS_EMULATE)
  emu_ldmatrix(r, 4, row);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(static_cast<uint32_t>(__cvta_generic_to_shared(row))));
#else
  __trap();
#endif
}

}  // namespace fused_ops
