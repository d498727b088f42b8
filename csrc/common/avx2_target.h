// Include first (before any other header) in a .cpp file that holds kernels for AVX2 + FMA.
// The file alone is compiled for those instructions, through the target pragma and the
// CPU_CAPABILITY macros that give ATen's vector types (at::vec::Vectorized, with SLEEF math)
// their own namespace, as ATen does for its per-CPU kernels. Its callers choose it at run
// time with fused_ops::cpu_has_avx2() (cpu_features.h). FUSED_OPS_AVX2 is defined where
// this works (x86-64, GCC or Clang); elsewhere the file is built for the baseline CPU.
// Code built this way keeps no standard containers: GCC 13 refuses to inline their
// always-inline members across the pragma ("inlining failed in call to 'always_inline'
// ... target specific option mismatch" for a std::vector; GCC 12 accepts it). Buffers come
// from the baseline-built caller.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__)
#define FUSED_OPS_AVX2 1
#pragma GCC target("avx2,fma")
// The pragma enables the instructions but not the macros that headers (sleef.h) test.
#ifndef __AVX__
#define __AVX__ 1
#endif
#ifndef __AVX2__
#define __AVX2__ 1
#endif
#ifndef __FMA__
#define __FMA__ 1
#endif
#define CPU_CAPABILITY AVX2
#define CPU_CAPABILITY_AVX2
#include <ATen/cpu/vec/vec.h>
#endif
