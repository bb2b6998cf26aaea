"""Fixtures shared by every test module.

Area-specific helpers live next to their tests (tests/support/...). Nothing here
skips: every component the tests need is installed by scripts/install.sh.
"""
from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

from support.checkout import use_checkout

REPO = Path(__file__).resolve().parent.parent
TEST_DATA = REPO / "tests" / "data"  # every file a test reads (tests/data/README.md)
CHECKOUT_BIN = use_checkout()  # `memq` / `ctf2perfetto` in any subprocess: this checkout's (support/checkout.py)

# Ctrl-C reaches every command a test starts. A suite launched as a background job of a shell without job control
# (`.ci/run &`, `nohup`) inherits SIGINT ignored, and an ignored signal stays ignored across exec: the commands
# would never see the Ctrl-C the tests send them. A Python handler is reset to the default on exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def import_bt2():
    """The babeltrace2 Python bindings (Debian python3-bt2, built for Python 3.11).

    They live in the system dist-packages; appended (not prepended) to sys.path so
    they cannot shadow the pinned packages of this interpreter.
    """
    try:
        import bt2  # noqa: F401
    except ImportError:
        sys.path.append("/usr/lib/python3/dist-packages")
        import bt2  # noqa: F401
    return sys.modules["bt2"]


@pytest.fixture(scope="session")
def test_data() -> Path:
    """tests/data: the real LTTng and Kineto traces, read only (a test that changes one works on a copy)."""
    assert TEST_DATA.is_dir(), f"{TEST_DATA} is missing"
    return TEST_DATA


@pytest.fixture(scope="session")
def bt2():
    return import_bt2()


# --- live recordings of the fake GPU runtimes (RECORD area; shared by decode/write/timeline/ui tests) ---

@pytest.fixture(scope="session")
def fake_gpu(tmp_path_factory):
    """Fake HIP/CUDA runtimes and workloads, built with gcc (support.fakes.FakeGpu)."""
    from support.fakes import build_fakes

    return build_fakes(tmp_path_factory.mktemp("fake_gpu"))


@pytest.fixture(scope="session")
def fake_hip_trace(fake_gpu, tmp_path_factory):
    """The HIP workload (every wrapped HIP call) recorded with `memq record` (support.lttng.RecordedWorkload):
    `.dir` the trace directory, `.calls` what the workload did (one dict per call), `.pid` its pid."""
    from support.lttng import record_workload

    return record_workload(fake_gpu, tmp_path_factory.mktemp("fake_hip") / "trace", "hip")


@pytest.fixture(scope="session")
def fake_cuda_trace(fake_gpu, tmp_path_factory):
    """The CUDA workload (every wrapped CUDA 12 call, _ptds/_ptsz included) recorded with `memq record`."""
    from support.lttng import record_workload

    return record_workload(fake_gpu, tmp_path_factory.mktemp("fake_cuda") / "trace", "cuda")
