"""A reader that goes away (`memq ... | head`) ends the command quietly, with exit 0."""
from __future__ import annotations

import subprocess


def test_closed_stdout_is_not_an_error(test_data) -> None:
    trace = test_data / "kineto" / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
    proc = subprocess.Popen(["memq", "sql", str(trace), "SELECT id, ts, name FROM slice"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline().split() == [b"id", b"ts", b"name"]
    proc.stdout.close()  # like `| head -1` exiting: the rest of the 68k rows hit a broken pipe
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, stderr
    assert stderr == "", stderr
