-- Redundant copies: bytes (and the time spent on them) that moved nothing new.
--
-- docs/DEFINITIONS.md, "Redundant copies": for each copy, the bytes whose source and destination were already a
-- mirror moved nothing new (same direction: *repeat*; reverse direction, copying data
-- back where it came from: *round trip*). On a unified-memory device every
-- host<->device copy is avoidable (*unified*), and so is any copy with a managed
-- endpoint (*managed*). A copy whose destination fingerprint is the same before and
-- after it (content fingerprints: a device-to-host read-back of unchanged data, in
-- practice) changed nothing at all: a *no-op copy*, proven redundant. Time is the
-- copy's duration prorated by its redundant bytes, as a sum and as wall-clock time
-- (union of intervals across threads and streams). Host<->device copies from
-- pageable host memory are reported separately (*staged*). Upper bounds where no
-- fingerprint checked: CPU and kernel writes are not traced, so a pair may no longer
-- have been a mirror.
--
-- Evidence: a redundant byte is `content` when a fingerprint proves it (no-op copies;
-- repeat and round-trip bytes whose mirror the copy itself observed unchanged, see
-- memq.mirrors), else `address` (the address rules alone: the old upper bound;
-- managed and unified bytes are always `address`). Repeat and round trip count only
-- mirrors that no fingerprint contradicted (memq.mirrors).
--
-- Decisions:
-- * Classes are per byte, first match wins: no-op (every byte of a no-op copy), repeat,
--   round trip (the pair's mirror orientation decides: same source bytes -> repeat,
--   reversed -> round trip), then managed (the source or destination byte lies in a
--   managed allocation), then unified (a HtoD / DtoH copy on a unified-memory device).
-- * A copy's `class` is the class with most bytes (ties in the order above); its
--   `evidence` is `content` when all its redundant bytes are, else `address`.
-- * Prorated time = floor(dur * class_bytes / bytes), computed in doubles; its
--   wall-clock interval is [ts, ts + prorated) (the start of the copy).
-- * `unified`: 'yes' (every device unified), 'no', or 'auto': the memq.device
--   event of the copy's process and device says `unified_memory` = 1. Kineto traces
--   carry no such event, so auto means no.
-- * Kineto copies have no addresses: repeat, round trip and managed are NULL for
--   them (not applicable); unified and staged still apply.
-- * `count` is the number of copies with at least one byte in the class.
-- * A trace merged with a PyTorch profile (`ctf2perfetto --kineto`) holds each copy
--   twice (memq.copy and gpu_memcpy): when it has LTTng copies, only those count.

INCLUDE PERFETTO MODULE memq.mirrors;

-- Unified-memory devices described by the preload library (memq.device events).
CREATE PERFETTO TABLE memq_device(
  -- Process that queried the device.
  pid LONG,
  -- Device index.
  device LONG,
  -- `hip` or `cuda`.
  runtime STRING,
  -- Device name.
  name STRING,
  -- 1 for an integrated GPU (APU).
  integrated BOOL,
  -- 1 when host and device share one memory pool.
  unified_memory BOOL
) AS
SELECT
  EXTRACT_ARG(arg_set_id, 'debug.pid') AS pid,
  EXTRACT_ARG(arg_set_id, 'debug.device') AS device,
  EXTRACT_ARG(arg_set_id, 'debug.runtime') AS runtime,
  EXTRACT_ARG(arg_set_id, 'debug.name') AS name,
  EXTRACT_ARG(arg_set_id, 'debug.integrated') AS integrated,
  EXTRACT_ARG(arg_set_id, 'debug.unified_memory') AS unified_memory
FROM slice WHERE category = 'memq.device';

-- Per copy with addresses: its bytes per history class, and how many of the repeat /
-- round-trip bytes content checked.
CREATE PERFETTO TABLE _memq_copy_class AS
SELECT
  p.copy_id,
  SUM(IIF(h.is_repeat, p.len, 0)) AS repeat_bytes,
  SUM(IIF(h.is_repeat AND h.checked, p.len, 0)) AS repeat_checked,
  SUM(IIF(NOT h.is_repeat AND h.is_round_trip, p.len, 0)) AS round_trip_bytes,
  SUM(IIF(NOT h.is_repeat AND h.is_round_trip AND h.checked, p.len, 0)) AS round_trip_checked,
  SUM(IIF(NOT h.is_repeat AND NOT h.is_round_trip AND p.managed, p.len, 0)) AS managed_bytes,
  SUM(IIF(NOT h.is_repeat AND NOT h.is_round_trip AND NOT p.managed, p.len, 0)) AS other_bytes
