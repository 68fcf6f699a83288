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


_ARM64 = "arm64_trixie_root"
_arm64: dict = {}


def _build_arm64_root() -> None:
    os.nice(19)  # on Linux this thread alone, and what it starts: the tests keep the CPU first
    from edgegossip.lab import root

    try:
        _arm64["path"] = root.ensure(root.Spec("trixie", "arm64"), progress=lambda m: None)
    except Exception as e:  # reported by the fixture, in the test that needs the root
        _arm64["error"] = e


def pytest_collection_finish(session):
    """The arm64 lab root takes minutes under emulation: when a selected test needs it, build it
    from the start of the session, behind the other tests."""
    if os.geteuid() == 0 and any(_ARM64 in getattr(i, "fixturenames", ()) for i in session.items):
        import threading

        _arm64["thread"] = threading.Thread(target=_build_arm64_root, name=_ARM64, daemon=True)
        _arm64["thread"].start()


@pytest.fixture(scope="session")
def arm64_trixie_root():
    thread = _arm64.get("thread")
    if thread is None:
        _build_arm64_root()
    else:
        thread.join()
    if "error" in _arm64:
        raise _arm64["error"]
    return _arm64["path"]
