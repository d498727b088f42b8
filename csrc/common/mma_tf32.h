// One warp's tensor-core product (mma.sync m16n8k8 with .tf32 operands, float accumulation,
// sm_80 and newer) and the split of a float into two tf32 parts for float32-accurate
// products ("3xTF32"), shared by the TimeX and LLTM kernels. Plain C++ apart from the PTX:
// with FUSED_OPS_EMULATE (tests/cuda_emulation.h defines it) the warp operation is emulated
// on the CPU, so kernel headers that use this compile as host code for the emulation tests.
#pragma once

#include <cstdint>

#if defined(FUSED_OPS_EMULATE)
#define FUSED_OPS_MMA_FN inline
#else
#define FUSED_OPS_MMA_FN __device__ __forceinline__
#endif

namespace fused_ops {

// The bits of x, for a .tf32 operand.
FUSED_OPS_MMA_FN uint32_t float_bits(float x) {
#if defined(FUSED_OPS_EMULATE)
  return emu_as_bits(x);
#else
  return __float_as_uint(x);
#endif
}

// The float whose bits are u (a fragment register that ldmatrix filled with a float).
FUSED_OPS_MMA_FN float bits_float(uint32_t u) {
#if defined(FUSED_OPS_EMULATE)
  return emu_as_float(u);
#else
  return __uint_as_float(u);
#endif
}

// x = big + small: big is x with the low 13 mantissa bits cleared (a tf32 value), small =
// x - big exactly (at most 13 significant bits). The tensor cores read a .tf32 operand's top
// 19 bits, so small enters its products truncated to tf32: an error below 2^-21 |x|. A
// product x * y accumulated as big*small + small*big + big*big misses small*small and those
// truncations: below 2^-20 relative.
FUSED_OPS_MMA_FN void split_tf32(float x, uint32_t& big, uint32_t& small) {
  big = float_bits(x) & 0xffffe000u;
#if defined(FUSED_OPS_EMULATE)
  small = emu_as_bits(x - emu_as_float(big));
#else
  small = __float_as_uint(x - __uint_as_float(big));
#endif
}

// x = big + small with both parts rounded to nearest tf32 (cvt.rna): big is x rounded to
// tf32, small = x - big (exact, |small| <= 2^-11 |big|, either sign) rounded to tf32 too, so
// that the parts' errors are unbiased (split_tf32's small always has x's sign and the tensor
// cores truncate it): the LLTM step kernels' products feed hundreds of recurrent steps.
FUSED_OPS_MMA_FN uint32_t round_tf32(float x) {
#if defined(FUSED_OPS_EMULATE)
  return (emu_as_bits(x) + 0x1000u) & 0xffffe000u;  // ties away, on the magnitude's bits
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
#else
  return __float_as_uint(x);
#endif
}

FUSED_OPS_MMA_FN void split_tf32_rn(float x, uint32_t& big, uint32_t& small) {
  big = round_tf32(x);
  small = round_tf32(x - bits_float(big));
}

// An MMA operand x: with SPLIT, big + small as above (3xTF32: the caller multiplies
// big*small + small*big + big*big); else x as it is (a tf32 value already: float16 and
// bfloat16 values are), small unused.
template <bool SPLIT>
FUSED_OPS_MMA_FN void tf32_operand(float x, uint32_t& big, uint32_t& small) {
  if constexpr (SPLIT) {
    split_tf32(x, big, small);
  } else {
    big = float_bits(x);
    small = 0;
  }
}

// c += A (16 x 8) * B (8 x 8), one warp; fragments as PTX's mma.m16n8k8 .tf32 lays them out
// (g = lane / 4, q = lane % 4): a = A[g][q], A[g+8][q], A[g][q+4], A[g+8][q+4];
// b = B[q][g], B[q+4][g]; c = C[g][2q], C[g][2q+1], C[g+8][2q], C[g+8][2q+1].
// The tensor cores round their float sums toward zero: callers sum a bounded number of
// products per fragment and add fragments to their totals with ordinary float adds.
FUSED_OPS_MMA_FN void mma_tf32(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(FUSED_OPS_EMULATE)
  emu_mma_m16n8k8_tf32(c, a, b);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  __trap();  // the host picks tensor-core kernels on sm_80 and newer only
#endif
}

}  // namespace fused_ops
