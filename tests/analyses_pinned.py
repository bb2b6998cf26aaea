"""Fixed event logs of the hard cases for the analyses, compared with the oracle on every run
(tests/test_analyses_property.py::test_pinned_logs_match_oracle).

Each log is one case in the generator's form: pids 0 and 1, times from 0, rows in time order, plus the
unified-memory device descriptions. Each targets a documented rule of sql/memq that random logs only
sometimes reach; scripts/mutation_check.py plants breakages of those rules and checks that they are caught.
"""
from __future__ import annotations

from typing import Callable

from ctf2perfetto.events import MemKind as M
from support.rows import Rows, in_time_order, unified

HOST, PINNED, DEV, UNTRACKED = 0x10000, 0x20000, 0x30000, 0x50000
Case = tuple[list[dict], list[dict]]
P0, P1 = Rows(0), Rows(1, "cuda")


def free_at_copy_start() -> Case:
    """A free starting as a copy starts: the block no longer holds the copy's source (untracked), so the
    mirror outlives the free; one made as a copy starts holds its destination."""
    return in_time_order([
        P0.malloc(10, HOST, 32), P0.gpu_alloc(10, DEV, 32, dur=10),
        P0.free(30, HOST), P0.copy(30, 40, DEV, HOST, 32, 1),
        P0.gpu_alloc(50, DEV + 64, 16, dur=10), P0.copy(60, 70, DEV + 64, HOST + 32, 16, 4),
        P0.gpu_free(80, DEV + 64, 16, dur=5)]), []


def free_as_a_repeat_completes() -> Case:
    """Frees before writes at equal times: a copy that would repeat completes as its source is freed."""
    return in_time_order([
        P0.malloc(10, HOST, 32), P0.gpu_alloc(10, DEV, 32, dur=5),
        P0.copy(20, 30, DEV, HOST, 32, 1), P0.copy(40, 50, DEV, HOST, 32, 1), P0.free(50, HOST),
        P0.copy(60, 70, DEV, HOST, 32, 1)]), []


def writes_ending_together() -> Case:
    """Writes ending together apply in slice id order (start, then log order): a memset started later wipes a
    copy's mirror; a copy started later keeps its mirror; of two copies starting together the second stays."""
    return in_time_order([
        P0.malloc(10, HOST, 64), P0.gpu_alloc(10, DEV, 64, dur=5),
        P0.copy(20, 40, DEV, HOST, 16, 1), P0.memset(30, 40, DEV + 8, 16),
        P0.memset(50, 70, DEV + 32, 16), P0.copy(60, 70, DEV + 32, HOST + 32, 16, 1),
        P0.copy(80, 90, DEV + 48, HOST, 16, 1, stream=1), P0.copy(80, 90, DEV + 48, HOST + 16, 16, 1, stream=2),
        P0.copy(100, 110, DEV + 48, HOST + 16, 16, 1)]), []


def primary_allocations() -> Case:
    """A registered range over a heap block (registered is the primary), two heap blocks overlapping after a
    lost free (the later one is the primary), device memory over a lost-free device block, pinned memory."""
    return in_time_order([
        P0.malloc(10, HOST, 64), P0.gpu_alloc(10, HOST, 32, M.REGISTERED, dur=5),
        P0.malloc(20, HOST + 96, 32), P0.malloc(20, HOST + 80, 32),
        P0.gpu_alloc(30, DEV, 64, dur=5), P0.gpu_alloc(35, DEV + 32, 64, M.MANAGED, dur=5),
        P0.gpu_alloc(40, PINNED, 64, M.PINNED, dur=5),
        P0.copy(50, 60, DEV + 40, HOST, 32, 4), P0.copy(50, 70, PINNED, HOST + 84, 40, 0),
        P0.copy(80, 90, DEV, PINNED, 16, 4), P0.copy(100, 110, HOST + 100, DEV + 40, 8, 2)]), []


def gpu_frees_end_mirrors() -> Case:
    """hipFree (device, managed), hipHostFree and hipHostUnregister end the mirrors of their bytes, and the CUDA
    calls do the same in process 1."""
    rows = []
    for log in (P0, P1):
        rows += [log.malloc(10, HOST, 32), log.gpu_alloc(10, HOST, 32, M.REGISTERED, dur=5),
                 log.gpu_alloc(20, DEV, 32, dur=5), log.gpu_alloc(20, PINNED, 32, M.PINNED, dur=5),
                 log.gpu_alloc(30, DEV + 64, 32, M.MANAGED, dur=5),
                 log.copy(40, 50, DEV, HOST, 32, 1), log.copy(40, 50, PINNED, DEV, 16, 2, stream=1),
                 log.copy(60, 70, DEV + 64, PINNED, 16, 4), log.copy(60, 70, HOST + 16, DEV + 80, 8, 2, stream=1),
                 log.gpu_free(80, DEV + 64, 32, M.MANAGED, dur=5), log.gpu_free(90, PINNED, 32, M.PINNED, dur=5),
                 log.gpu_free(100, HOST, 32, M.REGISTERED, dur=5), log.gpu_free(110, DEV, 32, dur=5)]
    return in_time_order(rows), []


