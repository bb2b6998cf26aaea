"""`memq plot` on the fake HIP workload: the PNG is a readable figure, and its series are the trace's numbers."""
from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ctf2perfetto.engine import open_trace
from ctf2perfetto.look.plot import PlotData, collect, live_bytes, render, size_unit
from ui.browser import ARTIFACTS
from ui.traces import converted, memq

WIDTH, HEIGHT = 1100, 1000  # figsize 11 x 10 in at 100 dpi


@pytest.fixture(scope="module")
def hip(fake_hip_trace, tmp_path_factory) -> Path:
    return converted(fake_hip_trace.dir, tmp_path_factory.mktemp("plot") / "hip.pftrace")


@pytest.fixture(scope="module")
def figure(hip: Path) -> np.ndarray:
    out = ARTIFACTS / "plot" / "memq_plot_hip.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    done = memq("plot", str(hip), "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    return _read_png(out)


def _dark_rows(region: np.ndarray, min_share: float = 0.6) -> int:
    """Rows where most pixels are dark: the horizontal axis lines of a panel."""
    dark = region.max(axis=2) < 0.3
    return int((dark.mean(axis=1) > min_share).sum())


# Colours of the data: the host heap line (green), the duplicated-bytes total line (purple), the redundant-time
# bars (red).
HOST_LINE, TOTAL_LINE, BARS = (0.17, 0.63, 0.17), (0.58, 0.40, 0.74), (0.84, 0.15, 0.16)


def _panels(figure: np.ndarray) -> list[np.ndarray]:
    """The three panels (vertical thirds), each checked to be boxed: at least its top and bottom axis lines."""
    assert figure.shape[:2] == (HEIGHT, WIDTH)
    thirds = np.array_split(figure[:, int(WIDTH * 0.3):int(WIDTH * 0.95)], [int(HEIGHT * 0.37), int(HEIGHT * 0.73)])
    for i, panel in enumerate(thirds):
        assert _dark_rows(panel) >= 2, f"panel {i}: no axes"
    return thirds


def _has_colour(region: np.ndarray, rgb: tuple[float, float, float]) -> bool:
    return bool((np.abs(region - np.array(rgb)).max(axis=2) < 0.08).sum() > 50)


def _read_png(path: Path) -> np.ndarray:
    import matplotlib.image

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return matplotlib.image.imread(path)[:, :, :3]


def test_png_has_three_panels_with_axes_and_data(figure: np.ndarray) -> None:
    assert figure.std() > 0.05, "blank figure"
    live, dup, red = _panels(figure)
    assert _has_colour(live, HOST_LINE), "no host heap line"
    assert _has_colour(dup, TOTAL_LINE), "no duplicated-bytes total line"
    assert _has_colour(red, BARS), "no redundant-time bars"


def test_live_series_are_the_sum_of_the_process_counters(hip: Path) -> None:
    with open_trace(hip) as engine:
        counters = engine.query("""
            SELECT t.id AS track_id, t.name AS track, c.ts AS ts, CAST(c.value AS INT) AS value
            FROM counter c JOIN counter_track t ON c.track_id = t.id
            WHERE t.name IN ('Host heap live bytes', 'Pinned live bytes', 'Registered live bytes',
                             'Managed live bytes') OR t.name GLOB 'GPU * device live bytes'
            ORDER BY c.ts, c.id""")
        data = collect(engine)
    assert set(data.live["series"]) >= {"host heap", "pinned", "managed", "GPU 0 device"}
    # Independent: replay the samples in order, keeping each track's last value, and sum per kind.
    kind_of = {"Host heap live bytes": "host heap", "Pinned live bytes": "pinned",
               "Registered live bytes": "registered", "Managed live bytes": "managed"}
    tracks_of = counters.groupby("track")["track_id"].unique().to_dict()
    last: dict[int, int] = {}
    expected: dict[str, dict[int, int]] = defaultdict(dict)
    for row in counters.itertuples(index=False):
        last[row.track_id] = int(row.value)
        series = kind_of.get(row.track, row.track.removesuffix(" live bytes"))
        expected[series][int(row.ts)] = sum(last.get(t, 0) for t in tracks_of[row.track])
    for series, rows in data.live.groupby("series"):
        assert dict(zip(rows["ts"].astype(int), rows["value"].astype(int))) == expected[series], series
    assert (data.redundant_time.set_index("cls").loc["round trip", "summed_ns"]) > 0


