"""Tile-size variants of the TimeX CUDA kernels, timed on a GPU: prints one table.

    python benchmarks/rwkv_variants.py [B,C,T ...]   (from the repository root, CUDA required)

Builds a throwaway extension (torch.utils.cpp_extension.load, float32 only, sm of the local
GPU) from csrc/rwkv/timex_kernels.cuh with the configurations listed below, checks each
against the float64 conv1d form, and times each kernel alone with CUDA events at the
benchmark shapes (or the shapes given). "default" marks the configuration timex_cuda.cu picks for that shape.
The build compiles the variants in parallel (MAX_JOBS, default: all cores); about a minute
on 16 cores (37 kernels).
"""

import os
import sys
import tempfile

import torch
from torch.utils.cpp_extension import load

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.timing import PEAK_FP32_TFLOPS as PEAK_TFLOPS, median_ms  # noqa: E402

SHAPES = [(32, 768, 768), (8, 1024, 1024), (64, 768, 256), (4, 1024, 4096)]

# name: ToeplitzConfig<float, RT, RB, NB, NC, NWARP, UC, UG, MINB> arguments.
TOEPLITZ = {
    "RT8 RB8 NB4 NC2 w4 UC32 UG4": "8, 8, 4, 2, 4, 32, 4, 4",
    "RT8 RB8 NB2 NC4 w4 UC32 UG2": "8, 8, 2, 4, 4, 32, 2, 4",
    "RT8 RB8 NB1 NC8 w4 UC32 UG2": "8, 8, 1, 8, 4, 32, 2, 4",
    "RT8 RB4 NB1 NC8 w4 UC32 UG2": "8, 4, 1, 8, 4, 32, 2, 4",
}
# name: ToeplitzTCConfig<NT, NWARP, UC, MINB, J> arguments (float32 tensor-core kernel, 3xTF32;
# 8 * NT columns per block: 8 * NT / J batch rows x J time folds).
TOEPLITZ_TC = {
    "TC NT4 w4 UC64": "4, 4, 64, 4",
    "TC NT4 w4 UC64 J2": "4, 4, 64, 4, 2",
    "TC NT4 w4 UC64 J4": "4, 4, 64, 4, 4",
    "TC NT4 w4 UC64 J8": "4, 4, 64, 4, 8",
    "TC NT4 w2 UC64 J4 MINB8": "4, 2, 64, 8, 4",
    "TC NT4 w2 UC64 J8 MINB8": "4, 2, 64, 8, 8",
    "TC NT2 w4 UC64 J2": "2, 4, 64, 4, 2",
}
# name: WgradConfig<float, RS, NR, NLW, NTWP, TQ, UG, MINB> arguments, NR filled in per B.
WGRAD = {
    "RS32 NLW2 NTWP2 TQ64 UG4": "32, {NR}, 2, 2, 64, 4, 4",
    "RS32 NLW2 NTWP2 TQ32 UG4": "32, {NR}, 2, 2, 32, 4, 4",
    "RS32 NLW2 NTWP2 TQ64 UG8": "32, {NR}, 2, 2, 64, 8, 4",
    "RS32 NLW1 NTWP4 TQ64 UG4": "32, {NR}, 1, 4, 64, 4, 4",
    "RS32 NLW4 NTWP1 TQ64 UG4": "32, {NR}, 4, 1, 64, 4, 4",
}
NRS = [16, 8, 4]


def default_toeplitz(B, T):
    """The configuration timex_cuda.cu launches for float32 on sm_80+ (Tiles<float>)."""
    if B > 16:
        return "TC NT4 w4 UC64"
    if B > 8:
        return "TC NT4 w4 UC64 J2"
    if B > 4:
        return "TC NT4 w2 UC64 J4 MINB8"
    return "TC NT4 w2 UC64 J8 MINB8" if T > 256 else "RT8 RB4 NB1 NC8 w4 UC32 UG2"


DEFAULT_WGRAD = "RS32 NLW2 NTWP2 TQ32 UG4"  # Tiles<float>::wgrad, every B


