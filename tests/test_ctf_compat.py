"""CTF that memq used to refuse or misread, judged by babeltrace2: its own test traces (each converts, or is
refused in one line, exactly where babeltrace2 refuses it), packetized metadata without the `/* CTF 1.8`
comment, LTTng's quirks babeltrace2 accepts (lttng-crash's unclosed packets, a repeated packet_seq_num), no
loss reported that the files do not show, a trace without vpid (one process per vtid, said), the lttng-ust 2.3
`ust_libc:*` provider."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from ctf2perfetto.ctf.decode import decode
from ctf2perfetto.events import COLUMNS, EventKind
from ctf2perfetto.importers.sniff import metadata_text

DATA = Path(__file__).resolve().parent / "data"
# memq refuses a trace with no stream file at all ("empty trace: no events": nothing to convert), which
# babeltrace2 prints as nothing.
NO_EVENTS_AT_ALL = {"succeed/succeed4"}


@pytest.fixture(scope="module")
def bt2_traces(tmp_path_factory) -> Path:
    where = tmp_path_factory.mktemp("bt2")
    with tarfile.open(DATA / "babeltrace2-ctf-traces.tar.gz") as tar:
        tar.extractall(where, filter="data")
    return where / "ctf-traces"


def bt2_accepts(path: Path) -> bool:
    return subprocess.run(["babeltrace2", str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          timeout=120).returncode == 0


def memq_convert(path: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ctf2perfetto.cli.convert", str(path), "-o", str(out)],
                          capture_output=True, text=True, timeout=300)


def test_babeltrace2_test_traces_accepted_where_babeltrace2_accepts_them(bt2_traces, tmp_path):
    checked = 0
    for group in ("succeed", "fail", "packet-seq-num"):
        for trace in sorted((bt2_traces / group).iterdir()):
            name = f"{group}/{trace.name}"
            out = tmp_path / f"{group}-{trace.name}.pftrace"
            result = memq_convert(trace, out)
            assert "Traceback" not in result.stderr, name
            if bt2_accepts(trace) and name not in NO_EVENTS_AT_ALL:
                assert result.returncode == 0, f"{name}: {result.stderr}"
                assert out.stat().st_size > 0
            else:
                assert result.returncode == 1, f"{name}: {result.stderr}"
                errors = [line for line in result.stderr.splitlines() if "error:" in line]
                assert len(errors) == 1 and result.stderr.count("\n") == 1, f"{name}: {result.stderr}"
                assert not out.exists()
            checked += 1
    assert checked == 47  # 30 succeed, 11 fail, 6 packet-seq-num


def test_packetized_metadata_without_the_version_comment(bt2_traces, tmp_path):
    trace = bt2_traces / "succeed" / "multi-domains"
    kernel = trace / "kernel" / "metadata"
    assert kernel.read_bytes()[:4] == bytes.fromhex("571dd175")  # packetized
    assert not metadata_text(kernel).lstrip().startswith(b"/* CTF 1.8")
    result = memq_convert(trace, tmp_path / "multi.pftrace")
    assert result.returncode == 0, result.stderr
    # the same text as plain-text metadata needs the comment, as babeltrace2 requires
    plain = tmp_path / "plain"
    shutil.copytree(bt2_traces / "succeed" / "wk-heartbeat-u", plain)
    (plain / "metadata").write_bytes(metadata_text(plain / "metadata"))
    assert not bt2_accepts(plain)
    result = memq_convert(plain, tmp_path / "plain.pftrace")
    assert result.returncode == 1 and "does not start with `/* CTF 1.8`" in result.stderr


def test_no_loss_the_files_do_not_show(bt2_traces, tmp_path):
    trace = bt2_traces / "packet-seq-num" / "7-lost-between-2-with-index"
    result = memq_convert(trace, tmp_path / "lost.pftrace")
    assert result.returncode == 0, result.stderr
    bt2 = subprocess.run(["babeltrace2", str(trace)], capture_output=True, text=True, timeout=120)
    discarded = int(re.search(r"discarded (\d+) packets", bt2.stdout + bt2.stderr).group(1))
    assert f"lost: 0 events, {discarded} packets" in result.stderr  # what the tracer said it discarded ...
    assert "missing" not in result.stderr  # ... and no packets the index lists that the file lacks (it holds both)


def _plain_copy(src: Path, dst: Path, edit) -> Path:
    """A copy of an LTTng trace with its metadata as plain text, edited (the stream files untouched)."""
    shutil.copytree(src, dst)
    for meta in dst.rglob("metadata"):
        meta.write_text(edit(metadata_text(meta).decode("ascii")))
    for index in dst.rglob("index"):
        shutil.rmtree(index)
    return dst


def _rows(path: Path):
    with decode(path) as dec:
        batches = list(dec)
    return {name: np.concatenate([b.columns[name] for b in batches]) for name in COLUMNS}, dec.api_names, dec.info


def test_each_thread_a_process_without_vpid(tmp_path):
    original, _, _ = _rows(DATA / "ctf" / "dbg")
    trace = _plain_copy(DATA / "ctf" / "dbg", tmp_path / "novpid",
                        lambda text: text.replace(" _vpid;", " _vpid_not_recorded;"))
    cols, _, info = _rows(trace)
    assert len(cols["ts"]) == len(original["ts"])
    heap = np.isin(cols["kind"], [EventKind.MALLOC, EventKind.FREE])
    assert heap.any() and np.array_equal(cols["pid"][heap], cols["tid"][heap])  # pid = vtid
    assert np.array_equal(cols["tid"], original["tid"])
    assert set(cols["pid"][heap]) == set(original["tid"][heap])
    assert any("each thread (vtid) read as a process of its own" in w for w in info.warnings)


def test_lttng_ust_2_3_libc_provider(tmp_path):
    original, names, _ = _rows(DATA / "ctf" / "dbg")
    trace = _plain_copy(DATA / "ctf" / "dbg", tmp_path / "ust23",
                        lambda text: text.replace('"lttng_ust_libc:', '"ust_libc:'))
    cols, _, info = _rows(trace)
    for kind in (EventKind.MALLOC, EventKind.FREE, EventKind.CALLOC, EventKind.REALLOC):
        assert np.count_nonzero(cols["kind"] == kind) == np.count_nonzero(original["kind"] == kind)
    assert np.count_nonzero(cols["kind"] == EventKind.MALLOC) > 0
    heap = cols["kind"] == EventKind.MALLOC
    assert np.array_equal(cols["ptr"][heap], original["ptr"][original["kind"] == EventKind.MALLOC])
    assert not any("ust_libc" in reason for reason in info.skipped)
