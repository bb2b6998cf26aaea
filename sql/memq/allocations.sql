-- Allocations: one row per live range `[addr, addr + size)` of one memory kind.
--
-- Definitions: docs/DEFINITIONS.md, "Allocations". How this module applies them:
-- * An allocation starts at the END of its allocating call (heap instants: their
--   time) and ends at the START of its freeing call; realloc ends the old block and
--   starts a new one, even in place. The converter pairs allocations with frees
--   (`debug.alloc_id` / `debug.freed_alloc_id`); this module only joins them.
-- * Never freed: `end_ts` is NULL, `dur` runs to trace_end() and `leaked` is 1.
-- * `kind` is `host` (libc heap), `pinned`, `registered`, `device` or `managed`.
-- * Capture windows (memq.windows): an allocation live when its window opened starts
--   at the window's start (`live_at_start` = 1; memq.live marker, named after the
--   function that allocated it, when the recorder knew it). One still live when its
--   window closed before the process exited ends at the close (`outlived_window` = 1,
--   `end_ts` = the close, not a leak: what happened to it outside the window is not
--   recorded). Allocations live when a window closed by the process's exit, or one
--   the trace never closes, are leaks as without windows.

INCLUDE PERFETTO MODULE memq.process;
INCLUDE PERFETTO MODULE memq.windows;

-- An event's argument `key` (`debug.<key>`) as EXTRACT_ARG(arg_set_id, key) gives it, from the `args` row `a`
-- joined on (arg_set_id, key): one of the three is set, by its type. Joining `args` picks the events that
-- carry a key faster than EXTRACT_ARG in WHERE, but only some joins leave trace_processor's heap as it was
-- (measured per table below: the heap's growth is the analyses' peak memory on a long trace).
CREATE PERFETTO MACRO _memq_arg(a ColumnName) RETURNS Expr AS
COALESCE($a.int_value, $a.string_value, $a.real_value);

-- Every memq.heap / memq.api slice, and memq.live marker, that starts an allocation.
-- EXTRACT_ARG, not a join of `args`: with these slice columns the join made
-- trace_processor's heap grow by ~16 bytes per row of `args` (57 MiB on a 48 MiB trace).
CREATE PERFETTO TABLE _memq_alloc_start AS
SELECT
  EXTRACT_ARG(s.arg_set_id, 'debug.alloc_id') AS alloc_id,
  s.id AS slice_id,
  s.ts + s.dur AS ts,
  s.track_id,
  s.name,
  s.category,
  s.arg_set_id
FROM slice s
WHERE s.category IN ('memq.heap', 'memq.api', 'memq.live')
  AND EXTRACT_ARG(s.arg_set_id, 'debug.alloc_id') IS NOT NULL
ORDER BY s.id;

-- Every memq.heap / memq.api slice that ends an allocation, by the id it ends: frees
-- and reallocs (at the start of the call), and allocations that start over a live one
-- whose free was not traced (`replaced_alloc_id`, at the new allocation's start).
-- One join of `args` per statement: with a second one in the same statement,
-- trace_processor's heap grew by ~36 bytes per row of `args` (126 MiB on a 48 MiB
-- trace, 710 MiB on a 521 MiB one), so the rare `replaced_alloc_id` is read by EXTRACT_ARG.
CREATE PERFETTO TABLE _memq_alloc_end AS
SELECT
  _memq_arg!(a) AS alloc_id,
  s.id AS slice_id,
  s.ts
FROM slice s
JOIN args a ON a.arg_set_id = s.arg_set_id AND a.key = 'debug.freed_alloc_id'
WHERE s.category IN ('memq.heap', 'memq.api')
  AND _memq_arg!(a) IS NOT NULL
UNION ALL
SELECT
  EXTRACT_ARG(s.arg_set_id, 'debug.replaced_alloc_id'),
  s.id,
  s.ts + s.dur
FROM slice s
WHERE s.category IN ('memq.heap', 'memq.api')
  AND EXTRACT_ARG(s.arg_set_id, 'debug.replaced_alloc_id') IS NOT NULL
ORDER BY alloc_id;

CREATE PERFETTO INDEX _memq_alloc_end_idx ON _memq_alloc_end(alloc_id);

-- The capture window of each allocation (memq.windows). Empty without windows.
CREATE PERFETTO TABLE _memq_alloc_window AS
SELECT key AS alloc_id, window, end_ts AS window_end, closed_early
FROM _memq_window_of!((
  SELECT a.alloc_id AS key, t.upid, a.ts
  FROM _memq_alloc_start a
  JOIN thread_track tt ON tt.id = a.track_id
  JOIN thread t USING (utid)))
ORDER BY alloc_id;

CREATE PERFETTO INDEX _memq_alloc_window_idx ON _memq_alloc_window(alloc_id);

