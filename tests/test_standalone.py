"""The repository stands alone: a clone with nothing beside it has every file its tests read (tests/data, each
file described in tests/data/README.md) and every definition its code cites (docs/DEFINITIONS.md), and no file
points at a design note, a data folder or a tracker outside it."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"

# Built from pieces so that this file does not name what it looks for.
OUTSIDE = re.compile("|".join((
    r"\.\./" + "shared",                                   # the folder beside a development checkout
    r"""["']""" + "shared" + r"""["']\s*/\s*["']data""",   # the same, as a path expression
    "DESIGN" + r"\.md",                                    # the design note of that folder
    r"\bissues?\s?#?\d+",                                  # a tracker's issue number: say the reason instead
    r"\(#\d+\)",
)), re.I)


def tracked_files() -> list[Path]:
    """The repository's files, as git lists them (a clone's whole content); build outputs are not in it."""
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    return [REPO / name for name in out.decode().split("\0") if name]


def text_of(path: Path) -> str | None:
    try:
        data = path.read_bytes()
    except OSError:  # a file deleted in the working tree
        return None
    return None if b"\0" in data[:8192] else data.decode("utf-8", "replace")


def test_no_file_points_outside_the_repository() -> None:
    found = []
    for path in tracked_files():
        text = text_of(path)
        for number, line in enumerate((text or "").splitlines(), 1):
            if OUTSIDE.search(line):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()[:100]}")
    assert not found, "files that point outside the repository (say the reason, cite docs/):\n" + "\n".join(found)


def test_the_check_finds_what_it_looks_for() -> None:
    # (written in pieces: this file is scanned too)
    for line in ("see ../" + "shared/data/ctf", 'REPO.parent / "sha' + 'red" / "data"', "as DESIGN" + ".md says",
                 "fixed in issue" + " 12", "(Issue" + " #7)", "issues" + " 10, 11 and 17", "the old way (" + "#31)"):
        assert OUTSIDE.search(line), line
    for line in ("MAP_SHARED | MAP_FIXED", "gcc -shared -fPIC", "a shared cache", "the issue is the order",
                 "color: #333", "docs/DEFINITIONS.md"):
        assert not OUTSIDE.search(line), line


def test_every_data_file_is_described() -> None:
    """tests/data/README.md names each file (or its folder, or its name in a row of its folder) with its origin,
    licence and what it exercises."""
    readme = (DATA / "README.md").read_text()
    named = set(re.findall(r"`([^`\s]+)`", readme))
    missing = []
    for path in tracked_files():
        if DATA not in path.parents or path == DATA / "README.md":
            continue
        rel = path.relative_to(DATA)
        folders = {"/".join(rel.parts[:i]) + "/" for i in range(1, len(rel.parts))}
        if not ({rel.as_posix(), rel.name} | folders) & named:
            missing.append(rel.as_posix())
    assert not missing, f"tests/data/README.md does not describe: {missing}"
    for row in ("ctf/dbg/", "ctf/disc/", "ctf/ovw/", "ctf/perpid/", "ctf/trunc_noidx/", "gpu-check.tar.gz"):
        assert row in named, row


def test_tests_read_their_data_inside_the_repository() -> None:
    """The shared fixture points into tests/data, and the data it lists is there."""
    import conftest

    assert conftest.TEST_DATA == DATA and DATA.is_dir()
    for trace in ("dbg", "disc", "ovw", "perpid", "trunc_noidx"):
        assert any((DATA / "ctf" / trace).rglob("metadata")), trace
    assert len(list((DATA / "kineto").glob("*.json.gz"))) == 4
