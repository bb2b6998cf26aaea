"""GVProf's Rodinia findings, as memq should report them: the program's own account of each copy
(tests/fakes/rodinia_work.c writes it) against memq's per-copy verdicts (analyses.redundant_copies).

Each program logs every cudaMemcpy in call order with its `truth`, from the program's data flow
(not from memq): "redundant" when the destination already held every byte copied, "" otherwise; and
`zero`: 1 when its host source held only zeros (a memset could write it). memq *flags* a copy when its
class is a data redundancy (no_op, repeat, round_trip; unified and managed say where the copy could be
avoided, not that it moved nothing new), and calls it a *zero copy* when its zero_content advice rule
lists it. A copy agrees when memq flags exactly the "redundant" ones and calls exactly the zero ones zero.

Where memq cannot agree, the reason is known and listed in KNOWN (what memq says instead and why); a
disagreement not listed there is a failure, and so is a listed one that no longer happens (fixed: take
it off the list). The findings themselves (FINDINGS) must be reported in each original with the class
and evidence derived from the program, and be absent from each fix, unless KNOWN says memq cannot see
them on that device.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROGRAMS = ("backprop", "streamcluster", "cfd", "bfs")
DATA_CLASSES = ("no_op", "repeat", "round_trip")

# finding -> (program, the classes memq may give it in the original, the evidence it must carry): derived from
# what the program does and what memq can fingerprint of it (docs/GPU_CHECK.md, "GVProf's Rodinia findings").
FINDINGS = {
    # DtoH into host memory the CPU can read: the destination's fingerprint before and after is the same.
    "backprop.input_units": ("backprop", ("no_op", "round_trip"), "content"),
    # HtoD from pageable host memory unchanged since the last upload: the source's fingerprint is the same.
    "streamcluster.p": ("streamcluster", ("repeat",), "content"),
    # DtoD: only a unified-memory device lets the CPU read either side.
    "cfd.old_variables": ("cfd", ("no_op",), "content"),
    # Not a redundant copy: data a memset could write, the zero_content advice rule's (the one all-zero mask; the
    # other two hold the source's byte).
    "bfs.masks": ("bfs", (), "zero"),
}


@dataclass(frozen=True)
class Known:
    """A disagreement memq cannot avoid today: on `device` ("discrete", "unified" or "any") in content mode
    `content` ("any", "sampled", "full"), the copies of `program` whose `why` starts with `why` get memq class
    `got` (None: not flagged) with evidence `evidence`, for `reason`. A data-dependent one (which entries a
    center opening changes, where the sampled blocks fall) need not happen in every run."""

    program: str
    why: str
    got: str | None
    evidence: str | None
    reason: str
    device: str = "any"
    content: str = "any"
    data_dependent: bool = False  # whether it happens depends on the values (a GPU's may differ): never stale

    def applies(self, call: dict, device: str, content: str) -> bool:
        return (call["program"] == self.program and call["why"].startswith(self.why)
                and self.device in ("any", device) and self.content in ("any", content))


KNOWN = (
    Known("backprop", "the forward kernel overwrote input_hidden", "repeat", "content",
          "a host-to-device repeat is called proven (evidence content) when its host source is unchanged, but "
          "on a discrete GPU the device side cannot be read: the kernel's write to it is invisible",
          device="discrete"),
    Known("cfd", "initialize_variables filled old_variables", None, None,
          "device-to-device: a discrete GPU's memory is not read, and no earlier copy made the two a mirror",
          device="discrete"),
    Known("cfd", "initialize_variables filled old_variables", None, None,
          "device-to-device: its after-fingerprint waits for a completion point, and the next copy into "
          "old_variables comes first (the program synchronises only after the loop)", device="unified"),
    Known("cfd", "time_step wrote variables", "repeat", "address",
          "the kernel's writes are invisible and neither side can be read: the address rules' upper bound",
          device="discrete"),
    Known("streamcluster", "a center opened since the last upload", "repeat", "content",
          "one 4-byte entry changed between the sampled blocks of a 32 KiB table (--content sampled hashes "
          "16 blocks of 64 bytes); --content full sees it", content="sampled", data_dependent=True),
)


def read_log(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def memq_copies(trace: Any) -> Any:
    """memq's verdict on every copy of a trace: analyses.redundant_copies with `zero` (the copy is in the
    zero_content advice rule's memq_advice_zero_copy)."""
    from ctf2perfetto import analyses
    from ctf2perfetto.analysis.advice import fill_zero_fingerprints

    copies = analyses.redundant_copies(trace)
    with analyses.load(trace) as engine:
        fill_zero_fingerprints(engine)
        zero = {int(r["id"]) for r in analyses.module_rows(
            engine, ("advice.zero_content",), "SELECT id FROM memq_advice_zero_copy").records()}
    copies["zero"] = copies["id"].map(lambda i: int(i) in zero)
    return copies


@dataclass
class Verdict:
    """One logged copy with memq's verdict on it."""

    call: dict
    cls: str | None  # memq's class when it is a data redundancy, else None
    evidence: str | None
    known: Known | None  # the listed reason when memq and the program disagree
    zero: bool = False  # memq's zero_content rule lists it

    @property
    def flagged(self) -> bool:
        return self.cls is not None

    @property
    def agrees(self) -> bool:
        return self.flagged == (self.call["truth"] == "redundant") and self.zero == bool(self.call.get("zero"))