def test_units_and_empty_figure(tmp_path: Path) -> None:
    assert size_unit(512) == (1, "B")
    assert size_unit(3 << 20) == (1 << 20, "MiB")
    assert size_unit(5 << 30) == (1 << 30, "GiB")
    empty = live_bytes(pd.DataFrame(columns=["track_id", "track", "kind", "ts", "value"]))
    assert empty.empty
    data = PlotData(live=empty, duplicated=pd.DataFrame(columns=["ts", "direction", "value"]),
                    redundant_time=pd.DataFrame(columns=["cls", "summed_ns", "wall_ns"]), start=0, end=10**9)
    out = tmp_path / "empty.png"
    render(data, out, "a trace with no memory events")
    # Three boxed panels and no data drawn in any of them.
    for panel in _panels(_read_png(out)):
        assert not any(_has_colour(panel, rgb) for rgb in (HOST_LINE, TOTAL_LINE, BARS))


def test_bad_input_is_one_line(hip: Path, tmp_path: Path) -> None:
    missing = memq("plot", str(tmp_path / "nope.pftrace"), "-o", str(tmp_path / "x.png"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "nope.pftrace" in missing.stderr
    not_png = memq("plot", str(hip), "-o", str(tmp_path / "x.pdf"))
    assert not_png.returncode == 2 and not_png.stderr.count("\n") == 1 and "PNG" in not_png.stderr
    no_dir = memq("plot", str(hip), "-o", str(tmp_path / "nodir" / "x.png"))
    assert no_dir.returncode == 2 and no_dir.stderr.count("\n") == 1 and "does not exist" in no_dir.stderr


def _pageable_copies(path: Path) -> list[tuple[int, int]]:
    """Independent: [start, end) in ns of the pageable copies in a PyTorch-profiler JSON."""
    events = json.load(gzip.open(path))
    events = events["traceEvents"] if isinstance(events, dict) else events
    return [(round(e["ts"] * 1000), round(e["ts"] * 1000) + round(e["dur"] * 1000)) for e in events
            if e.get("cat") == "gpu_memcpy" and e.get("ph") == "X" and "Pageable" in e["name"]]


def test_kineto_trace_plots_with_duplicated_marked_not_applicable(test_data: Path, tmp_path: Path) -> None:
    kineto = test_data / "kineto" / "benchmark_result_493459_1694039959_trace.json.gz"
    pageable = _pageable_copies(kineto)
    assert pageable, "this profile must have pageable copies for the bars to show"
    with open_trace(kineto) as engine:
        data = collect(engine)
    assert data.live.empty and data.duplicated.empty and data.duplicated.attrs["applies"] is False
    # Only the classes that apply without addresses, and the staged bar is the pageable copies' time.
    bars = {r.cls: (r.summed_ns, r.wall_ns) for r in data.redundant_time.itertuples()}
    assert set(bars) == {"unified", "any class (union)", "staged (pageable, not redundant)"}
    assert bars["unified"] == bars["any class (union)"] == (0, 0)  # no device described as unified memory
    starts, ends = zip(*sorted(pageable))
    wall = sum(max(0, end - max((start,) + ends[:i])) for i, (start, end) in enumerate(zip(starts, ends)))
    assert bars["staged (pageable, not redundant)"] == (sum(e - s for s, e in pageable), wall)
    out = tmp_path / "kineto.png"
    done = memq("plot", str(kineto), "-o", str(out))
    assert done.returncode == 0, done.stderr
    live, dup, red = _panels(_read_png(out))
    assert _has_colour(red, BARS) and not _has_colour(live, HOST_LINE) and not _has_colour(dup, TOTAL_LINE)
