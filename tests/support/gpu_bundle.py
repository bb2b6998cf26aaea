"""The GPU bundle (scripts/gpu-bundle.sh) and a machine without LTTng, as far as one can be faked here.

`hidden_path(dest)` is a PATH directory holding only the tools the bundle and
scripts/gpu-check.sh use, without the system's lttng / lttng-sessiond; `isolated(argv)`
runs a command in its own mount namespace with fresh /var/run/lttng, ~/.lttng and
/dev/shm (a private LTTng world), so the session daemon `memq record` finds or
starts there is the bundle's, never one another test left running
(`system_lttng=True`: the system's own, alone).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
FAKES = REPO / "tests" / "fakes"
GPU = REPO / "tests" / "gpu"

# What gpu-bundle's wrappers, gpu-check.sh and the g++ build of cuda_all run by name.
TOOLS = ("bash", "sh", "env", "dirname", "mktemp", "mkdir", "tee", "date", "tail", "head", "cp", "rm", "seq",
         "tar", "gzip", "stat", "awk", "tr", "hostname", "cat", "sort", "wc", "ls", "uname", "readlink", "grep",
         "sed", "sleep", "timeout", "true", "g++", "gcc", "as", "ld")

ISOLATE = r"""
sys() { PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@"; }  # the command itself gets the caller's PATH
sys mkdir -p /var/run/lttng "$HOME/.lttng"
sys mount -t tmpfs none /var/run/lttng && sys mount -t tmpfs none "$HOME/.lttng" &&
  sys mount -t tmpfs none /dev/shm || exit 97
# The GPU machines have no /usr/share/xml/lttng: the bundle's session daemon must find its schema itself
# (without it, it exits at start-up: "Session load failed", seen on an H100 machine).
[ -z "$MEMQ_ISOLATED_SYSTEM_LTTNG" ] && [ -d /usr/share/xml/lttng ] &&
  { sys mount -t tmpfs none /usr/share/xml/lttng || exit 97; }
"$@"
rc=$?
myns=$(sys readlink /proc/$$/ns/mnt)
for p in /proc/[0-9]*; do
  case "$(sys cat $p/comm 2>/dev/null)" in lttng-sessiond|lttng-consumerd) ;; *) continue ;; esac
  [ "$(sys readlink $p/ns/mnt 2>/dev/null)" = "$myns" ] && kill "${p#/proc/}" 2>/dev/null
done
exit $rc
"""


def build_bundle(dest: Path) -> Path:
    proc = subprocess.run(["bash", str(REPO / "scripts" / "gpu-bundle.sh"), str(dest)], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, f"gpu-bundle.sh failed:\n{proc.stderr}"
    return dest


def build_fake_cudart13(dest: Path) -> Path:
    """The fake CUDA runtime as libcudart.so.13 (CUDA 13 symbol version) with cuda_all's extra calls."""
    dest.mkdir(parents=True, exist_ok=True)
    lib = dest / "libcudart.so.13"
    subprocess.run(["gcc", "-D_GNU_SOURCE", "-O2", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared", f"-I{FAKES}",
                    "-Wl,-soname,libcudart.so.13", f"-Wl,--version-script={GPU / 'fake_cudart13.map'}",
                    "-o", str(lib), str(FAKES / "fake_cuda.c"), str(GPU / "fake_cudart13.c"), "-lpthread"],
                   check=True, capture_output=True, text=True)
    return lib


def cuda_all_build_env(cudart: Path) -> dict[str, str]:
    """GPU_CHECK_BUILD(_LIBS) for gpu-check.sh: cuda_all.cu as plain C++ against the fake libcudart.so.13."""
    return {"GPU_CHECK_BUILD": f"g++ -D_GNU_SOURCE -O2 -Wall -Wextra -Werror -x c++ -I{GPU / 'shim'} -I{FAKES} -o",
            "GPU_CHECK_BUILD_LIBS": f"-x none -L{cudart.parent} -l:libcudart.so.13 -Wl,-rpath,{cudart.parent}"}


def rodinia_build_env(cudart: Path) -> dict[str, str]:
    """GPU_CHECK_RODINIA_* for gpu-check.sh: tests/fakes/rodinia_work.c with the fake's kernels (direct writes of
    the fake device memory) against the fake libcudart.so.13, with gcc instead of nvcc."""
    return {"GPU_CHECK_RODINIA_BUILD": f"gcc -D_GNU_SOURCE -O2 -Wall -Wextra -Werror -std=gnu11 -I{FAKES} -o",
            "GPU_CHECK_RODINIA_KERNELS": str(FAKES / "rodinia_kernels_fake.c"),
            "GPU_CHECK_RODINIA_LIBS": f"-L{cudart.parent} -l:libcudart.so.13 -Wl,-rpath,{cudart.parent} -lm"}


def hidden_path(dest: Path) -> Path:
    """A directory of links to TOOLS and the real Python interpreter (not a pyenv shim), nothing else."""
    dest.mkdir(parents=True, exist_ok=True)
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found, f"{tool} is not installed"
        (dest / tool).symlink_to(found)
    (dest / "python3").symlink_to(os.path.realpath(sys.executable))
    assert shutil.which("lttng", path=str(dest)) is None and shutil.which("lttng-sessiond", path=str(dest)) is None
    return dest


def isolated(argv: list[str], *, env: dict[str, str], cwd: Path | None = None, timeout: float = 600,
             system_lttng: bool = False) -> subprocess.CompletedProcess:
    """Run argv in a private mount namespace with its own LTTng run directories (needs root, as CI has).

    As on a GPU machine, the system's LTTng session schema is hidden, unless `system_lttng` (a session daemon of
    the system's LTTng of its own: a test or bench that other sessions of this user must not disturb)."""
    env = {**env, "MEMQ_ISOLATED_SYSTEM_LTTNG": "1"} if system_lttng else env
    return subprocess.run(["/usr/bin/unshare", "-m", "--propagation", "private", "/bin/bash", "-c", ISOLATE, "isolated",
                           *argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
