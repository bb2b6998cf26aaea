-- Advice: pinned host memory allocated and freed again and again (alloc/free churn).
--
-- Allocating pinned memory locks its pages (a system call per page range) and freeing it
-- often synchronises the device: hipHostMalloc / cudaHostAlloc and their frees take
-- tens of microseconds to milliseconds. A loop that allocates a staging buffer, copies
-- and frees it pays that every step. The fix: allocate it once and reuse it, or use a
-- caching host allocator (PyTorch's `pin_memory=True` reuses its blocks).
--
-- Decisions:
-- * Pinned: memq_allocation.kind `pinned`. Grouped per process and size: buffers of one
--   size can stand in for each other.
-- * `max_live`: the most allocations of the group live at one time (an allocation is live
--   from its start to its end; at equal times ends come first). A program that reused its
--   buffers would need only that many: `avoidable` = allocs - max_live.
-- * A group churns when `avoidable` >= 1 (some buffer of that size was freed before another
--   was allocated).
-- * `call_dur`: the summed duration of the allocating and freeing calls (their slices;
--   heap instants and window markers count 0). `gain_dur` = call_dur * avoidable / allocs:
--   the share of the calls reuse would not make.

INCLUDE PERFETTO MODULE memq.allocations;

-- One row per (process, size) of pinned allocations that churn.
CREATE PERFETTO TABLE memq_advice_pinned_churn(
  -- Process.
  upid LONG,
  -- Size of each allocation.
  size LONG,
  -- Allocating function (of the first).
  api STRING,
  -- Allocations of that size.
  allocs LONG,
  -- Of them, freed in the trace.
  frees LONG,
  -- Most of them live at one time.
  max_live LONG,
  -- allocs - max_live: allocations reuse would not make.
  avoidable LONG,
  -- Summed duration of their allocating and freeing calls.
  call_dur DURATION,
  -- call_dur * avoidable / allocs.
  gain_dur DURATION,
  -- Start of the first.
  first_ts TIMESTAMP,
  -- Last end (or start, when never freed).
  last_ts TIMESTAMP,
  -- Slice of the first allocating call.
  first_alloc_slice_id LONG
) AS
WITH p AS (
  SELECT a.*, IFNULL(sa.dur, 0) + IFNULL(sf.dur, 0) AS calls
  FROM memq_allocation a
  LEFT JOIN slice sa ON sa.id = a.alloc_slice_id
  LEFT JOIN slice sf ON sf.id = a.free_slice_id
  WHERE a.kind = 'pinned' AND NOT a.live_at_start
),
ev AS (
  SELECT upid, size, ts, 1 AS delta FROM p
  UNION ALL
  SELECT upid, size, end_ts, -1 FROM p WHERE end_ts IS NOT NULL
),
live AS (
  SELECT upid, size, MAX(n) AS max_live FROM (
    SELECT upid, size, SUM(delta) OVER (PARTITION BY upid, size ORDER BY ts, delta
                                         ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS n
    FROM ev)
  GROUP BY upid, size
),
g AS (
  SELECT upid, size, COUNT(*) AS allocs, SUM(end_ts IS NOT NULL) AS frees, SUM(calls) AS call_dur,
    MIN(ts) AS first_ts, MAX(IFNULL(end_ts, ts)) AS last_ts
  FROM p GROUP BY upid, size
),
first AS (
  SELECT upid, size, api, alloc_slice_id FROM (
    SELECT upid, size, api, alloc_slice_id, ROW_NUMBER() OVER (PARTITION BY upid, size ORDER BY ts, alloc_id) AS rn
    FROM p)
  WHERE rn = 1
)
SELECT g.upid, g.size, f.api, g.allocs, g.frees, l.max_live, g.allocs - l.max_live AS avoidable, g.call_dur,
  CAST(g.call_dur * 1.0 * (g.allocs - l.max_live) / g.allocs AS INT) AS gain_dur, g.first_ts, g.last_ts,
  f.alloc_slice_id AS first_alloc_slice_id
FROM g JOIN live l USING (upid, size) JOIN first f USING (upid, size)
WHERE g.allocs - l.max_live >= 1
ORDER BY gain_dur DESC, avoidable DESC;
