"""The eager fast path that every family's public functions take. A call on plain eager
tensors skips the op's generated autograd wrapper (several times the host time of a plain
torch.autograd.Function, and small problems are bound by host time): straight to the
kernel when no graph is needed, else the family's autograd.Function with the same formula
that it registers for the op. Traced calls (torch.compile, export), functorch transforms,
dispatch or function modes and tensor subclasses go through the op and its registered
autograd formula."""

from numbers import Real as _Real

import torch

# Runs an op's CPU/CUDA kernel directly, past its Autograd key (what torch.library's own
# autograd kernel does for a call that needs no graph).
below_autograd = torch._C._AutoDispatchBelowAutograd
# Looked up once: they run on every call.
grad_enabled = torch._C.is_grad_enabled
any_requires_grad = torch._C._any_requires_grad
_is_compiling = torch.compiler.is_compiling
_functorch_active = torch._C._are_functorch_transforms_active
_dispatch_modes = torch._C._len_torch_dispatch_stack
_function_modes = torch._C._is_torch_function_mode_enabled
_Tensor = torch.Tensor
_Parameter = torch.nn.Parameter


def plain_eager(*tensors):
    """Whether a call on these tensors may skip the op's Autograd key: plain tensors or
    parameters, not traced (is_compiling() first: dynamo folds it and never looks at the
    rest), no functorch transform, no dispatch or function mode."""
    if _is_compiling() or _functorch_active() or _dispatch_modes() or _function_modes():
        return False
    for t in tensors:
        if type(t) is not _Tensor and type(t) is not _Parameter:
            return False
    return True


def require_tensors(fn, names, values):
    """TypeError naming the first of fn's arguments `names` whose value is not a tensor. Called
    where plain_eager() said no (a non-tensor fails it too), so eager calls pay nothing."""
    for name, value in zip(names, values):
        if not isinstance(value, _Tensor):
            raise TypeError(
                f"{fn}: {name} must be a torch.Tensor, got {type(value).__name__}"
                + (f" {value!r}" if isinstance(value, (int, float, list, tuple)) else "")
            )


def real_scalar(fn, name, value):
    """value as a float; TypeError naming the argument unless it is a real number (bool,
    strings, tensors and None are not)."""
    if isinstance(value, bool) or not isinstance(value, _Real):
        raise TypeError(
            f"{fn}: {name} must be a real number (int or float), got {type(value).__name__} "
            f"{value!r}"
        )
    return float(value)
