"""The parts of a gpu-check archive that judge memq's verdicts, not only its events: the LLM fine-tune
(examples/finetune_gpt.py) and GVProf's Rodinia findings (tools/rodinia_pairs.py).

Expected values come from the programs' own logs: the fine-tune's run.json names the source and
destination of every label and loss-mask upload and of every checkpoint copy; rodinia_work's logs say,
copy by copy, whether the destination already held the bytes. memq's side is its per-copy verdicts
(analyses.redundant_copies) with each copy's addresses and fingerprints from the trace.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from tools.gpu_archive import Check
from tools import rodinia_pairs

_COPIES = """SELECT r.id, r.pid, r.ts, r.direction, r.bytes, r.class, r.evidence,
  EXTRACT_ARG(s.arg_set_id, 'debug.dst') AS dst, EXTRACT_ARG(s.arg_set_id, 'debug.src') AS src,
  EXTRACT_ARG(s.arg_set_id, 'debug.src_hash') AS src_hash, EXTRACT_ARG(s.arg_set_id, 'debug.content') AS content
FROM memq_redundant_copy_report!('auto') r JOIN slice s USING (id)
WHERE r.source = 'lttng' ORDER BY r.ts, r.id"""


def copy_verdicts(trace: Any) -> Any:
    """memq's verdict on every recorded copy with its addresses and source fingerprint (a DataFrame; trace:
    anything analyses.load opens)."""
    from ctf2perfetto import analyses

    with analyses.load(trace) as engine:
        return analyses.module_query(engine, ("redundant",), _COPIES)


def _u64(v: Any) -> int:
    return int(v) & ((1 << 64) - 1)


def _match(copies: Any, logged: list[dict], direction: str) -> tuple[list[dict], list[str]]:
    """memq's row for each logged copy (same direction, destination, source when logged, bytes), in order."""
    rows = [r for r in copies.to_dict("records") if r["direction"] == direction]
    by_key: dict[tuple, list[dict]] = {}
    for r in rows:
        by_key.setdefault((_u64(r["dst"]), int(r["bytes"])), []).append(r)
    out, missing = [], []
    for want in logged:
        candidates = by_key.get((_u64(want["dst"]), int(want["bytes"])), [])
        found = next((r for r in candidates if "src" not in want or _u64(r["src"]) == _u64(want["src"])), None)
        if found is None:
            missing.append(f"{direction} {want['bytes']} B to {_u64(want['dst']):#x}")
            continue
        candidates.remove(found)
        out.append(found)
    return out, missing


def _flagged(row: dict) -> bool:
    return isinstance(row["class"], str) and row["class"] in rodinia_pairs.DATA_CLASSES


def check_labels(copies: Any, run: dict, label: str = "finetune") -> Check:
    """The DataLoader's label uploads carry new labels every micro-batch (the corpus's samples all differ, the
    loop's labels are random): memq flags none of them, and their source fingerprints show it (one distinct
    fingerprint per upload)."""
    labels = run.get("labels") or []
    name = f"{label} labels"
    if not labels:
        return Check(name, False, "the run's log lists no label upload")
    got, missing = _match(copies, labels, "HtoD")
    hashed = [r for r in got if int(r["content"] or 0) & 1]
    distinct = len({_u64(r["src_hash"]) for r in hashed})
    flagged = [r for r in got if _flagged(r)]
    ok = not missing and not flagged and len(hashed) == len(labels) and distinct == len(labels)
    detail = (f"{len(got)} of {len(labels)} label uploads ({labels[0]['bytes']} B) seen, {len(flagged)} flagged "
              f"redundant; {len(hashed)} with a source fingerprint, {distinct} distinct")
    if missing:
        detail += "; not seen: " + ", ".join(missing[:3])
    return Check(name, ok, detail)


def check_mask(copies: Any, run: dict) -> Check:
    """The loss mask: one pinned host tensor, never written after it was built. Uploaded every micro-batch, every
    upload after the first is a repeat that its source fingerprint proves (evidence content)."""
    uploads = run.get("mask_uploads") or []
    if run.get("mask_upload") != "step":
        return Check("finetune mask", True, "the mask was uploaded once (--mask-upload once): nothing to repeat")
    got, missing = _match(copies, uploads, "HtoD")
    repeats = [r for r in got[1:] if r["class"] == "repeat" and r["evidence"] == "content"]
    ok = not missing and len(uploads) > 1 and not _flagged(got[0]) and len(repeats) == len(uploads) - 1
    return Check("finetune mask", ok, f"{len(uploads)} uploads of the unchanged mask ({run.get('mask_bytes')} B): "
                 f"{len(repeats)} repeats with evidence content (the program: {len(uploads) - 1})"
                 + (f"; not seen: {', '.join(missing[:3])}" if missing else ""))


