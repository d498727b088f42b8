// Run-time CPU checks that pick between a kernel's baseline build and its AVX2 build
// (a *_avx2.cpp file; see avx2_target.h).
#pragma once

#include <cstdlib>
#include <cstring>

namespace fused_ops {

// True on x86-64 CPUs with AVX2, FMA and F16C (every AVX2 CPU has F16C; checked anyway), unless the environment variable
// FUSED_OPS_NO_AVX2 is set (not "0") when a library first asks: then every CPU kernel
// runs its baseline build (the tests use this to check that build on any machine).
inline bool cpu_has_avx2() {
  static const bool ok = [] {
    const char* off = std::getenv("FUSED_OPS_NO_AVX2");
    if (off != nullptr && *off != '\0' && std::strcmp(off, "0") != 0) return false;
#if defined(__x86_64__) && defined(__GNUC__)
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
#else
    return false;
#endif
  }();
  return ok;
}

}  // namespace fused_ops
