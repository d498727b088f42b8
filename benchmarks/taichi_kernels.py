"""Taichi versions of the brick-padding forward and the TimeX forward, for the benchmark's
Taichi rows. Taichi is optional: `setup(device)` returns None (and `reason` says why)
where it cannot be imported or initialised, and the rows are left out with a note.

Written here from the op definitions in DESIGN.md, the way the published Taichi demos
do it: float32 only, torch tensors passed as Taichi ndarrays (no copies: Taichi reads
the tensor's memory, on CUDA too).
- pad: one parallel loop over output pixels; the source pixel from integer floor
  division and modulo (Taichi's // and % on integers follow Python: floor semantics).
- timex: one parallel loop over (b, c, t), each an inner sum over u <= t held in a
  register, no shared memory; t varies fastest, so a warp reads one k[b, c, u] and
  consecutive w[c, T-1-t+u].
On CUDA, Taichi enqueues its work (argument copy, kernel) on the legacy default stream,
which is also torch's default stream: a call is ordered with the torch work around it and
timed like every other row, between CUDA events, with no synchronisation added (Taichi
1.7 compiles PTX for sm_86 at most; the driver JIT-compiles it for newer GPUs).
"""

# What the Taichi rows' numbers mean, for the notes under each table.
NOTE = ("forward only, float32; on CUDA timed like the other rows (CUDA events, no added "
        "synchronisation: Taichi enqueues on the default stream torch uses); launches n/a "
        "where the profiler does not see Taichi's; peak MiB counts only torch allocations "
        "(Taichi keeps its own memory pool)")
ti = None
reason = None
_arch = None
_kernels = {}


def setup(device):
    """Taichi initialised for device ("cpu" or "cuda"), or None (see `reason`)."""
    global ti, reason, _arch
    try:
        import taichi

        ti = taichi
        arch = ti.cuda if device == "cuda" else ti.cpu
        if _arch != device:
            ti.init(arch=arch, default_fp=ti.f32, log_level=ti.WARN)
            got = ti.lang.impl.current_cfg().arch
            if device == "cuda" and got != ti.cuda:
                raise RuntimeError(f"Taichi fell back from CUDA to {got}")
            _arch = device
            _kernels.clear()
        return ti
    except Exception as exc:  # ImportError, or a Taichi without this backend
        first = (str(exc).splitlines() or [""])[0]
        reason = f"Taichi rows left out: {type(exc).__name__}: {first}"
        return None


def _build():
    """The kernels, defined once per ti.init (Taichi compiles them on first call)."""
    if _kernels:
        return _kernels
    nd3 = ti.types.ndarray(dtype=ti.f32, ndim=3)
    nd2 = ti.types.ndarray(dtype=ti.f32, ndim=2)

    @ti.kernel
    def pad_kernel(x: nd3, y: nd3, left: ti.i32, top: ti.i32, shift: ti.i32):
        H, W = x.shape[1], x.shape[2]
        for n, i, j in ti.ndrange(y.shape[0], y.shape[1], y.shape[2]):
            r = i - top
            band = r // H
            y[n, i, j] = x[n, r - band * H, (j - left - band * shift) % W]

    @ti.kernel
    def timex_kernel(w: nd2, k: nd3, out: nd3, eps: ti.f32):
        T = k.shape[2]
        for b, c, t in ti.ndrange(k.shape[0], k.shape[1], T):
            s = ti.cast(0.0, ti.f32)
            for u in range(t + 1):
                s += w[c, T - 1 - t + u] * k[b, c, u]
            out[b, c, t] = s + eps

    _kernels.update(pad=pad_kernel, timex=timex_kernel)
    return _kernels


def tile_pad(x, pad, shift):
    """Brick padding forward of a contiguous float32 x (..., H, W), as padding_ops.tile_pad."""
    import torch

    left, right, top, bottom = pad
    H, W = x.shape[-2:]
    y = torch.empty(*x.shape[:-2], H + top + bottom, W + left + right, device=x.device,
                    dtype=x.dtype)
    _build()["pad"](x.reshape(-1, H, W), y.view(-1, *y.shape[-2:]), left, top, shift)
    return y


def timex(w, k, eps=0.0):
    """TimeX forward of contiguous float32 w (C, T), k (B, C, T), as rwkv_ops.timex."""
    import torch

    out = torch.empty_like(k)
    _build()["timex"](w, k, out, eps)
    return out
