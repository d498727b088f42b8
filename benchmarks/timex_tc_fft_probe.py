"""Issue 29's probe: the TimeX conv kernel with its FFT passes on tensor cores
(csrc/rwkv/timex_fft_tc_forward.cuh, bfloat16/float16 mma.sync) against the op's on-chip FMA
FFT kernels (RWKV_TIMEX_ALGO=fft_fused; the fused W-spectrum and conv kernels) and the FFT
convolution, forward only, on the GPU, at transform lengths up to 32768 (the op's "fft_tc"
runs the same kernel up to 16384). This script builds the kernel alone with
torch.utils.cpp_extension.load_inline (a CUDA machine with nvcc) and gives it W's spectrum in
its storage order, made here with torch.fft in float64 (not timed: the fused path's
W-spectrum kernel is listed apart). Per shape: the conv kernels' GPU time
(profiler, per call), the forward's wall time (CUDA events, medians of alternating rounds),
and each forward's error against float64 on the same rounded inputs (max|err| / max|ref|).
Built for sm_90a (an H100). Usage: python -m benchmarks.timex_tc_fft_probe [--out FILE]
[--reps 200] [--builds MACRO=V,.. ..] [--ncu-shape B C T]
"""

import argparse
import os

import torch

from benchmarks.timing import cuda_kernels, medians_ms

SHAPES = [(4, 1024, 1024), (4, 1024, 2048), (4, 1024, 4096), (2, 768, 6000), (2, 1024, 8192),
          (2, 512, 16384)]

SOURCE = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include "rwkv/timex_fft_tc_forward.cuh"

using namespace rwkv::fft_tc;

template <typename S, int N>
void run(const torch::Tensor& k, const torch::Tensor& wz, const torch::Tensor& wexp,
         torch::Tensor& out, double eps) {
  const int B = k.size(0), C = k.size(1), T = k.size(2);
  auto kernel = conv_tc_kernel<S, N>;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       forward_smem_bytes(N));
  kernel<<<C * ((B + 1) / 2), forward_threads(N), forward_smem_bytes(N),
           c10::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<const uint16_t*>(k.data_ptr()),
      reinterpret_cast<const rwkv::fft::cf32*>(wz.data_ptr()), wexp.data_ptr<int>(),
      reinterpret_cast<uint16_t*>(out.data_ptr()), B, C, T, float(eps));
}

template <typename S>
void by_length(const torch::Tensor& k, const torch::Tensor& wz, const torch::Tensor& wexp,
               torch::Tensor& out, double eps) {
  switch (wz.size(1)) {
    case 2048: return run<S, 2048>(k, wz, wexp, out, eps);
    case 4096: return run<S, 4096>(k, wz, wexp, out, eps);
    case 8192: return run<S, 8192>(k, wz, wexp, out, eps);
    case 16384: return run<S, 16384>(k, wz, wexp, out, eps);
    case 32768: return run<S, 32768>(k, wz, wexp, out, eps);
  }
  TORCH_CHECK(false, "N");
}

