"""The two-line verdict every analysis' table output starts with, worked out by hand on one loop: four steps of an
8 MiB upload of unchanged data from pinned memory (a repeat from step 2 on: 3 x 8 MiB in 3 x 200 ns) and a 1 MiB
upload of new data from a pageable buffer (staged, not redundant: 4 x 100 ns)."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from ctf2perfetto import analyses
from ctf2perfetto.analysis.registry import ANALYSES, analysis
from ctf2perfetto.convert.write import write_trace
from ctf2perfetto.events import EventBatch, MemKind as M, TraceInfo
from support.rows import Rows, in_time_order

REPO = Path(__file__).resolve().parent.parent
MiB = 1 << 20
HOST, DEV, PIN = 0x10000000, 0x900000000, 0x70000000


def loop(path: Path) -> Path:
    log = Rows(51)
    rows = [log.malloc(100, HOST, 2 * MiB), log.gpu_alloc(200, PIN, 8 * MiB, M.PINNED),
            log.gpu_alloc(300, DEV, 16 * MiB)]
    t = 1000
    for step in range(4):
        rows.append(log.fingerprinted(log.copy(t, t + 200, DEV, PIN, 8 * MiB, 1), 2 * step + 1, src=0xABC))
        rows.append(log.fingerprinted(log.copy(t + 300, t + 400, DEV + 8 * MiB, HOST, MiB, 1), 2 * step + 2,
                                      src=0x100 + step))
        t += 1000
    rows.append(log.gpu_free(5000, DEV, 16 * MiB))  # the pinned buffer and the host block stay: leaks
    write_trace([EventBatch.from_rows(in_time_order(rows))], TraceInfo(devices=[]), path)
    return path


def verdicts(path: Path) -> dict[str, list[str]]:
    with analyses.load(path) as engine:
        return {a.name: a.verdict(a.tables(engine, argparse.Namespace(unified="auto"))) for a in ANALYSES}


def test_verdicts_by_hand(tmp_path):
    got = verdicts(loop(tmp_path / "loop.pftrace"))
    assert all(len(lines) == 2 for lines in got.values()), got
    assert got["redundant"][0] == ("3 copies moved 24.0 MiB their destination already held: 600 ns summed, 600 ns "
                                   "wall-clock; 4 staged copies from pageable memory took 400 ns.")
    assert got["redundant"][1].startswith("100% of those bytes are proven by content fingerprints, the rest are upper "
                                          "bounds. Largest: repeat, 24.0 MiB in 600 ns.")
    # 8 MiB of device bytes mirror the pinned buffer from the first upload's end (1200) to the free (5000); the
    # pageable batch's mirror ends at each new batch (new fingerprint), the last one at the free too
    assert got["duplicated"][0].startswith("Up to 9.0 MiB is held twice")
    # 4 x 200 + 4 x 100 ns of copies over the trace's 100 .. 5050 ns: 1200 / 4950 = 24%
    assert got["summary"][0] == "8 copies moved 36.0 MiB in 1.2 µs; device 0 was busy copying 24% of the time."
    assert got["leaks"][0] == "2 allocations (10.0 MiB) were never freed; most of it pinned memory (8.0 MiB)."
    # the pageable batch: 4 uploads (pin it: at the pinned rate, 8 MiB per 200 ns, 4 MiB take 100 of its 400 ns), and
    # they are synchronous (pageable) from one site 4 times: a loop site holding the thread 400 ns
    assert got["advice"][0] == ("2 place(s) to fix under 2 rule(s); the largest gain, up to 400 ns: synchronous "
                                "copies in a loop.")


def test_table_output_starts_with_the_verdict(tmp_path):
    path = loop(tmp_path / "loop.pftrace")
    want = verdicts(path)
    for name in ("redundant", "leaks"):
        out = subprocess.run([sys.executable, "-m", "ctf2perfetto", name, str(path)], capture_output=True, text=True,
                             cwd=REPO, timeout=300)
        assert out.returncode == 0, out.stderr
        assert out.stdout.splitlines()[:3] == [*want[name], f"memq {name} (source: lttng)"]
        js = subprocess.run([sys.executable, "-m", "ctf2perfetto", name, str(path), "--format", "json"],
                            capture_output=True, text=True, cwd=REPO, timeout=300)
        assert json.loads(js.stdout)["verdict"] == want[name]
    assert analysis("advice").verdict is not None
