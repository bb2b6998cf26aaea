-- Advice: copies and memsets of zero bytes.
--
-- A copy or memset of no bytes moves nothing, yet costs a runtime call (and, on a stream,
-- a queue entry and often an implicit synchronisation). The fix is to skip the call when
-- the size is 0 (`if (n) hipMemcpy(...)`; in PyTorch, an empty tensor's `.to()`).
--
-- Decisions:
-- * A copy counts when its recorded `bytes` is 0 (a 2D/3D copy of zero rows included);
--   memsets likewise, as direction `memset`. Copies whose source recorded no size
--   (bytes NULL) do not count.
-- * Grouped per process, call site (`ip`, memq.advice.calls; NULL without the ip context),
--   API function and direction. `gain_dur` is the summed call time: all of it is saved
--   by not making the calls.

INCLUDE PERFETTO MODULE memq.copies;
INCLUDE PERFETTO MODULE memq.advice.calls;

-- One row per (process, call site, API, direction) that made zero-byte copies or memsets.
CREATE PERFETTO TABLE memq_advice_zero_bytes(
  -- Process.
  upid LONG,
  -- Caller address of the calls (NULL: not recorded).
  ip LONG,
  -- API function (`hipMemcpyAsync`, ...).
  api STRING,
  -- HtoD, DtoH, DtoD, HtoH, or `memset`.
  direction STRING,
  -- Number of zero-byte calls.
  count LONG,
  -- Summed duration of the copies (their slices).
  dur_sum DURATION,
  -- Time saved by skipping them: their summed duration.
  gain_dur DURATION,
  -- First such call.
  first_ts TIMESTAMP,
  -- End of the last such call.
  last_end_ts TIMESTAMP,
  -- `debug.call_id` of the first one (to find it on the timeline).
  first_call_id LONG
) AS
WITH z AS (
  SELECT c.upid, k.ip, c.api, c.direction, c.ts, c.dur, c.call_id
  FROM memq_copy c LEFT JOIN memq_advice_call k USING (call_id)
  WHERE c.bytes = 0
  UNION ALL
  SELECT s.upid, k.ip, IFNULL(k.api, 'memset'), 'memset', s.ts, s.dur, s.call_id
  FROM memq_set s LEFT JOIN memq_advice_call k USING (call_id)
  WHERE s.bytes = 0
)
SELECT upid, ip, api, direction, COUNT(*) AS count, SUM(dur) AS dur_sum, SUM(dur) AS gain_dur,
  MIN(ts) AS first_ts, MAX(ts + dur) AS last_end_ts, MAX(IIF(rn = 1, call_id, NULL)) AS first_call_id
FROM (SELECT z.*, ROW_NUMBER() OVER (PARTITION BY upid, ip, api, direction ORDER BY ts) AS rn FROM z)
GROUP BY upid, ip, api, direction
ORDER BY gain_dur DESC, count DESC;
