"""Build the fake GPU runtimes and the workloads (tests/fakes/) with gcc.

`build_fakes(dest)` compiles, into `dest`:
  libamdhip64.so, libcudart.so.12   fake HIP / CUDA runtimes (real exported names and signatures)
  libcuda.so.1                      fake CUDA driver (memory API, VMM, cuGetProcAddress)
  libhipwork.so, libcudawork.so     workload libraries (every wrapped call, logged as JSON lines)
  workload                          C driver: hip|cuda|fork|crash|wait LOG, stress THREADS ITERS
  driver_work                       direct|procaddr|vmm|runtime LOG: the paths around a linked runtime
  window_work                       profiler|fork|heap hip|cuda LOG, steps .., race ..: capture windows
  libcudart.so.13, libmod12.so,     a second CUDA runtime copy (CUDA 13) and one module linked with each
  libmod13.so, two_runtimes         copy; two_runtimes DIR LOG runs both in one process
  stream_work                       hip|cuda LOG: per-thread default stream entry points and stream ids
  heap_work                         host heap only: edges|threads|idle|fork (memq's heap wrappers)
  content_work                      copy patterns for content fingerprints (staging loop, read-backs, ...)
and returns their paths. Everything finds its neighbours through an $ORIGIN
rpath, so nothing needs LD_LIBRARY_PATH.
"""
from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

FAKES = Path(__file__).resolve().parent.parent / "fakes"
GPU = FAKES.parent / "gpu"
PRELOAD = FAKES.parent.parent / "preload"
CFLAGS = ["-D_GNU_SOURCE", "-O2", "-g", "-Wall", "-Wextra", "-Werror", "-std=gnu11"]
RPATH = "-Wl,-rpath,$ORIGIN"
# Programs that use fake_mem.h for the 3D-copy parameter struct only: the rest is unused there.
FAKE_MEM_STRUCTS_ONLY = ("-Wno-unused-function", "-Wno-unused-variable")


@dataclass(frozen=True)
class FakeGpu:
    """Paths of the built fakes (all in one directory)."""

    dir: Path
    hip_runtime: Path
    cuda_runtime: Path
    hip_work: Path
    cuda_work: Path
    workload: Path
    python_workload: Path  # work_local.py: ctypes, RTLD_LOCAL
    cuda_driver: Path
    driver_work: Path
    two_runtimes: Path
    stream_work: Path  # hip|cuda LOG: per-thread-stream entry points, stream ids
    heap_work: Path
    content_work: Path
    window_work: Path

    def python_argv(self, python: str, runtime: str, log: Path) -> list[str]:
        """argv running the `runtime` workload from Python through ctypes (RTLD_LOCAL)."""
        return [python, str(self.python_workload), str(self.dir), runtime, str(log)]


