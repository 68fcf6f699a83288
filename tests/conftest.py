import os
import socket

import pytest

from edgegossip import _kernels_py
from tests.helpers.ports import free_port

try:
    from edgegossip import _kernels_c
except ImportError:  # pragma: no cover - CI builds the extension; a missing one fails below
    _kernels_c = None

IMPLS = {"numpy": _kernels_py}
if _kernels_c is not None:
    IMPLS["cython"] = _kernels_c


@pytest.fixture(params=sorted(IMPLS))
def impl(request):
    """Runs a kernel test against both the compiled kernels and the NumPy reference."""
    return IMPLS[request.param]


def pytest_sessionstart(session):
    if os.environ.get("CI") == "true" and _kernels_c is None:
        raise pytest.UsageError("CI must test the compiled kernels: edgegossip._kernels_c missing")


@pytest.fixture
def free_udp_port():
    return free_port


@pytest.fixture
def free_tcp_port():
    return lambda: free_port(socket.SOCK_STREAM)


@pytest.fixture(scope="session")
def mnist_data():
    """Real MNIST from the cache (`make test` fetches it first); CI must not skip these."""
    from edgegossip.data import mnist

    try:
        return mnist.load()
    except mnist.DataError:
        if os.environ.get("CI") == "true":
            pytest.fail("MNIST missing in CI: `make test` fetches it before pytest")
        pytest.skip("MNIST not cached: run `edgegossip data fetch mnist`")


@pytest.fixture
def root_only():
    from edgegossip.emulate import netns

    if not netns.is_root():
        if os.environ.get("CI") == "true":
            pytest.fail("root-only test reached CI without root")
        pytest.skip("needs root (network namespaces, nftables)")


@pytest.fixture
def procs():
    """Processes a test started: killed at its end if still running, whatever the outcome."""
    started = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
            p.wait()
