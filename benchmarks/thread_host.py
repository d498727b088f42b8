"""Host time of one call issued from the main thread and from a second Python thread (autograd's
engine runs a CUDA backward on a thread of its own): the TimeX ops below autograd at
(4, 1024, 2048) bfloat16, the FFT convolution's forward (ATen), 20 tiny ATen adds and an
lltm_sequence forward at (64, 16, 32, 128). Each call timed alone on an idle GPU (synchronised
before it, not after), medians of 300; three rounds. CUDA only:

    python -m benchmarks.thread_host
"""

import statistics
import threading
import time

import torch

import rwkv_ops  # noqa: F401  (registers torch.ops.rwkv_ops)
from lltm import lltm_sequence
from rwkv_ops.reference import timex_fftconv
from torch_fused_ops._eager import below_autograd


def host_us(fn, n=300):
    out = []
    for _ in range(30):
        fn()
    for _ in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(out)


def in_thread(fn):
    res = []
    th = threading.Thread(target=lambda: res.append(host_us(fn)))
    th.start()
    th.join()
    return res[0]


def main():
    B, C, T = 4, 1024, 2048
    w = (torch.randn(C, T, device="cuda") / T**0.5).bfloat16()
    k = torch.randn(B, C, T, device="cuda").bfloat16()
    g = torch.randn(B, C, T, device="cuda").bfloat16()
    fk = torch.ops.rwkv_ops.timex_forward_keep.default
    bk = torch.ops.rwkv_ops.timex_backward_kept.default
    _, kz, wz = fk(w, k, 0.0)
    wf, kf = w.float(), k.float()
    x = torch.randn(64, device="cuda")
    S, F, Tn, Bn = 128, 32, 64, 16
    xs = torch.randn(Tn, Bn, F, device="cuda")
    weights = torch.randn(3 * S, S + F, device="cuda") * S**-0.5
    bias = torch.zeros(3 * S, device="cuda")
    h0, c0 = torch.zeros(Bn, S, device="cuda"), torch.zeros(Bn, S, device="cuda")

    def fwd():
        with below_autograd():
            fk(w, k, 0.0)

    def bwd():
        with below_autograd():
            bk(g, w, k, kz, wz)

    def tiny():
        for _ in range(20):
            x.add_(1.0)

    def seq():
        with torch.no_grad():
            lltm_sequence(xs, weights, bias, h0, c0)

    cases = [("timex fwd op", fwd), ("timex bwd op", bwd),
             ("fftconv fwd", lambda: timex_fftconv(wf, kf, 0.0)), ("20 x add_", tiny),
             ("lltm_sequence fwd", seq)]
    print(torch.cuda.get_device_name(), torch.__version__)
    for _ in range(3):
        for name, fn in cases:
            print(f"{name:20s} main {host_us(fn):8.1f} us   thread {in_thread(fn):8.1f} us",
                  flush=True)


if __name__ == "__main__":
    main()
