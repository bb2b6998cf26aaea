"""Where memq may write, and how: the one rule every command that writes a file follows.

    out = check_output(args.output, inputs=[args.trace])    # before any work: UsageError if not allowed
    with AtomicOutput(out, inputs=[args.trace]) as target:  # a temporary file beside `out`
        write(target.path)                                  # ... renamed over `out` by target.commit()
        target.commit()

memq replaces only a regular file owned by the user running it (or creates a new
one) in an existing directory. Never a directory, a symbolic link (its target
may be anywhere), a device node (`-o /dev/null` would be destroyed), a fifo or
socket, another user's file, one of the command's inputs, or anything inside a
CTF trace directory (babeltrace2 would read an extra file there as a stream).
The file is written under a temporary name in the target directory and renamed
over `out` only when complete, so a failure (or Ctrl-C) leaves `out` as it was.
Temporary names carry the writer's pid: leftovers of a killed run (SIGKILL) are
removed by the next run that writes into the same directory.
"""
from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path

from ctf2perfetto.errors import MemqError, UsageError

TMP_PREFIX = ".memq-tmp."
# .memq-tmp.<pid>.<8 hex>.<output name>: the output's name last, so writers that choose a format by
# the suffix (.png, .json.gz) write the same format into the temporary file.
_TMP = re.compile(r"^" + re.escape(TMP_PREFIX) + r"(\d+)\.[0-9a-f]{8}\.")
CTF_METADATA = "metadata"


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (one we may not signal counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def check_output(out: Path | str, *, inputs: Iterable[Path | str] = (), flag: str = "-o") -> Path:
    """`out` if memq may (re)place a file there; UsageError saying why not (module docstring)."""
    out = Path(out)
    label = f"{flag} {out}" if flag else str(out)
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"{label}: cannot write: directory {parent} does not exist")
    if out.name in ("", ".", ".."):
        raise UsageError(f"{label}: is a directory, expected a file name")
    try:
        st = os.lstat(out)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise UsageError(f"{label}: cannot write: {exc.strerror or exc}") from None
    if st is not None:
        _check_existing(out, st, label)
    target = Path(os.path.realpath(parent)) / out.name
    for item in inputs:
        if target == Path(os.path.realpath(item)) or (st is not None and _same_file(st, item)):
            raise UsageError(f"{label}: is an input trace of this command; write to a new file")
    if _inside_trace_directory(target):
        raise UsageError(f"{label}: is inside a CTF trace directory ({target.parent}); "
                         "write it elsewhere (an extra file there breaks the trace)")
    return out


def _check_existing(out: Path, st: os.stat_result, label: str) -> None:
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        raise UsageError(f"{label}: is a symbolic link; memq does not write through links (give the real path)")
    if stat.S_ISDIR(mode):
        raise UsageError(f"{label}: is a directory, expected a file name")
    if not stat.S_ISREG(mode):
        kind = ("a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a fifo" if stat.S_ISFIFO(mode)
                else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
        raise UsageError(f"{label}: is {kind}; memq only replaces regular files")
    if st.st_uid != os.geteuid():
        raise UsageError(f"{label}: belongs to another user (uid {st.st_uid}); memq only replaces your own files")


def _same_file(st: os.stat_result, other: Path | str) -> bool:
    try:
        ost = os.stat(other)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (ost.st_dev, ost.st_ino)


def _inside_trace_directory(target: Path) -> bool:
    """A CTF trace directory (holds `metadata`) or its index/ directory."""
    parent = target.parent
    return (parent / CTF_METADATA).is_file() or (parent.name == "index" and (parent.parent / CTF_METADATA).is_file())


def sweep_stale(directory: Path) -> None:
    """Removes temporary files that killed memq runs left in `directory` (their pid is gone)."""
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        found = _TMP.match(entry.name)
        if not found or pid_alive(int(found.group(1))):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
                os.unlink(entry.path)
        except OSError:
            pass


class AtomicOutput:
    """Temporary files beside `out`; `commit(path)` renames one over `out` after checking `out` again.

    Every temporary file not committed is removed on exit, whatever happened.
    """

    def __init__(self, out: Path | str, *, inputs: Iterable[Path | str] = (), flag: str = "-o") -> None:
        self.inputs = list(inputs)
        self.flag = flag
        self.out = check_output(out, inputs=self.inputs, flag=flag)
        self.directory = self.out.parent if str(self.out.parent) else Path(".")
        self.temps: list[Path] = []
        self.path = Path()  # the first temporary file, made on entry

    def __enter__(self) -> "AtomicOutput":
        sweep_stale(self.directory)
        self.path = self.temp()
        return self

    def __exit__(self, *exc: object) -> None:
        for path in self.temps:
            try:
                path.unlink()
            except OSError:
                pass

    def temp(self) -> Path:
        """A new empty temporary file in the target directory (removed on exit unless committed)."""
        for _ in range(100):
            name = f"{TMP_PREFIX}{os.getpid()}.{os.urandom(4).hex()}.{self.out.name}"
            path = self.directory / name
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                continue
            except OSError as exc:
                raise MemqError(f"{self.out}: cannot write: {exc.strerror or exc}") from exc
            os.close(fd)
            self.temps.append(path)
            return path
        raise MemqError(f"{self.out}: cannot write: no free temporary name in {self.directory}")

    def commit(self, path: Path | None = None) -> None:
        """Renames `path` (default: the first temporary file) over `out`, with the umask's permissions."""
        path = self.path if path is None else path
        check_output(self.out, inputs=self.inputs, flag=self.flag)  # it may have changed meanwhile
        umask = os.umask(0)
        os.umask(umask)
        try:
            os.chmod(path, 0o666 & ~umask)  # the temporary file was private; the output is an ordinary file
            os.replace(path, self.out)
        except OSError as exc:
            raise MemqError(f"{self.out}: cannot write: {exc.strerror or exc}") from exc
        self.temps.remove(path)


def write_atomically(out: Path | str, data: bytes, *, inputs: Iterable[Path | str] = (), flag: str = "-o") -> None:
    """Writes `data` to `out` by the rule above."""
    with AtomicOutput(out, inputs=inputs, flag=flag) as target:
        try:
            target.path.write_bytes(data)
        except OSError as exc:
            raise MemqError(f"{target.out}: cannot write: {exc.strerror or exc}") from exc
        target.commit()