def memset_over_a_source() -> Case:
    """A memset over part of a mirror's source ends that part; the next copy repeats the rest only."""
    return in_time_order([
        P0.malloc(10, HOST, 48), P0.gpu_alloc(10, DEV, 48, dur=5),
        P0.copy(20, 30, DEV, HOST, 48, 1), P0.memset(40, 50, HOST + 8, 8), P0.copy(60, 70, DEV, HOST, 48, 1),
        P0.copy(80, 90, HOST + 16, DEV + 16, 8, 2)]), []


def two_d_shapes() -> Case:
    """2D copies repeating 2D copies, a shifted source pitch, rows overlapping (pitch < width: the last row's
    bytes stay; a copy is no repeat of its own rows), a zero-row copy and a 2D copy back (round trip)."""
    return in_time_order([
        P0.malloc(10, HOST, 128), P0.gpu_alloc(10, DEV, 128, dur=5),
        P0.copy_2d(20, 30, DEV, HOST, 4, 3, 8, 16, 1), P0.copy_2d(40, 50, DEV, HOST, 4, 3, 8, 16, 1),
        P0.copy_2d(60, 70, DEV, HOST, 4, 3, 8, 12, 1),
        P0.copy_2d(80, 90, DEV + 64, HOST + 64, 8, 3, 4, 2, 1),
        P0.copy_2d(100, 110, DEV + 64, HOST + 64, 8, 3, 4, 2, 1),
        P0.copy_2d(120, 130, DEV + 96, HOST, 6, 0, 8, 8, 1),
        P0.copy_2d(140, 150, HOST, DEV, 4, 2, 16, 8, 2)]), []


def classes_and_devices() -> Case:
    """Ties of classes (repeat = round trip bytes: repeat), a round trip needing the same bytes back, a managed
    source, unified memory on device 1 only (process 1, CUDA)."""
    return in_time_order([
        P0.malloc(10, HOST, 64), P0.gpu_alloc(10, DEV, 64, dur=5), P0.gpu_alloc(10, DEV + 64, 64, dur=5),
        P0.gpu_alloc(15, DEV + 128, 16, M.MANAGED, dur=5),
        P0.copy(20, 30, DEV, HOST, 8, 1), P0.copy(20, 30, HOST + 8, DEV + 8, 8, 2, stream=1),
        P0.copy(40, 50, DEV, HOST, 16, 1),
        P0.copy(60, 70, HOST + 32, DEV + 64, 8, 2), P0.copy(80, 90, DEV + 32, HOST + 32, 8, 1),
        P0.copy(100, 110, DEV + 48, DEV + 128, 8, 4),
        P1.malloc(10, HOST, 64), P1.copy(20, 33, DEV, HOST, 16, 1, device=0),
        P1.copy(40, 53, DEV + 16, HOST, 16, 1, device=1), P1.copy(60, 73, HOST + 16, DEV + 16, 16, 2, device=1)]), \
        [unified(1, 1, "cuda")]


def content_fingerprints() -> Case:
    """Content evidence (memq.mirrors, memq.redundant): a new batch uploaded over the last one (its source
    fingerprint ends the old mirror: no repeat), the same batch again (a repeat the copy checked), a read-back whose
    destination did not change (no-op) and one whose did; a mirror at whose end another copy reads its source with
    another fingerprint (at that nanosecond only after-fingerprints count: the mirror stays, the next copy repeats
    it), a read-back fingerprinted later (copy_done) and copied back (a checked round trip), and a repeat starting
    as its mirror starts (not checked: its source fingerprint is from before that mirror's end)."""
    fp = P0.fingerprinted
    return in_time_order([
        P0.malloc(10, HOST, 128), P0.gpu_alloc(10, DEV, 128, dur=5),
        fp(P0.copy(20, 30, DEV, HOST, 32, 1), 1, src=1), fp(P0.copy(40, 50, DEV, HOST, 32, 1), 2, src=2),
        fp(P0.copy(60, 70, DEV, HOST, 32, 1), 3, src=2),
        fp(P0.copy(80, 90, HOST + 32, DEV + 32, 16, 2), 4, before=7, after=7),
        fp(P0.copy(100, 110, HOST + 32, DEV + 32, 16, 2), 5, before=7, after=9),
        fp(P0.copy(120, 130, DEV + 48, HOST + 48, 8, 1), 6, src=5),
        fp(P0.copy(130, 140, UNTRACKED, HOST + 48, 8, 0), 7, src=6),
        fp(P0.copy(150, 160, DEV + 48, HOST + 48, 8, 1), 8, src=5),
        fp(P0.copy(170, 180, HOST + 64, DEV + 64, 16, 2), 9, later=True), P0.copy_done(200, 9, 11),
        fp(P0.copy(210, 220, DEV + 64, HOST + 64, 16, 1), 10, src=11),
        fp(P0.copy(240, 250, DEV + 96, HOST + 96, 8, 1), 11, src=21),
        fp(P0.copy(250, 260, DEV + 96, HOST + 96, 8, 1), 12, src=21)]), []


LOGS: dict[str, Callable[[], Case]] = {f.__name__: f for f in (
    free_at_copy_start, free_as_a_repeat_completes, writes_ending_together, primary_allocations,
    gpu_frees_end_mirrors, memset_over_a_source, two_d_shapes, classes_and_devices, content_fingerprints)}
