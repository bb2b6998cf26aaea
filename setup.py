"""Build hooks: compile the native parts and ship the SQL package inside the wheel.

pyproject.toml holds the metadata; this file only adds two build steps that
declarative setuptools cannot express:
  * `make native` compiles preload/ (the LD_PRELOAD library) and
    ctf2perfetto/ctf/native/ (the libbabeltrace2 decoder) and ctf2perfetto/convert/native/
    (the packet encoder) with the system gcc;
  * sql/memq/*.sql is copied to ctf2perfetto/sql/memq so an installed wheel
    carries the PerfettoSQL package next to the code that registers it.
"""
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildWithNative(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # a source checkout: scripts/install.sh runs `make native` in place
        pkg = Path(self.build_lib).resolve() / "ctf2perfetto"  # absolute: sub-makes run in their own dirs
        subprocess.run(["make", "-C", str(ROOT), "native", f"LIBDIR={pkg / 'lib'}"], check=True)
        sql_out = pkg / "sql" / "memq"
        if sql_out.exists():
            shutil.rmtree(sql_out)
        shutil.copytree(ROOT / "sql" / "memq", sql_out)


setup(cmdclass={"build_py": BuildWithNative})
