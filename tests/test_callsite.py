"""Call sites: `ip` -> binary + function (+ file:line) on real recordings.

A C program with known functions (in the executable and in a library it
dlopen()s after start) allocates known sizes under `memq record`; after
conversion, attribute(..., "callsite") must name those functions and lines.
The library map comes from memq's preload library (memq:lib_load) by default
and from LTTng's statedump with `--host-source lttng`: both must give the same.
"""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from ctf2perfetto.analysis.attribution import attribute
from ctf2perfetto.analysis.callsite import ElfFile, Mapping, Symbolizer
from ctf2perfetto.engine import open_trace
from ctf2perfetto.errors import MemqError, UsageError
from support.lttng import read_events

PROGRAM = r"""
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
__attribute__((noinline)) void *alloc_weights(void) { return malloc(123456); }     /* line 6 */
__attribute__((noinline)) void *alloc_buffer(void) { return calloc(1, 654321); }   /* line 7 */
static __attribute__((noinline)) void *alloc_scratch(void) { return realloc(NULL, 77777); } /* line 8 */

int main(int argc, char **argv)
{
	void *lib = dlopen(argv[1], RTLD_NOW);
	if (!lib) { fprintf(stderr, "%s\n", dlerror()); return 1; }
	void *(*lib_alloc)(void) = (void *(*)(void))dlsym(lib, "lib_alloc");
	void *p[4] = { alloc_weights(), alloc_buffer(), alloc_scratch(), lib_alloc() };
	for (int i = 0; i < 4; i++)
		free(p[i]);
	/* what memq record set for this process (the baddr statedump switch), then the pid */
	printf("%s\n%d\n", getenv("LTTNG_UST_WITHOUT_BADDR_STATEDUMP") ? getenv("LTTNG_UST_WITHOUT_BADDR_STATEDUMP") : "unset",
	       getpid());
	return 0;
}
"""
LIBRARY = r"""
#include <stdlib.h>
__attribute__((noinline)) void *lib_alloc(void) { return malloc(99999); }  /* line 3 */
"""
# size -> (function, binary name, source line)
EXPECTED = {
    123456: ("alloc_weights", "callsite_prog", 6),
    654321: ("alloc_buffer", "callsite_prog", 7),
    77777: ("alloc_scratch", "callsite_prog", 8),
    99999: ("lib_alloc", "libcallsite.so", 3),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("callsite")
    (work / "runpath").mkdir()
    (work / "prog.c").write_text(PROGRAM)
    (work / "lib.c").write_text(LIBRARY)
    subprocess.run(["gcc", "-g", "-O1", "-shared", "-fPIC", "-o", str(work / "libcallsite.so"), str(work / "lib.c")],
                   check=True)
    subprocess.run(["gcc", "-g", "-O1", "-o", str(work / "callsite_prog"), str(work / "prog.c"), "-ldl"], check=True)
    # the same program finding the library by its bare name in its own RUNPATH
    subprocess.run(["gcc", "-g", "-O1", "-o", str(work / "runpath" / "callsite_prog"), str(work / "prog.c"), "-ldl",
                    "-Wl,--enable-new-dtags,-rpath,$ORIGIN/.."], check=True)
    return work


def record_program(work: Path, name: str, *options: str, program: str = "callsite_prog",
                   library: str | None = None) -> tuple[Path, Path, int, str]:
    """The converted trace, the recording, the program's pid and the statedump switch it saw."""
    trace = work / name
    rec = subprocess.run(["memq", "record", "-o", str(trace), *options, "--", str(work / program),
                          library or str(work / "libcallsite.so")], check=True, capture_output=True, text=True,
                         timeout=120)
    out = work / f"{name}.pftrace"
    subprocess.run(["ctf2perfetto", str(trace), "-o", str(out)], check=True, capture_output=True, timeout=120)
    switch, pid = rec.stdout.split()[-2:]
    return out, trace, int(pid), switch


@pytest.fixture(scope="module")
def recorded_both(built: Path) -> dict[str, tuple[Path, Path, int, str]]:
    """The program recorded with memq's library map (the default) and with LTTng's (`--host-source lttng`)."""
    return {"memq": record_program(built, "trace"),
            "lttng": record_program(built, "trace-lttng", "--api", "libc", "--host-source", "lttng")}


@pytest.fixture(scope="module")
def recorded(recorded_both) -> tuple[Path, int]:
    out, _, pid, _ = recorded_both["memq"]
    return out, pid


def allocations(engine, pid: int) -> pd.DataFrame:
    """The program's allocations of the known sizes, as asked for (other traced processes may run meanwhile; LTTng's
    libc wrapper records only the size asked for, memq's heap wrapper that as `requested`)."""
    sizes = ", ".join(map(str, EXPECTED))
    return engine.query(f"""
        SELECT alloc_id, size FROM (
          SELECT EXTRACT_ARG(s.arg_set_id, 'debug.alloc_id') AS alloc_id,
            COALESCE(EXTRACT_ARG(s.arg_set_id, 'debug.requested'), EXTRACT_ARG(s.arg_set_id, 'debug.size')) AS size
          FROM slice s JOIN thread_track tt ON s.track_id = tt.id JOIN thread USING (utid) JOIN process p USING (upid)
          WHERE p.pid = {pid} AND s.category = 'memq.heap')
        WHERE size IN ({sizes})""")


def test_callsite_names_the_allocating_functions(recorded: tuple[Path, int]) -> None:
    with open_trace(recorded[0]) as engine:
        df = allocations(engine, recorded[1])
        assert sorted(df["size"]) == sorted(EXPECTED)
        result = attribute(engine, df, "callsite")
    for row in result.itertuples():
        function, binary, line = EXPECTED[row.size]
        assert row.function == function
        assert Path(row.binary).name == binary
        assert row.source is not None and row.source.endswith(f".c:{line}"), row.source
        assert function in row.callsite


def test_both_library_maps_resolve_the_same(recorded_both) -> None:
    """memq's own map and LTTng's name the same binary, function and line for every allocation; only memq record
    with memq's library switches LTTng's baddr statedump off in the traced process."""
    results = {}
    for source, (out, _, pid, _) in recorded_both.items():
        with open_trace(out) as engine:
            result = attribute(engine, allocations(engine, pid), "callsite")
        results[source] = sorted((r.size, r.function, Path(r.binary).name, r.source.rsplit("/", 1)[-1])
                                 for r in result.itertuples())
    expected = sorted((size, f, b, f"prog.c:{line}" if b == "callsite_prog" else f"lib.c:{line}")
                      for size, (f, b, line) in EXPECTED.items())
    assert results["memq"] == results["lttng"] == expected
    assert recorded_both["memq"][3] == "1" and recorded_both["lttng"][3] == "unset"


def library_map(trace: Path, pid: int, events: tuple[str, ...]) -> dict[str, tuple[int, str]]:
    """path -> (memsz, build id in hex) of a process, from the given load events and LTTng's build_id events."""
    rows = read_events(trace, pids={pid})
    build_ids = {e["baddr"]: bytes(e["build_id"]).hex() for e in rows if e["event"].endswith(":build_id")}
    return {e["path"]: (e["memsz"], bytes(e["build_id"]).hex() if "build_id" in e else build_ids.get(e["baddr"], ""))
            for e in rows if e["event"] in events}


def readelf_build_id(path: Path) -> str:
    """The GNU build id `readelf -n` reads from the file."""
    notes = subprocess.run(["readelf", "-n", str(path)], check=True, capture_output=True, text=True).stdout
    return re.search(r"Build ID: ([0-9a-f]+)", notes).group(1)


def test_memq_library_map_matches_the_files_and_lttng(recorded_both, built: Path) -> None:
    """memq:lib_load (written from memory) gives LTTng's path and memsz, and the build id readelf reads from the file,
    for the program and the library it dlopen()s after start; no LTTng library events are left."""
    _, trace, pid, _ = recorded_both["memq"]
    _, lttng_trace, lttng_pid, _ = recorded_both["lttng"]
    ours = library_map(trace, pid, ("memq:lib_load",))
    theirs = library_map(lttng_trace, lttng_pid, ("lttng_ust_statedump:bin_info", "lttng_ust_lib:load"))
    for name in ("callsite_prog", "libcallsite.so"):
        path = os.path.realpath(built / name)
        assert ours[path] == theirs[path] == (ours[path][0], readelf_build_id(built / name))
    # every object with a file (LTTng reads those from the file: memsz 0 and no build id for the vDSO)
    shared = {p for p in set(ours) & set(theirs) if p.startswith("/")}
    assert {p for p in shared if ours[p] != theirs[p]} == set() and len(shared) >= 4  # libc, ld.so, ... too
    assert not [e for e in read_events(trace, pids={pid}) if e["event"].startswith("lttng_ust_lib:")
                or e["event"] == "lttng_ust_statedump:bin_info"]
    # one memq.binary per object, though the whole map is written twice (at start-up and by the first event)
    raw = [e["path"] for e in read_events(trace, pids={pid}, prefix="memq:lib_load")]
    with open_trace(recorded_both["memq"][0]) as engine:
        converted = engine.query(f"INCLUDE PERFETTO MODULE memq.attribution; SELECT path FROM memq_binary "
                                 f"WHERE pid = {pid}")["path"].tolist()
    assert sorted(converted) == sorted(set(raw))


def test_library_found_through_the_callers_runpath(built: Path) -> None:
    """dlopen("libcallsite.so") is searched in its caller's RUNPATH (memq's dlopen hands it on as a tail call): it
    loads, and the library's map event, written at the next memq event, resolves its call site."""
    out, trace, pid, _ = record_program(built, "trace-runpath", program="runpath/callsite_prog",
                                        library="libcallsite.so")
    with open_trace(out) as engine:
        result = attribute(engine, allocations(engine, pid), "callsite")
    assert sorted((r.function, Path(r.binary).name) for r in result.itertuples()) == sorted(
        (f, b) for f, b, _ in EXPECTED.values())
    ours = library_map(trace, pid, ("memq:lib_load",))
    assert ours[os.path.realpath(built / "libcallsite.so")][1] == readelf_build_id(built / "libcallsite.so")


def test_by_op_without_kineto_is_a_usage_error(recorded: tuple[Path, int]) -> None:
    with open_trace(recorded[0]) as engine:
        df = allocations(engine, recorded[1])
        with pytest.raises(UsageError, match="--kineto"):
            attribute(engine, df, "op")
        with pytest.raises(UsageError, match="expected one of"):
            attribute(engine, df, "thread")
        with pytest.raises(MemqError, match="no call_id or alloc_id"):
            attribute(engine, df.rename(columns={"alloc_id": "id"}), "callsite")


def test_missing_or_changed_binaries_are_reported(tmp_path: Path) -> None:
    prog = tmp_path / "prog"
    (tmp_path / "prog.c").write_text("int main(void) { return 0; }\n")
    subprocess.run(["gcc", "-o", str(prog), str(tmp_path / "prog.c")], check=True)
    elf = ElfFile(prog)
    assert len(elf.build_id) == 40  # gcc links a GNU build-id note by default
    symbolizer = Symbolizer([
        Mapping(1, 0x1000, 0x1000, str(tmp_path / "gone.so")),
        Mapping(1, 0x5000, 0x4000, str(prog), build_id="00" * 20),
        Mapping(1, 0x9000, 0x4000, str(tmp_path / "prog.c")),
    ])
    gone, changed, not_elf, nowhere = symbolizer.resolve([(1, 0x1100, None), (1, 0x5100, None),
                                                          (1, 0x9100, None), (1, 0xF0000, None)])
    assert gone.function is None and "gone.so" in gone.problem
    assert changed.function is None and "changed on disk" in changed.problem
    assert not_elf.function is None and "not a 64-bit" in not_elf.problem
    assert nowhere.binary is None and nowhere.label() == "[unknown binary]"
    assert len(symbolizer.problems()) == 3


def test_stripped_versioned_library_resolves_through_dynsym(tmp_path: Path) -> None:
    """Only .dynsym left (strip), symbols versioned (`lib_alloc@@MEMQ_1`): the plain name comes back."""
    (tmp_path / "lib.c").write_text(LIBRARY)
    (tmp_path / "lib.map").write_text("MEMQ_1 { global: lib_alloc; local: *; };\n")
    lib = tmp_path / "libv.so"
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", f"-Wl,--version-script={tmp_path / 'lib.map'}", "-o", str(lib),
                    str(tmp_path / "lib.c")], check=True)
    subprocess.run(["strip", "--strip-all", str(lib)], check=True)
    dynsyms = subprocess.run(["readelf", "-W", "--dyn-syms", str(lib)], capture_output=True, text=True).stdout
    row = next(line.split() for line in dynsyms.splitlines() if "lib_alloc@@MEMQ_1" in line)
    address, size = int(row[1], 16), int(row[2])
    elf = ElfFile(lib)
    assert elf.function(address + size // 2) == "lib_alloc"
    assert elf.function(address + size + 4096) is None
