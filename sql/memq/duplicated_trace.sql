-- Duplicated bytes of the whole trace: all mirrors (the trace's and each process's) and per copy direction (the
-- trace's), as counters over time and as peak / mean: what memq report, plot and annotate show.
--
-- docs/DEFINITIONS.md, "Duplicated bytes": duplicated bytes at time t = destination bytes in an active mirror at t
-- (each byte once), reported as a counter, its peak and when, its time-weighted mean. Figures are upper bounds:
-- CPU and kernel writes are not traced. memq.duplicated adds the groupings memq duplicated prints besides these
-- (direction per process, destination allocation, untracked source), through this module's macros.
--
-- Decisions:
-- * Groupings (`grouping`, `key`): `total` (key NULL), `direction` (key = HtoD, ...), `allocation` (key = primary
--   destination allocation id, NULL = untracked destination), `untracked_source` (key '1' / '0'). A process is
--   `upid`; NULL is the whole trace.
-- * The mean is over the recorded time, memq_recorded_dur(): the trace window [trace_start(), trace_end()], or
--   with capture windows the union of the windows (nothing is duplicated outside them: mirrors end when their
--   window closes). One denominator for every row, so per-process means add up to the trace's; `byte_ns` is the
--   integral as a double: exact below 2^53 byte*ns (9 MB*s), and a long run's (28 MiB duplicated for 30 minutes
--   is 5e19) does not overflow as 64-bit integers do.
-- * `peak_ts` is the first time the peak is reached; NULL when nothing is duplicated.

INCLUDE PERFETTO MODULE memq.mirrors;
INCLUDE PERFETTO MODULE memq.windows;

-- The mirrors that hold bytes for a while, with their keys in every grouping.
CREATE PERFETTO VIEW _memq_dup_mirror(
  -- Process of the copy; NULL when unknown.
  upid LONG,
  -- When the mirror starts.
  ts TIMESTAMP,
  -- When it ends.
  end_ts TIMESTAMP,
  -- Destination bytes it holds.
  bytes LONG,
  -- Direction of the copy that made it.
  direction STRING,
  -- Primary destination allocation id as text; NULL for an untracked destination.
  alloc_key STRING,
  -- '1' when no traced allocation holds the source, else '0'.
  untracked_key STRING
) AS
SELECT upid, ts, ts + dur AS end_ts, bytes, direction,
  CAST(dst_alloc_id AS TEXT) AS alloc_key, CAST(untracked_source AS TEXT) AS untracked_key
FROM memq_mirror WHERE dur > 0;

