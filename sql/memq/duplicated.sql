-- Duplicated bytes: destination bytes in an active mirror, as a counter over time.
--
-- docs/DEFINITIONS.md, "Duplicated bytes": duplicated bytes at time t = destination bytes in an active mirror at t
-- (each byte once), reported as a counter, its peak and when, its time-weighted
-- mean, split by the direction of the copy that made it and by allocation; a copy
-- whose source lies in no traced allocation still creates mirrors, flagged
-- untracked-source. Figures are upper bounds: CPU and kernel writes are not traced.
--
-- Decisions:
-- * Every grouping is given for the whole trace (`upid` NULL) and per process, except
--   `allocation`: an allocation belongs to one process, so it is given per process only.
-- * Groupings (`grouping`, `key`): `total` (key NULL), `direction` (key = HtoD, ...),
--   `allocation` (key = primary destination allocation id, NULL = untracked
--   destination), `untracked_source` (key '1' / '0').
-- * The mean is over the recorded time, memq_recorded_dur(): the trace window
--   [trace_start(), trace_end()], or with capture windows the union of the windows
--   (nothing is duplicated outside them: mirrors end when their window closes). One
--   denominator for every row, so per-process means add up to the trace's; `byte_ns`
--   is the integral as a double: exact below 2^53 byte*ns (9 MB*s), and a long run's
--   (28 MiB duplicated for 30 minutes is 5e19) does not overflow as 64-bit integers do.
-- * `peak_ts` is the first time the peak is reached; NULL when nothing is duplicated.

INCLUDE PERFETTO MODULE memq.mirrors;
INCLUDE PERFETTO MODULE memq.windows;

-- Each mirror once per grouping it belongs to.
CREATE PERFETTO TABLE _memq_dup_member AS
WITH m AS (
  SELECT upid, ts, ts + dur AS end_ts, bytes, direction,
    CAST(dst_alloc_id AS TEXT) AS alloc_key, CAST(untracked_source AS TEXT) AS untracked_key
  FROM memq_mirror WHERE dur > 0
),
scoped AS (
  SELECT upid, ts, end_ts, bytes, direction, alloc_key, untracked_key FROM m WHERE upid IS NOT NULL
  UNION ALL
  SELECT NULL, ts, end_ts, bytes, direction, alloc_key, untracked_key FROM m
)
SELECT 'total' AS grouping, upid, NULL AS key, ts, end_ts, bytes FROM scoped
UNION ALL SELECT 'direction', upid, direction, ts, end_ts, bytes FROM scoped
UNION ALL SELECT 'allocation', upid, alloc_key, ts, end_ts, bytes FROM scoped WHERE upid IS NOT NULL
UNION ALL SELECT 'untracked_source', upid, untracked_key, ts, end_ts, bytes FROM scoped;

