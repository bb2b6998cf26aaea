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
--
-- How (the cost is SQLite sorting and windowing in WebAssembly, per change row):
-- * A group is named by integers while computed (g, u, k: _memq_dup_grouping) and by name only when read
--   (_memq_dup_named): the changes are a table of integers, which trace_processor sorts for the grouping
--   itself; the window reads them in that order.
-- * Only groups that differ are computed: a grouping whose mirrors all have one key (one direction, every
--   source tracked, ...) has the counter of the scope's `total`, and with a sole process (_memq_dup_sole) each
--   per-process group has the trace's. Such a group names the computed one (`src_g`, `src_u`, `src_k`): its
--   counter rows and figures are read from it, not copied.
-- * The figures are taken from the computed counters once (per group: one grouping pass for the peak and the
--   integral, one look-up of the peak's first time).

INCLUDE PERFETTO MODULE memq.mirrors;
INCLUDE PERFETTO MODULE memq.windows;

-- The groupings, numbered in name order: `g`, the first of the integer columns (g, u, k) that name a group in
-- the counters (u: upid, k: the key's code; -1 for none: ids and codes are never negative). The counters are
-- computed on these integers: sorting and storing a name per change cost as much as the rest.
CREATE PERFETTO TABLE _memq_dup_grouping(
  -- Grouping number.
  g LONG,
  -- `allocation`, `direction`, `total` or `untracked_source`.
  grouping STRING
) AS
SELECT 0 AS g, 'allocation' AS grouping
UNION ALL SELECT 1, 'direction'
UNION ALL SELECT 2, 'total'
UNION ALL SELECT 3, 'untracked_source';

-- The copy directions of the mirrors, numbered in name order: the key code `k` of the `direction` grouping.
CREATE PERFETTO TABLE _memq_dup_direction(
  -- Key code.
  k LONG,
  -- Direction (HtoD, ...).
  direction STRING
) AS
SELECT ROW_NUMBER() OVER (ORDER BY direction) - 1 AS k, direction
FROM (SELECT DISTINCT direction FROM memq_mirror WHERE dur > 0);

-- The mirrors that hold bytes for a while, with their key codes in every grouping.
CREATE PERFETTO TABLE _memq_dup_mirror(
  -- Process of the copy; -1 when unknown.
  u LONG,
  -- When the mirror starts.
  ts TIMESTAMP,
  -- When it ends.
  end_ts TIMESTAMP,
  -- Destination bytes it holds.
  bytes LONG,
  -- Code of the direction of the copy that made it (_memq_dup_direction).
  dir LONG,
  -- Primary destination allocation id; -1 for an untracked destination.
  alloc LONG,
  -- 1 when no traced allocation holds the source, else 0.
  untracked LONG
) AS
SELECT IFNULL(m.upid, -1) AS u, m.ts, m.ts + m.dur AS end_ts, m.bytes, d.k AS dir,
  IFNULL(m.dst_alloc_id, -1) AS alloc, m.untracked_source AS untracked
FROM memq_mirror m JOIN _memq_dup_direction d ON d.direction IS m.direction
WHERE m.dur > 0;

-- The distinct key codes of the mirrors (a few rows): every group any grouping has.
CREATE PERFETTO TABLE _memq_dup_keys(
  -- Process; -1 when unknown.
  u LONG,
  -- Direction code.
  dir LONG,
  -- Primary destination allocation; -1 when untracked.
  alloc LONG,
  -- Untracked source.
  untracked LONG
) AS
SELECT u, dir, alloc, untracked FROM _memq_dup_mirror GROUP BY u, dir, alloc, untracked;

-- The process holding every mirror, when one does (no mirror of an unknown process); else NULL. Its
-- per-process groups then equal the whole trace's: their counters are the trace's, not computed again.
CREATE PERFETTO TABLE _memq_dup_sole(
  -- That process; NULL when the mirrors have several, an unknown one, or there are none.
  upid LONG
) AS
SELECT IIF(COUNT(DISTINCT u) = 1 AND MIN(u) >= 0, MIN(u), NULL) AS upid FROM _memq_dup_keys;

-- Which groups of each grouping are computed from the mirrors. A grouping whose mirrors all have one key has
-- one group per scope holding every mirror of the scope: its counter is the scope's `total`. With a sole
-- process (_memq_dup_sole), the per-process groups are the trace's.
CREATE PERFETTO TABLE _memq_dup_plan(
  -- Grouping number.
  g LONG,
  -- 1 when every mirror has the same key in it (never for `total`).
  single BOOL,
  -- 1 when its per-process groups are computed.
  per_process BOOL
) AS
WITH keys AS (
  SELECT COUNT(DISTINCT alloc) AS a, COUNT(DISTINCT dir) AS d, COUNT(DISTINCT untracked) AS t,
    (SELECT upid FROM _memq_dup_sole) IS NOT NULL AS sole
  FROM _memq_dup_keys
)
SELECT 0 AS g, a = 1 AS single, a != 1 AS per_process FROM keys
UNION ALL SELECT 1, d = 1, d != 1 AND NOT sole FROM keys
UNION ALL SELECT 2, 0, NOT sole FROM keys
UNION ALL SELECT 3, t = 1, t != 1 AND NOT sole FROM keys;

-- Whether the trace-wide groups of grouping `g` are computed (`scope` 'trace') or its per-process ones
-- (`scope` 'process'), as an expression for a WHERE clause.
CREATE PERFETTO MACRO _memq_dup_computed(g Expr, scope Expr)
RETURNS Expr AS (
  SELECT IIF($scope = 'trace', NOT single, per_process) FROM _memq_dup_plan WHERE g = $g
);

-- Changes of duplicated bytes of `members` (columns g, u, k, ts, end_ts, bytes: each mirror once per group it
-- belongs to): +bytes at its start, -bytes at its end.
CREATE PERFETTO MACRO _memq_dup_changes(members TableOrSubquery)
RETURNS TableOrSubquery AS (
  SELECT g, u, k, ts, bytes AS delta FROM $members
  UNION ALL
  SELECT g, u, k, end_ts, -bytes FROM $members
);

-- Duplicated bytes over time of the groups of `changes` (a table of _memq_dup_changes' rows: a table, so that
-- trace_processor sorts it for the grouping, not SQLite): per group (g, u, k), one row per change with ts, dur
-- (to the next change; the last holds to trace_end()) and value.
CREATE PERFETTO MACRO _memq_dup_counter(changes TableOrSubquery)
RETURNS TableOrSubquery AS (
  -- the changes per time and their running sum in one statement: the window reads the grouped rows in the
  -- order the grouping sorted them (a separate grouped subquery was sorted again)
  SELECT g, u, k, ts, IFNULL(LEAD(ts) OVER win, trace_end()) - ts AS dur, SUM(SUM(delta)) OVER win AS value
  FROM $changes
  GROUP BY g, u, k, ts
  WINDOW win AS (PARTITION BY g, u, k ORDER BY ts)
);

-- Per group (g, u, k) of `counter` (a table of _memq_dup_counter's rows): peak_bytes, peak_ts (its first time)
-- and byte_ns (the integral over the trace window).
CREATE PERFETTO MACRO _memq_dup_figures(counter TableOrSubquery)
RETURNS TableOrSubquery AS (
  WITH f AS (
    SELECT g, u, k, MAX(value) AS peak_bytes,
      TOTAL(value * 1.0 * (MIN(ts + dur, trace_end()) - MAX(ts, trace_start()))) AS byte_ns
    FROM $counter
    GROUP BY g, u, k
  )
  SELECT g, u, k, peak_bytes,
    (SELECT MIN(c.ts) FROM $counter c WHERE c.g = f.g AND c.u = f.u AND c.k = f.k AND c.value = f.peak_bytes)
      AS peak_ts,
    byte_ns
  FROM f
);

-- The groups (g, u, k) of `groups` by name (grouping, upid, key), with the computed group whose counter
-- and figures they have (src_g, src_u, src_k: _memq_dup_plan).
CREATE PERFETTO MACRO _memq_dup_named(groups TableOrSubquery)
RETURNS TableOrSubquery AS (
  WITH s AS (
    SELECT x.g, x.u, x.k, IIF(p.single, 2, x.g) AS src_g, IIF(p.single, -1, x.k) AS src_k
    FROM $groups x JOIN _memq_dup_plan p USING (g)
  )
  SELECT n.grouping, NULLIF(s.u, -1) AS upid,
    CASE s.g WHEN 0 THEN CAST(NULLIF(s.k, -1) AS TEXT) WHEN 1 THEN d.direction WHEN 3 THEN CAST(s.k AS TEXT)
    END AS key,
    s.src_g, IIF(p.per_process, s.u, -1) AS src_u, s.src_k
  FROM s
  JOIN _memq_dup_grouping n USING (g)
  JOIN _memq_dup_plan p ON p.g = s.src_g
  LEFT JOIN _memq_dup_direction d ON s.g = 1 AND d.k = s.k
);

-- The counter rows of the groups `named` (rows of _memq_dup_named) whose counters `counter` (a table of
-- _memq_dup_counter's rows) holds, with memq_duplicated_counter's columns.
CREATE PERFETTO MACRO _memq_dup_named_counter(named TableOrSubquery, counter TableOrSubquery)
RETURNS TableOrSubquery AS (
  SELECT n.grouping, n.upid, n.key, c.ts, c.dur, c.value
  FROM $named n JOIN $counter c ON c.g = n.src_g AND c.u = n.src_u AND c.k = n.src_k
);

-- The figures of the groups `named` (rows of _memq_dup_named) from `figures` (rows of _memq_dup_figures),
-- with memq_duplicated_group's columns.
CREATE PERFETTO MACRO _memq_dup_named_figures(named TableOrSubquery, figures TableOrSubquery)
RETURNS TableOrSubquery AS (
  SELECT n.grouping, n.upid, n.key, f.peak_bytes, f.peak_ts, f.byte_ns,
    IIF(r.dur > 0, f.byte_ns * 1.0 / r.dur, 0.0) AS mean_bytes,
    trace_start() AS window_start,
    trace_end() AS window_end,
    r.dur AS recorded_dur
  FROM $named n
  JOIN $figures f ON f.g = n.src_g AND f.u = n.src_u AND f.k = n.src_k,
  (SELECT memq_recorded_dur() AS dur) r
);

-- Every group of `total` (the whole trace and each process) and `direction` (the whole trace) by name, with
-- the group whose counter it has.
CREATE PERFETTO TABLE _memq_dup_trace_named AS
SELECT * FROM _memq_dup_named!((
  SELECT 2 AS g, -1 AS u, -1 AS k FROM _memq_dup_keys
  UNION SELECT 2, u, -1 FROM _memq_dup_keys WHERE u != -1
  UNION SELECT 1, -1, dir FROM _memq_dup_keys
));

-- Changes of duplicated bytes of the computed groups of `total` and `direction` (the whole trace's).
CREATE PERFETTO TABLE _memq_dup_trace_change AS
SELECT * FROM _memq_dup_changes!((
  SELECT 2 AS g, -1 AS u, -1 AS k, ts, end_ts, bytes FROM _memq_dup_mirror
  UNION ALL
  SELECT 2, u, -1, ts, end_ts, bytes FROM _memq_dup_mirror WHERE u != -1 AND _memq_dup_computed!(2, 'process')
  UNION ALL
  SELECT 1, -1, dir, ts, end_ts, bytes FROM _memq_dup_mirror WHERE _memq_dup_computed!(1, 'trace')
));

-- Duplicated bytes over time of the computed groups of `total` and `direction` (the whole trace's).
CREATE PERFETTO TABLE _memq_dup_trace_computed AS
SELECT * FROM _memq_dup_counter!(_memq_dup_trace_change);

-- Duplicated bytes over time of `total` (the whole trace and each process) and `direction` (the whole trace):
-- one row per change, with memq_duplicated_counter's columns.
CREATE PERFETTO VIEW _memq_dup_trace_counter AS
SELECT * FROM _memq_dup_named_counter!(_memq_dup_trace_named, _memq_dup_trace_computed);

-- Figures of the computed groups of `total` and `direction` (rows of _memq_dup_figures).
CREATE PERFETTO TABLE _memq_dup_trace_figures AS
SELECT * FROM _memq_dup_figures!(_memq_dup_trace_computed);

-- Peak, time of the peak and time-weighted mean of duplicated bytes: `total` (the whole trace and each process)
-- and `direction` (the whole trace), with memq_duplicated_group's columns, in its order.
CREATE PERFETTO TABLE _memq_dup_trace_group AS
SELECT * FROM _memq_dup_named_figures!(_memq_dup_trace_named, _memq_dup_trace_figures)
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