FROM _memq_piece p
JOIN _memq_piece_history h USING (piece_id)
GROUP BY p.copy_id
ORDER BY p.copy_id;

CREATE PERFETTO INDEX _memq_copy_class_idx ON _memq_copy_class(copy_id);

-- Unified-memory flag of each (process, device) a memq.device event describes.
CREATE PERFETTO TABLE _memq_device_unified AS
SELECT p.upid, d.device, MAX(d.unified_memory) AS unified_memory
FROM memq_device d JOIN process p ON p.pid = d.pid
GROUP BY p.upid, d.device;

-- Per copy: what memq_redundant_copy reports that does not depend on its `unified`
-- argument, computed once (the function and the totals read it several times).
CREATE PERFETTO TABLE _memq_copy_redundancy AS
WITH c AS (
  SELECT
    mc.*,
    IFNULL(du.unified_memory, 0) AS device_unified,
    IIF(memq_has_addresses!(mc.source), IFNULL(mc.dst_hash_before = mc.dst_hash_after, 0), NULL) AS no_op,
    -- Copies with addresses that moved no byte (a 2D copy of zero rows) have no pieces: 0, not NULL.
    IIF(memq_has_addresses!(mc.source), IFNULL(k.repeat_bytes, 0), NULL) AS k_repeat,
    IIF(memq_has_addresses!(mc.source), IFNULL(k.repeat_checked, 0), NULL) AS k_repeat_checked,
    IIF(memq_has_addresses!(mc.source), IFNULL(k.round_trip_bytes, 0), NULL) AS k_round_trip,
    IIF(memq_has_addresses!(mc.source), IFNULL(k.round_trip_checked, 0), NULL) AS k_round_trip_checked,
    IIF(memq_has_addresses!(mc.source), IFNULL(k.managed_bytes, 0), NULL) AS k_managed,
    IIF(memq_has_addresses!(mc.source), IFNULL(k.other_bytes, 0), mc.bytes) AS k_other
  FROM memq_copy mc
  LEFT JOIN _memq_copy_class k ON k.copy_id = mc.id
  LEFT JOIN _memq_device_unified du ON du.upid = mc.upid AND du.device = mc.device
  WHERE memq_has_addresses!(mc.source)
    OR NOT EXISTS (SELECT 1 FROM memq_source WHERE has_addresses AND copies > 0)
)
SELECT
  id, ts, dur, source, upid, utid, call_id, api, direction, bytes, stream, device, device_unified, no_op,
  -- a no-op copy's bytes are all no-op; the other classes then have none
  IIF(no_op, bytes, IIF(memq_has_addresses!(source), 0, NULL)) AS no_op_bytes,
  IIF(no_op, 0, k_repeat) AS repeat_bytes,
  IIF(no_op, 0, k_repeat_checked) AS repeat_content_bytes,
  IIF(no_op, 0, k_round_trip) AS round_trip_bytes,
  IIF(no_op, 0, k_round_trip_checked) AS round_trip_content_bytes,
  IIF(no_op, 0, k_managed) AS managed_bytes,
  -- bytes of no other class: unified when the copy's device counts as unified
  IIF(IFNULL(no_op, 0) = 0 AND direction IN ('HtoD', 'DtoH'), IFNULL(k_other, 0), 0) AS unified_candidate_bytes,
  IFNULL(pageable, 0) AS staged
FROM c
ORDER BY id;

