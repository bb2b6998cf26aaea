"""`python3 -m ctf2perfetto.torchprof`: a script run under the PyTorch profiler, unchanged."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import sys, torch
print("argv", sys.argv[1:], __name__)
a = torch.randn(64, 64)
b = a @ a
sys.exit(int(sys.argv[1]))
"""


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ctf2perfetto.torchprof", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=120)


def test_script_runs_as_main_with_its_args_and_status(tmp_path: Path) -> None:
    (tmp_path / "work.py").write_text(SCRIPT)
    out = tmp_path / "profile.json.gz"
    proc = run("-o", str(out), "work.py", "3", "--steps", "2", cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert "argv ['3', '--steps', '2'] __main__" in proc.stdout
    doc = json.loads(gzip.decompress(out.read_bytes()))
    ops = {e["name"] for e in doc["traceEvents"] if e.get("cat") == "cpu_op"}
    assert {"aten::randn", "aten::mm"} <= ops
    assert any(e.get("name") == "[memory]" for e in doc["traceEvents"])  # memory events on by default


def test_activities_and_no_memory(tmp_path: Path) -> None:
    """--activities cpu --no-memory: the operators, no [memory] events (a long GPU run uses cuda alone)."""
    (tmp_path / "work.py").write_text(SCRIPT)
    out = tmp_path / "profile.json"
    proc = run("-o", str(out), "--activities", "cpu", "--no-memory", "work.py", "0", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    events = json.loads(out.read_text())["traceEvents"]
    assert {"aten::randn", "aten::mm"} <= {e["name"] for e in events if e.get("cat") == "cpu_op"}
    assert not any(e.get("name") == "[memory]" for e in events)


def test_bad_usage_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "work.py").write_text(SCRIPT)
    missing = run("-o", "profile.json", "nowhere.py", cwd=tmp_path)
    bad_dir = run("-o", str(tmp_path / "no" / "p.json"), "work.py", "0", cwd=tmp_path)
    bad_activity = run("-o", "profile.json", "--activities", "cpu,gpu", "work.py", "0", cwd=tmp_path)
    no_cuda = run("-o", "profile.json", "--activities", "cuda", "work.py", "0", cwd=tmp_path)  # CPU-only torch here
    for proc, text in ((missing, "nowhere.py: script not found"), (bad_dir, "does not exist"),
                       (bad_activity, "--activities cpu,gpu: expected a comma-separated list of cpu, cuda"),
                       (no_cuda, "--activities cuda: torch sees no CUDA device")):
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        assert lines[0].startswith("torchprof: error: ") and text in lines[0]
