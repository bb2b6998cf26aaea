"""GVProf's Rodinia findings (GVProf/GVProf-samples, GVProf's docs/rodinia.md) on the fake CUDA runtime.

tests/fakes/rodinia_work.c makes the CUDA calls of backprop, streamcluster, cfd and bfs, each as the
original and as GVProf's fix, with kernels that write the fake device memory directly (untraced, as a
GPU's are), and logs every copy with what the program knows of it: whether the destination already held
the bytes (its data flow, not memq). Each run is recorded with the real `memq record` and judged by
tools/rodinia_pairs.py against analyses.redundant_copies: every finding is reported in the original with
the class and evidence the program implies and is gone from the fix; every other copy is flagged exactly
when the program says it moved nothing new, except the listed disagreements (tools.rodinia_pairs.KNOWN:
what memq cannot see, and why), each of which must still happen. scripts/gpu-check.sh runs the same
program built by nvcc with real kernels (tests/gpu/rodinia_kernels.cu) on a GPU.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from support.fakes import FAKES
from support.lttng import record
from tools import rodinia_pairs
from tools.rodinia_pairs import judge, read_log, verdicts

SIZES = {"backprop": 65536, "streamcluster": 8192, "cfd": 16384, "bfs": 65536}  # rodinia_work.c's defaults


@pytest.fixture(scope="module")
def rodinia_work(fake_gpu) -> Path:
    exe = fake_gpu.dir / "rodinia_work"
    if not exe.exists():
        subprocess.run(["gcc", "-D_GNU_SOURCE", "-O2", "-Wall", "-Wextra", "-Werror", "-std=gnu11", f"-I{FAKES}",
                        f"-Wl,-rpath,{fake_gpu.dir}", "-o", str(exe), str(FAKES / "rodinia_work.c"),
                        str(FAKES / "rodinia_kernels_fake.c"), f"-L{fake_gpu.dir}", "-l:libcudart.so.12", "-lm"],
                       check=True, capture_output=True, text=True)
    return exe


def run(exe: Path, tmp: Path, program: str, variant: str, *, content: str = "sampled",
        unified: bool = False) -> tuple[list[dict], object]:
    """Record one program run; (its log, memq's per-copy verdicts)."""
    name = f"{program}-{variant}-{content}-{'unified' if unified else 'discrete'}"
    log = tmp / f"{name}.jsonl"
    env = {**os.environ, "FAKE_GPU_UNIFIED": "1" if unified else "0"}
    record(tmp / name, [str(exe), program, variant, str(log)], api="cuda,libc", extra=("--content", content),
           env=env)
    return read_log(log), rodinia_pairs.memq_copies(tmp / name)


@pytest.fixture(scope="module")
def discrete(rodinia_work, tmp_path_factory) -> dict[str, dict]:
    """Every program, original and fix, on the discrete fake with the default settings."""
    tmp = tmp_path_factory.mktemp("rodinia")
    return {p: {v: run(rodinia_work, tmp, p, v) for v in ("orig", "fix")} for p in rodinia_pairs.PROGRAMS}


def lines(program: str, runs: dict, device: str = "discrete", content: str = "sampled") -> dict[str, tuple]:
    return {name: (ok, detail) for name, ok, detail in judge(program, runs, device, content)}


@pytest.mark.parametrize("program", rodinia_pairs.PROGRAMS)
def test_each_pair_as_the_program_says(discrete, program) -> None:
    got = lines(program, discrete[program])
    assert got and all(ok for ok, _ in got.values()), got


def test_backprop_copy_back_is_a_no_op(discrete) -> None:
    calls, copies = discrete["backprop"]["orig"]
    back = [c for c in calls if c["finding"] == "backprop.input_units" and c["direction"] == "DtoH"]
    assert len(back) == 1 and back[0]["bytes"] == (SIZES["backprop"] + 1) * 4 and back[0]["truth"] == "redundant"
    v = next(v for v in verdicts(calls, copies, "discrete", "sampled")[0] if v.call is back[0])
    assert (v.cls, v.evidence) == ("no_op", "content")
    fix_calls, fix_copies = discrete["backprop"]["fix"]
    upload = next(c for c in fix_calls if c["finding"] == "backprop.input_units")
    assert not [c for c in fix_calls if c["direction"] == "DtoH" and c["dst"] == upload["src"]]
    fixed = verdicts(fix_calls, fix_copies, "discrete", "sampled")[0]
    assert [v.cls for v in fixed if v.cls == "no_op"] == []
    assert len(fixed) == len(verdicts(calls, copies, "discrete", "sampled")[0]) - 1


def test_streamcluster_reuploads_of_unchanged_points(discrete) -> None:
    calls, copies = discrete["streamcluster"]["orig"]
    p = [c for c in calls if c["finding"] == "streamcluster.p"]
    again = [c for c in p if c["truth"] == "redundant"]
    assert len(p) == 12 and 0 < len(again) < len(p) - 1, "some iterations change the points, most do not"
    got = {id(v.call): v for v in verdicts(calls, copies, "discrete", "sampled")[0]}
    assert [(got[id(c)].cls, got[id(c)].evidence) for c in again] == [("repeat", "content")] * len(again)
    assert all(got[id(c)].cls is None for c in p if c["truth"] != "redundant")
    fix_calls, fix_copies = discrete["streamcluster"]["fix"]
    fix_p = [v for v in verdicts(fix_calls, fix_copies, "discrete", "sampled")[0]
             if v.call["finding"] == "streamcluster.p"]
    assert len(fix_p) == len(p) - len(again) and not any(v.flagged for v in fix_p)


def test_streamcluster_full_content_agrees_everywhere(rodinia_work, tmp_path) -> None:
    """--content full hashes every byte: the one-entry change of the center table is seen, and memq flags
    exactly the copies the program says moved nothing new."""
    runs = {v: run(rodinia_work, tmp_path, "streamcluster", v, content="full") for v in ("orig", "fix")}
    for variant, (calls, copies) in runs.items():
        got, problems = verdicts(calls, copies, "discrete", "full")
        assert not problems and all(v.agrees for v in got), variant
    assert all(ok for ok, _ in lines("streamcluster", runs, content="full").values())


def test_cfd_iteration_zero_copy_is_invisible(discrete, rodinia_work, tmp_path) -> None:
    """The DtoD copy of iteration 0 moves nothing (the program initialised both arrays alike), but memq
    cannot say so: not on a discrete device (neither side readable), and not on a unified one either (the
    after-fingerprint of a device-to-device copy waits for a completion point, and the program's next copy
    into old_variables comes before any)."""
    for device, runs in (("discrete", discrete["cfd"]),
                         ("unified", {v: run(rodinia_work, tmp_path, "cfd", v, unified=True)
                                      for v in ("orig", "fix")})):
        calls, copies = runs["orig"]
        first = next(v for v in verdicts(calls, copies, device, "sampled")[0]
                     if v.call["finding"] == "cfd.old_variables")
        assert first.call["truth"] == "redundant" and first.cls is None and first.known is not None, device
        assert all(ok for ok, _ in lines("cfd", runs, device).values()), device
    # On the unified device, the later copies are not flagged either: both sides were read and had changed.
    later = [v for v in verdicts(*runs["orig"], "unified", "sampled")[0] if v.call["why"].startswith("time_step")]
    assert len(later) == 5 and not any(v.flagged for v in later)


def test_bfs_masks_are_zero_data_not_redundant(discrete) -> None:
    """The updating mask is all zeros (the other two hold the source node's byte): memq's zero_content rule lists
    it and the loop's 1-byte uploads of a false flag, each of them, and nothing else."""
    calls, copies = discrete["bfs"]["orig"]
    masks = [c for c in calls if c["finding"] == "bfs.masks"]
    assert [(c["op"], c["bytes"], c["zero"]) for c in masks] == [("copy", SIZES["bfs"], z) for z in (0, 1, 0)]
    got = verdicts(calls, copies, "discrete", "sampled")[0]
    zero = [(v.call["bytes"], v.call["why"]) for v in got if v.zero]
    levels = sum(c["bytes"] == 1 and c["direction"] == "HtoD" for c in calls)
    assert zero == [(SIZES["bfs"], "all zeros")] + [(1, "resets the flag Kernel2 may have set")] * levels
    assert not any(v.flagged for v in got if v.zero)
    fix_calls, _ = discrete["bfs"]["fix"]
    sets = [c for c in fix_calls if c["finding"] == "bfs.masks"]
    assert [(c["op"], c["bytes"], c["value"]) for c in sets] == [
        ("set", SIZES["bfs"], 0), ("set", 1, 1), ("set", SIZES["bfs"], 0), ("set", SIZES["bfs"], 0), ("set", 1, 1)]
    # The last read-back of the loop's flag wrote 0 over 0: a no-op the program knows and memq proves.
    got = verdicts(calls, copies, "discrete", "sampled")[0]
    last = [v for v in got if v.call["direction"] == "DtoH" and v.call["bytes"] == 1][-1]
    assert (last.call["truth"], last.cls, last.evidence) == ("redundant", "no_op", "content")


def test_judge_fails_on_altered_evidence(discrete) -> None:
    """The judge is not vacuous: a program truth changed, a memq verdict changed, a listed reason gone."""
    calls, copies = discrete["backprop"]["orig"]
    altered = [dict(c, truth="redundant") if c["seq"] == 0 else c for c in calls]
    got = lines("backprop", {"orig": (altered, copies), "fix": discrete["backprop"]["fix"]})
    ok, detail = got["rodinia backprop orig"]
    assert not ok and "copy 0 (the first upload of input_units): program redundant, memq not flagged" in detail
    flipped = copies.copy()
    finding = flipped.index[(flipped["direction"] == "DtoH") & (flipped["bytes"] == (SIZES["backprop"] + 1) * 4)]
    flipped.loc[finding, "class"] = None
    got = lines("backprop", {"orig": (calls, flipped), "fix": discrete["backprop"]["fix"]})
    assert not got["finding backprop.input_units"][0] and not got["rodinia backprop orig"][0]
    # memq agreeing where a disagreement is listed: the list must be updated.
    cured = copies.copy()
    restore = cured.index[(cured["direction"] == "HtoD") & (cured["bytes"] == (SIZES["backprop"] + 1) * 17 * 4)]
    cured.loc[restore[-1], "class"] = None
    got = lines("backprop", {"orig": (calls, cured), "fix": discrete["backprop"]["fix"]})
    assert not got["rodinia backprop orig"][0] and "listed disagreement gone" in got["rodinia backprop orig"][1]
