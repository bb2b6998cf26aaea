"""Capture windows in the analyses, against the plain-Python oracle (tests/oracle.py).

The generated logs of test_analyses_property are cut the way `memq record
--delay/--duration/--capture-range` cuts a run: each process gets one or two windows;
only the calls inside them stay, each window opens with a WINDOW row and one LIVE row
per allocation the full log has live at that moment (what the preload's snapshot
writes), and closes with a WINDOW row (the process's exit, or not). Every figure of the
SQL package must then equal the oracle's on the windowed log, and the allocations
still live at an early close are reported apart from leaks.
"""
from __future__ import annotations

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import oracle
from ctf2perfetto import analyses
from ctf2perfetto.engine import open_trace
from ctf2perfetto.events import EventKind as K, MemKind as M
from test_analyses_property import _combine, case, check_trace

TRACES = 25
CASES_PER_TRACE = 8
MEM_KIND = {"host": M.HOST, "pinned": M.PINNED, "registered": M.REGISTERED, "device": M.DEVICE,
            "managed": M.MANAGED}
DELAY, DURATION, PROFILER_API, EXIT = 1, 2, 3, 4


@st.composite
def windowed_case(draw) -> tuple[list[dict], list[dict]]:
    """A generated case as a windowed recording of it would hold it."""
    rows, devices = draw(case())
    full = oracle.build(rows)
    taken = {t for r in rows for t in (r["ts"], r.get("begin", r["ts"]))}
    end = max(taken, default=10) + 20
    out: list[tuple[int, int, dict]] = []  # (ts, order at equal ts, row)
    for pid in sorted({r["pid"] for r in rows}):
        busy = [(r.get("begin", r["ts"]), r["ts"]) for r in rows if r["pid"] == pid]
        free = [t for t in range(1, end) if t not in taken and not any(b <= t <= e for b, e in busy)]
        if len(free) < 4:
            continue
        count = draw(st.integers(1, 2))
        bounds = sorted(draw(st.lists(st.sampled_from(free), min_size=2 * count, max_size=2 * count, unique=True)))
        for index in range(count):
            w0, w1 = bounds[2 * index], bounds[2 * index + 1]
            last = index == count - 1
            cause = EXIT if last and draw(st.booleans()) else draw(st.sampled_from([DURATION, PROFILER_API]))
            out.append((w0, 0, dict(kind=K.WINDOW, ts=w0, pid=pid, tid=pid, aux=1, aux2=DELAY, flags=index,
                                    api="")))
            for a in full.allocs:
                if a.pid == pid and a.start < w0 and (a.end is None or a.end > w0):
                    out.append((w0, 1, dict(kind=K.LIVE, ts=w0, pid=pid, tid=pid, ptr=a.addr, size=a.size,
                                            mem=MEM_KIND[a.mem], device=a.device, api="hipMalloc")))
            out += [(r["ts"], 2, r) for r in rows
                    if r["pid"] == pid and w0 < r.get("begin", r["ts"]) and r["ts"] < w1]
            out.append((w1, 3, dict(kind=K.WINDOW, ts=w1, pid=pid, tid=pid, aux=0, aux2=cause, flags=index,
                                    api="")))
    out.sort(key=lambda e: (e[0], e[1]))
    return [r for _, _, r in out], devices


def check_windows(rows: list[dict], devices: list[dict], path) -> None:
    check_trace(rows, devices, path)  # every figure, as without windows
    ref = oracle.build(rows, {(d["pid"], d["device"]) for d in devices})
    with open_trace(path) as engine:
        got = {(r["kind"], r["size"]): (r["count"], r["bytes"], r["live_at_start"])
               for r in analyses.outlived(engine).to_dict("records")}
        assert got == oracle.outlived_by_kind_size(ref)
        windows = analyses.windows(engine)
        assert sorted((int(r.pid), int(r.ts), int(r.end_ts)) for r in windows.itertuples()) == \
            sorted((pid, t0, t1) for pid, t0, t1 in ref.windows)
        leaks = analyses.leaks(engine)
        assert leaks.attrs["windows"] and "outlived" in leaks.attrs["note"]
        live = engine.query("INCLUDE PERFETTO MODULE memq.allocations; "
                            "SELECT COUNT(*) AS n FROM memq_allocation WHERE live_at_start")["n"].iloc[0]
        assert live == sum(r["kind"] == K.LIVE for r in rows)


def test_windowed_figures_match_oracle(tmp_path_factory) -> None:
    executed: list[int] = []

    @settings(max_examples=TRACES, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                     HealthCheck.large_base_example, HealthCheck.filter_too_much])
    @given(st.lists(windowed_case(), min_size=CASES_PER_TRACE, max_size=CASES_PER_TRACE))
    def compare(cases) -> None:
        rows, devices = _combine(cases)
        if not any(r["kind"] == K.WINDOW for r in rows):
            return
        check_windows(rows, devices, tmp_path_factory.mktemp("win") / "trace.pftrace")
        executed.append(len(cases))

    compare()
    assert len(executed) >= TRACES // 2


def test_copies_returning_as_their_window_closes(tmp_path) -> None:
    """A window's close comes after the writes at its time (the preload writes it after every call of the
    window): a copy returning as its window closes at the process's exit, or at the end of a trace whose window
    never closes (a `ctf2perfetto --from` range to the end), repeats the mirror an earlier copy of the same
    bytes made, and its own mirror ends there. An early close ends the process's allocations at its time as a
    free would, before the writes at that time: no repeat then."""
    def row(kind, ts, **columns):
        return dict(kind=kind, ts=ts, pid=1, tid=1, **columns)

    common = [row(K.WINDOW, 10, aux=1, aux2=DELAY, flags=0, api=""),
              row(K.GPU_ALLOC, 12, begin=11, ptr=0x100000, size=64, mem=M.DEVICE, api="hipMalloc"),
              row(K.MALLOC, 13, ptr=0x200000, size=64, api="malloc")]
    copies = [row(K.GPU_COPY, end, begin=begin, ptr=0x100000, src=0x200000, size=64, copy_kind=1, api="hipMemcpy")
              for begin, end in ((20, 25), (26, 30))]
    for name, end, repeats in (("exit", [row(K.WINDOW, 30, aux=0, aux2=EXIT, flags=0, api="")], [0, 64]),
                               ("never closed", [], [0, 64]),
                               ("early", [row(K.WINDOW, 30, aux=0, aux2=DURATION, flags=0, api="")], [0, 0])):
        rows = common + copies + end
        assert [w.repeat for w in oracle.build(rows).writes] == repeats, name
        check_windows(rows, [], tmp_path / f"{name}.pftrace")
