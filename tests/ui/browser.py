"""Helpers for the UI tests: `memq open` as a process, and the system Chromium driven by playwright-core.

The browser is Debian's /usr/bin/chromium; playwright-core comes from tests/ui/package.json
(installed by scripts/install.sh with `npm ci`), and never downloads a browser.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

UI_DIR = Path(__file__).resolve().parent
ARTIFACTS = UI_DIR.parent.parent / "test-artifacts"


@dataclass
class OpenServer:
    """A running `memq open --no-browser` or `memq serve`, and the lines it printed."""

    process: subprocess.Popen[str]
    url: str
    tunnel: str
    banner: list[str]
    err_lines: list[str] = field(default_factory=list)  # stderr so far, read by a thread (never blocks it)

    @property
    def origin(self) -> str:
        return re.match(r"http://127\.0\.0\.1:\d+", self.url).group(0)

    @property
    def port(self) -> int:
        return int(self.origin.rsplit(":", 1)[1])

    def stop(self) -> tuple[int, str]:
        """Ctrl-C it; its exit status and what it wrote on stderr."""
        self.process.send_signal(signal.SIGINT)
        # It answers the request in flight first (a query of a loaded trace: more than 30 s once, beside a full test run).
        self.process.wait(timeout=180)
        self._reader.join(timeout=10)
        return self.process.returncode, "".join(self.err_lines)

    def wait_for_err(self, pattern: str, timeout_s: float = 120, since: int = 0) -> str:
        """The first stderr line matching regex `pattern`, waiting for it; AssertionError after `timeout_s`.

        Only lines from index `since` on count: pass `len(err_lines)` taken before what should print the line,
        so that the same line printed earlier (by an earlier test on a shared server) is not taken for it.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for line in self.err_lines[since:]:
                if re.search(pattern, line):
                    return line
            time.sleep(0.1)
        raise AssertionError(f"no stderr line matching {pattern!r} in {timeout_s} s: {self.err_lines}")

    def start_reading_stderr(self) -> None:
        def read() -> None:
            for line in self.process.stderr:
                self.err_lines.append(line)

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()


def start_memq_open(trace: Path, *extra: str) -> OpenServer:
    """Start `memq open TRACE --no-browser --port 0` and wait for its URL line."""
    return start_memq("open", str(trace), "--no-browser", "--port", "0", *extra)


def start_memq_serve(trace: Path, *extra: str, port: int = 0) -> OpenServer:
    """Start `memq serve TRACE --port PORT` (0: a free one) and wait until it serves."""
    return start_memq("serve", str(trace), "--port", str(port), *extra)


def start_memq(*args: str) -> OpenServer:
    """Start `memq ARGS...` (open or serve) and wait for its URL line."""
    process = subprocess.Popen([sys.executable, "-m", "ctf2perfetto.cli.memq", *args],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    banner: list[str] = []
    url = tunnel = ""
    for line in process.stdout:
        banner.append(line.rstrip("\n"))
        if line.strip().startswith("URL:"):
            url = line.split()[1]
        if line.strip().startswith("from laptop:"):
            tunnel = line.split(":", 1)[1].split("   ")[0].strip()
        if line.startswith("Press Ctrl-C"):
            break
    if not url:
        process.kill()
        raise AssertionError(f"memq {args[0]} printed no URL: {banner} {process.stderr.read()}")
    server = OpenServer(process, url, tunnel, banner)
    server.start_reading_stderr()
    return server


def load_in_chromium(url: str, screenshot: Path, expected_tracks: list[str], timeout_ms: int = 90_000) -> dict:
    """Open `url` in headless Chromium with no internet; the report of tests/ui/load_trace.mjs."""
    assert (UI_DIR / "node_modules" / "playwright-core").is_dir(), \
        "tests/ui/node_modules is missing: run scripts/install.sh (npm ci in tests/ui)"
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["node", str(UI_DIR / "load_trace.mjs"), url, str(screenshot), json.dumps(expected_tracks),
                           str(timeout_ms)], capture_output=True, text=True, timeout=timeout_ms / 1000 + 60,
                          cwd=UI_DIR, env={**os.environ, "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD": "1"})
    assert done.returncode == 0, f"load_trace.mjs failed: {done.stderr[-2000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_rpc_session(plan: dict, timeout_s: float = 600) -> dict:
    """Run tests/ui/rpc_session.mjs on `plan` (see its header); its report."""
    assert (UI_DIR / "node_modules" / "playwright-core").is_dir(), \
        "tests/ui/node_modules is missing: run scripts/install.sh (npm ci in tests/ui)"
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(plan, f)
    try:
        done = subprocess.run(["node", str(UI_DIR / "rpc_session.mjs"), f.name], capture_output=True, text=True,
                              timeout=timeout_s, cwd=UI_DIR, env={**os.environ, "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD": "1"})
    finally:
        os.unlink(f.name)
    assert done.returncode == 0, f"rpc_session.mjs failed: {done.stderr[-2000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])
