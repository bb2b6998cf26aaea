-- Advice: pageable host buffers uploaded again and again (pinning candidates).
--
-- A host-to-device copy from pageable memory (malloc, a tensor without pin_memory) is
-- staged by the runtime through a pinned bounce buffer, in chunks, and is synchronous for
-- the host even with the Async API. A buffer uploaded more than once is worth pinning
-- once (`pin_memory=True`, `tensor.pin_memory()`, hipHostMalloc / cudaMallocHost, or
-- hipHostRegister / cudaHostRegister of the existing buffer): every later upload then runs
-- at the pinned rate and can overlap with compute (`non_blocking=True`).
--
-- Decisions:
-- * Upload: an LTTng copy of direction HtoD with `pageable` = 1 (its source lies in a
--   libc heap block or in no traced allocation). Kineto copies have no source address:
--   they are never grouped here (memq redundant counts them as staged). Zero-byte copies
--   are memq.advice.zero_bytes' concern.
-- * The buffer is the source's allocation (`src_alloc_id`); a source in no traced
--   allocation is grouped by its byte sequence (`src_key`). A buffer is a candidate when
--   it was uploaded at least twice.
-- * The pinned rate is measured in the same trace: bytes / summed duration of the
--   process's HtoD copies on the same device whose source was not pageable. `est_pinned_dur`
--   is the candidate's bytes at that rate, and `gain_dur` = dur_sum - est_pinned_dur (not
--   below 0); both are NULL when the trace has no such pinned upload to measure.

INCLUDE PERFETTO MODULE memq.copies;
INCLUDE PERFETTO MODULE memq.allocations;
INCLUDE PERFETTO MODULE memq.advice.calls;

-- Every pageable upload with its buffer (upid, buffer): `grp` the slice id of the buffer's first upload (never NULL,
-- unlike a call id), `site` its call id, `rn` its rank among them. One pass for both tables below.
CREATE PERFETTO TABLE _memq_advice_pinning_upload AS
WITH up AS (
  SELECT c.id, c.ts, c.dur, c.upid, c.device, c.bytes, c.call_id, c.api, c.src, c.src_alloc_id, c.src_mem, c.src_key
  FROM memq_copy c
  WHERE memq_has_addresses!(c.source) AND c.direction = 'HtoD' AND c.pageable AND c.bytes > 0 AND c.upid IS NOT NULL
    AND c.src IS NOT NULL
)
SELECT up.*, FIRST_VALUE(id) OVER w AS grp, FIRST_VALUE(call_id) OVER w AS site, ROW_NUMBER() OVER w AS rn
FROM up
WINDOW w AS (PARTITION BY upid, IFNULL(CAST(src_alloc_id AS STRING), 'key:' || src_key) ORDER BY ts, id);

-- One row per pageable host buffer uploaded at least twice.
CREATE PERFETTO TABLE memq_advice_pinning(
  -- Process.
  upid LONG,
  -- Device uploaded to (the most frequent one, the lowest on a tie).
  device LONG,
  -- The buffer's allocation; NULL when the source lies in no traced allocation.
  src_alloc_id LONG,
  -- Its memory kind (`host` or `untracked`).
  src_mem STRING,
  -- First byte of the buffer (of its allocation, else of the first upload).
  addr LONG,
  -- Size of the allocation (else of the largest upload).
  size LONG,
  -- Caller address of the first upload (NULL: not recorded).
  ip LONG,
  -- API function of the first upload.
  api STRING,
  -- Number of uploads.
  count LONG,
  -- Bytes uploaded.
  bytes LONG,
  -- Summed duration of the uploads.
  dur_sum DURATION,
  -- Measured pinned HtoD rate of the process and device, GB/s (NULL: no pinned upload).
  pinned_gb_per_s DOUBLE,
  -- The pageable uploads' rate, GB/s.
  gb_per_s DOUBLE,
  -- The uploads' bytes at the pinned rate (NULL: no pinned upload to measure).
  est_pinned_dur DURATION,
  -- Time pinning would save: dur_sum - est_pinned_dur, at least 0 (NULL: unknown).
  gain_dur DURATION,
  -- Start of the first upload.
  first_ts TIMESTAMP,
  -- End of the last upload.
  last_end_ts TIMESTAMP,
  -- `debug.call_id` of the first upload.
  first_call_id LONG
) AS
WITH rate AS (
  SELECT upid, device, SUM(bytes) * 1.0 / SUM(dur) AS gbps
  FROM memq_copy
  WHERE memq_has_addresses!(source) AND direction = 'HtoD' AND NOT pageable AND dur > 0 AND bytes > 0
  GROUP BY upid, device
),
per AS (
  SELECT grp, COUNT(*) AS count, SUM(bytes) AS bytes, SUM(dur) AS dur_sum, MIN(ts) AS first_ts,
    MAX(ts + dur) AS last_end_ts, MAX(bytes) AS largest
  FROM _memq_advice_pinning_upload GROUP BY grp HAVING COUNT(*) >= 2
),
dev AS (
  SELECT grp, device FROM (
    SELECT grp, device, ROW_NUMBER() OVER (PARTITION BY grp ORDER BY COUNT(*) DESC, device) AS rn
    FROM _memq_advice_pinning_upload WHERE grp IN (SELECT grp FROM per) GROUP BY grp, device)
  WHERE rn = 1
),
first AS MATERIALIZED (SELECT * FROM _memq_advice_pinning_upload WHERE rn = 1 AND grp IN (SELECT grp FROM per)),
est AS (
  SELECT per.*, f.upid, dev.device, f.src_alloc_id, f.src_mem, f.src, f.call_id, f.api, r.gbps,
    IIF(r.gbps IS NULL, NULL, CAST(per.bytes / r.gbps AS INT)) AS est
  FROM per
  JOIN dev USING (grp)
  JOIN first f USING (grp)
  LEFT JOIN rate r ON r.upid = f.upid AND r.device IS dev.device
)
SELECT e.upid, e.device, e.src_alloc_id, e.src_mem, IFNULL(a.addr, e.src) AS addr, IFNULL(a.size, e.largest) AS size,
  k.ip, e.api, e.count, e.bytes, e.dur_sum, e.gbps AS pinned_gb_per_s,
  IIF(e.dur_sum > 0, e.bytes * 1.0 / e.dur_sum, NULL) AS gb_per_s,
  e.est AS est_pinned_dur, IIF(e.est IS NULL, NULL, MAX(0, e.dur_sum - e.est)) AS gain_dur,
  e.first_ts, e.last_end_ts, e.call_id AS first_call_id
FROM est e
LEFT JOIN memq_allocation a ON a.alloc_id = e.src_alloc_id
LEFT JOIN memq_advice_call k ON k.call_id = e.call_id
ORDER BY IFNULL(gain_dur, 0) DESC, dur_sum DESC;

-- Every upload of a pinning candidate, with the candidate it belongs to (the call id of its first upload).
CREATE PERFETTO TABLE memq_advice_pinning_copy(
  -- Slice id of the copy (memq_copy.id).
  id LONG,
  -- `debug.call_id` of the candidate's first upload (memq_advice_pinning.first_call_id).
  site LONG
) AS
SELECT u.id, u.site
FROM _memq_advice_pinning_upload u
JOIN (SELECT grp FROM _memq_advice_pinning_upload GROUP BY grp HAVING COUNT(*) >= 2) g USING (grp)
ORDER BY u.id;
