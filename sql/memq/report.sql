-- What memq report reads of the redundant copies: memq_redundant_copy('auto') computed once (the report groups
-- it five ways: the class totals, the findings per call site, the advice rules' overlaps, the time bins, the
-- ranks), and the whole trace's totals per class.

INCLUDE PERFETTO MODULE memq.redundant;
INCLUDE PERFETTO MODULE memq.intervals;

-- memq_redundant_copy('auto'): its columns, one row per copy.
CREATE PERFETTO TABLE memq_report_copy AS
SELECT * FROM memq_redundant_copy('auto');

-- The whole trace's figures memq redundant gives per class: memq_redundant_total's definitions (a class's time is
-- floor(dur * class bytes / bytes) from the copy's start; wall-clock is the union of those intervals) without its
-- per-process and per-evidence rows, which cost more than the report's other figures together. A staged copy of
-- no bytes still counts, as in memq redundant.
CREATE PERFETTO TABLE memq_report_class_total(
  -- `no_op`, `repeat`, `round_trip`, `managed`, `unified`, `redundant` (every class together) or `staged`.
  cls STRING,
  -- Copies with bytes in the class.
  count LONG,
  -- Their bytes in the class.
  bytes LONG,
  -- Their prorated time, summed.
  dur_sum DURATION,
  -- The union of their prorated time.
  wall_dur DURATION,
  -- For `redundant`: the bytes content fingerprints prove; else 0.
  content_bytes LONG
) AS
WITH c AS MATERIALIZED (
  SELECT ts, dur, bytes, no_op_bytes, repeat_bytes, round_trip_bytes, managed_bytes, unified_bytes, redundant_bytes,
    content_bytes, staged
  FROM memq_report_copy WHERE redundant_bytes > 0 OR staged
),
per AS MATERIALIZED (
  SELECT cls, ts, n, IIF(cls = 'staged', dur, CAST(CAST(dur AS DOUBLE) * n / bytes AS INT)) AS dur, content
  FROM (
    SELECT 'no_op' AS cls, ts, dur, bytes, no_op_bytes AS n, 0 AS content FROM c WHERE no_op_bytes > 0
    UNION ALL SELECT 'repeat', ts, dur, bytes, repeat_bytes, 0 FROM c WHERE repeat_bytes > 0
    UNION ALL SELECT 'round_trip', ts, dur, bytes, round_trip_bytes, 0 FROM c WHERE round_trip_bytes > 0
    UNION ALL SELECT 'managed', ts, dur, bytes, managed_bytes, 0 FROM c WHERE managed_bytes > 0
    UNION ALL SELECT 'unified', ts, dur, bytes, unified_bytes, 0 FROM c WHERE unified_bytes > 0
    UNION ALL SELECT 'redundant', ts, dur, bytes, redundant_bytes, IFNULL(content_bytes, 0) FROM c
      WHERE redundant_bytes > 0
    UNION ALL SELECT 'staged', ts, dur, bytes, bytes, 0 FROM c WHERE staged
  )
)
SELECT p.cls, COUNT(*) AS count, IFNULL(SUM(p.n), 0) AS bytes, IFNULL(SUM(p.dur), 0) AS dur_sum,
  IFNULL(w.wall_dur, 0) AS wall_dur, SUM(p.content) AS content_bytes
FROM per p LEFT JOIN _memq_union_dur!((SELECT cls AS grp, ts, dur FROM per)) w ON w.grp = p.cls
GROUP BY p.cls;

-- On an APU every host<->device copy goes too: memq_redundant_copy('yes') summed for the whole trace (the seven
-- classes' totals with their evidence split, which memq redundant --unified yes computes, cost twice as much).
CREATE PERFETTO TABLE memq_report_apu_total(
  -- Copies an APU would not need.
  count LONG,
  -- Their bytes.
  bytes LONG,
  -- Their time, summed.
  dur_sum DURATION,
  -- The union of their time.
  wall_dur DURATION
) AS
WITH r AS MATERIALIZED (
  SELECT ts, redundant_dur AS dur, redundant_bytes AS bytes FROM memq_redundant_copy('yes') WHERE redundant_bytes > 0
)
SELECT COUNT(*) AS count, IFNULL(SUM(bytes), 0) AS bytes, IFNULL(SUM(dur), 0) AS dur_sum,
  IFNULL((SELECT wall_dur FROM _memq_union_dur!((SELECT 1 AS grp, ts, dur FROM r))), 0) AS wall_dur
FROM r;
