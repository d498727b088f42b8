// RWKV TimeX: programmatic dependent launch (sm_90 and newer; no-ops elsewhere and in the
// emulation) between a kernel that makes spectra and the kernel launched right after it that
// reads them: W's spectra and the fused path's conv kernel or the tensor-core path's conv and
// backward. The producer lets that launch start as soon as every one of its CTAs is running
// (launch_dependents, at its start); the consumer does what does not depend on them (loads and
// transforms its rows), then waits (wait_for_spectra) for the producer grid to complete and
// its stores to be visible. A grid of a few waves leaves most of an SM idle in its last; the
// consumer's CTAs fill it. Only a kernel
// launched as a programmatic dependent (fused_ops::launch_with_smem_after) does this; for any
// other launch griddepcontrol.wait returns at once (the stream's order already holds).
#pragma once

#include "rwkv/timex_fft_math.cuh"  // TIMEX_FFT_DEVICE

namespace rwkv::fft {

TIMEX_FFT_DEVICE void launch_dependents() {
#if !defined(TIMEX_EMULATE) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The wait, then the pointers to the spectra as the compiler must see them after it: loads
// through them cannot be scheduled above the wait (a load the compiler takes for one of
// read-only memory, as through a const __restrict__ pointer, it may otherwise hoist anywhere,
// and the spectrum kernel may still be writing there). Their loads must be plain (coherent)
// ones, not the read-only path, whose data must not change while the kernel runs: the
// kernels take the spectra through pointers without __restrict__.
template <typename T>
TIMEX_FFT_DEVICE void opaque_pointer(T*& p) {
#ifndef TIMEX_EMULATE
  asm volatile("" : "+l"(p));
#else
  (void)p;
#endif
}
template <typename... P>
TIMEX_FFT_DEVICE void wait_for_spectra(P*&... spectra) {
#if !defined(TIMEX_EMULATE) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  (opaque_pointer(spectra), ...);
}

}  // namespace rwkv::fft
