"""The tests run this checkout's code, whatever else is installed (support/checkout.py)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import CHECKOUT_BIN, REPO


def test_commands_on_path_are_the_checkouts() -> None:
    for name in ("memq", "ctf2perfetto"):
        assert Path(shutil.which(name)).parent == CHECKOUT_BIN
    proc = subprocess.run(["memq", "sql", "--help"], capture_output=True, text=True, check=True)
    assert "memq sql" in proc.stdout
    where = subprocess.run([sys.executable, "-c", "import ctf2perfetto; print(ctf2perfetto.__file__)"],
                           capture_output=True, text=True, check=True, cwd="/")
    assert Path(where.stdout.strip()).resolve().parent == REPO / "ctf2perfetto"


def test_a_foreign_ctf2perfetto_first_on_path_is_not_used(tmp_path: Path) -> None:
    # Another installation earlier on PATH (as pyenv's shims are): its commands only say who they are.
    foreign = tmp_path / "foreign-bin"
    foreign.mkdir()
    for name in ("memq", "ctf2perfetto"):
        (foreign / name).write_text("#!/bin/sh\necho FOREIGN\nexit 3\n")
        (foreign / name).chmod(0o755)
    probe = tmp_path / "test_probe.py"
    probe.write_text(textwrap.dedent("""
        import subprocess
        def test_probe():
            for name in ("memq", "ctf2perfetto"):
                out = subprocess.run([name, "--help"], capture_output=True, text=True)
                assert out.returncode == 0 and "FOREIGN" not in out.stdout, (name, out.stdout)
    """))
    env = {**os.environ, "PATH": os.pathsep.join([str(foreign), os.environ["PATH"]])}
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(REPO),
                           "-c", str(REPO / "pyproject.toml"), "--confcutdir", str(REPO / "tests"),
                           str(REPO / "tests" / "conftest.py"), str(probe)],
                          capture_output=True, text=True, env=env, cwd=REPO / "tests", timeout=300)
    assert "1 passed" in proc.stdout, proc.stdout + proc.stderr
    # and the same probe without the checkout's launchers does reach the foreign commands (the probe can fail)
    bare = subprocess.run(["sh", "-c", "ctf2perfetto --help"], capture_output=True, text=True, env=env)
    assert "FOREIGN" in bare.stdout
