"""Tile variants of the LLTM small-path CUDA kernels, timed on a GPU: prints one table.

    python benchmarks/lltm_variants.py [B,F,S ...]   (from the repository root, CUDA required)

Builds a throwaway extension (torch.utils.cpp_extension.load, float32, sm of the local GPU)
from csrc/lltm/lltm_cuda_small.cuh with each (TM, CH, tiles) below: TM rows per thread (4
or 2; tensor-core tiles: 16 * TM rows per block as well), CH the depth of each staged
reduction chunk (16, the default, or 32: twice the work between barriers and global loads,
more latency hidden, twice the shared memory), tiles SIMT (float FMAs) or TC (tensor cores,
3xTF32). Checks each kernel against float64 and times it alone with CUDA events at the given
sizes (default: the benchmark's small-path sizes). "default" marks what lltm_cuda_small.cu
launches for that size on this GPU.
"""

import os
import sys
import tempfile

import torch
from torch.utils.cpp_extension import load

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.report import markdown  # noqa: E402
from benchmarks.timing import PEAK_FP32_TFLOPS, median_ms  # noqa: E402

SHAPES = [(256, 256, 1024), (512, 512, 1024), (16, 32, 128)]
VARIANTS = [(4, 16, False), (2, 16, False), (4, 16, True), (2, 16, True), (4, 32, True),
            (2, 32, True)]  # (TM, CH, tensor cores)

SOURCE = r"""
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <torch/extension.h>

#include "lltm/lltm_cuda_small.cuh"

using namespace lltm::small;

template <int TM, int CH, bool TC>
void forward(const at::Tensor& input, const at::Tensor& weights, const at::Tensor& bias,
             const at::Tensor& old_h, const at::Tensor& old_cell, at::Tensor& new_h,
             at::Tensor& new_cell, at::Tensor& X, at::Tensor& gates) {
  const int B = input.size(0), F = input.size(1), S = old_h.size(1);
  const int blocks = ceil_div(B, fwd_rows<TM>) * ceil_div(S, kFwdCols);
  small_forward_kernel<float, TM, CH, TC><<<blocks, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      input.data_ptr<float>(), weights.data_ptr<float>(), bias.data_ptr<float>(),
      old_h.data_ptr<float>(), old_cell.data_ptr<float>(), new_h.data_ptr<float>(),
      new_cell.data_ptr<float>(), X.data_ptr<float>(), gates.data_ptr<float>(), B, F, S);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Every gradient (the grid of small_backward_gemms_cuda with all four wanted).
template <int TM, int CH, bool TC>
void backward(const at::Tensor& d_gates, const at::Tensor& X, const at::Tensor& weights,
              at::Tensor& d_input, at::Tensor& d_weights, at::Tensor& d_bias, at::Tensor& d_old_h) {
  BackwardArgs<float> a;
  a.B = X.size(0);
  a.K = X.size(1);
  a.N = weights.size(0);
  a.S = a.N / 3;
  a.d_gates = d_gates.data_ptr<float>();
  a.X = X.data_ptr<float>();
  a.weights = weights.data_ptr<float>();
  a.d_input = d_input.data_ptr<float>();
  a.d_weights = d_weights.data_ptr<float>();
  a.d_bias = d_bias.data_ptr<float>();
  a.d_old_h = d_old_h.data_ptr<float>();
  a.dx_k0 = 0;
  a.dx_k1 = a.K;
  a.dx_col_tiles = ceil_div(a.K, kDxCols);
  a.dx_blocks = ceil_div(a.B, kGroups * TM) * a.dx_col_tiles;
  a.p_col_tiles = ceil_div(a.K, kPK);
  const int blocks = a.dx_blocks + ceil_div(a.N, kPN) * a.p_col_tiles;
  small_backward_kernel<float, TM, CH, TC><<<blocks, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(a);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
BINDINGS
}
"""


def build():
    tmp = tempfile.mkdtemp(prefix="lltm_variants_")
    binds = [f'm.def("{kind}_{tm}_{ch}_{int(tc)}", &{kind}<{tm}, {ch}, {str(tc).lower()}>);'
             for kind in ("forward", "backward") for tm, ch, tc in VARIANTS]
    path = os.path.join(tmp, "variants.cu")
    with open(path, "w") as f:
        f.write(SOURCE.replace("BINDINGS", "\n".join(binds)))
    os.environ.setdefault("MAX_JOBS", str(os.cpu_count() or 4))
    return load(name="lltm_variants", sources=[path], build_directory=tmp,
                extra_include_paths=[os.path.join(ROOT, "csrc")],
                extra_cuda_cflags=["-O3", "--expt-relaxed-constexpr"], verbose=False)


