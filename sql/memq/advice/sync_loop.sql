-- Advice: synchronous copies made again and again from one place (inside a loop).
--
-- A synchronous copy holds the calling thread until the data has moved: the host cannot
-- queue more work, and the device idles while the host catches up. Made once it costs
-- little; made every step of a loop (a read-back of a loss, `.item()`, `.cpu()`,
-- `.tolist()`, an upload with the blocking API) it serialises host and device every step.
-- The fix: DtoH, read back once after the loop (accumulate on the device), or into a
-- pinned buffer with `non_blocking=True` and one synchronisation; HtoD, the async API from
-- a pinned source (`non_blocking=True` with `pin_memory=True`).
--
-- Decisions:
-- * Synchronous: an LTTng copy made with a blocking API (no `Async` in its name:
--   hipMemcpy, cudaMemcpy, hipMemcpyDtoH, ...), `why` = `blocking API`; or a HtoD/DtoH
--   Async copy with a pageable host endpoint, which the runtimes also make synchronous,
--   `why` = `pageable host memory`.
-- * A loop site: one thread, one call site (`ip`; NULL without the ip context), one API,
--   one direction, one size, and at least 3 such copies. Without the ip context, every copy
--   of one API, direction and size on a thread counts as one site.
-- * Zero-byte copies are memq.advice.zero_bytes' concern, not counted here.
-- * `gain_dur` is the copies' summed duration: the time the thread was held. An upper
--   bound on what making them asynchronous saves (a bus still moves the bytes, but
--   overlapped with other work).

INCLUDE PERFETTO MODULE memq.copies;
INCLUDE PERFETTO MODULE memq.advice.calls;

-- The fewest synchronous copies from one site that make it a loop site.
CREATE PERFETTO FUNCTION memq_advice_sync_loop_min()
-- 3.
RETURNS LONG AS
SELECT 3;

-- Every synchronous copy with its site (upid, utid, ip, api, direction, bytes): `grp` the slice id of the site's
-- first copy (never NULL, unlike a call id), `site` that copy's call id. One pass for both tables below.
CREATE PERFETTO TABLE _memq_advice_sync_copy AS
WITH s AS (
  SELECT c.id, c.ts, c.dur, c.upid, c.utid, c.call_id, k.ip, c.api, c.direction, c.bytes
  FROM memq_copy c LEFT JOIN memq_advice_call k USING (call_id)
  WHERE memq_has_addresses!(c.source) AND c.bytes > 0
    AND (c.api NOT GLOB '*Async*' OR (c.direction IN ('HtoD', 'DtoH') AND c.pageable))
)
SELECT s.*,
  FIRST_VALUE(id) OVER w AS grp,
  FIRST_VALUE(call_id) OVER w AS site
FROM s
WINDOW w AS (PARTITION BY upid, utid, ip, api, direction, bytes ORDER BY ts, id);

-- One row per loop site of synchronous copies.
CREATE PERFETTO TABLE memq_advice_sync_loop(
  -- Process.
  upid LONG,
  -- Thread.
  utid LONG,
  -- Caller address (NULL: not recorded).
  ip LONG,
  -- API function.
  api STRING,
  -- Direction.
  direction STRING,
  -- Bytes per copy.
  bytes_each LONG,
  -- `blocking API` or `pageable host memory`.
  why STRING,
  -- Number of copies.
  count LONG,
  -- Bytes copied in all.
  bytes LONG,
  -- Summed duration: the time the thread was held.
  dur_sum DURATION,
  -- Upper bound of the time asynchronous copies would give back: dur_sum.
  gain_dur DURATION,
  -- Mean time from one copy's start to the next one's (the loop's period).
  period DOUBLE,
  -- Start of the first.
  first_ts TIMESTAMP,
  -- End of the last.
  last_end_ts TIMESTAMP,
  -- `debug.call_id` of the first.
  first_call_id LONG
) AS
SELECT MIN(upid) AS upid, MIN(utid) AS utid, MIN(ip) AS ip, MIN(api) AS api, MIN(direction) AS direction,
  MIN(bytes) AS bytes_each, IIF(MIN(api) NOT GLOB '*Async*', 'blocking API', 'pageable host memory') AS why,
  COUNT(*) AS count, SUM(bytes) AS bytes, SUM(dur) AS dur_sum, SUM(dur) AS gain_dur,
  (MAX(ts) - MIN(ts)) * 1.0 / (COUNT(*) - 1) AS period,
  MIN(ts) AS first_ts, MAX(ts + dur) AS last_end_ts, MIN(site) AS first_call_id
FROM _memq_advice_sync_copy
GROUP BY grp
HAVING COUNT(*) >= memq_advice_sync_loop_min()
ORDER BY gain_dur DESC, count DESC;

-- Every synchronous copy of a loop site, with the site it belongs to (the call id of the site's first copy).
CREATE PERFETTO TABLE memq_advice_sync_loop_copy(
  -- Slice id of the copy (memq_copy.id).
  id LONG,
  -- `debug.call_id` of the first copy of its loop site (memq_advice_sync_loop.first_call_id).
  site LONG
) AS
SELECT c.id, c.site FROM _memq_advice_sync_copy c
JOIN (SELECT grp FROM _memq_advice_sync_copy GROUP BY grp HAVING COUNT(*) >= memq_advice_sync_loop_min()) g
  USING (grp)
ORDER BY c.id;