torch::Tensor conv_tc(torch::Tensor k, torch::Tensor wz, torch::Tensor wexp, double eps) {
  TORCH_CHECK(k.is_contiguous() && wz.is_contiguous() && wexp.scalar_type() == torch::kInt32);
  auto out = torch::empty_like(k);
  if (k.scalar_type() == torch::kBFloat16) {
    by_length<c10::BFloat16>(k, wz, wexp, out, eps);
  } else {
    by_length<c10::Half>(k, wz, wexp, out, eps);
  }
  return out;
}
"""


def storage_frequency(N):
    """The frequency at each storage position of the probe's spectra (timex_fft_tc.cuh)."""
    m = N // 16
    while m > 16:
        m //= 16
    radices, strides = [m], [N // m]
    L = N // m
    while L > 16:
        L //= 16
        radices.append(16)
        strides.append(L)
    radices.append(16)
    strides.append(1)
    s = torch.arange(N, dtype=torch.int64)
    f = torch.zeros(N, dtype=torch.int64)
    for r, L in reversed(list(zip(radices, strides))):
        f = f * r + (s // L) % r
    return f


def middle_positions(N):
    """The storage position of each entry of the middle's layout (middle_position)."""
    i = torch.arange(N, dtype=torch.int64)
    e, t, lane, it = i % 4, (i // 4) % 2, (i // 8) % 32, i // 256
    return 16 * (16 * it + lane // 4 + 8 * (e // 2)) + 8 * t + 2 * (lane % 4) + e % 2


def fft_length(T):
    n = 2048
    while n < 2 * T:
        n *= 2
    return n


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=None)
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--builds", nargs="+",
                        default=["TIMEX_TC_MIN_BLOCKS=3"],
                        help="one build of the kernel each: its macros, comma-separated "
                             "(timex_fft_tc_common.cuh: TIMEX_TC_MIN_BLOCKS, the register cap)")
    parser.add_argument("--ncu-shape", type=int, nargs=3, default=None,
                        help="B C T: only run each build's kernel a few times (for ncu)")
    args = parser.parse_args()
    from torch.utils.cpp_extension import load_inline

    import rwkv_ops
    from rwkv_ops.reference import timex_fftconv

    csrc = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "csrc")
    exts = {}
    for i, build in enumerate(args.builds):
        exts[build] = load_inline(
            f"timex_tc_probe_{i}",
            cpp_sources="torch::Tensor conv_tc(torch::Tensor k, torch::Tensor wz, "
                        "torch::Tensor wexp, double eps);",
            cuda_sources=SOURCE, functions=["conv_tc"], extra_include_paths=[csrc],
            extra_cuda_cflags=["-O3", "-gencode=arch=compute_90a,code=sm_90a", "-std=c++17",
                               *(f"-D{m}" for m in build.split(","))])
    if args.ncu_shape:  # a few calls of each variant at one shape, for Nsight Compute
        B, C, T = args.ncu_shape
        N = fft_length(T)
        k = torch.randn(B, C, T, device="cuda").to(torch.bfloat16)
        wz = torch.randn(C, N, device="cuda", dtype=torch.complex64)
        wz = wz / wz.abs().amax()  # at most 1 in magnitude, as conv_tc_kernel takes it
        wexp = torch.zeros(C, device="cuda", dtype=torch.int32)
        for ext in exts.values():
            for _ in range(3):
                ext.conv_tc(k, wz, wexp, 0.0)
        torch.cuda.synchronize()
        return
    lines = [f"# {torch.cuda.get_device_name()}, torch {torch.__version__}", "",
             f"| (B, C, T) | dtype | N | tc conv kernel us ({' / '.join(args.builds)}) | "
             "fused conv + W kernels us | fwd wall ms: tc builds / fused / FFT conv | "
             "err tc builds / fused / FFT conv |",
             "| --- | --- | ---: | ---: | ---: | --- | --- |"]
    for dtype in (torch.bfloat16, torch.float16):
        for B, C, T in SHAPES:
            g = torch.Generator(device="cuda").manual_seed(B * C + T)
            w = (torch.randn(C, T, device="cuda", generator=g) / T ** 0.5).to(dtype)
            k = torch.randn(B, C, T, device="cuda", generator=g).to(dtype)
            N = fft_length(T)
            h = w.double().flip(-1)
            H = torch.fft.fft(h, n=N)[:, storage_frequency(N).cuda()]
            # Scaled per channel by 2^-wexp to at most 1 in magnitude (conv_tc_kernel).
            wexp = torch.frexp(H.abs().amax(dim=1)).exponent
            H = H * torch.ldexp(torch.ones_like(wexp, dtype=torch.float64), -wexp)[:, None]
            wz = H.to(torch.complex64)[:, middle_positions(N).cuda()].contiguous()
            wexp = wexp.to(torch.int32)
            ref = timex_fftconv(w.double(), k.double(), 0.0)

            def err(out):
                return ((out.double() - ref).abs().max() / ref.abs().max()).item()

            os.environ["RWKV_TIMEX_ALGO"] = "fft_fused"

            def fused(i):
                return rwkv_ops.timex(w, k)

            tcs = [lambda i, ext=ext: ext.conv_tc(k, wz, wexp, 0.0) for ext in exts.values()]

            def conv(i):
                return timex_fftconv(w.float(), k.float(), 0.0).to(dtype)

            with torch.no_grad():
                e_tc = " / ".join(f"{err(f(0)):.1e}" for f in tcs)
                e_fused, e_conv = err(fused(0)), err(conv(0))
                ms = medians_ms([*tcs, fused, conv], "cuda", warmup=5, reps=args.reps, rounds=4)
                tc_us = " / ".join(
                    f"{sum(t for _, t in cuda_kernels(f).values()) * 1e3:.1f}" for f in tcs)
                kf = cuda_kernels(fused)
            fused_us = sum(t for _, t in kf.values()) * 1e3
            detail = ", ".join(f"{name[:40]} {t * 1e3:.1f}" for name, (_, t) in kf.items())
            lines.append(f"| ({B}, {C}, {T}) | {str(dtype)[6:]} | {N} | {tc_us} | "
                         f"{fused_us:.1f} ({detail}) | "
                         f"{' / '.join(f'{m:.3f}' for m in ms)} | "
                         f"{e_tc} / {e_fused:.1e} / {e_conv:.1e} |")
            print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
