-- Duplicated bytes in every grouping memq duplicated prints: the whole trace's (memq.duplicated_trace) and
-- per copy direction of each process, per destination allocation, per untracked source.
--
-- docs/DEFINITIONS.md, "Duplicated bytes"; the groupings, the mean and the peak as memq.duplicated_trace defines
-- them (its macros compute these groupings' counters and figures). A copy whose source lies in no traced
-- allocation still creates mirrors, flagged untracked-source.
--
-- Decisions:
-- * Every grouping is given for the whole trace (`upid` NULL) and per process, except `allocation`: an
--   allocation belongs to one process, so it is given per process only.
-- * Only memq duplicated (and its callers: the UI's grouping table) needs these groupings: they cost as much as
--   the whole trace's, so memq report, plot and annotate include memq.duplicated_trace alone.

INCLUDE PERFETTO MODULE memq.duplicated_trace;

-- Every group outside memq.duplicated_trace's by name: direction per process, allocation per process, untracked
-- source for the trace and per process; with the group whose counter it has.
CREATE PERFETTO TABLE _memq_dup_member_named AS
SELECT * FROM _memq_dup_named!((
  SELECT 1 AS g, u, dir AS k FROM _memq_dup_keys WHERE u != -1
  UNION SELECT 0, u, alloc FROM _memq_dup_keys WHERE u != -1
  UNION SELECT 3, -1, untracked FROM _memq_dup_keys
  UNION SELECT 3, u, untracked FROM _memq_dup_keys WHERE u != -1
));

-- Changes of duplicated bytes of the computed groups outside memq.duplicated_trace's.
CREATE PERFETTO TABLE _memq_dup_member_change AS
SELECT * FROM _memq_dup_changes!((
  SELECT 1 AS g, u, dir AS k, ts, end_ts, bytes FROM _memq_dup_mirror
  WHERE u != -1 AND _memq_dup_computed!(1, 'process')
  UNION ALL
  SELECT 0, u, alloc, ts, end_ts, bytes FROM _memq_dup_mirror WHERE u != -1 AND _memq_dup_computed!(0, 'process')
  UNION ALL
  SELECT 3, -1, untracked, ts, end_ts, bytes FROM _memq_dup_mirror WHERE _memq_dup_computed!(3, 'trace')
  UNION ALL
  SELECT 3, u, untracked, ts, end_ts, bytes FROM _memq_dup_mirror
  WHERE u != -1 AND _memq_dup_computed!(3, 'process')
));

-- Duplicated bytes over time of the computed groups outside memq.duplicated_trace's.
CREATE PERFETTO TABLE _memq_dup_member_counter AS
SELECT * FROM _memq_dup_counter!(_memq_dup_member_change);

-- Figures of every computed group: memq.duplicated_trace's and this module's (rows of _memq_dup_figures).
CREATE PERFETTO TABLE _memq_dup_computed_figures AS
SELECT * FROM _memq_dup_trace_figures
UNION ALL
SELECT * FROM _memq_dup_figures!(_memq_dup_member_counter);

-- The counters of the groupings outside memq.duplicated_trace's, with memq_duplicated_counter's columns.
CREATE PERFETTO VIEW _memq_dup_grouping_counter AS
SELECT * FROM _memq_dup_named_counter!(_memq_dup_member_named, _memq_dup_trace_computed)
UNION ALL
SELECT * FROM _memq_dup_named_counter!(_memq_dup_member_named, _memq_dup_member_counter);

-- Duplicated bytes over time, per grouping: one row per change.
CREATE PERFETTO VIEW memq_duplicated_counter(
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
SELECT grouping, upid, key, ts, dur, value FROM _memq_dup_trace_counter
UNION ALL
SELECT grouping, upid, key, ts, dur, value FROM _memq_dup_grouping_counter;

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
SELECT * FROM (
  SELECT * FROM _memq_dup_trace_group
  UNION ALL
  SELECT * FROM _memq_dup_named_figures!(_memq_dup_member_named, _memq_dup_computed_figures)
)
ORDER BY grouping, upid, key;

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