def check_checkpoints(copies: Any, run: dict) -> Check:
    """Every parameter copied to the host at each checkpoint is one device-to-host copy of its bytes."""
    logged = [c for ckpt in run.get("checkpoints") or [] for c in ckpt["copies"]]
    if not logged:
        return Check("finetune checkpoints", False, "run.json lists no checkpoint copy")
    got, missing = _match(copies, logged, "DtoH")
    want_bytes = sum(c["bytes"] for c in logged)
    got_bytes = sum(int(r["bytes"]) for r in got)
    ok = not missing and got_bytes == want_bytes
    return Check("finetune checkpoints", ok,
                 f"{len(run['checkpoints'])} checkpoints: {len(got)} of {len(logged)} device-to-host copies seen, "
                 f"{got_bytes} of {want_bytes} B" + (f"; not seen: {', '.join(missing[:3])}" if missing else ""))


def check_report(trace: Path, run: dict) -> Check:
    """`memq report` names the mask's re-uploads as a finding of their own: the repeats the program makes
    (count and bytes from run.json), with the call site they come from; the detail says where it ranks."""
    from ctf2perfetto import analyses
    from ctf2perfetto.look.report import collect

    uploads = run.get("mask_uploads") or []
    if run.get("mask_upload") != "step":
        return Check("finetune report", True, "the mask was uploaded once: no finding to name")
    with analyses.load(trace) as engine:
        findings = [f for f in collect(engine, "finetune").findings if f.pid in (None, int(run["pid"]))]
    want = (len(uploads) - 1, (len(uploads) - 1) * int(run["mask_bytes"]))
    rank = next((i for i, f in enumerate(findings) if f.kind == "repeat" and (f.count, f.bytes) == want), None)
    if rank is None:
        return Check("finetune report", False, f"no repeat finding of {want[0]} copies, {want[1]} B (the mask's) among "
                     f"{len(findings)}: " + "; ".join(f"{f.kind} {f.count}/{f.bytes} B" for f in findings[:5]))
    found, top = findings[rank], findings[0]
    return Check("finetune report", bool(found.where), f"the mask's {want[0]} repeats ({want[1]} B) are finding "
                 f"{rank + 1} of {len(findings)}, at {found.where or 'no call site'}; the top one: {top.title} "
                 f"({top.count} copies, {top.bytes} B) at {top.where}")


def finetune_checks(trace: Path, run: dict) -> list[Check]:
    copies = copy_verdicts(trace)
    mine = copies[copies["pid"] == int(run["pid"])]
    return [check_labels(mine, run), check_mask(mine, run), check_checkpoints(mine, run), check_report(trace, run)]


def rodinia_checks(root: Path, device: str = "discrete") -> list[Check]:
    """Each Rodinia pair of the archive (rodinia/P-V.jsonl and its trace rodinia/P-V/), judged by
    tools.rodinia_pairs; streamcluster-full-V with --content full."""
    out = []
    for program, content, stem in [(p, "sampled", p) for p in rodinia_pairs.PROGRAMS] + [
            ("streamcluster", "full", "streamcluster-full")]:
        runs, missing = {}, []
        for variant in ("orig", "fix"):
            log, trace = root / f"{stem}-{variant}.jsonl", root / f"{stem}-{variant}"
            if not log.is_file() or not (trace / "ust").is_dir():
                missing.append(f"{stem}-{variant}")
                continue
            runs[variant] = (rodinia_pairs.read_log(log), rodinia_pairs.memq_copies(trace))
        if missing:
            out.append(Check(f"rodinia {stem}", False, "missing from the archive: " + ", ".join(missing)))
            continue
        for name, ok, detail in rodinia_pairs.judge(program, runs, device, content):
            out.append(Check(name if stem == program else f"{name} (--content {content})", ok, detail))
    return out