-- Duplicated bytes over time of `members` (columns grouping, upid, key, ts, end_ts, bytes: each mirror once per
-- group it belongs to): per group (grouping, upid, key), one row per change with ts, dur (to the next change;
-- the last holds to trace_end()) and value.
CREATE PERFETTO MACRO _memq_dup_counter(members TableOrSubquery)
RETURNS TableOrSubquery AS (
  WITH ev AS (
    SELECT grouping, upid, key, ts, bytes AS delta FROM $members
    UNION ALL
    SELECT grouping, upid, key, end_ts, -bytes FROM $members
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
  SELECT grouping, upid, key, ts, IFNULL(next_ts, trace_end()) - ts AS dur, value FROM run
);

-- Per group of `counter` (rows of _memq_dup_counter): grouping, upid, key, peak_bytes, peak_ts, byte_ns,
-- mean_bytes, window_start, window_end, recorded_dur (memq_duplicated_group's columns).
CREATE PERFETTO MACRO _memq_dup_figures(counter TableOrSubquery)
RETURNS TableOrSubquery AS (
  -- The peak and integral in one grouping pass, then the peak's first time by looking each sample's group up
  -- (NULL process and key as -1 and '': keys are never ''); a window for the peak sorted the counter once more.
  WITH g AS (
    SELECT grouping, upid, key, IFNULL(upid, -1) AS u, IFNULL(key, '') AS k, MAX(value) AS peak_bytes,
      TOTAL(value * 1.0 * (MIN(ts + dur, trace_end()) - MAX(ts, trace_start()))) AS byte_ns
    FROM $counter
    GROUP BY grouping, upid, key
  ),
  at_peak AS (
    SELECT g.grouping, g.u, g.k, MIN(c.ts) AS peak_ts
    FROM $counter c
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
);

-- The process holding every mirror, when one does (no mirror of an unknown process); else NULL. Its
-- per-process rows of a grouping then equal the whole trace's: they are copied, not computed again (the
-- counters sort every mirror once per grouping and process).
CREATE PERFETTO TABLE _memq_dup_sole(
  -- That process; NULL when the mirrors have several, an unknown one, or there are none.
  upid LONG
) AS
SELECT IIF(COUNT(DISTINCT upid) = 1 AND COUNT(upid) = COUNT(*), MIN(upid), NULL) AS upid FROM _memq_dup_mirror;

-- Rows of `counter` (rows of _memq_dup_counter) of the whole trace (`upid` NULL) in `grouping`, as the
-- rows of _memq_dup_sole's process; none when no one process holds every mirror.
CREATE PERFETTO MACRO _memq_dup_sole_rows(counter TableOrSubquery, grouping Expr)
RETURNS TableOrSubquery AS (
  SELECT c.grouping, s.upid, c.key, c.ts, c.dur, c.value
  FROM $counter c, _memq_dup_sole s
  WHERE s.upid IS NOT NULL AND c.upid IS NULL AND c.grouping = $grouping
);

-- Duplicated bytes over time of `total` (the whole trace and each process) and `direction` (the whole trace),
-- before each process's `total` is copied from the trace's (_memq_dup_sole).
CREATE PERFETTO TABLE _memq_dup_trace_computed AS
SELECT * FROM _memq_dup_counter!((
  SELECT 'total' AS grouping, upid, NULL AS key, ts, end_ts, bytes FROM _memq_dup_mirror
  WHERE upid IS NOT NULL AND (SELECT upid FROM _memq_dup_sole) IS NULL
  UNION ALL SELECT 'total', NULL, NULL, ts, end_ts, bytes FROM _memq_dup_mirror
  UNION ALL SELECT 'direction', NULL, direction, ts, end_ts, bytes FROM _memq_dup_mirror
));

-- Duplicated bytes over time of `total` (the whole trace and each process) and `direction` (the whole trace):
-- one row per change, with memq_duplicated_counter's columns.
CREATE PERFETTO TABLE _memq_dup_trace_counter AS
SELECT * FROM _memq_dup_trace_computed
UNION ALL
SELECT * FROM _memq_dup_sole_rows!(_memq_dup_trace_computed, 'total');

-- Peak, time of the peak and time-weighted mean of duplicated bytes: `total` (the whole trace and each process)
-- and `direction` (the whole trace), with memq_duplicated_group's columns, in its order.
CREATE PERFETTO TABLE _memq_dup_trace_group AS
SELECT * FROM _memq_dup_figures!(_memq_dup_trace_counter)
ORDER BY grouping, upid, key;

-- The `total` rows of _memq_dup_trace_group with process ids, in memq_duplicated_report's order and
-- columns (ctf2perfetto.analysis.duplicated.duplicated_total_rows: memq report's figures).
CREATE PERFETTO VIEW memq_duplicated_total_report AS
SELECT g.grouping, p.pid, g.key, g.peak_bytes, g.peak_ts, g.mean_bytes, g.byte_ns, g.window_start, g.window_end,
  g.recorded_dur
FROM _memq_dup_trace_group g LEFT JOIN process p USING (upid)
WHERE g.grouping = 'total'
ORDER BY p.pid IS NOT NULL, p.pid;

-- Whole-trace duplicated bytes, all mirrors (`direction` '') and per copy direction: what `memq annotate`
-- draws as counters, `memq plot` and `memq report` as lines.
CREATE PERFETTO VIEW memq_duplicated_trace_counter(
  -- '' for all mirrors, else HtoD, DtoH, DtoD or HtoH.
  direction STRING,
  -- When the value starts.
  ts TIMESTAMP,
  -- Duplicated bytes.
  value LONG
) AS
SELECT IIF(grouping = 'total', '', key) AS direction, ts, value
FROM _memq_dup_trace_counter
WHERE upid IS NULL
ORDER BY grouping = 'direction', key, ts;

-- Duplicated bytes over time of each process (all its mirrors): one row per change, in process and time order.
CREATE PERFETTO VIEW memq_duplicated_process_counter(
  -- Process id.
  pid LONG,
  -- When the value starts.
  ts TIMESTAMP,
  -- Duplicated bytes of the process.
  value LONG
) AS
SELECT p.pid, c.ts, c.value
FROM _memq_dup_trace_counter c JOIN process p USING (upid)
WHERE c.grouping = 'total' AND c.upid IS NOT NULL
ORDER BY p.pid, c.ts;
