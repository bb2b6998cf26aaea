"""THAPI (`iprof`) CTF traces: recognised by their metadata (lttng_ust_hip:*, lttng_ust_cuda:*,
lttng_ust_cudart:* entry/exit events, no memq events), not read yet: refused in one line rather than
converted as an LTTng recording with every event skipped."""
from __future__ import annotations

from pathlib import Path

from ..errors import MemqError


def read(path: Path):
    raise MemqError(f"{path}: a THAPI (iprof) trace (lttng_ust_hip/cuda/cudart entry and exit events): memq does "
                    "not read THAPI traces yet (docs/IMPORTERS.md)")
