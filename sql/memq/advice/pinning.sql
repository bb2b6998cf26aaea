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
WITH up AS (
  SELECT c.*, IFNULL(CAST(c.src_alloc_id AS STRING), 'key:' || c.src_key) AS buffer
  FROM memq_copy c
  WHERE memq_has_addresses!(c.source) AND c.direction = 'HtoD' AND c.pageable AND c.bytes > 0 AND c.upid IS NOT NULL
    AND c.src IS NOT NULL
),
rate AS (
  SELECT upid, device, SUM(bytes) * 1.0 / SUM(dur) AS gbps
  FROM memq_copy
  WHERE memq_has_addresses!(source) AND direction = 'HtoD' AND NOT pageable AND dur > 0 AND bytes > 0
  GROUP BY upid, device
),
per AS (
  SELECT upid, buffer, COUNT(*) AS count, SUM(bytes) AS bytes, SUM(dur) AS dur_sum, MIN(ts) AS first_ts,
    MAX(ts + dur) AS last_end_ts, MAX(bytes) AS largest
  FROM up GROUP BY upid, buffer HAVING COUNT(*) >= 2
),
dev AS (
  SELECT upid, buffer, device FROM (
    SELECT upid, buffer, device, ROW_NUMBER() OVER (PARTITION BY upid, buffer ORDER BY COUNT(*) DESC, device) AS rn
    FROM up GROUP BY upid, buffer, device)
  WHERE rn = 1
),
first AS (
  SELECT * FROM (SELECT up.*, ROW_NUMBER() OVER (PARTITION BY upid, buffer ORDER BY ts, id) AS rn FROM up)
  WHERE rn = 1
),
est AS (
  SELECT per.*, dev.device, f.src_alloc_id, f.src_mem, f.src, f.call_id, f.api, r.gbps,
    IIF(r.gbps IS NULL, NULL, CAST(per.bytes / r.gbps AS INT)) AS est
  FROM per
  JOIN dev USING (upid, buffer)
  JOIN first f USING (upid, buffer)
  LEFT JOIN rate r ON r.upid = per.upid AND r.device IS dev.device
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
WITH up AS (
  SELECT c.id, c.ts, c.upid, c.call_id, IFNULL(CAST(c.src_alloc_id AS STRING), 'key:' || c.src_key) AS buffer
  FROM memq_copy c
  WHERE memq_has_addresses!(c.source) AND c.direction = 'HtoD' AND c.pageable AND c.bytes > 0 AND c.upid IS NOT NULL
    AND c.src IS NOT NULL
),
g AS (
  SELECT up.*, FIRST_VALUE(call_id) OVER (PARTITION BY upid, buffer ORDER BY ts, id) AS site,
    COUNT(*) OVER (PARTITION BY upid, buffer) AS n
  FROM up
)
SELECT id, site FROM g WHERE n >= 2 ORDER BY id;