-- Duplicated bytes over time, per grouping: one row per change.
CREATE PERFETTO TABLE memq_duplicated_counter(
  -- `total`, `direction`, `allocation` or `untracked_source`.
  grouping STRING,
  -- Process; NULL for the whole trace.
  upid LONG,
  -- Group within the grouping (direction, allocation id, '1'/'0'); NULL for `total`.
  key STRING,
  -- When the value starts.
  ts TIMESTAMP,
  -- How long it holds (to the next change; the last sample holds to trace_end()).
  dur DURATION,
  -- Duplicated bytes from ts on.
  value LONG
) AS
WITH ev AS (
  SELECT grouping, upid, key, ts, bytes AS delta FROM _memq_dup_member
  UNION ALL
  SELECT grouping, upid, key, end_ts, -bytes FROM _memq_dup_member
),
-- the changes per time and their running sum in one statement: the window reads the grouped rows in the
-- order the grouping sorted them (a separate grouped subquery was sorted again: 25% of this table's time)
run AS (
  SELECT grouping, upid, key, ts,
    SUM(SUM(delta)) OVER win AS value,
    LEAD(ts) OVER win AS next_ts
  FROM ev
  GROUP BY grouping, upid, key, ts
  WINDOW win AS (PARTITION BY grouping, upid, key ORDER BY ts)
)
SELECT grouping, upid, key, ts, IFNULL(next_ts, trace_end()) - ts AS dur, value FROM run;

-- Peak, time of the peak and time-weighted mean of duplicated bytes, per grouping.
CREATE PERFETTO TABLE memq_duplicated_group(
  -- `total`, `direction`, `allocation` or `untracked_source`.
  grouping STRING,
  -- Process; NULL for the whole trace.
  upid LONG,
  -- Group within the grouping; NULL for `total`.
  key STRING,
  -- Highest duplicated bytes.
  peak_bytes LONG,
  -- First time the peak is reached.
  peak_ts TIMESTAMP,
  -- Integral of duplicated bytes over the trace window, in byte*ns.
  byte_ns DOUBLE,
  -- Time-weighted mean over the recorded time, in bytes.
  mean_bytes DOUBLE,
  -- Start of the trace window.
  window_start TIMESTAMP,
  -- End of the trace window.
  window_end TIMESTAMP,
  -- Recorded time the mean is over: the trace window, or the union of its capture windows.
  recorded_dur DURATION
) AS
-- The peak and integral in one grouping pass, then the peak's first time by looking each sample's group up
-- (NULL process and key as -1 and '': keys are never ''); a window for the peak sorted the counter once more.
WITH g AS (
  SELECT grouping, upid, key, IFNULL(upid, -1) AS u, IFNULL(key, '') AS k, MAX(value) AS peak_bytes,
    TOTAL(value * 1.0 * (MIN(ts + dur, trace_end()) - MAX(ts, trace_start()))) AS byte_ns
  FROM memq_duplicated_counter
  GROUP BY grouping, upid, key
),
at_peak AS (
  SELECT g.grouping, g.u, g.k, MIN(c.ts) AS peak_ts
  FROM memq_duplicated_counter c
  JOIN g ON g.grouping = c.grouping AND g.u = IFNULL(c.upid, -1) AND g.k = IFNULL(c.key, '')
  WHERE c.value = g.peak_bytes
  GROUP BY g.grouping, g.u, g.k
),
fig AS (
  SELECT g.grouping, g.upid, g.key, g.peak_bytes, p.peak_ts, g.byte_ns
  FROM g LEFT JOIN at_peak p USING (grouping, u, k)
)
SELECT
  f.grouping, f.upid, f.key, f.peak_bytes, f.peak_ts, f.byte_ns,
  IIF(r.dur > 0, f.byte_ns * 1.0 / r.dur, 0.0) AS mean_bytes,
  trace_start() AS window_start,
  trace_end() AS window_end,
  r.dur AS recorded_dur
FROM fig f, (SELECT memq_recorded_dur() AS dur) r
ORDER BY f.grouping, f.upid, f.key;

-- Duplicated bytes per destination allocation (per process), with the allocation.
CREATE PERFETTO TABLE memq_duplicated_by_allocation(
  -- Process.
  upid LONG,
  -- Primary destination allocation; NULL for untracked destinations.
  alloc_id LONG,
  -- Its kind (`device`, `pinned`, ...); NULL when untracked.
  kind STRING,
  -- Its first byte.
  addr LONG,
  -- Its size.
  size LONG,
  -- When it was allocated.
  alloc_ts TIMESTAMP,
  -- Highest duplicated bytes in it.
  peak_bytes LONG,
  -- First time of the peak.
  peak_ts TIMESTAMP,
  -- Time-weighted mean over the recorded time.
  mean_bytes DOUBLE,
  -- Integral over the trace window, byte*ns.
  byte_ns DOUBLE
) AS
SELECT g.upid, a.alloc_id, a.kind, a.addr, a.size, a.ts AS alloc_ts, g.peak_bytes, g.peak_ts, g.mean_bytes,
  g.byte_ns
FROM memq_duplicated_group g
LEFT JOIN memq_allocation a ON a.alloc_id = CAST(g.key AS INT)
WHERE g.grouping = 'allocation'
ORDER BY g.peak_bytes DESC;

-- memq_duplicated_group with process ids, in report order (ctf2perfetto.analyses.duplicated).
CREATE PERFETTO VIEW memq_duplicated_report AS
SELECT g.grouping, p.pid, g.key, g.peak_bytes, g.peak_ts, g.mean_bytes, g.byte_ns, g.window_start, g.window_end,
  g.recorded_dur
FROM memq_duplicated_group g LEFT JOIN process p USING (upid)
ORDER BY g.grouping, p.pid IS NOT NULL, p.pid, g.key;

-- memq_duplicated_counter of one grouping with process ids (ctf2perfetto.analyses.duplicated_counter).
CREATE PERFETTO FUNCTION memq_duplicated_over_time(
  -- `total`, `direction`, `allocation` or `untracked_source`.
  grouping STRING
)
-- One row per change.
RETURNS TABLE(
  -- Process id; NULL for the whole trace.
  pid LONG,
  -- Group within the grouping.
  key STRING,
  -- When the value starts.
  ts TIMESTAMP,
  -- How long it holds.
  dur DURATION,
  -- Duplicated bytes.
  value LONG
) AS
SELECT p.pid, c.key, c.ts, c.dur, c.value
FROM memq_duplicated_counter c LEFT JOIN process p USING (upid)
WHERE c.grouping = $grouping
ORDER BY p.pid IS NOT NULL, p.pid, c.key, c.ts;

-- Whole-trace duplicated bytes, all mirrors (`direction` '') and per copy direction: what `memq annotate`
-- draws as counters and `memq plot` as lines.
CREATE PERFETTO VIEW memq_duplicated_trace_counter(
  -- '' for all mirrors, else HtoD, DtoH, DtoD or HtoH.
  direction STRING,
  -- When the value starts.
  ts TIMESTAMP,
  -- Duplicated bytes.
  value LONG
) AS
SELECT IIF(grouping = 'total', '', key) AS direction, ts, value
FROM memq_duplicated_counter
WHERE upid IS NULL AND grouping IN ('total', 'direction')
ORDER BY grouping = 'direction', key, ts;
