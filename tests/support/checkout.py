"""Every command a test runs is this checkout's: `memq` and `ctf2perfetto` first on PATH, the checkout on PYTHONPATH.

An installed memq elsewhere (a pyenv shim, a user site, another clone's editable install) would otherwise answer a
test's `subprocess.run(["ctf2perfetto", ...])`, and the test would check someone else's code. `use_checkout()` runs
once, when conftest.py is imported (before any test), and writes two small launchers that run this interpreter
on this checkout's package; `tests/test_checkout.py` proves a foreign `ctf2perfetto` earlier on PATH is not used.
"""
from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# command name -> the module its launcher runs (pyproject.toml's [project.scripts])
ENTRY_POINTS = {"memq": "ctf2perfetto.cli.memq", "ctf2perfetto": "ctf2perfetto.cli.convert"}


def use_checkout() -> Path:
    """Put launchers of this checkout's commands first on PATH (and the checkout first on PYTHONPATH) for this
    process and every process it starts; returns their directory."""
    bin_dir = Path(tempfile.mkdtemp(prefix="memq-checkout-bin-"))
    atexit.register(shutil.rmtree, bin_dir, True)  # one per test session: not left in /tmp after it
    for name, module in ENTRY_POINTS.items():
        launcher = bin_dir / name
        launcher.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m {module} "$@"\n')
        launcher.chmod(0o755)
    os.environ["PATH"] = os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")])
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")]))
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    return bin_dir