def _gcc(args: list[str]) -> None:
    proc = subprocess.run(["gcc", *CFLAGS, *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"gcc {' '.join(args)} failed:\n{proc.stderr}")


def build_fakes(dest: Path) -> FakeGpu:
    """Compile the fakes and workloads into `dest` (created if needed)."""
    dest.mkdir(parents=True, exist_ok=True)
    src = {name: str(FAKES / name) for name in ("fake_hip.c", "fake_cuda.c", "fake_cudadrv.c", "hip_work.c",
                                                "cuda_work.c", "workload.c", "driver_work.c", "stream_work.c",
                                                "heap_work.c", "content_work.c", "window_work.c")}
    hip = dest / "libamdhip64.so"
    cuda = dest / "libcudart.so.12"
    hip_work = dest / "libhipwork.so"
    cuda_work = dest / "libcudawork.so"
    exe = dest / "workload"
    inc = f"-I{FAKES}"
    _gcc(["-fPIC", "-shared", inc, "-Wl,-soname,libamdhip64.so", "-o", str(hip), src["fake_hip.c"], "-lpthread"])
    _gcc(["-fPIC", "-shared", inc, "-Wl,-soname,libcudart.so.12", f"-Wl,--version-script={FAKES / 'fake_cudart12.map'}",
          "-o", str(cuda), src["fake_cuda.c"], "-lpthread", "-ldl"])
    _gcc(["-fPIC", "-shared", inc, RPATH, "-o", str(hip_work), src["hip_work.c"], f"-L{dest}", "-l:libamdhip64.so"])
    _gcc(["-fPIC", "-shared", inc, RPATH, "-o", str(cuda_work), src["cuda_work.c"], f"-L{dest}", "-l:libcudart.so.12"])
    _gcc([inc, RPATH, "-o", str(exe), src["workload.c"], f"-L{dest}", "-l:libhipwork.so", "-l:libcudawork.so",
          "-l:libamdhip64.so", "-lpthread"])
    driver = dest / "libcuda.so.1"
    _gcc(["-fPIC", "-shared", inc, "-Wl,-soname,libcuda.so.1", "-o", str(driver), src["fake_cudadrv.c"], "-lpthread"])
    driver_work = dest / "driver_work"
    _gcc([inc, RPATH, *FAKE_MEM_STRUCTS_ONLY, "-o", str(driver_work), src["driver_work.c"],
          f"-L{dest}", "-l:libcuda.so.1", "-ldl"])
    _build_two_runtimes(dest)
    stream_work = dest / "stream_work"
    _gcc([inc, RPATH, *FAKE_MEM_STRUCTS_ONLY, "-o", str(stream_work), src["stream_work.c"], f"-L{dest}",
          "-l:libamdhip64.so",
          "-l:libcudart.so.12", "-l:libcuda.so.1", "-lpthread"])
    heap_work = dest / "heap_work"
    _gcc(["-o", str(heap_work), src["heap_work.c"], "-lpthread"])
    content_work = dest / "content_work"
    _gcc([inc, RPATH, "-o", str(content_work), src["content_work.c"], f"-L{dest}", "-l:libcudart.so.12",
          "-l:libamdhip64.so"])
    window_work = dest / "window_work"
    _gcc([inc, RPATH, "-o", str(window_work), src["window_work.c"], f"-L{dest}", "-lpthread", "-l:libamdhip64.so",
          "-l:libcudart.so.12", "-l:libcuda.so.1"])
    return FakeGpu(dest, hip, cuda, hip_work, cuda_work, exe, FAKES / "work_local.py", driver, driver_work,
                   dest / "two_runtimes", stream_work, heap_work, content_work, window_work)


def _build_two_runtimes(dest: Path) -> None:
    """libcudart.so.13 (fake_cuda.c as CUDA 13, with that symbol version), libmod12.so / libmod13.so
    (cuda_module.c linked with each copy) and two_runtimes, which dlopens both modules."""
    inc = f"-I{FAKES}"
    _gcc(["-fPIC", "-shared", inc, "-DFAKE_CUDA_DEFAULT_VERSION=13000", "-Wl,-soname,libcudart.so.13",
          f"-Wl,--version-script={GPU / 'fake_cudart13.map'}", "-o", str(dest / "libcudart.so.13"),
          str(FAKES / "fake_cuda.c"), "-lpthread", "-ldl"])
    for major in (12, 13):
        _gcc(["-fPIC", "-shared", inc, RPATH, f"-DMODULE_MAJOR={major}", "-o", str(dest / f"libmod{major}.so"),
              str(FAKES / "cuda_module.c"), f"-L{dest}", f"-l:libcudart.so.{major}"])
    _gcc([inc, "-o", str(dest / "two_runtimes"), str(FAKES / "two_runtimes.c"), "-ldl"])


def build_table_check(dest: Path) -> Path:
    """tests/fakes/table_check.c: preload/memq_table.c compiled into a test program (internals visible)."""
    dest.mkdir(parents=True, exist_ok=True)
    lttng = subprocess.run(["pkg-config", "--cflags", "lttng-ust"], capture_output=True, text=True,
                           check=True).stdout.split()
    exe = dest / "table_check"
    _gcc([f"-I{PRELOAD}", *lttng, "-o", str(exe), str(FAKES / "table_check.c"), "-lpthread", "-ldl"])
    return exe