def verdicts(calls: list[dict], copies: Any, device: str, content: str) -> tuple[list[Verdict], list[str]]:
    """Pair each logged copy with memq's row of the same process (in time order) and judge it.
    copies: memq_copies' frame (without a `zero` column: no copy is a zero copy). Returns the verdicts and what
    did not pair up."""
    logged = [c for c in calls if c["op"] == "copy"]
    if not logged:
        return [], ["the program logged no copy"]
    rows = copies[copies["pid"] == logged[0]["pid"]].to_dict("records")
    problems = []
    if len(rows) != len(logged):
        problems.append(f"{len(logged)} copies logged, memq has {len(rows)}")
    out = []
    for call, row in zip(logged, rows):
        if (row["direction"], int(row["bytes"])) != (call["direction"], call["bytes"]):
            problems.append(f"copy {call['seq']}: logged {call['direction']} {call['bytes']} B, memq "
                            f"{row['direction']} {int(row['bytes'])} B")
            continue
        cls = row["class"] if isinstance(row["class"], str) and row["class"] in DATA_CLASSES else None
        evidence = row["evidence"] if cls and isinstance(row["evidence"], str) else None
        v = Verdict(call, cls, evidence, None, bool(row.get("zero", False)))
        if not v.agrees:
            v.known = next((k for k in KNOWN if k.applies(call, device, content)), None)
        out.append(v)
    return out, problems


def stale_known(got: list[Verdict], device: str, content: str) -> list[Known]:
    """Listed disagreements that no longer happen: the entry matches copies of this run, yet memq agrees with
    the program on all of them."""
    out = []
    for k in KNOWN:
        if k.data_dependent:
            continue
        mine = [v for v in got if k.applies(v.call, device, content)]
        if mine and all(v.agrees for v in mine):
            out.append(k)
    return out


def judge(program: str, runs: dict[str, tuple[list[dict], Any]], device: str,
          content: str) -> list[tuple[str, bool, str]]:
    """(name, ok, detail) lines for one program's original and fix: runs = {"orig": (calls, copies), "fix": ...}."""
    lines = []
    for variant in ("orig", "fix"):
        calls, copies = runs[variant]
        got, problems = verdicts(calls, copies, device, content)
        # A disagreement is known when listed with what memq says; a listed one that is gone must come off the list.
        unexpected = [v for v in got if not v.agrees and (v.known is None or (v.cls, v.evidence) != (
            v.known.got, v.known.evidence))]
        known = [v for v in got if not v.agrees and v not in unexpected]
        agree = sum(v.agrees for v in got)
        text = f"{agree} of {len(got)} copies as the program says"
        if known:
            text += f"; {len(known)} known disagreement{'s' if len(known) > 1 else ''}: " + "; ".join(sorted(
                {f"{v.call['why']} -> {v.cls or 'not flagged'} {v.evidence or ''}".rstrip() for v in known}))
        for v in unexpected:
            problems.append(f"copy {v.call['seq']} ({v.call['why']}): program {v.call['truth'] or 'new data'}"
                            f"{', zero' if v.call.get('zero') else ''}, memq {v.cls or 'not flagged'}"
                            f"{' ' + v.evidence if v.evidence else ''}{', zero' if v.zero else ''}")
        for k in stale_known(got, device, content):
            problems.append(f"listed disagreement gone ({k.why}...: memq agrees with the program now)")
        lines.append((f"rodinia {program} {variant}", not problems, "; ".join(problems[:6]) or text))
        # The finding: in the original with the class and evidence the program implies, absent from the fix.
        for finding, (prog, classes, evidence) in FINDINGS.items():
            if prog != program:
                continue
            mine = [v for v in got if v.call["finding"] == finding]
            hits = [v for v in mine if v.call["truth"] == "redundant"]
            if variant == "fix":
                flagged = [v for v in mine if (v.flagged or v.zero) and v.known is None]
                ok = not hits and not flagged
                lines.append((f"finding {finding} fixed", ok, f"{len(mine)} copies of it in the fix, "
                              f"{len(hits)} redundant by the program, {len(flagged)} flagged by memq "
                              "(known disagreements apart)"))
                continue
            if not classes:  # zero data: the zero_content rule's, not a redundant class
                zero = [v for v in mine if v.call.get("zero")]
                seen = [v for v in zero if v.zero and not v.flagged]
                ok = bool(zero) and len(seen) == len(zero) and not any(v.zero for v in mine if v not in zero)
                lines.append((f"finding {finding}", ok, f"{len(mine)} uploads, {len(zero)} of all-zero data "
                              f"({sum(v.call['bytes'] for v in zero)} B): {len(seen)} listed by the zero_content "
                              "rule, none a redundant copy"))
                continue
            blind = [v for v in hits if v.known is not None and v.known.got is None]
            seen = [v for v in hits if v.cls in classes and v.evidence == evidence]
            ok = bool(hits) and len(seen) + len(blind) == len(hits)
            detail = (f"{len(seen)} of {len(hits)} reported as {'/'.join(classes)} with evidence {evidence} "
                      f"({sum(v.call['bytes'] for v in seen)} B)")
            if blind:
                detail += f"; {len(blind)} not visible here: {blind[0].known.reason}"
            lines.append((f"finding {finding}", ok, detail))
    return lines
