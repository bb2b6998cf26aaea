-- Summary: what rocmProfileData and `nsys stats` report, from memq's own tables.
--
-- Decisions:
-- * API calls: memq.api slices (LTTng) and, for Kineto traces, the runtime slices
--   (categories cuda_runtime, cuda_driver, hip_runtime). `share` is of the summed
--   time of all listed calls.
-- * Copies per (source, direction), memsets as direction `memset`: count, bytes,
--   summed time, wall-clock time (union across streams), bandwidth = bytes / summed
--   time (GB/s), and how many were staged (pageable host endpoint).
-- * Allocations per kind: count, bytes (host blocks below the recording's threshold
--   included, from their totals), largest (of those recorded one by one), peak live bytes in one process
--   (device memory: on one device) from the live-bytes counters, and when first
--   reached, still live at the end. Where several samples share a time, the last
--   one counts (a block allocated and freed at the same time is never live).
-- * Device busy share: per device, the union of its copy and memset intervals
--   (plus kernels for Kineto, which records them) over the recorded time
--   (memq_recorded_dur(): the trace window, or the union of its capture windows).
-- * Allocations per kind count those made in the trace; `live_at_start` counts those
--   a capture window's snapshot found live (allocated before the window), apart.

INCLUDE PERFETTO MODULE memq.allocations;
INCLUDE PERFETTO MODULE memq.copies;
INCLUDE PERFETTO MODULE memq.counters;
INCLUDE PERFETTO MODULE memq.intervals;
INCLUDE PERFETTO MODULE memq.units;
INCLUDE PERFETTO MODULE memq.windows;

-- API calls by total time.
CREATE PERFETTO TABLE memq_summary_api(
  -- Function name.
  name STRING,
  -- Number of calls.
  calls LONG,
  -- Summed duration.
  total_dur DURATION,
  -- Mean duration.
  mean_dur DOUBLE,
  -- Longest call.
  max_dur DURATION,
  -- Share of the summed time of all calls (0..1).
  share DOUBLE
) AS
WITH calls AS (
  SELECT name, COUNT(*) AS calls, SUM(dur) AS total_dur, AVG(dur) AS mean_dur, MAX(dur) AS max_dur
  FROM slice
  WHERE category IN ('memq.api', 'cuda_runtime', 'cuda_driver', 'hip_runtime') AND dur >= 0
  GROUP BY name
)
SELECT name, calls, total_dur, mean_dur, max_dur,
  IIF(SUM(total_dur) OVER () > 0, total_dur * 1.0 / SUM(total_dur) OVER (), 0.0) AS share
FROM calls
ORDER BY total_dur DESC;

-- Copies per direction (and memsets), with bandwidth.
CREATE PERFETTO TABLE memq_summary_copy(
  -- `lttng` or `kineto`.
  source STRING,
  -- HtoD, DtoH, DtoD, HtoH (Kineto also PtoP), or `memset`.
  direction STRING,
  -- Number of copies.
  count LONG,
  -- Bytes moved (NULL when the source recorded none).
  bytes LONG,
  -- Summed duration.
  dur_sum DURATION,
  -- Wall-clock duration (union across threads and streams).
  wall_dur DURATION,
  -- bytes / dur_sum, GB/s.
  gb_per_s DOUBLE,
  -- Copies staged through a pageable host buffer.
  staged LONG
) AS
WITH ops AS (
  SELECT source, direction, ts, dur, bytes, IFNULL(pageable, 0) AS staged FROM memq_copy
  UNION ALL
  SELECT source, 'memset', ts, dur, bytes, 0 FROM memq_set
),
agg AS (
  SELECT source, direction, COUNT(*) AS count, SUM(bytes) AS bytes, SUM(dur) AS dur_sum, SUM(staged) AS staged
  FROM ops GROUP BY source, direction
),
wall AS (
  SELECT grp, wall_dur FROM _memq_union_dur!((SELECT source || '/' || direction AS grp, ts, dur FROM ops))
)
SELECT a.source, a.direction, a.count, a.bytes, a.dur_sum, IFNULL(w.wall_dur, 0) AS wall_dur,
  memq_gb_per_s(a.bytes, a.dur_sum) AS gb_per_s, a.staged
FROM agg a
LEFT JOIN wall w ON w.grp = a.source || '/' || a.direction
ORDER BY a.source, a.direction;

-- The value each live-bytes sample time settles on: calls at one time (a block allocated and
-- freed at the same ns) leave several samples there, and only the last one holds for a while.
-- With MAX(id) the only aggregate, SQLite takes `value` from the row of the largest id: the last
-- sample. (A table, not a CTE: read twice below, and a ROW_NUMBER() window or an SQLite
-- materialisation over every sample cost 3-5x more.)
CREATE PERFETTO TABLE _memq_live_held AS
SELECT c.track_id, c.ts, c.value, MAX(c.id) AS last_id
FROM counter c
WHERE c.track_id IN (SELECT id FROM memq_live_counter_track)
GROUP BY c.track_id, c.ts
ORDER BY c.track_id, c.ts;

