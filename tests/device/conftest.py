"""The device the device stage's tests run on: the CPU always, and CUDA where torch sees it (benchmarks/device_run.sh
runs them on a GPU machine)."""
import pytest


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not _cuda(), reason="no CUDA device here: benchmarks/device_run.sh runs these on a GPU"))])
def device(request) -> str:
    """Each test that takes it runs on the CPU and on CUDA."""
    return request.param
