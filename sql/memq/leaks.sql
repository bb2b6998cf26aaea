-- Leaks: allocations never freed before the end of the trace.
--
-- Decisions: an allocation is leaked when no freeing event ends it in the trace
-- (a lost free makes a false leak; the trace's lost-event count says how likely).
-- Grouped by kind and size: a repeated (kind, size) is the usual leak signature.
-- Capture windows (memq.windows): an allocation still live when its window closed
-- before the process exited is not a leak, its fate outside the window is unknown:
-- those are counted apart (memq_outlived_by_kind_size). A leak that was live when its
-- window opened was allocated before the recording saw it: `live_at_start` counts them.

INCLUDE PERFETTO MODULE memq.allocations;

-- Every allocation never freed.
CREATE PERFETTO VIEW memq_leak(
  -- Allocation id.
  alloc_id LONG,
  -- Process.
  upid LONG,
  -- Kind.
  kind STRING,
  -- Device (GPU allocations).
  device LONG,
  -- First byte.
  addr LONG,
  -- Size in bytes.
  size LONG,
  -- When it was allocated (its window's start when `live_at_start`).
  ts TIMESTAMP,
  -- Allocating function.
  api STRING,
  -- Slice of the allocating call.
  alloc_slice_id LONG,
  -- 1 when it was live when its capture window opened (allocated before the window).
  live_at_start BOOL,
  -- Its capture window in its process; NULL without windows.
  window LONG
) AS
SELECT alloc_id, upid, kind, device, addr, size, ts, api, alloc_slice_id, live_at_start, window
FROM memq_allocation WHERE leaked;

-- Leaks grouped by kind and size. Host blocks below the recording's threshold, which the
-- trace holds only as totals (memq_host_small), are one `host` row with no size: those
-- still live at the end, all processes. Never `outlived`: their totals are written at thread
-- and process exit even outside capture windows, so they count what was live at the exit.
CREATE PERFETTO TABLE memq_leak_by_kind_size(
  -- Kind.
  kind STRING,
  -- Size of each allocation (NULL: the host blocks below the threshold, of any size).
  size LONG,
  -- How many were never freed.
  count LONG,
  -- count * size.
  bytes LONG,
  -- First such allocation.
  first_ts TIMESTAMP,
  -- Last such allocation.
  last_ts TIMESTAMP,
  -- How many of them were live when their capture window opened (allocated before it).
  live_at_start LONG
) AS
SELECT * FROM (
  SELECT kind, size, COUNT(*) AS count, SUM(size) AS bytes, MIN(ts) AS first_ts, MAX(ts) AS last_ts,
    SUM(live_at_start) AS live_at_start
  FROM memq_leak
  GROUP BY kind, size
  UNION ALL
  SELECT 'host', NULL, SUM(live_count), SUM(live_bytes), MIN(first_ts), MAX(last_ts), 0
  FROM memq_host_small
  HAVING SUM(live_count) > 0 OR SUM(live_bytes) > 0
)
ORDER BY bytes DESC;

-- Every leaked allocation with its process id, largest first (ctf2perfetto.analyses.leaked_allocations).
CREATE PERFETTO VIEW memq_leak_report AS
SELECT l.alloc_id, p.pid, l.kind, l.device, l.addr, l.size, l.ts, l.api, l.alloc_slice_id, l.live_at_start,
  l.window
FROM memq_leak l LEFT JOIN process p USING (upid) ORDER BY l.size DESC, l.ts;

-- Allocations still live when their capture window closed before the process exited,
-- by kind and size: not leaks (they may be freed outside the recorded windows).
CREATE PERFETTO TABLE memq_outlived_by_kind_size(
  -- Kind.
  kind STRING,
  -- Size of each allocation.
  size LONG,
  -- How many.
  count LONG,
  -- count * size.
  bytes LONG,
  -- How many of them were live when their window opened.
  live_at_start LONG
) AS
SELECT kind, size, COUNT(*) AS count, SUM(size) AS bytes, SUM(live_at_start) AS live_at_start
FROM memq_allocation
WHERE outlived_window
GROUP BY kind, size
ORDER BY bytes DESC;
