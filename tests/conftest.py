import pytest
import torch

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


def rel_err(out, ref):
    """||out - ref|| / ||ref|| in float64 (0 when both are zero)."""
    out, ref = out.double(), ref.double().to(out.device)
    denom = ref.norm().item()
    diff = (out - ref).norm().item()
    return diff / denom if denom > 0 else diff
