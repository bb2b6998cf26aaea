"""The distribution: a wheel built from the repository carries the SQL package and the
native libraries, and works installed on its own (outside the source checkout)."""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import REPO


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(REPO),
                    "-w", str(out)], check=True, capture_output=True, cwd=out)
    (whl,) = out.glob("memq-*.whl")
    return whl


def test_wheel_contains_sql_package_and_native_libraries(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    sql = {f"ctf2perfetto/sql/memq/{p.name}" for p in (REPO / "sql" / "memq").glob("*.sql")}
    assert sql and sql <= names, sorted(sql - names)
    libs = {f"ctf2perfetto/lib/{n}" for n in ("libmemq_preload.so", "libmemqdecode.so", "libmemqencode.so")}
    assert libs <= names, sorted(libs - names)
    assert {"ctf2perfetto/cli/memq.py", "ctf2perfetto/engine/__init__.py"} <= names


def test_installed_wheel_registers_the_memq_package(wheel: Path, tmp_path: Path, test_data: Path) -> None:
    venv = tmp_path / "venv"
    # Dependencies come from this interpreter's site-packages; memq itself only from the wheel.
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    python = venv / "bin" / "python"
    # --ignore-installed: a memq of the same version in the system site-packages (an editable install of some
    # checkout) would otherwise count as installed, and the wheel would not be.
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--ignore-installed", str(wheel)], check=True,
                   capture_output=True)
    # A PYTHONPATH naming a checkout (how the tests run from one) would win over the installed wheel.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = subprocess.run([python, "-c", "import ctf2perfetto; print(ctf2perfetto.__file__)"], cwd=tmp_path,
                           check=True, capture_output=True, text=True, env=env).stdout
    assert where.startswith(str(venv)), where
    query = "INCLUDE PERFETTO MODULE memq.units; SELECT memq_mib(3145728) AS mib"
    run = subprocess.run([venv / "bin" / "memq", "sql", str(test_data / "kineto" / "base.json.gz"), query,
                          "--format", "csv"], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["mib", "3.0"]
