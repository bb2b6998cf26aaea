"""The output directory: prepared, undone after an early failure, measured, and memq-record.json in it."""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import stat
import subprocess
from pathlib import Path
from typing import Mapping

from ctf2perfetto.errors import MemqError, UsageError
from ctf2perfetto.traceformat import job as N  # the job's names without numpy (the command line avoids it)

RECORD_FILE = "memq-record.json"


def expand_output(output: Path, env: Mapping[str, str], host: str | None = None) -> Path:
    """`-o job/%h`: %h the host name, %r the rank the launcher gave this process (RANK, SLURM_PROCID, ...),
    %j the job id (SLURM_JOB_ID, else TORCHELASTIC_RUN_ID), %% a percent sign; one directory per node or
    rank on a shared file system (`srun memq record -o job/%h -- ...`)."""
    text = str(output)
    if "%" not in text:
        return output

    def first(names: tuple[str, ...], what: str, letter: str) -> str:
        for name in names:
            value = env.get(name, "").strip()
            if value:
                return value
        raise UsageError(f"-o {text}: %{letter} needs {what}, and none of {', '.join(names)} is set")

    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c != "%":
            out.append(c)
            i += 1
            continue
        letter = text[i + 1] if i + 1 < len(text) else ""
        if letter == "h":
            value = host if host is not None else socket.gethostname()
        elif letter == "r":
            value = first(N.RANK_VARS, "a rank", "r")
        elif letter == "j":
            value = first(N.JOB_ID_VARS, "a job id", "j")
        elif letter == "%":
            value = "%"
        else:
            raise UsageError(f"-o {text}: unknown pattern %{letter} (use %h host, %r rank, %j job id, %% a percent sign)")
        if "/" in value or value in (".", ".."):
            raise UsageError(f"-o {text}: %{letter} gives {value!r}, which cannot be a directory name")
        out.append(value)
        i += 2
    return Path("".join(out))


def prepare_output(output: Path, force: bool) -> tuple[Path, bool]:
    """Create/validate the output directory; --force clears what memq wrote. Returns it and
    whether this call created it (a recording that fails before the command runs removes it)."""
    output = output.expanduser().resolve()
    if output.exists() and not output.is_dir():
        raise UsageError(f"{output}: exists and is not a directory")
    for parent in [output, *output.parents]:
        if (parent / "metadata").is_file():
            raise UsageError(f"{output}: is inside a CTF trace directory ({parent}); record somewhere else")
    created = not output.exists()
    if output.is_dir() and any(output.iterdir()):
        if not force:
            raise UsageError(f"{output}: directory is not empty (use --force to record into it anyway)")
        _clear_previous(output)
    try:
        output.mkdir(parents=True, exist_ok=True)
        probe = output / ".memq-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise MemqError(f"{output}: output directory is not writable ({exc.strerror})") from exc
    return output, created


def _clear_previous(output: Path) -> None:
    """--force: removes what a previous recording wrote (ust/, memq-record.json), nothing else:
    never through a link and never a file of another user."""
    ust, record_file = output / "ust", output / RECORD_FILE
    for target, is_dir in ((ust, True), (record_file, False)):
        if not os.path.lexists(target):
            continue
        st = os.lstat(target)
        kind_ok = stat.S_ISDIR(st.st_mode) if is_dir else stat.S_ISREG(st.st_mode)
        if not kind_ok or st.st_uid != os.geteuid():
            raise UsageError(f"{target}: is not what a previous memq record wrote (a link, another kind of file "
                             "or another user's); --force removes only memq's own ust/ and memq-record.json")
    try:
        if os.path.lexists(ust):
            shutil.rmtree(ust)
        if os.path.lexists(record_file):
            record_file.unlink()
    except OSError as exc:
        raise MemqError(f"{output}: cannot clear the previous recording: {exc.strerror or exc}") from exc


def undo_output(output: Path, created: bool) -> None:
    """After a failure before the command ran: remove what this run made (nothing the user had)."""
    if created:
        shutil.rmtree(output, ignore_errors=True)
    else:
        shutil.rmtree(output / "ust", ignore_errors=True)


def trace_size(output: Path) -> int:
    """Bytes of the files under the output directory."""
    return sum(p.stat().st_size for p in output.rglob("*") if p.is_file())


def count_events(output: Path) -> int | None:
    """Events in the recorded trace (babeltrace2's counter sink); None if unreadable."""
    babeltrace = shutil.which("babeltrace2")
    if babeltrace is None or not (output / "ust").is_dir():
        return None
    # step=+0 (unsigned): one final count instead of one every 10,000 messages. Its own
    # process session, like lttng's: a terminal's ^C meant for memq does not cut it short.
    proc = subprocess.run([babeltrace, str(output / "ust"), "-c", "sink.utils.counter", "-p", "step=+0"],
                          capture_output=True, text=True, start_new_session=True, stdin=subprocess.DEVNULL)
    match = re.search(r"^\s*(\d+) Event messages", proc.stdout, re.MULTILINE)
    return int(match.group(1)) if proc.returncode == 0 and match else None


def write_record(output: Path, record: dict) -> None:
    """memq-record.json, written whole or not at all (a temporary file renamed)."""
    target = output / RECORD_FILE
    tmp = output / f".{RECORD_FILE}.{os.getpid()}.tmp"
    try:
        tmp.write_text(json.dumps(record, indent=2) + "\n")
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise MemqError(f"{target}: cannot write: {exc.strerror or exc}") from exc
