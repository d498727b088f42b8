// Include first (before any other header) in a .cpp file that holds kernels for AVX2 + FMA
// (+ F16C, the float16 <-> float32 conversions). The file alone is compiled for those
// instructions, through the target pragma; its kernels use the raw intrinsics of
// <immintrin.h> (ATen's at::vec::Vectorized and SLEEF are not part of the stable ABI). Its
// callers choose it at run time with fused_ops::cpu_has_avx2() (cpu_features.h).
// FUSED_OPS_AVX2 is defined where this works (x86-64, GCC or Clang);
// elsewhere the file is built for the baseline CPU and its callers never reach it.
// Code built this way keeps no standard containers: GCC 13 refuses to inline their
// always-inline members across the pragma ("inlining failed in call to 'always_inline'
// ... target specific option mismatch" for a std::vector; GCC 12 accepts it). Buffers come
// from the baseline-built caller.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__)
#define FUSED_OPS_AVX2 1
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>
#endif
