"""The command's environment: the LD_PRELOAD list and the preload library's settings."""
from __future__ import annotations

import ctypes.util
import os
from pathlib import Path

from ctf2perfetto.capture.triggers import CAPTURE_ENV, Capture
from ctf2perfetto.errors import MemqError
from ctf2perfetto.paths import native_library
from ctf2perfetto.capture.lttng import INSTALL_HINT
from ctf2perfetto.capture.reach import REACH_ENV

# LTTng's own preload helpers (liblttng-ust1): fork re-registers children
# that fork without exec; dl reports libraries dlopen'ed after start-up, only
# needed without memq's library, which writes its own library map.
LTTNG_FORK = "liblttng-ust-fork.so"
LTTNG_DL = "liblttng-ust-dl.so"
LIBC_WRAPPER = "liblttng-ust-libc-wrapper.so"
PRELOAD_LIBRARY = "libmemq_preload.so"
# Switches LTTng-UST's base-address statedump off (the library map memq's library writes
# instead, from memory): it reads every object's ELF file on each dlopen, session or not.
NO_BADDR_STATEDUMP_ENV = "LTTNG_UST_WITHOUT_BADDR_STATEDUMP"
# Content fingerprints of copies (docs/EVENTS.md "Content fingerprints"), passed to the preload library.
CONTENT_ENV = "MEMQ_CONTENT"
# The host heap threshold in bytes (preload/memq_heap.h MEMQ_ENV_HOST_MIN_SIZE); unset = heap wrappers forward only.
HOST_MIN_SIZE_ENV = "MEMQ_HOST_MIN_SIZE"


def _system_library(name: str) -> str:
    """The soname of an installed LTTng library (e.g. liblttng-ust-fork.so.1).

    LTTng unpacked outside the linker's cache (the GPU bundle, scripts/gpu-bundle.sh)
    is found in LD_LIBRARY_PATH instead, by full path: find_library only sees it
    through gcc/ld/objdump, which such a machine may lack.
    """
    found = ctypes.util.find_library(name[len("lib"):-len(".so")]) or _on_library_path(name)
    if not found:
        raise MemqError(f"{name} is missing: {INSTALL_HINT}")
    return found


def _on_library_path(name: str) -> str | None:
    """The first NAME.N (a soname) in the LD_LIBRARY_PATH directories, as a full path."""
    for directory in filter(None, os.environ.get("LD_LIBRARY_PATH", "").split(":")):
        for candidate in sorted(Path(directory).glob(f"{name}.[0-9]")):
            return str(candidate)
    return None


def memq_preloaded(apis: tuple[str, ...], host_source: str = "memq") -> bool:
    """Whether memq's library is preloaded: for the GPU APIs, or the heap when memq records it.

    Then it writes the library map (memq:lib_load, docs/EVENTS.md), else LTTng does.
    """
    return "hip" in apis or "cuda" in apis or ("libc" in apis and host_source != "lttng")


def preload_list(apis: tuple[str, ...], host_source: str = "memq") -> list[str]:
    """LD_PRELOAD entries, in load order.

    One heap wrapper only: with `--host-source lttng` memq's library (when the GPU APIs
    need it) gets no threshold and its heap wrappers just forward to LTTng's.
    """
    ours = memq_preloaded(apis, host_source)
    libs = [_system_library(name) for name in (LTTNG_FORK,) + (() if ours else (LTTNG_DL,))]
    if "libc" in apis and host_source == "lttng":
        libs.append(_system_library(LIBC_WRAPPER))
    if ours:
        libs.append(str(native_library(PRELOAD_LIBRARY)))
    return libs


# Set for the recorded command: the output directory of the memq record running it. A memq record started
# inside it would trace itself and start a session of its own under the outer one's preloads (lttng-ust then
# aborts at exit); it refuses instead.
RECORDING_ENV = "MEMQ_RECORDING"


def child_environment(env: dict[str, str], preload: list[str], mode: str, reach_dir: Path,
                      host: dict | None = None, content: str = "sampled") -> dict[str, str]:
    """The command's environment: our preloads first, then the user's own; the preload
    library's settings (a threshold only when memq records the heap: unset, it forwards;
    the content fingerprint mode); LTTng's base-address statedump off when memq's library
    writes the library map."""
    child = dict(env)
    child["LD_PRELOAD"] = ":".join(preload + [p for p in env.get("LD_PRELOAD", "").split(":") if p])
    if str(native_library(PRELOAD_LIBRARY)) in preload:
        child[NO_BADDR_STATEDUMP_ENV] = "1"
    child[REACH_ENV] = str(reach_dir)
    child.pop(HOST_MIN_SIZE_ENV, None)
    if host and host["source"] == "memq":
        child[HOST_MIN_SIZE_ENV] = str(host["min_size"])
    child[CONTENT_ENV] = content
    if mode == "blocking":
        child["LTTNG_UST_ALLOW_BLOCKING"] = "1"  # without it the channel's blocking timeout is ignored
    return child


def capture_env(env: dict[str, str], capture: Capture, command_start_ns: int) -> None:
    """MEMQ_CAPTURE for the command (removed when no window was asked for, so a stale one cannot apply)."""
    value = capture.env_value(command_start_ns)
    if value is None:
        env.pop(CAPTURE_ENV, None)
    else:
        env[CAPTURE_ENV] = value
