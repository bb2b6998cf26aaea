"""`memq plot`: one figure that answers "where does the memory go" at a glance.

Three panels sharing nothing but the trace: live bytes per memory kind over time (host heap,
pinned, registered, managed summed over processes; device per GPU), duplicated bytes over time
(total and per copy direction), and redundant copy time per class (summed and wall-clock), the
summed time split by evidence (proven by a content fingerprint, or by the address rules alone).
Times are seconds from the trace's start; sizes in the largest binary unit that fits.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ctf2perfetto.errors import MemqError
from ctf2perfetto.outfiles import AtomicOutput
from ctf2perfetto.traceformat import names as N

# The live-bytes counters (memq.counters), summed over processes into one line per kind; device memory
# has one line per GPU, named after its track.
KIND_LABELS = {"host": "host heap", "pinned": "pinned", "registered": "registered", "managed": "managed"}
# The analyses' classes as the figure names them.
CLASS_LABELS = {"no_op": "no-op", "round_trip": "round trip", "redundant": "any class (union)",
                "staged": "staged (pageable, not redundant)"}
_UNITS = [(1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"), (1, "B")]


@dataclass(frozen=True)
class PlotData:
    """What the figure shows, in trace time (ns) and bytes.

    live: ts, series, value — one step line per series (memory kind, or device), already summed.
    duplicated: ts, direction ('' = total), value — counter samples.
    redundant_time: cls, summed_ns, content_ns (of summed_ns, proven by a fingerprint), wall_ns — one row per class.
    start, end: the trace's bounds.
    """

    live: pd.DataFrame
    duplicated: pd.DataFrame
    redundant_time: pd.DataFrame
    start: int
    end: int


def live_bytes(counters: pd.DataFrame) -> pd.DataFrame:
    """Sum the per-process live-bytes counters into one step series per kind (device: one per GPU).

    `counters` holds the rows of memq_live_counter. A counter track holds its last value until its
    next sample, so each track's change is added to its series' running total.
    """
    if counters.empty:
        return pd.DataFrame({"ts": pd.Series(dtype="int64"), "series": pd.Series(dtype=str),
                             "value": pd.Series(dtype="int64")})
    frame = counters.copy()
    frame["series"] = [KIND_LABELS.get(kind) or track.removesuffix(N.DEVICE_COUNTER_SUFFIX) + " device"
                       for kind, track in zip(frame["kind"], frame["track"])]
    # Tracks of one name exist once per process: each track's own changes are what add up.
    frame["delta"] = frame.groupby("track_id")["value"].diff().fillna(frame["value"])
    frame["value"] = frame.groupby("series")["delta"].cumsum().astype("int64")
    # Several tracks changing at one instant: keep the series' state after the last change.
    return frame.groupby(["series", "ts"], sort=True)["value"].last().reset_index()[["ts", "series", "value"]]


def collect(engine: Any, unified: str = "auto") -> PlotData:
    """Query everything the figure shows from an open engine."""
    from ctf2perfetto import analyses

    totals = analyses.redundant(engine, unified)
    totals = totals[totals["pid"].isna() & totals["applies"].astype(bool)]
    redundant_time = pd.DataFrame({
        "cls": [CLASS_LABELS.get(c, c) for c in totals["class"]],
        "summed_ns": totals["dur_sum"].astype("int64").to_numpy(),
        "content_ns": totals["content_dur_sum"].astype("int64").to_numpy(),
        "wall_ns": totals["wall_dur"].astype("int64").to_numpy()})
    bounds = analyses.module_query(engine, ("trace",), "SELECT start_ts, end_ts FROM memq_trace").iloc[0]
    counters = analyses.module_query(engine, ("counters",), "SELECT * FROM memq_live_counter")
    return PlotData(live=live_bytes(counters), duplicated=analyses.duplicated_over_time(engine),
                    redundant_time=redundant_time, start=int(bounds["start_ts"]), end=int(bounds["end_ts"]))


def size_unit(max_bytes: float) -> tuple[int, str]:
    """The binary unit (scale, name) that shows `max_bytes` as a number of at least 1."""
    return next(((scale, name) for scale, name in _UNITS if max_bytes >= scale), (1, "B"))


def render(data: PlotData, out: Path, title: str) -> None:
    """Draw the three panels into a PNG at `out`."""
    import matplotlib

    matplotlib.use("Agg")  # no display on compute nodes
    import matplotlib.pyplot as plt

    fig, (ax_live, ax_dup, ax_red) = plt.subplots(
        3, 1, figsize=(11, 10), gridspec_kw={"height_ratios": [3, 3, 2]}, constrained_layout=True)
    fig.suptitle(title, fontsize=12)
    duration_s = max(data.end - data.start, 1) / 1e9

    _steps(ax_live, data.live, "series", data, "Live memory by kind",
           "no live-bytes counters: not a memq recording (see docs/TRACE_FORMAT.md)")
    dup = data.duplicated.assign(series=data.duplicated["direction"].fillna("").replace("", "total"))
    not_applicable = data.duplicated.attrs.get("applies") is False
    _steps(ax_dup, dup, "series", data, f"{N.DUPLICATED_TRACK} ({N.UPPER_BOUND_NOTE})",
           "not applicable: the trace's copies carry no addresses" if not_applicable else "nothing duplicated")
    ax_live.set_xlim(0, duration_s)
    ax_dup.set_xlim(*_active_window(dup, data, duration_s))
    if ax_dup.get_xlim() != (0, duration_s):
        ax_dup.set_title(ax_dup.get_title() + "\nzoomed to the copies", fontsize=10)
    for ax in (ax_live, ax_dup):
        ax.set_xlabel("time since trace start (s)")

    red = data.redundant_time
    ax_red.set_title("Redundant copy time per class")
    if red.empty or not red[["summed_ns", "wall_ns"]].to_numpy().any():
        ax_red.text(0.5, 0.5, "no redundant copies", ha="center", va="center", transform=ax_red.transAxes)
        ax_red.set_yticks([])
    else:
        scale, unit = _time_unit(float(red[["summed_ns", "wall_ns"]].to_numpy().max()))
        y = np.arange(len(red))
        ax_red.barh(y - 0.2, red["summed_ns"] / scale, height=0.4, label="summed over copies", color="#d62728")
        content = red["content_ns"] if "content_ns" in red else pd.Series(0, index=red.index)
        ax_red.barh(y - 0.2, content / scale, height=0.4, label="... of which proven by a content fingerprint",
                    color="#7f0000")
        ax_red.barh(y + 0.2, red["wall_ns"] / scale, height=0.4, label="wall-clock (union)", color="#ff9896")
        ax_red.set_yticks(y, red["cls"].astype(str).tolist())
        ax_red.invert_yaxis()
        ax_red.legend(loc="lower right", fontsize=8)
        ax_red.set_xlabel(f"copy time ({unit})")
    ax_red.set_ylabel("class")
    try:
        with AtomicOutput(out) as target:
            fig.savefig(target.path, dpi=100, format="png")
            target.commit()
    except OSError as exc:
        raise MemqError(f"{out}: cannot write the figure: {exc.strerror or exc}") from exc
    finally:
        plt.close(fig)


def _steps(ax, frame: pd.DataFrame, key: str, data: PlotData, title: str, empty_text: str) -> None:
    ax.set_title(title)
    if frame.empty:
        ax.text(0.5, 0.5, empty_text, ha="center", va="center", transform=ax.transAxes)
        ax.set_ylabel("bytes")
        return
    scale, unit = size_unit(float(frame["value"].max()))
    for series, rows in frame.groupby(key, sort=True):
        # Extend each step line to the trace's end so the last value stays visible.
        t = np.append(rows["ts"].to_numpy(dtype="float64"), data.end)
        v = np.append(rows["value"].to_numpy(dtype="float64"), rows["value"].iloc[-1])
        ax.step((t - data.start) / 1e9, v / scale, where="post", label=str(series), linewidth=1.5)
    ax.set_ylim(bottom=0)
    ax.set_ylabel(unit)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8, ncols=3)


def _active_window(frame: pd.DataFrame, data: PlotData, duration_s: float) -> tuple[float, float]:
    """The x range (s) where `frame` changes, padded; the whole trace when that is most of it."""
    if frame.empty:
        return 0.0, duration_s
    first, last = (frame["ts"].min() - data.start) / 1e9, (frame["ts"].max() - data.start) / 1e9
    pad = max((last - first) * 0.1, duration_s * 1e-4)
    low, high = max(first - pad, 0.0), min(last + pad, duration_s)
    return (0.0, duration_s) if high - low > duration_s / 3 else (low, high)


def _time_unit(max_ns: float) -> tuple[float, str]:
    for scale, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "µs")):
        if max_ns >= scale:
            return scale, unit
    return 1.0, "ns"
