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
from dataclasses import dataclass
from pathlib import Path

UI_DIR = Path(__file__).resolve().parent
ARTIFACTS = UI_DIR.parent.parent / "test-artifacts"


@dataclass
class OpenServer:
    """A running `memq open --no-browser` and the lines it printed."""

    process: subprocess.Popen[str]
    url: str
    tunnel: str
    banner: list[str]

    @property
    def origin(self) -> str:
        return re.match(r"http://127\.0\.0\.1:\d+", self.url).group(0)

    def stop(self) -> tuple[int, str]:
        """Ctrl-C it; its exit status and what it wrote on stderr."""
        self.process.send_signal(signal.SIGINT)
        _, err = self.process.communicate(timeout=20)
        return self.process.returncode, err


def start_memq_open(trace: Path, *extra: str) -> OpenServer:
    """Start `memq open TRACE --no-browser --port 0` and wait for its URL line."""
    process = subprocess.Popen([sys.executable, "-m", "ctf2perfetto.cli.memq", "open", str(trace), "--no-browser",
                                "--port", "0", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
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
        raise AssertionError(f"memq open printed no URL: {banner} {process.stderr.read()}")
    return OpenServer(process, url, tunnel, banner)


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
