"""The real thing: `memq open --no-browser` on the annotated fake-HIP trace (the demo's offload trace stands in
for it: the same workload kind, recorded here), loaded by headless Chromium (system /usr/bin/chromium driven by
playwright-core) with no internet access: as a user runs it (memq's engine behind the UI), and with
`--engine browser` (the UI's own in-browser engine).

Each test keeps its screenshot under its own pytest tmp dir (printed; pytest keeps the last runs' dirs) for a
person to look at, and checks what the first screen shows without scrolling.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from ctf2perfetto.traceformat import names as N
from ctf2perfetto.traceformat import ui
from ui.browser import load_in_chromium, start_memq_open
from ui.traces import annotated, converted

REPO = Path(__file__).resolve().parent.parent
# Requests the UI makes that need the internet or a trace_processor on :9001; without them it still works.
OPTIONAL_REQUESTS = ("https://storage.cloud.google.com/", "http://127.0.0.1:9001/")
# What a GPU engineer must see at once: the pinned summary tracks (both GPUs' device bytes), GPU 0's group and the
# analyses' group.
FIRST_SCREEN = [N.DUPLICATED_TRACK, N.REDUNDANT_TRACK, N.device_counter_name(0), N.device_counter_name(1),
                N.gpu_track_name(0), N.ANALYSIS_GROUP]


@pytest.fixture(scope="module")
def hip_annotated(fake_hip_trace, tmp_path_factory) -> Path:
    hip = converted(fake_hip_trace.dir, tmp_path_factory.mktemp("ui_browser") / "hip.pftrace")
    return annotated(hip, hip.with_name("hip.annotated.pftrace"))


def _assert_loaded_cleanly(report: dict, origin: str, may_abort: tuple[str, ...] = ()) -> None:
    assert report["modals"] == [], f"error dialog: {report['modals']}"
    assert report["pageErrors"] == [], report["pageErrors"]
    assert report["missing"] == [], f"not on the page: {report['missing']} (tracks: {report['trackTitles']})"
    # Everything of our own origin was served, except the UI's dev-server live-reload probe.
    assert [e for e in report["httpErrors"] if not e.endswith("/live_reload")] == [], report["httpErrors"]
    assert all(u.startswith(OPTIONAL_REQUESTS) for u in report["externalRequests"]), report["externalRequests"]
    # Closing the page aborts the live-reload probe; nothing else of ours may fail.
    aborted_ok = ("/live_reload", *may_abort)
    failed = [f for f in report["failedRequests"] if origin in f and not any(f"{origin}{p} " in f for p in aborted_ok)]
    assert failed == [], report["failedRequests"]


def test_first_screen_shows_the_summary_gpu0_and_the_analyses(hip_annotated: Path, tmp_path: Path) -> None:
    """`memq open` as a user runs it: the pinned tracks fit the pinned area (no scrolling there), each shows once,
    GPU 0 and the analysis group are on screen, and times read as wall-clock time."""
    server = start_memq_open(hip_annotated)
    try:
        screenshot = tmp_path / "memq_open_first_screen.png"
        # (memq's engine holds the trace, so the UI's sidebar names no file: the browser-engine tests check it)
        report = load_in_chromium(server.url, screenshot, FIRST_SCREEN)
    finally:
        code, err = server.stop()
    print("screenshot:", screenshot, "first seen (ms):", report["firstSeenMs"])
    _assert_loaded_cleanly(report, server.origin)
    assert code == 0 and "Traceback" not in err, err
    visible = report["visibleTitles"]
    # a GPU's group is titled with its PCI bus id when the runtime gave one ("GPU 0 (0000:18:00.0)")
    off_screen = {name for name in FIRST_SCREEN if not any(t == name or t.startswith(f"{name} (") for t in visible)}
    assert not off_screen, f"scroll needed for {off_screen}: {visible}"
    pinned = next(s for s in report["scrollers"] if N.DUPLICATED_TRACK in s["titles"])
    assert sorted(pinned["titles"]) == sorted(FIRST_SCREEN[:4]), pinned  # only the summary tracks are pinned
    assert pinned["overflow"] <= 0, f"the pinned area scrolls by {pinned['overflow']} px"
    # No pinned track shows again in the first screen (their groups start collapsed), nor does a second copy of
    # the libraries or heap tracks push GPU 0 down.
    assert len(visible) == len(set(visible)), visible
    assert not {N.TRACK_LIBRARIES, N.TRACK_HEAP} & set(visible), visible
    assert report["settings"]["timestampFormat"] == ui.TIMESTAMP_FORMAT
    assert screenshot.stat().st_size > 50_000  # a rendered timeline, not a blank page


def test_startup_commands_file_adds_its_debug_tracks(hip_annotated: Path, tmp_path: Path) -> None:
    server = start_memq_open(hip_annotated, "--engine", "browser",
                             "--startup-commands", str(REPO / "ui_plugins" / "startup_commands.json"))
    try:
        screenshot = tmp_path / "memq_open_startup_commands.png"
        # from ui_plugins/startup_commands.json (debug tracks built by SQL in the UI's engine)
        report = load_in_chromium(server.url, screenshot, ["memq: device live bytes, all GPUs",
                                                          "memq: copies by direction", *FIRST_SCREEN[:4]])
    finally:
        code, err = server.stop()
    print("screenshot:", screenshot)
    _assert_loaded_cleanly(report, server.origin)
    assert code == 0 and "Traceback" not in err, err
    pinned = next(s for s in report["scrollers"] if N.DUPLICATED_TRACK in s["titles"])
    assert len(pinned["titles"]) == len(set(pinned["titles"])), f"pinned twice: {pinned['titles']}"


def test_bare_page_opens_the_trace_like_vizviewer(hip_annotated: Path, tmp_path: Path) -> None:
    server = start_memq_open(hip_annotated, "--engine", "browser")
    try:
        report = load_in_chromium(server.origin + "/", tmp_path / "memq_open_bare_page.png",
                                  ["GPU 0", "GPU 1", "workload", N.ANALYSIS_GROUP])
    finally:
        server.stop()
    # Now and then (about 1 run in 5 here) the bootstrap aborts one /localtrace request while the trace loads
    # through another; the tracks on screen show that it loaded.
    _assert_loaded_cleanly(report, server.origin, may_abort=("/localtrace",))
