-- Advice: copies of all-zero data, which a memset would do.
--
-- Uploading a buffer of zeros moves every byte over the bus to write what
-- hipMemset / cudaMemset (torch.zeros(..., device='cuda')) writes on the device at device
-- bandwidth with nothing to read. GVProf found such copies in Rodinia bfs.
--
-- The evidence is the copy's source fingerprint (`memq record --content`): the copy is a
-- zero copy when `src_hash` equals the fingerprint all-zero bytes of that length have in
-- that content mode. SQL cannot compute xxh3, so those fingerprints come in the plain
-- table memq_zero_fingerprint, which the caller fills (ctf2perfetto computes them with
-- libxxhash, as memq_hash.c does) before reading this module's views; it is empty
-- otherwise and no copy is a zero copy.
--
-- Decisions:
-- * `proof` is `full` when every byte was hashed (content mode `full`, or `sampled` with
--   at most 1,024 bytes, which hashes them all), else `sampled`: the 16 sampled blocks of
--   64 bytes were zero, the bytes between them were not read.
-- * Any direction whose source the recorder fingerprinted (host, pinned, registered
--   memory; device memory on a unified-memory device) counts. Copies without a source
--   fingerprint never count.
-- * Grouped per process, call site (`ip`), API, direction and destination allocation.
--   `gain_dur` is the copies' summed duration (a memset costs a fraction of it and moves
--   nothing over the bus): an upper bound on the time saved.
-- * Views, not tables: they read memq_zero_fingerprint when queried, so it can be filled
--   after this module is included.

INCLUDE PERFETTO MODULE memq.copies;
INCLUDE PERFETTO MODULE memq.advice.calls;

-- Fingerprints of all-zero bytes: one row per (content mode, length) the caller computed.
-- A plain SQLite table: the caller creates and fills it (this module leaves it as it finds it).
CREATE TABLE IF NOT EXISTS memq_zero_fingerprint(
  -- `sampled` or `full` (memq_copy.content_mode).
  content_mode TEXT,
  -- Length in bytes.
  bytes INTEGER,
  -- The fingerprint of `bytes` zero bytes in that mode, as the trace stores hashes (signed 64-bit).
  hash INTEGER
);

-- One row per copy whose source fingerprint shows all-zero data.
CREATE PERFETTO VIEW memq_advice_zero_copy(
  -- Slice id of the copy.
  id LONG,
  -- Start.
  ts TIMESTAMP,
  -- Duration.
  dur DURATION,
  -- Process.
  upid LONG,
  -- `debug.call_id` of the call.
  call_id LONG,
  -- Caller address (NULL: not recorded).
  ip LONG,
  -- API function.
  api STRING,
  -- Direction.
  direction STRING,
  -- Bytes copied (all zero).
  bytes LONG,
  -- Destination address.
  dst LONG,
  -- Allocation holding the first destination byte.
  dst_alloc_id LONG,
  -- Memory kind of the destination.
  dst_mem STRING,
  -- Memory kind of the source.
  src_mem STRING,
  -- `full` (every byte hashed) or `sampled` (16 blocks of 64 bytes hashed).
  proof STRING
) AS
SELECT c.id, c.ts, c.dur, c.upid, c.call_id, k.ip, c.api, c.direction, c.bytes, c.dst, c.dst_alloc_id,
  c.dst_mem, c.src_mem,
  IIF(c.content_mode = 'full' OR c.bytes <= 1024, 'full', 'sampled') AS proof
FROM memq_copy c
JOIN memq_zero_fingerprint z ON z.content_mode = c.content_mode AND z.bytes = c.bytes AND z.hash = c.src_hash
LEFT JOIN memq_advice_call k USING (call_id)
WHERE c.src_hash IS NOT NULL AND c.bytes > 0;

-- Zero copies per (process, call site, API, direction, destination allocation).
CREATE PERFETTO VIEW memq_advice_zero_content(
  -- Process.
  upid LONG,
  -- Caller address (NULL: not recorded).
  ip LONG,
  -- API function.
  api STRING,
  -- Direction.
  direction STRING,
  -- Allocation holding the destination (NULL: untracked).
  dst_alloc_id LONG,
  -- Memory kind of the destination.
  dst_mem STRING,
  -- Number of zero copies.
  count LONG,
  -- Bytes they copied.
  bytes LONG,
  -- Their summed duration.
  dur_sum DURATION,
  -- Upper bound of the time a memset would save: the summed duration.
  gain_dur DURATION,
  -- `full` when every copy's bytes were all hashed, else `sampled`.
  proof STRING,
  -- Start of the first.
  first_ts TIMESTAMP,
  -- End of the last.
  last_end_ts TIMESTAMP,
  -- `debug.call_id` of the first.
  first_call_id LONG
) AS
SELECT upid, ip, api, direction, dst_alloc_id, MIN(dst_mem) AS dst_mem, COUNT(*) AS count, SUM(bytes) AS bytes,
  SUM(dur) AS dur_sum, SUM(dur) AS gain_dur, IIF(MIN(proof) = 'full' AND MAX(proof) = 'full', 'full', 'sampled') AS proof,
  MIN(ts) AS first_ts, MAX(ts + dur) AS last_end_ts, MAX(IIF(rn = 1, call_id, NULL)) AS first_call_id
FROM (SELECT z.*, ROW_NUMBER() OVER (PARTITION BY upid, ip, api, direction, dst_alloc_id ORDER BY ts, id) AS rn
      FROM memq_advice_zero_copy z)
GROUP BY upid, ip, api, direction, dst_alloc_id
ORDER BY gain_dur DESC, bytes DESC;