-- Allocations per kind.
CREATE PERFETTO TABLE memq_summary_allocation(
  -- host, pinned, registered, device, managed.
  kind STRING,
  -- Number of allocations made in the trace (`live_at_start` ones not counted).
  count LONG,
  -- Bytes allocated (summed over those allocations).
  bytes LONG,
  -- Largest allocation.
  max_size LONG,
  -- Peak live bytes of the kind in one process (device memory: on one device, all
  -- processes), from the converter's live-bytes counters.
  peak_live_bytes LONG,
  -- First time of that peak.
  peak_ts TIMESTAMP,
  -- Allocations still live at the end of the trace.
  leaked LONG,
  -- Their bytes.
  leaked_bytes LONG,
  -- Allocations live when a capture window opened (allocated before it).
  live_at_start LONG,
  -- Their bytes.
  live_at_start_bytes LONG
) AS
WITH track AS (SELECT id, kind FROM memq_live_counter_track),
held AS (SELECT track_id, ts, value FROM _memq_live_held),
track_peak AS (
  SELECT track_id, MAX(value) AS value FROM held GROUP BY track_id
),
peak AS (
  SELECT t.kind, MAX(p.value) AS peak_live_bytes FROM track_peak p JOIN track t ON t.id = p.track_id
  GROUP BY t.kind
),
peak_at AS (
  SELECT t.kind, MIN(c.ts) AS peak_ts
  FROM peak p
  JOIN track t USING (kind)
  JOIN held c ON c.track_id = t.id AND c.value = p.peak_live_bytes
  GROUP BY t.kind
),
events AS (
  SELECT kind, SUM(NOT live_at_start) AS count, SUM(IIF(live_at_start, 0, size)) AS bytes, MAX(size) AS max_size,
    SUM(leaked) AS leaked, SUM(IIF(leaked, size, 0)) AS leaked_bytes,
    SUM(live_at_start) AS live_at_start, SUM(IIF(live_at_start, size, 0)) AS live_at_start_bytes
  FROM memq_allocation GROUP BY kind
  UNION ALL
  -- host blocks below the recording's threshold: counted, not recorded one by one
  SELECT 'host', SUM(alloc_count), SUM(alloc_bytes), NULL, MAX(SUM(live_count), 0), MAX(SUM(live_bytes), 0), 0, 0
  FROM memq_host_small HAVING COUNT(*) > 0
),
agg AS (
  SELECT kind, SUM(count) AS count, SUM(bytes) AS bytes, MAX(max_size) AS max_size, SUM(leaked) AS leaked,
    SUM(leaked_bytes) AS leaked_bytes, SUM(live_at_start) AS live_at_start,
    SUM(live_at_start_bytes) AS live_at_start_bytes
  FROM events GROUP BY kind
)
SELECT a.kind, a.count, a.bytes, a.max_size, CAST(p.peak_live_bytes AS INT) AS peak_live_bytes, pa.peak_ts,
  a.leaked, a.leaked_bytes, a.live_at_start, a.live_at_start_bytes
FROM agg a LEFT JOIN peak p USING (kind) LEFT JOIN peak_at pa USING (kind)
ORDER BY a.bytes DESC;

-- Share of the trace window each device spends copying or setting memory.
CREATE PERFETTO TABLE memq_summary_device(
  -- Device.
  device LONG,
  -- Copies and memsets on it (plus kernels for Kineto).
  ops LONG,
  -- Union of their intervals.
  busy_dur DURATION,
  -- busy_dur / recorded time (0..1).
  busy_share DOUBLE
) AS
WITH ops AS (
  SELECT device, ts, dur FROM memq_copy
  UNION ALL SELECT device, ts, dur FROM memq_set
  UNION ALL
  SELECT COALESCE(EXTRACT_ARG(arg_set_id, 'debug.device'), EXTRACT_ARG(arg_set_id, 'args.device')), ts, dur FROM slice WHERE category = 'kernel'
),
n AS (SELECT device, COUNT(*) AS ops FROM ops GROUP BY device),
busy AS (SELECT grp AS device, wall_dur FROM _memq_union_dur!((SELECT device AS grp, ts, dur FROM ops)))
SELECT n.device, n.ops, IFNULL(b.wall_dur, 0) AS busy_dur,
  IIF(r.dur > 0, IFNULL(b.wall_dur, 0) * 1.0 / r.dur, 0.0) AS busy_share
FROM n LEFT JOIN busy b ON b.device IS n.device, (SELECT memq_recorded_dur() AS dur) r
ORDER BY n.device;