-- Every allocation of the trace (host heap and GPU runtime), with its lifetime.
CREATE PERFETTO TABLE memq_allocation(
  -- Allocation id (`debug.alloc_id`, unique in the trace).
  alloc_id LONG,
  -- Process whose address space holds it.
  upid LONG,
  -- Thread that allocated it (for `live_at_start`: the thread that opened the window).
  utid LONG,
  -- `host`, `pinned`, `registered`, `device` or `managed`.
  kind STRING,
  -- Device of a GPU allocation (the current device at the call); NULL for host heap.
  device LONG,
  -- First byte.
  addr LONG,
  -- Size in bytes.
  size LONG,
  -- Start of the lifetime: end of the allocating call (the window's start for `live_at_start`).
  ts TIMESTAMP,
  -- Lifetime; runs to trace_end() when never freed.
  dur DURATION,
  -- End of the lifetime: start of the freeing call, or the close of its window
  -- (`outlived_window`); NULL when never freed.
  end_ts TIMESTAMP,
  -- 1 when never freed in the trace (and not `outlived_window`).
  leaked BOOL,
  -- Function that allocated it (`malloc`, `hipMalloc`, ...; `live` when a window's
  -- snapshot did not know it).
  api STRING,
  -- Slice of the allocating call (heap instant or API slice; memq.live marker).
  alloc_slice_id LONG,
  -- Slice of the freeing call; NULL when never freed.
  free_slice_id LONG,
  -- 1 when it was live when its capture window opened (allocated before the window).
  live_at_start BOOL,
  -- Index of its capture window in its process; NULL without windows.
  window LONG,
  -- 1 when still live when its window closed before the process exited: its end is
  -- the close, and its fate outside the window is unknown.
  outlived_window BOOL
) AS
SELECT
  a.alloc_id,
  t.upid,
  tt.utid,
  IIF(a.category = 'memq.heap', 'host', EXTRACT_ARG(a.arg_set_id, 'debug.mem_kind')) AS kind,
  IIF(a.category = 'memq.heap', NULL, EXTRACT_ARG(a.arg_set_id, 'debug.device')) AS device,
  EXTRACT_ARG(a.arg_set_id, 'debug.ptr') AS addr,
  EXTRACT_ARG(a.arg_set_id, 'debug.size') AS size,
  a.ts,
  IFNULL(IFNULL(e.ts, IIF(w.closed_early, w.window_end, NULL)), trace_end()) - a.ts AS dur,
  IFNULL(e.ts, IIF(w.closed_early, w.window_end, NULL)) AS end_ts,
  e.ts IS NULL AND NOT IFNULL(w.closed_early, 0) AS leaked,
  a.name AS api,
  a.slice_id AS alloc_slice_id,
  e.slice_id AS free_slice_id,
  a.category = 'memq.live' AS live_at_start,
  w.window,
  e.ts IS NULL AND IFNULL(w.closed_early, 0) AS outlived_window
FROM _memq_alloc_start a
JOIN thread_track tt ON tt.id = a.track_id
JOIN thread t USING (utid)
LEFT JOIN _memq_alloc_end e USING (alloc_id)
LEFT JOIN _memq_alloc_window w USING (alloc_id)
ORDER BY a.alloc_id;

-- Lookup of an allocation by id.
CREATE PERFETTO INDEX memq_allocation_idx ON memq_allocation(alloc_id);

-- Host heap blocks below the recording's threshold (`memq record --host-min-size`): the
-- recorder counts them per thread instead of recording them one by one, and writes the
-- counts as `host_small` heap instants (docs/TRACE_FORMAT.md). Totals per process; the
-- host live-bytes counter already includes them. `live_*` can be negative in a process
-- that frees blocks counted before its trace began.
CREATE PERFETTO TABLE memq_host_small(
  -- Process.
  upid LONG,
  -- Blocks allocated.
  alloc_count LONG,
  -- Their bytes (usable sizes).
  alloc_bytes LONG,
  -- Blocks freed.
  free_count LONG,
  -- Their bytes.
  free_bytes LONG,
  -- Blocks still live at the end of the trace (alloc_count - free_count).
  live_count LONG,
  -- Their bytes.
  live_bytes LONG,
  -- First and last `host_small` instant of the process.
  first_ts TIMESTAMP,
  last_ts TIMESTAMP
) AS
WITH small AS (
  SELECT
    t.upid,
    s.ts,
    EXTRACT_ARG(s.arg_set_id, 'debug.alloc_count') AS alloc_count,
    EXTRACT_ARG(s.arg_set_id, 'debug.alloc_bytes') AS alloc_bytes,
    EXTRACT_ARG(s.arg_set_id, 'debug.free_count') AS free_count,
    EXTRACT_ARG(s.arg_set_id, 'debug.free_bytes') AS free_bytes
  FROM slice s
  JOIN thread_track tt ON tt.id = s.track_id
  JOIN thread t USING (utid)
  WHERE s.category = 'memq.heap' AND s.name = 'host_small'
)
SELECT upid, SUM(alloc_count) AS alloc_count, SUM(alloc_bytes) AS alloc_bytes, SUM(free_count) AS free_count,
  SUM(free_bytes) AS free_bytes, SUM(alloc_count) - SUM(free_count) AS live_count,
  SUM(alloc_bytes) - SUM(free_bytes) AS live_bytes, MIN(ts) AS first_ts, MAX(ts) AS last_ts
FROM small
GROUP BY upid
ORDER BY upid;