-- Per copy: redundant bytes per class and the prorated time.
CREATE PERFETTO FUNCTION memq_redundant_copy(
  -- 'auto', 'yes' or 'no': whether host<->device copies count as unified.
  unified STRING
)
-- One row per copy.
RETURNS TABLE(
  -- Slice id of the copy.
  id LONG,
  -- Start.
  ts TIMESTAMP,
  -- Duration.
  dur DURATION,
  -- `lttng` or `kineto`.
  source STRING,
  -- Process.
  upid LONG,
  -- Thread.
  utid LONG,
  -- `debug.call_id` of the call (NULL for Kineto).
  call_id LONG,
  -- API function or event name.
  api STRING,
  -- HtoD, DtoH, DtoD, HtoH.
  direction STRING,
  -- Bytes copied.
  bytes LONG,
  -- Stream.
  stream LONG,
  -- Device.
  device LONG,
  -- 1 when the copy's device counts as unified memory.
  unified_device BOOL,
  -- All its bytes when the destination fingerprint did not change (NULL: no addresses).
  no_op_bytes LONG,
  -- Bytes already mirrored from the same source bytes (NULL: no addresses).
  repeat_bytes LONG,
  -- Bytes copied back onto their own source (NULL: no addresses).
  round_trip_bytes LONG,
  -- Bytes with a managed endpoint (NULL: no addresses).
  managed_bytes LONG,
  -- Host<->device bytes on a unified-memory device.
  unified_bytes LONG,
  -- Sum of the five classes.
  redundant_bytes LONG,
  -- Of those, bytes a fingerprint proves (no-op, checked repeat / round trip).
  content_bytes LONG,
  -- Repeat bytes a fingerprint proves.
  repeat_content_bytes LONG,
  -- Round-trip bytes a fingerprint proves.
  round_trip_content_bytes LONG,
  -- Class with most bytes; NULL when nothing is redundant.
  class STRING,
  -- `content` when every redundant byte is proven by a fingerprint, else `address`; NULL
  -- when nothing is redundant.
  evidence STRING,
  -- Duration prorated by the redundant bytes.
  redundant_dur DURATION,
  -- 1 when a host<->device copy from pageable host memory.
  staged BOOL
) AS
WITH u AS (
  SELECT *,
    CASE $unified WHEN 'yes' THEN 1 WHEN 'no' THEN 0 ELSE device_unified END AS unified_device
  FROM _memq_copy_redundancy
),
r AS (
  SELECT *,
    IIF(unified_device, unified_candidate_bytes, 0) AS unified_bytes,
    IFNULL(no_op_bytes, 0) + IFNULL(repeat_bytes, 0) + IFNULL(round_trip_bytes, 0) + IFNULL(managed_bytes, 0)
      + IIF(unified_device, unified_candidate_bytes, 0) AS redundant_bytes,
    IFNULL(no_op_bytes, 0) + IFNULL(repeat_content_bytes, 0) + IFNULL(round_trip_content_bytes, 0) AS content_bytes
  FROM u
)
SELECT
  id, ts, dur, source, upid, utid, call_id, api, direction, bytes, stream, device, unified_device,
  no_op_bytes, repeat_bytes, round_trip_bytes, managed_bytes, unified_bytes, redundant_bytes, content_bytes,
  repeat_content_bytes, round_trip_content_bytes,
  CASE
    WHEN redundant_bytes = 0 THEN NULL
    WHEN IFNULL(no_op_bytes, 0) > 0 THEN 'no_op'
    WHEN IFNULL(repeat_bytes, 0) >= MAX(IFNULL(round_trip_bytes, 0), IFNULL(managed_bytes, 0), unified_bytes)
      THEN 'repeat'
    WHEN IFNULL(round_trip_bytes, 0) >= MAX(IFNULL(managed_bytes, 0), unified_bytes) THEN 'round_trip'
    WHEN IFNULL(managed_bytes, 0) >= unified_bytes THEN 'managed'
    ELSE 'unified'
  END AS class,
  CASE WHEN redundant_bytes = 0 THEN NULL WHEN content_bytes = redundant_bytes THEN 'content' ELSE 'address' END
    AS evidence,
  IIF(bytes > 0, CAST(CAST(dur AS DOUBLE) * redundant_bytes / bytes AS INT), 0) AS redundant_dur,
  staged
FROM r
ORDER BY id;

