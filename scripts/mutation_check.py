#!/usr/bin/env python3
"""Mutation check: plant known bugs in sql/memq, the converter, the model, the decoder and the importers, one at a
time, and see a test fail.

    python3 scripts/mutation_check.py            # every mutation, deterministic tests only
    python3 scripts/mutation_check.py --random   # also the randomised property test
    python3 scripts/mutation_check.py --every    # name every test that fails, not only the first
    python3 scripts/mutation_check.py --list

Each mutation is a text replacement in one file that breaks one documented rule (docs/DEFINITIONS.md, the
modules' doc comments). The repository is copied to a temporary directory (the checkout is never modified),
the tests run there once unmutated (they must pass), then once per mutation with the file changed (and, for
C sources, the library rebuilt) and put back after. A mutation is caught when a test fails. A mutation of
sql/memq runs the deterministic analyses tests (the hand-worked cases and the pinned logs) and any it names;
one elsewhere runs the tests it names, those nearest the code. No catch depends on a random draw. Exit
status 1 when a mutation survives or no longer applies (its text is gone from the file: update the list here).
Not run by pytest; takes about 15 s per mutation on a quiet machine.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DETERMINISTIC = ["tests/test_analyses_property.py::test_pinned_logs_match_oracle", "tests/test_analyses_cases.py",
                 "tests/test_windows_analyses.py::test_copies_returning_as_their_window_closes",
                 "tests/test_parts.py::test_pinned_parts"]
RANDOM = ["tests/test_analyses_property.py::test_sql_matches_oracle"]
COPY_IGNORE = shutil.ignore_patterns(".git", "__pycache__", ".pytest_cache", ".hypothesis", "node_modules", "out",
                                     "test-artifacts", ".gpu-bundle", "build", "dist", "*.egg-info")
INF = "9223372036854775807"


@dataclass(frozen=True)
class Mutation:
    name: str
    file: str  # under sql/memq, or a path from the repository root (holding a "/")
    edits: tuple[tuple[str, str], ...]  # (text that must occur exactly once, replacement)
    breaks: str  # the rule it breaks
    tests: tuple[str, ...] = ()  # the tests nearest the code (with DETERMINISTIC for sql/memq)

    @property
    def path(self) -> str:
        return self.file if "/" in self.file else f"sql/memq/{self.file}"

    def test_ids(self, extra: list[str], nearest: bool = False) -> list[str]:
        base = DETERMINISTIC + extra if self.path.startswith("sql/memq/") and not (nearest and self.tests) else []
        return base + [t for t in self.tests if t not in base]


# A C source's library, rebuilt in the copy after each change to it (the Makefile's rule).
NATIVE = {"ctf2perfetto/ctf/native/": "libmemqdecode.so", "ctf2perfetto/convert/native/": "libmemqencode.so"}
PLANTED = "tests/test_planted.py"


MUTATIONS = [
    Mutation("freed_at_copy_start_still_holds", "mirrors.sql",
             (("(a.end_ts IS NULL OR a.end_ts > r.begin_ts)", "(a.end_ts IS NULL OR a.end_ts >= r.begin_ts)"),),
             "an allocation freed exactly at a copy's start no longer holds its bytes"),
    Mutation("made_at_copy_start_does_not_hold", "mirrors.sql",
             (("WHERE a.ts <= r.begin_ts AND", "WHERE a.ts < r.begin_ts AND"),),
             "an allocation made exactly at a copy's start holds its bytes"),
    Mutation("grouped_by_source_allocation", "duplicated_trace.sql",
             (("IFNULL(m.dst_alloc_id, -1) AS alloc", "IFNULL(m.src_alloc_id, -1) AS alloc"),),
             "duplicated bytes by allocation are grouped by the destination allocation"),
    Mutation("repeat_ignores_source_offset", "mirrors.sql",
             (("JOIN _memq_piece q ON q.ord = p.dst_prev_ord AND q.lo = p.lo AND q.k = p.k",
               "JOIN _memq_piece q ON q.ord = p.dst_prev_ord AND q.lo = p.lo"),),
             "a repeat copies from the same source bytes"),
    Mutation("gpu_frees_never_end_mirrors", "mirrors.sql",
             ((f"MIN(IFNULL(a_end, {INF})) AS alloc_end",
               f"MIN(IIF(kind IN ('host', 'registered'), IFNULL(a_end, {INF}), {INF})) AS alloc_end"),),
             "freeing device, managed or pinned memory ends its mirrors"),
    Mutation("registered_after_host", "mirrors.sql",
             (("WHEN 'registered' THEN 3", "WHEN 'registered' THEN 5"),),
             "the primary allocation is the first of device/managed, pinned, registered, host"),
    Mutation("earliest_started_is_primary", "mirrors.sql",
             (("ORDER BY h.rank, h.a_start DESC, h.alloc_id DESC", "ORDER BY h.rank, h.a_start, h.alloc_id"),),
             "within a kind the latest started allocation is the primary"),
    Mutation("writes_by_slice_id_reversed", "mirrors.sql",
             (("WINDOW w AS (ORDER BY end_ts, id, r ROWS", "WINDOW w AS (ORDER BY end_ts, id DESC, r ROWS"),),
             "writes ending together take effect in slice id order"),
    Mutation("writes_before_frees", "mirrors.sql",
             (("WHERE q.alloc_end > p.t AND q.window_end >= p.t AND IFNULL(q.src_next_seq, p.seq) >= p.seq\n"
               "    AND q.content_end > p.t\n",
               "WHERE q.alloc_end >= p.t AND q.window_end >= p.t AND IFNULL(q.src_next_seq, p.seq) >= p.seq\n"
               "    AND q.content_end > p.t\n"),),
             "at equal times frees come before writes (a mirror whose memory is freed as a copy ends is gone)"),
    Mutation("window_closes_before_writes", "mirrors.sql",
             (("WHERE q.alloc_end > p.t AND q.window_end >= p.t AND IFNULL(q.src_next_seq, p.seq) >= p.seq\n"
               "    AND q.content_end > p.t\n",
               "WHERE q.alloc_end > p.t AND q.window_end > p.t AND IFNULL(q.src_next_seq, p.seq) >= p.seq\n"
               "    AND q.content_end > p.t\n"),),
             "a window closes after the writes at its time (a copy returning as it closes sees its mirrors)"),
    Mutation("dead_mirrors_listed", "mirrors.sql",
             (("WHERE p.end_raw > p.t", "WHERE p.end_raw >= p.t"),),
             "a mirror that ends as it is made is no mirror"),
    Mutation("memset_spares_sources", "mirrors.sql",
             (("  FROM _memq_cover\n)\nWHERE NOT is_dst;", "  FROM _memq_cover WHERE is_copy\n)\nWHERE NOT is_dst;"),),
             "a memset over a mirror's source bytes ends the mirror"),
    Mutation("source_writes_spare_mirrors", "mirrors.sql",
             (("MIN(dst_write_end, src_write_end, dst_alloc_end, src_alloc_end, window_end, content_end) AS end_raw",
               "MIN(dst_write_end, dst_alloc_end, src_alloc_end, window_end, content_end) AS end_raw"),),
             "a later write over either byte ends the mirror"),
    Mutation("round_trip_ignores_offset", "mirrors.sql",
             (("JOIN _memq_piece q ON q.ord = p.src_prev_ord AND q.lo = p.lo + p.k AND q.k = -p.k",
               "JOIN _memq_piece q ON q.ord = p.src_prev_ord AND q.lo = p.lo + p.k"),),
             "a round trip copies back onto the bytes it came from"),
    Mutation("untracked_flag_from_destination", "mirrors.sql",
             (("p.src_alloc_id IS NULL AS untracked_source", "p.dst_alloc_id IS NULL AS untracked_source"),),
             "untracked-source means the source bytes lie in no traced allocation"),
    Mutation("two_d_source_at_dst_pitch", "mirrors.sql",
             (("src + (r / height) * sslice + (r % height) * spitch AS src",
               "src + (r / height) * sslice + (r % height) * dpitch AS src"),),
             "a 2D copy reads its rows `spitch` apart"),
    Mutation("two_d_rows_by_address", "mirrors.sql",
             (("WINDOW w AS (ORDER BY end_ts, id, r ROWS", "WINDOW w AS (ORDER BY end_ts, id, -r ROWS"),),
             "overlapping rows of a 2D copy are written in row order (the last row's bytes stay)"),
    Mutation("class_ties_to_later_class", "redundant.sql",
             (("WHEN IFNULL(repeat_bytes, 0) >= MAX(", "WHEN IFNULL(repeat_bytes, 0) > MAX("),),
             "a copy's class is the class with most bytes, ties in the order repeat, round trip, managed, unified"),
    Mutation("unified_any_device", "redundant.sql",
             (("LEFT JOIN _memq_device_unified du ON du.upid = mc.upid AND du.device = mc.device",
               "LEFT JOIN (SELECT upid, MAX(unified_memory) AS unified_memory FROM _memq_device_unified GROUP BY upid)"
               " du ON du.upid = mc.upid"),),
             "unified memory is a property of the copy's device"),
    Mutation("managed_destination_only", "mirrors.sql",
             (("MAX(kind = 'managed') AS managed", "MAX(kind = 'managed' AND side = 'dst') AS managed"),),
             "a copy with a managed endpoint (either side) is avoidable"),
    Mutation("prorated_rounded", "redundant.sql",
             (("CAST(CAST(dur AS DOUBLE) * redundant_bytes / bytes AS INT), 0) AS redundant_dur",
               "CAST(ROUND(CAST(dur AS DOUBLE) * redundant_bytes / bytes) AS INT), 0) AS redundant_dur"),),
             "prorated time is floor(dur * redundant bytes / bytes)"),
    Mutation("wall_clock_is_the_sum", "redundant.sql",
             (("SUM(MAX(0, ts + d - MAX(ts, IFNULL(prev_end, ts)))) AS wall_dur", "SUM(d) AS wall_dur"),),
             "wall-clock time is the union of the prorated intervals"),
    Mutation("free_at_end_of_call", "allocations.sql",
             (("  _memq_arg!(a) AS alloc_id,\n  s.id AS slice_id,\n  s.ts\n",
               "  _memq_arg!(a) AS alloc_id,\n  s.id AS slice_id,\n  s.ts + s.dur AS ts\n"),),
             "an allocation ends at the start of its freeing call"),
    Mutation("fingerprints_never_end_mirrors", "mirrors.sql",
             (("MIN(dst_write_end, src_write_end, dst_alloc_end, src_alloc_end, window_end, content_end) AS end_raw",
               "MIN(dst_write_end, src_write_end, dst_alloc_end, src_alloc_end, window_end) AS end_raw"),),
             "a mirror ends when a fingerprint shows a side no longer holding what was copied"),
    Mutation("repeat_despite_changed_content", "mirrors.sql",
             (("IFNULL(q.src_next_seq, p.seq) >= p.seq\n    AND q.content_end > p.t\n  UNION ALL",
               "IFNULL(q.src_next_seq, p.seq) >= p.seq\n  UNION ALL"),),
             "a repeat counts only where no fingerprint contradicted the mirror by the copy's end"),
    Mutation("fingerprint_at_start_ends_mirror", "mirrors.sql",
             (("  0 AS rank, IFNULL(src_hash, dst_hash_after) AS hash", "  2 AS rank, IFNULL(src_hash, dst_hash_after) AS hash"),
              ("SELECT id, upid, 'before', dst_key, ts, 0, dst_hash_before", "SELECT id, upid, 'before', dst_key, ts, 2, dst_hash_before")),
             "at the nanosecond a mirror starts only after-fingerprints can end it"),
    Mutation("checked_at_mirror_start", "mirrors.sql",
             (("WHERE (o.ts > pr.q_t OR (o.ts = pr.q_t AND o.kind = 'after')) AND o.ts <= pr.t",
               "WHERE o.ts >= pr.q_t AND o.ts <= pr.t"),),
             "a repeat is checked by what the copy observed after the mirror began (the same tie rule)"),
    Mutation("no_op_without_equal_fingerprints", "redundant.sql",
             (("IFNULL(mc.dst_hash_before = mc.dst_hash_after, 0)",
               "IFNULL(mc.dst_hash_before IS NOT NULL AND mc.dst_hash_after IS NOT NULL, 0)"),),
             "a no-op copy is one whose destination fingerprint is the same before and after"),
    Mutation("peak_at_last_time", "duplicated_trace.sql",
             (("(SELECT MIN(c.ts) FROM $counter c", "(SELECT MAX(c.ts) FROM $counter c"),),
             "the peak's time is the first time it is reached"),
    Mutation("carried_pieces_ignored", "mirrors.sql",
             (("FROM _memq_carried_copy c\nWHERE bytes > 0", "FROM _memq_carried_copy c\nWHERE 0"),),
             "a part starts with the mirror pieces the previous part left alive"),
    Mutation("carried_held_by_any_live_allocation", "mirrors.sql",
             (("AND (NOT r.carried OR EXISTS (", "AND (1 OR EXISTS ("),),
             "a carried piece is held by the allocations that held it when its copy started, not by any live now"),
    Mutation("carried_pieces_of_one_copy_apart", "mirrors.sql",
             (("c.write - 4611686018427387904 AS id,", "c.id - 4611686018427387904 AS id,"),),
             "the carried pieces of one copy are one call: its own rows do not end its mirrors"),
    Mutation("carried_content_forgotten", "mirrors.sql",
             (("FROM (SELECT DISTINCT id, upid, end_ts, src_key, dst_key, content FROM _memq_carried_copy\n"
               "      WHERE content IS NOT NULL", "FROM (SELECT DISTINCT id, upid, end_ts, src_key, dst_key, content "
               "FROM _memq_carried_copy\n      WHERE 0"),),
             "a carried piece keeps what its copy copied: a later fingerprint may end it, or check a repeat"),
    Mutation("carried_sequences_unknown", "mirrors.sql",
             (("SELECT DISTINCT id, src_key, dst_key FROM _memq_carried_copy\n",
               "SELECT DISTINCT id, src_key, dst_key FROM _memq_carried_copy WHERE 0\n"),),
             "a copy's fingerprint checks a repeat of a carried mirror on that mirror's byte sequences"),
    Mutation("carry_out_stops_before_the_close", "mirrors.sql",
             (("WHERE p.t < $at AND p.end_raw >= $at AND p.end_raw > p.t\nORDER BY p.ord, p.lo;",
               "WHERE p.t < $at AND p.end_raw > $at AND p.end_raw > p.t\nORDER BY p.ord, p.lo;"),),
             "the pieces alive at a part's end are those its closes end there"),
    # -- beyond sql/memq: the converter, the model, the decoder, the importers ------------------------------
    Mutation("three_d_slice_at_width", "copies.sql",
             (("WHEN IFNULL($depth, 0) <= 1 OR $slice = $pitch * $height",
               "WHEN IFNULL($depth, 0) <= 1 OR $slice = $width * $height"),),
             "a 3D copy whose slices continue the row stride is rows (its key is the 2D copy's)",
             (f"{PLANTED}::test_a_3d_copy_of_contiguous_slices_has_the_2d_key",)),
    Mutation("leaks_smallest_first", "leaks.sql",
             (("  FROM memq_host_small\n  HAVING SUM(live_count) > 0 OR SUM(live_bytes) > 0\n)\nORDER BY bytes DESC;",
               "  FROM memq_host_small\n  HAVING SUM(live_count) > 0 OR SUM(live_bytes) > 0\n)\nORDER BY bytes;"),),
             "the leak report lists the most leaked bytes first",
             (f"{PLANTED}::test_leaks_are_listed_largest_first",)),
    Mutation("leaked_allocations_smallest_first", "leaks.sql",
             (("ORDER BY l.size DESC, l.ts;", "ORDER BY l.size, l.ts;"),),
             "leaked allocations are listed largest first, then oldest",
             (f"{PLANTED}::test_leaks_are_listed_largest_first",)),
    Mutation("advice_loop_of_two", "sql/memq/advice/sync_loop.sql", (("SELECT 3;", "SELECT 2;"),),
             "a loop site takes at least 3 synchronous copies from one call site",
             ("tests/test_advice.py::test_rules_hold_back",)),
    Mutation("advice_pins_pinned_sources", "sql/memq/advice/pinning.sql",
             (("WITH up AS (\n  SELECT c.*, IFNULL(CAST(c.src_alloc_id AS STRING), 'key:' || c.src_key) AS buffer\n"
               "  FROM memq_copy c\n  WHERE memq_has_addresses!(c.source) AND c.direction = 'HtoD' AND c.pageable",
               "WITH up AS (\n  SELECT c.*, IFNULL(CAST(c.src_alloc_id AS STRING), 'key:' || c.src_key) AS buffer\n"
               "  FROM memq_copy c\n  WHERE memq_has_addresses!(c.source) AND c.direction = 'HtoD'"),),
             "only uploads from pageable memory are pinning candidates",
             ("tests/test_advice.py::test_story_rules_by_hand",)),
    Mutation("advice_pinned_rate_with_pageable", "sql/memq/advice/pinning.sql",
             (("AND direction = 'HtoD' AND NOT pageable AND dur > 0", "AND direction = 'HtoD' AND dur > 0"),),
             "the pinned rate is measured on uploads whose source is not pageable",
             ("tests/test_advice.py::test_story_rules_by_hand",)),
    Mutation("advice_sampled_zeros_called_full", "sql/memq/advice/zero_content.sql",
             (("c.bytes <= 1024, 'full', 'sampled')", "c.bytes <= 4096, 'full', 'sampled')"),),
             "a sampled fingerprint hashes every byte only up to 1,024 bytes",
             ("tests/test_advice.py::test_story_rules_by_hand",)),
    Mutation("decode_begin_without_clock_delta", "ctf2perfetto/ctf/native/decode.c",
             (("c->begin[i] = (int64_t)get_u(pl, h->idx[R_BEGIN]) + h->delta_ns;",
               "c->begin[i] = (int64_t)get_u(pl, h->idx[R_BEGIN]);"),),
             "a GPU call's begin time is on the reference clock (its trace's clock offset delta added)",
             (f"{PLANTED}::test_call_times_of_two_traces_with_different_clock_offsets",)),
    Mutation("kineto_flow_skips_slice_at_its_time", "ctf2perfetto/importers/kineto/layout.py",
             (("i = bisect.bisect_left(starts.get(lane, []), ts)", "i = bisect.bisect_right(starts.get(lane, []), ts)"),),
             "a flow end without bp=e binds to the next slice starting at or after its time",
             (f"{PLANTED}::test_a_flow_end_binds_to_the_slice_starting_at_its_time",)),
    Mutation("copy_endpoint_misses_allocation_start", "ctf2perfetto/convert/model.py",
             (('hi = int(np.searchsorted(a0, a, side="right"))', 'hi = int(np.searchsorted(a0, a, side="left"))'),),
             "a copy's endpoint at an allocation's first byte lies in that allocation",
             ("tests/test_model.py",)),
    Mutation("clock_snapshot_from_the_end_reading", "ctf2perfetto/convert/clocks.py",
             (('start = next((r for r in readings if r.get("where") == "start"), readings[0])',
               'start = next((r for r in readings if r.get("where") == "end"), readings[0])'),),
             "the trace's clock snapshot is the recorder's start reading",
             ("tests/test_clocks.py",)),
]


def _copy_repo(dest: Path) -> Path:
    """The checkout as it is (uncommitted changes, built libraries and tests/data included)."""
    repo = dest / "repo"
    shutil.copytree(REPO, repo, ignore=COPY_IGNORE, symlinks=True)
    return repo


def _run_tests(repo: Path, tests: list[str], every: bool = False) -> tuple[bool, str]:
    """(passed, the failing test ids (the first one unless `every`) or the last output line)."""
    env = dict(os.environ, PYTHONPATH=str(repo))
    stop = [] if every else ["-x"]
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", *stop, "-p", "no:cacheprovider", "-rfE", *tests],
                          cwd=repo, env=env, capture_output=True, text=True)
    if done.returncode == 0:
        return True, ""
    failed = [line.split()[1].split("/")[-1] for line in done.stdout.splitlines()
              if line.startswith(("FAILED ", "ERROR "))]
    lines = (done.stdout + done.stderr).strip().splitlines()
    return False, ", ".join(failed) if failed else (lines[-1] if lines else f"exit {done.returncode}")


def _rebuild(repo: Path, path: str) -> tuple[bool, str]:
    """Rebuilds the library of a changed C source in the copy (nothing to do for other files)."""
    for folder, library in NATIVE.items():
        if path.startswith(folder):
            done = subprocess.run(["make", "-s", "-B", "-C", str(repo / folder), f"OUT={repo / 'ctf2perfetto' / 'lib'}"],
                                  capture_output=True, text=True)
            if done.returncode:
                return False, f"{library} does not build: {(done.stderr.strip().splitlines() or ['?'])[-1]}"
    return True, ""


def _apply(text: str, m: Mutation) -> str | None:
    for old, new in m.edits:
        if text.count(old) != 1:
            return None
        text = text.replace(old, new)
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--random", action="store_true", help="also run the randomised property test")
    parser.add_argument("--only", action="append", metavar="NAME", help="run only this mutation (repeatable)")
    parser.add_argument("--every", action="store_true", help="run every test for each mutation (not stopping at the "
                        "first failure) and name all that fail")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--nearest", action="store_true", help="run only the tests a mutation names, where it names "
                        "some (a quick check of those; the full run also runs the analyses tests for sql/memq)")
    args = parser.parse_args()
    chosen = [m for m in MUTATIONS if not args.only or m.name in args.only]
    if args.list or not chosen:
        for m in MUTATIONS:
            print(f"{m.name:34} {m.path:40} {m.breaks}")
        return 0 if chosen or not args.only else 2
    extra = RANDOM if args.random else []
    with tempfile.TemporaryDirectory(prefix="memq-mutation-") as tmp:
        repo = _copy_repo(Path(tmp))
        tests = list(dict.fromkeys(t for m in chosen for t in m.test_ids(extra, args.nearest)))
        print(f"tests: {' '.join(tests)}", flush=True)
        start = time.monotonic()
        ok, why = _run_tests(repo, tests)
        if not ok:
            print(f"the tests fail with no mutation ({why}): fix them first", file=sys.stderr)
            return 1
        print(f"unmutated: pass ({time.monotonic() - start:.0f} s)", flush=True)
        survived = 0
        for m in chosen:
            path = repo / m.path
            original = path.read_text()
            mutated = _apply(original, m)
            if mutated is None:
                print(f"{m.name:34} DOES NOT APPLY: its text is no longer in {m.path}", flush=True)
                survived += 1
                continue
            start = time.monotonic()
            path.write_text(mutated)
            built = False
            try:
                built, why = _rebuild(repo, m.path)
                ok, why = _run_tests(repo, m.test_ids(extra, args.nearest), args.every) if built else (True, why)
            finally:
                path.write_text(original)
                _rebuild(repo, m.path)
            verdict = ("SURVIVED" if built else why.upper()) if ok else f"caught by {why}"
            survived += ok
            print(f"{m.name:34} {verdict} ({time.monotonic() - start:.0f} s)", flush=True)
    print(f"{len(chosen) - survived} of {len(chosen)} mutations caught")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
