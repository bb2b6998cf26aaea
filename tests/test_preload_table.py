"""The preload library's allocation table (preload/memq_table.c), exercised directly by tests/fakes/table_check.c."""
from __future__ import annotations

import subprocess

import pytest

from support.fakes import build_table_check


@pytest.fixture(scope="module")
def table_check(tmp_path_factory):
    return build_table_check(tmp_path_factory.mktemp("table"))


def run(exe, *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"table_check {' '.join(args)}: exit {proc.returncode}\n{proc.stderr}"
    return proc


def test_key_spaces_are_kept_apart_exactly(table_check) -> None:
    """put/take agree on any key space (put used to hash the raw value and store it as 0/1)."""
    run(table_check, "spaces")


@pytest.mark.parametrize("stride", [2 << 20, 4096 + 16, 48])
def test_aligned_pointers_spread_like_any_others(table_check, stride) -> None:
    """400k live entries 2 MiB apart (device blocks), a page + 16 apart (large host blocks) or 48 bytes apart:
    every entry lies close to its home slot (the slot came from the pointer's low bits, which aligned
    pointers share, and 2 MiB-aligned entries piled up on one probe chain per shard)."""
    mean, worst = (float(x) for x in run(table_check, "spread", "400000", str(stride)).stdout.split()[1::2])
    assert mean < 3.0 and worst < 200, (mean, worst)


def test_a_signal_handler_interrupting_the_table_does_not_deadlock(table_check) -> None:
    """A wrapped call from a signal handler that interrupted its own thread inside the table: its operations are
    skipped and counted, the interrupted one completes, nothing else changes."""
    run(table_check, "signal")


def test_threads_keep_their_entries(table_check) -> None:
    run(table_check, "threads", "4", "50000")


def test_dropped_table_updates_are_a_warning() -> None:
    """The exit report's count of dropped table updates becomes one warning line naming the process."""
    from ctf2perfetto.capture.reach import reach_warnings

    report = {"pid": 7, "calls": {"hip": 5, "cuda": 0, "driver": 0}, "table_dropped": 3, "libraries": []}
    (warning,) = reach_warnings([report], ("hip", "cuda"))
    assert warning.startswith("pid 7: 3 allocation-table updates were dropped")
    assert reach_warnings([{**report, "table_dropped": 0}], ("hip", "cuda")) == []
