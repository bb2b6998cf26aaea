-- What memq report reads of the redundant copies: memq_redundant_copy('auto') computed once (the report groups
-- it five ways: the class totals, the findings per call site, the advice rules' overlaps, the time bins, the
-- ranks), and the whole trace's totals per class and of the unified-memory what-if.

INCLUDE PERFETTO MODULE memq.redundant;

-- memq_redundant_copy('auto'): its columns, one row per copy, and `apu_bytes`: its redundant bytes were every
-- device unified (memq_redundant_copy('yes')'s redundant_bytes: the host<->device bytes of no other class count
-- on every device, not only on those memq.device calls unified).
CREATE PERFETTO TABLE memq_report_copy AS
SELECT r.*, r.redundant_bytes + IIF(r.unified_device, 0, k.unified_candidate_bytes) AS apu_bytes
FROM memq_redundant_copy('auto') r JOIN _memq_copy_redundancy k USING (id)
ORDER BY r.id;

-- A copy's time prorated by `n` of its bytes (memq.redundant: floor(dur * n / bytes), in doubles); NULL when none
-- of its bytes is in the class. Reads the copy's `dur` and `bytes`.
CREATE PERFETTO MACRO _memq_report_prorated(n Expr)
RETURNS Expr AS IIF($n > 0, CAST(CAST(dur AS DOUBLE) * $n / bytes AS INT), NULL);

-- The end of the latest interval [ts, ts + d) of the copies before this one in time order (the `earlier` window).
CREATE PERFETTO MACRO _memq_report_prev_end(d ColumnName)
RETURNS Expr AS MAX(IIF($d > 0, ts + $d, NULL)) OVER earlier;

-- What interval [ts, ts + d) adds to the union of the intervals before it in time order, which all start at or
-- before ts: the part after their latest end `prev_end`.
CREATE PERFETTO MACRO _memq_report_added(d ColumnName, prev_end ColumnName)
RETURNS Expr AS IIF($d > 0, MAX(0, ts + $d - MAX(ts, IFNULL($prev_end, ts))), 0);

-- Per copy that counts in any total: each class's bytes and prorated time, and the latest end of that class's
-- intervals before it. One window pass in time order gives every class's wall-clock union (a copy's intervals all
-- start at its start), where a union per class sorted each class's intervals on its own.
CREATE PERFETTO TABLE _memq_report_interval AS
WITH c AS (
  SELECT ts, bytes, IFNULL(no_op_bytes, 0) AS no_op, IFNULL(repeat_bytes, 0) AS repeat,
    IFNULL(round_trip_bytes, 0) AS round_trip, IFNULL(managed_bytes, 0) AS managed, unified_bytes AS unified,
    redundant_bytes AS redundant, IFNULL(content_bytes, 0) AS content, apu_bytes AS apu,
    _memq_report_prorated!(IFNULL(no_op_bytes, 0)) AS no_op_d,
    _memq_report_prorated!(IFNULL(repeat_bytes, 0)) AS repeat_d,
    _memq_report_prorated!(IFNULL(round_trip_bytes, 0)) AS round_trip_d,
    _memq_report_prorated!(IFNULL(managed_bytes, 0)) AS managed_d,
    _memq_report_prorated!(unified_bytes) AS unified_d,
    _memq_report_prorated!(redundant_bytes) AS redundant_d,
    -- a staged copy counts whole, even of no bytes
    IIF(staged, dur, NULL) AS staged_d, IIF(staged, bytes, 0) AS staged,
    _memq_report_prorated!(apu_bytes) AS apu_d
  FROM memq_report_copy
  WHERE apu_bytes > 0 OR staged
)
SELECT *,
  _memq_report_prev_end!(no_op_d) AS no_op_end, _memq_report_prev_end!(repeat_d) AS repeat_end,
  _memq_report_prev_end!(round_trip_d) AS round_trip_end, _memq_report_prev_end!(managed_d) AS managed_end,
  _memq_report_prev_end!(unified_d) AS unified_end, _memq_report_prev_end!(redundant_d) AS redundant_end,
  _memq_report_prev_end!(staged_d) AS staged_end, _memq_report_prev_end!(apu_d) AS apu_end
FROM c
WINDOW earlier AS (ORDER BY ts ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING);

-- One class's totals from _memq_report_interval: `n` its bytes, `d` its prorated time, `prev_end` the latest end
-- before; `content` the bytes content proves (0 but for the redundant class).
CREATE PERFETTO MACRO _memq_report_class(cls Expr, n ColumnName, d ColumnName, prev_end ColumnName, content Expr)
RETURNS TableOrSubquery AS (
  SELECT $cls AS cls, COUNT($d) AS count, IFNULL(SUM(IIF($d IS NULL, 0, $n)), 0) AS bytes,
    IFNULL(SUM($d), 0) AS dur_sum, IFNULL(SUM(_memq_report_added!($d, $prev_end)), 0) AS wall_dur,
    IFNULL(SUM(IIF($d IS NULL, 0, $content)), 0) AS content_bytes
  FROM _memq_report_interval
);

-- The whole trace's figures memq redundant gives per class: memq_redundant_total's definitions (a class's time is
-- floor(dur * class bytes / bytes) from the copy's start; wall-clock is the union of those intervals) without its
-- per-process and per-evidence rows, which cost more than the report's other figures together. A staged copy of
-- no bytes still counts, as in memq redundant. A class no copy has is no row.
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
SELECT * FROM (
  SELECT * FROM _memq_report_class!('no_op', no_op, no_op_d, no_op_end, 0)
  UNION ALL SELECT * FROM _memq_report_class!('repeat', repeat, repeat_d, repeat_end, 0)
  UNION ALL SELECT * FROM _memq_report_class!('round_trip', round_trip, round_trip_d, round_trip_end, 0)
  UNION ALL SELECT * FROM _memq_report_class!('managed', managed, managed_d, managed_end, 0)
  UNION ALL SELECT * FROM _memq_report_class!('unified', unified, unified_d, unified_end, 0)
  UNION ALL SELECT * FROM _memq_report_class!('redundant', redundant, redundant_d, redundant_end, content)
  UNION ALL SELECT * FROM _memq_report_class!('staged', staged, staged_d, staged_end, 0)
)
WHERE count > 0
ORDER BY cls;

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
SELECT count, bytes, dur_sum, wall_dur FROM _memq_report_class!('apu', apu, apu_d, apu_end, 0);
