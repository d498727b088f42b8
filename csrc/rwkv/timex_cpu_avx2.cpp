// The TimeX CPU kernels of timex_cpu.h built for AVX2 + FMA (see common/avx2_target.h);
// timex.cpp calls them only where fused_ops::cpu_has_avx2(). Where the target pragma does
// not apply (not x86-64 GCC/Clang) this file is one more baseline build of the same code.
#include "common/avx2_target.h"

#include "rwkv/timex_cpu.h"

namespace rwkv {

template <typename T>
void forward_rows_avx2(const T* w_rev, const T* k, T* out, T eps, int64_t C, int64_t len,
                       int64_t r0, int64_t r1) {
  forward_rows(w_rev, k, out, eps, C, len, r0, r1);
}

template <typename T>
void grad_k_rows_avx2(const T* w_fwd, const T* g, T* grad_k, int64_t C, int64_t len, int64_t r0,
                      int64_t r1) {
  grad_k_rows(w_fwd, g, grad_k, C, len, r0, r1);
}

template <typename T>
void grad_w_channels_avx2(const T* g, const T* k, T* grad_w, int64_t B, int64_t C, int64_t len,
                          int64_t c0, int64_t c1, T* scratch) {
  grad_w_channels(g, k, grad_w, B, C, len, c0, c1, scratch);
}

#define TIMEX_AVX2_INSTANTIATE(T)                                                          \
  template void forward_rows_avx2<T>(const T*, const T*, T*, T, int64_t, int64_t, int64_t, \
                                     int64_t);                                             \
  template void grad_k_rows_avx2<T>(const T*, const T*, T*, int64_t, int64_t, int64_t,     \
                                    int64_t);                                              \
  template void grad_w_channels_avx2<T>(const T*, const T*, T*, int64_t, int64_t, int64_t, \
                                        int64_t, int64_t, T*);
TIMEX_AVX2_INSTANTIATE(float)
TIMEX_AVX2_INSTANTIATE(double)
#undef TIMEX_AVX2_INSTANTIATE

}  // namespace rwkv