def nr_for(B):
    return 16 if B > 8 else 8 if B > 4 else 4


HEADER = r"""
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include "rwkv/timex_kernels.cuh"
using namespace rwkv::kernels;

template <typename Cfg, bool CAUSAL>
void run_toeplitz(const at::Tensor& w, const at::Tensor& in, at::Tensor& out, double eps) {
  const int B = in.size(0), C = in.size(1), T = in.size(2);
  auto kernel = toeplitz_kernel<float, Cfg, CAUSAL>;
  if (Cfg::SMEM_BYTES > 48 * 1024)
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::SMEM_BYTES));
  const unsigned blocks = unsigned(cdiv(C, Cfg::NC) * cdiv(B, Cfg::BB) * cdiv(T, Cfg::TT));
  const bool vec = T % 4 == 0;
  kernel<<<blocks, Cfg::THREADS, Cfg::SMEM_BYTES, at::cuda::getCurrentCUDAStream()>>>(
      w.data_ptr<float>(), in.data_ptr<float>(), out.data_ptr<float>(), B, C, T, float(eps), vec, vec,
      vec);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename Cfg, bool CAUSAL>
void run_toeplitz_tc(const at::Tensor& w, const at::Tensor& in, at::Tensor& out, double eps) {
  const int B = in.size(0), C = in.size(1), T = in.size(2);
  auto kernel = toeplitz_tc_kernel<float, Cfg, CAUSAL>;
  const unsigned blocks = unsigned(C * cdiv(B, Cfg::BB) * cdiv(T, Cfg::TT));
  const bool vec = T % 4 == 0;
  kernel<<<blocks, Cfg::THREADS, Cfg::SMEM_BYTES, at::cuda::getCurrentCUDAStream()>>>(
      w.data_ptr<float>(), in.data_ptr<float>(), out.data_ptr<float>(), B, C, T, float(eps), vec,
      vec);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename Cfg>
void run_wgrad(const at::Tensor& g, const at::Tensor& k, at::Tensor& gw) {
  const int B = k.size(0), C = k.size(1), T = k.size(2);
  auto kernel = wgrad_kernel<float, Cfg>;
  if (Cfg::SMEM_BYTES > 48 * 1024)
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::SMEM_BYTES));
  const unsigned blocks = unsigned(cdiv(C, Cfg::NCH) * cdiv(T, Cfg::ST));
  kernel<<<blocks, Cfg::THREADS, Cfg::SMEM_BYTES, at::cuda::getCurrentCUDAStream()>>>(
      g.data_ptr<float>(), k.data_ptr<float>(), gw.data_ptr<float>(), B, C, T, T % 4 == 0);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""


def build():
    """One .cu per variant (parallel compile) plus a binding file; returns the module."""
    tmp = tempfile.mkdtemp(prefix="rwkv_variants_")
    sources, decls, binds = [], [], []

    def add(fn, params, call):
        """One variant: `void fn(params) { call; }` in its own .cu, declared and bound."""
        path = os.path.join(tmp, f"{fn}.cu")
        with open(path, "w") as f:
            f.write(HEADER + f"void {fn}({params}) {{ {call}; }}\n")
        sources.append(path)
        decls.append(f"void {fn}({params});")
        binds.append(f'm.def("{fn}", &{fn});')

    for i, (name, args) in enumerate(TOEPLITZ.items()):
        for causal in ("true", "false"):
            add(f"toeplitz_{i}_{causal}",
                "const at::Tensor& w, const at::Tensor& in, at::Tensor& out, double eps",
                f"run_toeplitz<ToeplitzConfig<float, {args}>, {causal}>(w, in, out, eps)")
    for i, (name, args) in enumerate(TOEPLITZ_TC.items()):
        for causal in ("true", "false"):
            add(f"toeplitz_tc_{i}_{causal}",
                "const at::Tensor& w, const at::Tensor& in, at::Tensor& out, double eps",
                f"run_toeplitz_tc<ToeplitzTCConfig<{args}>, {causal}>(w, in, out, eps)")
    for i, (name, args) in enumerate(WGRAD.items()):
        for nr in NRS:
            add(f"wgrad_{i}_{nr}", "const at::Tensor& g, const at::Tensor& k, at::Tensor& gw",
                f"run_wgrad<WgradConfig<float, {args.format(NR=nr)}>>(g, k, gw)")
    main = os.path.join(tmp, "bind.cpp")
    with open(main, "w") as f:
        f.write("#include <torch/extension.h>\n" + "\n".join(decls) +
                "\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n" + "\n".join(binds) + "\n}\n")
    os.environ.setdefault("MAX_JOBS", str(os.cpu_count() or 4))
    return load(name="rwkv_variants", sources=[main] + sources, build_directory=tmp,
                extra_include_paths=[os.path.join(ROOT, "csrc")],
                extra_cuda_cflags=["-O3", "--expt-relaxed-constexpr"], extra_cflags=["-O3"],
                verbose=False)


def main():
    assert torch.cuda.is_available(), "needs a CUDA GPU"
    torch.backends.cudnn.allow_tf32 = False
    mod = build()
    rows = []
    shapes = [tuple(int(x) for x in a.split(",")) for a in sys.argv[1:]] or SHAPES
    for B, C, T in shapes:
        torch.manual_seed(0)
        w = torch.randn(C, T, device="cuda") / T**0.5
        k = torch.randn(B, C, T, device="cuda")
        g = torch.randn(B, C, T, device="cuda")
        flops = B * C * T * (T + 1)
        ch = torch.arange(8, device="cuda")
        w64, k64, g64 = (w[ch].double().requires_grad_(), k[:, ch].double().requires_grad_(),
                         g[:, ch].double())
        ref = torch.nn.functional.conv1d(torch.nn.functional.pad(k64, (T - 1, 0)), w64.unsqueeze(1), groups=8)
        ref_w, ref_k = torch.autograd.grad(ref, [w64, k64], g64)
        out = torch.empty_like(k)

        def err(got, want):
            return ((got.double() - want).norm() / want.norm()).item()

        toeplitz = [(f"toeplitz_{i}", name) for i, name in enumerate(TOEPLITZ)]
        toeplitz += [(f"toeplitz_tc_{i}", name) for i, name in enumerate(TOEPLITZ_TC)]
        for fn_name, name in toeplitz:
            for causal in ("true", "false"):
                fn = getattr(mod, f"{fn_name}_{causal}")
                src, want = (k, ref) if causal == "true" else (g, ref_k)
                fn(w, src, out, 0.0)
                e = err(out[:, ch], want)
                ms = median_ms(lambda _: fn(w, src, out, 0.0), "cuda", warmup=5, reps=20)
                tag = " (default)" if name == default_toeplitz(B, T) else ""
                kind = "fwd toeplitz" if causal == "true" else "grad_k toeplitz"
                rows.append(((B, C, T), kind, name + tag, ms, flops / ms / 1e9, e))
        gw = torch.empty_like(w)
        for i, name in enumerate(WGRAD):
            fn = getattr(mod, f"wgrad_{i}_{nr_for(B)}")
            fn(g, k, gw)
            e = err(gw[ch], ref_w)
            ms = median_ms(lambda _: fn(g, k, gw), "cuda", warmup=5, reps=20)
            tag = " (default)" if name == DEFAULT_WGRAD else ""
            rows.append(((B, C, T), "grad_w wgrad", f"{name} NR{nr_for(B)}{tag}", ms,
                         flops / ms / 1e9, e))
    print(f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}; kernel time alone, "
          f"median of 20; TFLOP/s = B*C*T*(T+1) / time; % of {PEAK_TFLOPS:g}\n")
    print("| (B, C, T) | kernel | variant | ms | TFLOP/s | % peak | rel err |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: |")
    for shape, kind, name, ms, tf, e in rows:
        flag = "" if e < 1e-4 else " MISMATCH"
        print(f"| {shape} | {kind} | {name} | {ms:.3f} | {tf:.1f} | {100 * tf / PEAK_TFLOPS:.0f}% | "
              f"{e:.1e}{flag} |")


if __name__ == "__main__":
    main()
