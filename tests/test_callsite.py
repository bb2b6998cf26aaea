"""Call sites: `ip` -> binary + function (+ file:line) on real recordings.

A C program with known functions (in the executable and in a library it
dlopen()s after start) allocates known sizes under `memq record`; after
conversion, attribute(..., "callsite") must name those functions and lines.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import pandas as pd
import pytest

from ctf2perfetto.analysis.attribution import attribute
from ctf2perfetto.analysis.callsite import ElfFile, Mapping, Symbolizer
from ctf2perfetto.engine import open_trace
from ctf2perfetto.errors import MemqError, UsageError

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
	printf("%d\n", getpid());
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
def recorded(tmp_path_factory) -> tuple[Path, int]:
    work = tmp_path_factory.mktemp("callsite")
    (work / "prog.c").write_text(PROGRAM)
    (work / "lib.c").write_text(LIBRARY)
    subprocess.run(["gcc", "-g", "-O1", "-shared", "-fPIC", "-o", str(work / "libcallsite.so"), str(work / "lib.c")],
                   check=True)
    subprocess.run(["gcc", "-g", "-O1", "-o", str(work / "callsite_prog"), str(work / "prog.c"), "-ldl"], check=True)
    trace = work / "trace"
    rec = subprocess.run(["memq", "record", "-o", str(trace), "--", str(work / "callsite_prog"),
                          str(work / "libcallsite.so")], check=True, capture_output=True, text=True, timeout=120)
    out = work / "out.pftrace"
    subprocess.run(["ctf2perfetto", str(trace), "-o", str(out)], check=True, capture_output=True, timeout=120)
    return out, int(rec.stdout.split()[-1])


def allocations(engine, pid: int) -> pd.DataFrame:
    """The program's allocations of the known sizes, as asked for (other traced processes may run meanwhile)."""
    sizes = ", ".join(map(str, EXPECTED))
    return engine.query(f"""
        SELECT alloc_id, size FROM (
          SELECT EXTRACT_ARG(s.arg_set_id, 'debug.alloc_id') AS alloc_id,
            EXTRACT_ARG(s.arg_set_id, 'debug.requested') AS size
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