def rows_per_thread(B, col_tiles):
    """The TM that rows_per_thread (csrc/lltm/lltm_cuda_small.cu) picks."""
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    large, small = -(-B // 64), -(-B // 32)
    return 2 if large * col_tiles < sms and small > large else 4


def defaults(B, S, K):
    """The (TM, CH, tensor cores) that lltm_cuda_small.cu launches for float32 on this GPU:
    (forward, backward)."""
    if torch.cuda.get_device_capability() < (8, 0):
        return (4, 16, False), (rows_per_thread(B, -(-K // 64)), 16, False)
    tm = rows_per_thread(B, -(-S // 32))
    return (tm, 32 if tm == 2 else 16, True), (rows_per_thread(B, -(-K // 64)), 32, True)


def rel_err(got, want):
    return ((got.double() - want).norm() / want.norm().clamp_min(1e-30)).item()


def main():
    assert torch.cuda.is_available(), "needs a CUDA GPU"
    torch.backends.cuda.matmul.allow_tf32 = False
    mod = build()
    shapes = [tuple(int(x) for x in a.split(",")) for a in sys.argv[1:]] or SHAPES
    rows = []
    for B, F, S in shapes:
        K, N = S + F, 3 * S
        torch.manual_seed(0)
        x, h, c = (torch.randn(B, F, device="cuda"), torch.randn(B, S, device="cuda"),
                   torch.randn(B, S, device="cuda"))
        w = torch.empty(N, K, device="cuda").uniform_(-S**-0.5, S**-0.5)
        b = torch.empty(N, device="cuda").uniform_(-S**-0.5, S**-0.5)
        X64 = torch.cat([h, x], 1).double()
        gates64 = torch.addmm(b.double(), X64, w.double().t())
        dz = torch.randn(B, N, device="cuda")
        dX64, dW64, db64 = dz.double() @ w.double(), dz.double().t() @ X64, dz.double().sum(0)
        outs = [torch.empty(B, S, device="cuda"), torch.empty(B, S, device="cuda"),
                torch.empty(B, K, device="cuda"), torch.empty(B, N, device="cuda")]
        grads = [torch.empty(B, F, device="cuda"), torch.empty(N, K, device="cuda"),
                 torch.empty(N, device="cuda"), torch.empty(B, S, device="cuda")]
        X = X64.float()
        macs = B * K * N  # one GEMM
        fwd_default, bwd_default = defaults(B, S, K)
        for tm, ch, tc in VARIANTS:
            name = f"{'TC' if tc else 'SIMT'} TM{tm} CH{ch}"
            fwd = getattr(mod, f"forward_{tm}_{ch}_{int(tc)}")
            fwd(x, w, b, h, c, *outs)
            err = rel_err(outs[3], gates64)
            ms = median_ms(lambda _: fwd(x, w, b, h, c, *outs), "cuda", warmup=5, reps=50)
            tag = " (default)" if (tm, ch, tc) == fwd_default else ""
            rows.append(((B, F, S), "forward", name + tag, ms, 2 * macs / ms / 1e9, err))
            bwd = getattr(mod, f"backward_{tm}_{ch}_{int(tc)}")
            bwd(dz, X, w, *grads)
            err = max(rel_err(grads[0], dX64[:, S:]), rel_err(grads[1], dW64),
                      rel_err(grads[2], db64), rel_err(grads[3], dX64[:, :S]))
            ms = median_ms(lambda _: bwd(dz, X, w, *grads), "cuda", warmup=5, reps=50)
            tag = " (default)" if (tm, ch, tc) == bwd_default else ""
            rows.append(((B, F, S), "backward GEMMs", name + tag, ms, 4 * macs / ms / 1e9, err))
    print(f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}; kernel time alone, "
          f"median of 50; TFLOP/s = 2 * B*(S+F)*3S per GEMM / time; % of {PEAK_FP32_TFLOPS:g}\n")
    header = ["(B, F, S)", "kernel", "variant", "ms", "TFLOP/s", "% peak", "rel err"]
    print(markdown(header, [
        [shape, kind, name, f"{ms:.4f}", f"{tf:.1f}", f"{100 * tf / PEAK_FP32_TFLOPS:.0f}%",
         f"{e:.1e}" + ("" if e < 1e-5 else " MISMATCH")]
        for shape, kind, name, ms, tf, e in rows]))


if __name__ == "__main__":
    main()
