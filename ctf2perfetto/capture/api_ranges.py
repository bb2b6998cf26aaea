"""The API number ranges of each family of calls and the runtime numbers, as preload/memq_api.h defines them
(MEMQ_API_RANGES_*, enum memq_runtime).

The header is the definition; this is its copy for the recorder, which must not need the C sources at run time.
tests/test_preload_build.py reads the header and checks that the two agree.
"""
from __future__ import annotations

# family -> inclusive (first, last) API numbers: HIP runtime and VMM, CUDA runtime and driver, the libc heap
API_RANGES: dict[str, tuple[tuple[int, int], ...]] = {
    "hip": ((1, 99), (401, 449)),
    "cuda": ((101, 199), (301, 399)),
    "libc": ((501, 519),),
}

# The `runtime` field of memq's per-process events (enum memq_runtime).
RUNTIMES: dict[str, int] = {"hip": 1, "cuda": 2, "cudrv": 3}


def lttng_filter(family: str) -> str:
    """An LTTng filter expression keeping the events whose `api` field is of `family`."""
    return " || ".join(f"(api >= {first} && api <= {last})" for first, last in API_RANGES[family])
