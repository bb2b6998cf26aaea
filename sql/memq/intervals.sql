-- Interval helpers shared by the memq modules.

-- Wall-clock length of a set of intervals per group: the length of their union.
-- `tab` needs columns `grp` (any value, NULL allowed), `ts` and `dur`; the result
-- has `grp` and `wall_dur`.
CREATE PERFETTO MACRO _memq_union_dur(tab TableOrSubquery)
RETURNS TableOrSubquery AS (
  SELECT grp, SUM(MAX(0, ts + dur - MAX(ts, IFNULL(prev_end, ts)))) AS wall_dur
  FROM (
    SELECT grp, ts, dur,
      MAX(ts + dur) OVER (PARTITION BY grp ORDER BY ts, dur
                          ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM $tab
    WHERE dur > 0
  )
  GROUP BY grp
);