-- Totals per class and evidence, for the whole trace (upid NULL) and per process.
CREATE PERFETTO FUNCTION memq_redundant_total(
  -- 'auto', 'yes' or 'no' (see memq_redundant_copy).
  unified STRING
)
-- One row per (scope, class, evidence): classes no_op, repeat, round_trip, managed,
-- unified, redundant (any class) and staged (pageable host<->device copies, whole
-- duration); evidence `all`, and for the redundant classes also its split into
-- `content` (bytes a fingerprint proves) and `address` (the rest). Copies are counted
-- under each evidence they have bytes in.
RETURNS TABLE(
  -- Process; NULL for the whole trace.
  upid LONG,
  -- Class.
  class STRING,
  -- `all`, `content` or `address`.
  evidence STRING,
  -- Copies with bytes in the class (and evidence).
  count LONG,
  -- Bytes in the class (and evidence).
  bytes LONG,
  -- Summed prorated time.
  dur_sum DURATION,
  -- Wall-clock time: union of the prorated intervals.
  wall_dur DURATION
) AS
WITH rc AS MATERIALIZED (SELECT * FROM memq_redundant_copy($unified)),
per AS (
  SELECT upid, 'no_op' AS class, ts, dur, bytes AS total, no_op_bytes AS n, no_op_bytes AS proven FROM rc
  UNION ALL SELECT upid, 'repeat', ts, dur, bytes, repeat_bytes, repeat_content_bytes FROM rc
  UNION ALL SELECT upid, 'round_trip', ts, dur, bytes, round_trip_bytes, round_trip_content_bytes FROM rc
  UNION ALL SELECT upid, 'managed', ts, dur, bytes, managed_bytes, 0 FROM rc
  UNION ALL SELECT upid, 'unified', ts, dur, bytes, unified_bytes, 0 FROM rc
  UNION ALL SELECT upid, 'redundant', ts, dur, bytes, redundant_bytes, content_bytes FROM rc
),
split AS (
  SELECT upid, class, 'all' AS evidence, ts, dur, total, n FROM per
  UNION ALL SELECT upid, class, 'content', ts, dur, total, proven FROM per
  UNION ALL SELECT upid, class, 'address', ts, dur, total, IFNULL(n, 0) - IFNULL(proven, 0) FROM per
),
iv AS (
  SELECT upid, class, evidence, ts, n, CAST(CAST(dur AS DOUBLE) * n / total AS INT) AS d FROM split WHERE n > 0
  UNION ALL
  SELECT upid, 'staged', 'all', ts, bytes, dur FROM rc WHERE staged
),
scoped AS (
  -- Per process: copies without one (Kineto device work) count only in the whole-trace row.
  SELECT upid, class, evidence, ts, n, d FROM iv WHERE upid IS NOT NULL
  UNION ALL
  SELECT NULL, class, evidence, ts, n, d FROM iv
),
walled AS (
  SELECT *,
    MAX(ts + d) OVER (PARTITION BY upid, class, evidence ORDER BY ts, d
                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
  FROM scoped
)
SELECT
  upid, class, evidence, COUNT(*) AS count, SUM(IFNULL(n, 0)) AS bytes, SUM(d) AS dur_sum,
  SUM(MAX(0, ts + d - MAX(ts, IFNULL(prev_end, ts)))) AS wall_dur
FROM walled
GROUP BY upid, class, evidence
ORDER BY upid, class, evidence;

-- memq_redundant_copy with process and thread ids, in time order (ctf2perfetto.analyses.redundant_copies):
-- `SELECT * FROM memq_redundant_copy_report!('auto')`.
CREATE PERFETTO MACRO memq_redundant_copy_report(unified Expr)
RETURNS TableOrSubquery AS (
  SELECT r.id, r.call_id, p.pid, t.tid, r.ts, r.dur, r.source, r.api, r.direction, r.bytes, r.stream,
    r.device, r.unified_device, r.no_op_bytes, r.repeat_bytes, r.round_trip_bytes, r.managed_bytes,
    r.unified_bytes, r.redundant_bytes, r.content_bytes, r.repeat_content_bytes, r.round_trip_content_bytes,
    r.class, r.evidence, r.redundant_dur, r.staged
  FROM memq_redundant_copy($unified) r
  LEFT JOIN process p USING (upid) LEFT JOIN thread t USING (utid)
  ORDER BY r.ts, r.id
);

-- memq_redundant_total with process ids (ctf2perfetto.analyses.redundant).
CREATE PERFETTO MACRO memq_redundant_total_report(unified Expr)
RETURNS TableOrSubquery AS (
  SELECT p.pid, r.class, r.evidence, r.count, r.bytes, r.dur_sum, r.wall_dur
  FROM memq_redundant_total($unified) r LEFT JOIN process p USING (upid)
);
