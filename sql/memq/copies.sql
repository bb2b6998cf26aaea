-- Copies and memsets, normalised over every source memq reads.
--
-- Sources (docs/DEFINITIONS.md, "Sources with and without addresses"; in SQL ask
-- memq_has_addresses!(source), never the source's name):
-- * `lttng`: memq.copy / memq.set slices written by ctf2perfetto (one per
--   successful call, on its stream track, same start and duration as the API call;
--   an LTTng recording, or another profiler's file imported as memq events);
--   they have addresses and the allocations holding their first bytes.
-- * `kineto`: PyTorch-profiler JSON, read by memq's importer (`gpu_memcpy` / `gpu_memset`
--   slices). Kineto records no addresses: src, dst and the allocation columns are
--   NULL, and only address-free figures (counts, bytes, time, bandwidth, staged)
--   apply to them.
--
-- Decisions:
-- * `pageable` says whether the HOST endpoint of a host<->device copy is pageable
--   memory (the runtime stages it through a pinned buffer). LTTng: the host
--   endpoint's first byte lies in a libc heap block or in no traced allocation
--   (anything not pinned, registered or managed is pageable). Kineto: from the name,
--   "(Pageable -> Device)" is 1, "(Pinned -> Device)" is 0, "(Host -> Device)"
--   (ROCm) is NULL (unknown). NULL for copies that are not HtoD / DtoH.
-- * Kineto direction is the 4 letters after "Memcpy " in the name (HtoD, DtoH,
--   DtoD, HtoH, PtoP).
-- * Content fingerprints (LTTng, docs/TRACE_FORMAT.md): `src_hash` is what the source
--   held at the call, `dst_hash_before` what the destination held before it,
--   `dst_hash_after` what it held after completion, taken at `after_ts` (the copy's
--   end when recorded with it, else the memq.copy_done instant with the copy's
--   process and `seq`); NULL where not taken. Hashes of one content mode are
--   comparable when they cover the same bytes in the same order: `src_key` /
--   `dst_key` name a side's byte sequence (see _memq_range_key!).

INCLUDE PERFETTO MODULE memq.process;

-- Whether copies and memsets of `source` (memq_copy.source, memq_set.source) carry addresses, so that the
-- address-based figures (mirrors, duplicated bytes, repeat, round trip, managed, leaks) apply to them
-- (docs/DEFINITIONS.md, "Sources with and without addresses"). A macro: no call per row.
CREATE PERFETTO MACRO memq_has_addresses(source Expr) RETURNS Expr AS
($source = 'lttng');

-- A side's byte sequence as a key: `addr:len` when its bytes are contiguous, else
-- `addr:width:height:pitch` (rows) or `addr:width:height:pitch:depth:slice` (rows of
-- slices), in the one form each sequence has: contiguous rows merge, a slice that
-- is one run is a row, slices that continue the row stride are more rows.
-- A macro, not a function: a function call per copy side cost more than the rest of the key.
CREATE PERFETTO MACRO _memq_range_key(
  -- First byte.
  addr Expr,
  -- Bytes copied.
  bytes Expr,
  -- Row width (2D/3D), else NULL.
  width Expr,
  -- Rows per slice (2D/3D), else NULL.
  height Expr,
  -- Bytes from one row to the next.
  pitch Expr,
  -- Slices (3D), else NULL or 0.
  depth Expr,
  -- Bytes from one slice to the next.
  slice Expr)
RETURNS Expr AS (CASE
  WHEN $addr IS NULL THEN NULL
  WHEN $height IS NULL THEN printf('%d:%d', $addr, $bytes)
  -- one run per slice (rows contiguous or a single row)
  WHEN $height = 1 OR $pitch = $width THEN CASE
    WHEN IFNULL($depth, 0) <= 1 OR $slice = $width * $height THEN printf('%d:%d', $addr, $bytes)
    ELSE printf('%d:%d:%d:%d', $addr, $width * $height, $depth, $slice) END
  WHEN IFNULL($depth, 0) <= 1 OR $slice = $pitch * $height
    THEN printf('%d:%d:%d:%d', $addr, $width, $height * MAX(IFNULL($depth, 0), 1), $pitch)
  ELSE printf('%d:%d:%d:%d:%d:%d', $addr, $width, $height, $pitch, $depth, $slice)
END);

-- Every copy of the trace, from any source.
CREATE PERFETTO TABLE memq_copy(
  -- Slice id of the copy (memq.copy or gpu_memcpy slice).
  id LONG,
  -- Start of the call (LTTng) or of the device activity (Kineto).
  ts TIMESTAMP,
  -- Duration.
  dur DURATION,
  -- End: when the copy completes (the call's end for LTTng).
  end_ts TIMESTAMP,
  -- `lttng` or `kineto`.
  source STRING,
  -- Process that issued it (LTTng: the slice's `debug.pid`; Kineto: of the slice's track).
  upid LONG,
  -- Thread that issued it (LTTng: `debug.pid` / `debug.tid`); Kineto: the track's thread.
  utid LONG,
  -- `debug.call_id` shared with the memq.api slice of the call; NULL for Kineto.
  call_id LONG,
  -- API function (`hipMemcpyAsync`, ...); Kineto: the event name.
  api STRING,
  -- `HtoD`, `DtoH`, `DtoD`, `HtoH` (Kineto also `PtoP`).
  direction STRING,
  -- Bytes copied (NULL when the source did not record them).
  bytes LONG,
  -- Destination address; NULL without addresses.
  dst LONG,
  -- Source address; NULL without addresses.
  src LONG,
  -- hipMemcpyKind / cudaMemcpyKind as passed; NULL for Kineto.
  copy_kind LONG,
  -- Stream handle (LTTng) or stream number (Kineto).
  stream LONG,
  -- Device.
  device LONG,
  -- Allocation holding the first destination byte; NULL when untracked.
  dst_alloc_id LONG,
  -- Allocation holding the first source byte; NULL when untracked.
  src_alloc_id LONG,
  -- Memory kind of the destination (`host`, `pinned`, ..., `untracked`).
  dst_mem STRING,
  -- Memory kind of the source.
  src_mem STRING,
  -- Host endpoint of a HtoD/DtoH copy is pageable (1), not (0), unknown/NA (NULL).
  pageable BOOL,
  -- 2D copies: bytes per row; NULL for linear copies.
  width LONG,
  -- 2D copies: number of rows; NULL for linear copies.
  height LONG,
  -- 2D copies: destination pitch (bytes from one row to the next).
  dpitch LONG,
  -- 2D copies: source pitch.
  spitch LONG,
  -- 3D copies: number of slices of `height` rows (NULL for 1D/2D copies).
  depth LONG,
  -- 3D copies: destination bytes from one slice to the next.
  dslice LONG,
  -- 3D copies: source bytes from one slice to the next.
  sslice LONG,
  -- Per-process copy number (`seq` of memq:copy); NULL without it.
  seq LONG,
  -- Content fingerprint mode of the recording: `sampled`, `full`, `off`; NULL without.
  content_mode STRING,
  -- Fingerprint of the source at the call; NULL when not taken.
  src_hash LONG,
  -- Fingerprint of the destination before the call; NULL when not taken.
  dst_hash_before LONG,
  -- Fingerprint of the destination after completion; NULL when not taken.
  dst_hash_after LONG,
  -- When dst_hash_after was taken (the copy's end, or its completion point).
  after_ts TIMESTAMP,
  -- The source's byte sequence (NULL without address): equal keys, same bytes in the same order.
  src_key STRING,
  -- The destination's byte sequence.
  dst_key STRING
) AS
-- MATERIALIZED: each argument read once per copy (folded into the query below, every use of a column would read
-- its argument again: the keys use some five times)
WITH lttng AS MATERIALIZED (
  SELECT
    s.id,
    s.ts,
    s.dur,
    s.name AS direction,
    EXTRACT_ARG(s.arg_set_id, 'debug.call_id') AS call_id,
    EXTRACT_ARG(s.arg_set_id, 'debug.pid') AS pid,
    EXTRACT_ARG(s.arg_set_id, 'debug.tid') AS tid,
    EXTRACT_ARG(s.arg_set_id, 'debug.api') AS api,
    EXTRACT_ARG(s.arg_set_id, 'debug.bytes') AS bytes,
    EXTRACT_ARG(s.arg_set_id, 'debug.dst') AS dst,
    EXTRACT_ARG(s.arg_set_id, 'debug.src') AS src,
    EXTRACT_ARG(s.arg_set_id, 'debug.copy_kind') AS copy_kind,
    EXTRACT_ARG(s.arg_set_id, 'debug.stream') AS stream,
    EXTRACT_ARG(s.arg_set_id, 'debug.device') AS device,
    EXTRACT_ARG(s.arg_set_id, 'debug.dst_alloc_id') AS dst_alloc_id,
    EXTRACT_ARG(s.arg_set_id, 'debug.src_alloc_id') AS src_alloc_id,
    EXTRACT_ARG(s.arg_set_id, 'debug.dst_mem') AS dst_mem,
    EXTRACT_ARG(s.arg_set_id, 'debug.src_mem') AS src_mem,
    EXTRACT_ARG(s.arg_set_id, 'debug.width') AS width,
    EXTRACT_ARG(s.arg_set_id, 'debug.height') AS height,
    EXTRACT_ARG(s.arg_set_id, 'debug.dpitch') AS dpitch,
    EXTRACT_ARG(s.arg_set_id, 'debug.spitch') AS spitch,
    EXTRACT_ARG(s.arg_set_id, 'debug.depth') AS depth,
    EXTRACT_ARG(s.arg_set_id, 'debug.dslice') AS dslice,
    EXTRACT_ARG(s.arg_set_id, 'debug.sslice') AS sslice,
    EXTRACT_ARG(s.arg_set_id, 'debug.seq') AS seq,
    EXTRACT_ARG(s.arg_set_id, 'debug.content_mode') AS content_mode,
    EXTRACT_ARG(s.arg_set_id, 'debug.src_hash') AS src_hash,
    EXTRACT_ARG(s.arg_set_id, 'debug.dst_hash_before') AS dst_hash_before,
    EXTRACT_ARG(s.arg_set_id, 'debug.dst_hash_after') AS dst_hash_after
  FROM slice s
  WHERE s.category = 'memq.copy'
),
done AS (
  SELECT t.upid, EXTRACT_ARG(s.arg_set_id, 'debug.seq') AS seq, MIN(s.ts) AS ts,
    EXTRACT_ARG(s.arg_set_id, 'debug.dst_hash_after') AS hash
  FROM slice s
  JOIN thread_track tt ON tt.id = s.track_id
  JOIN thread t USING (utid)
  WHERE s.category = 'memq.copy_done'
  GROUP BY t.upid, seq
),
kineto AS (
  SELECT
    s.id,
    s.ts,
    s.dur,
    s.name,
    t.upid,
    tt.utid,
    SUBSTR(s.name, 8, 4) AS direction,
    COALESCE(EXTRACT_ARG(s.arg_set_id, 'debug.bytes'), EXTRACT_ARG(s.arg_set_id, 'args.bytes')) AS bytes,
    COALESCE(EXTRACT_ARG(s.arg_set_id, 'debug.stream'), EXTRACT_ARG(s.arg_set_id, 'args.stream')) AS stream,
    COALESCE(EXTRACT_ARG(s.arg_set_id, 'debug.device'), EXTRACT_ARG(s.arg_set_id, 'args.device')) AS device
  FROM slice s
  LEFT JOIN thread_track tt ON tt.id = s.track_id
  LEFT JOIN thread t USING (utid)
  WHERE s.category = 'gpu_memcpy'
)
SELECT
  l.id, l.ts, l.dur, l.ts + l.dur AS end_ts, 'lttng' AS source, c.upid, c.utid, l.call_id, l.api,
  l.direction, l.bytes, l.dst, l.src, l.copy_kind, l.stream, l.device, l.dst_alloc_id, l.src_alloc_id,
  l.dst_mem, l.src_mem,
  CASE l.direction
    WHEN 'HtoD' THEN l.src_mem IN ('host', 'untracked')
    WHEN 'DtoH' THEN l.dst_mem IN ('host', 'untracked')
  END AS pageable,
  l.width, l.height, l.dpitch, l.spitch, l.depth, l.dslice, l.sslice,
  l.seq, l.content_mode, l.src_hash, l.dst_hash_before,
  IFNULL(l.dst_hash_after, d.hash) AS dst_hash_after,
  IIF(l.dst_hash_after IS NOT NULL, l.ts + l.dur, d.ts) AS after_ts,
  _memq_range_key!(l.src, l.bytes, l.width, l.height, l.spitch, l.depth, l.sslice) AS src_key,
  _memq_range_key!(l.dst, l.bytes, l.width, l.height, l.dpitch, l.depth, l.dslice) AS dst_key
FROM lttng l
LEFT JOIN _memq_thread c USING (pid, tid)
LEFT JOIN done d ON d.upid = c.upid AND d.seq = l.seq
UNION ALL
SELECT
  k.id, k.ts, k.dur, k.ts + k.dur, 'kineto', k.upid, k.utid, NULL, k.name, k.direction, k.bytes,
  NULL, NULL, NULL, k.stream, k.device, NULL, NULL, NULL, NULL,
  CASE
    WHEN k.direction NOT IN ('HtoD', 'DtoH') THEN NULL
    WHEN k.name GLOB '*Pageable*' THEN 1
    WHEN k.name GLOB '*Pinned*' THEN 0
  END,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM kineto k
ORDER BY id;

-- Every memset of the trace, from any source.
CREATE PERFETTO TABLE memq_set(
  -- Slice id (memq.set or gpu_memset slice).
  id LONG,
  -- Start.
  ts TIMESTAMP,
  -- Duration.
  dur DURATION,
  -- End: when the write completes.
  end_ts TIMESTAMP,
  -- `lttng` or `kineto`.
  source STRING,
  -- Process that issued it.
  upid LONG,
  -- `debug.call_id` of the call; NULL for Kineto.
  call_id LONG,
  -- Bytes written.
  bytes LONG,
  -- First byte written; NULL without addresses.
  dst LONG,
  -- Stream.
  stream LONG,
  -- Device.
  device LONG
) AS
SELECT
  s.id, s.ts, s.dur, s.ts + s.dur AS end_ts, 'lttng' AS source, c.upid,
  EXTRACT_ARG(s.arg_set_id, 'debug.call_id') AS call_id,
  EXTRACT_ARG(s.arg_set_id, 'debug.bytes') AS bytes,
  EXTRACT_ARG(s.arg_set_id, 'debug.dst') AS dst,
  EXTRACT_ARG(s.arg_set_id, 'debug.stream') AS stream,
  EXTRACT_ARG(s.arg_set_id, 'debug.device') AS device
FROM slice s
LEFT JOIN _memq_thread c
  ON c.pid = EXTRACT_ARG(s.arg_set_id, 'debug.pid') AND c.tid = EXTRACT_ARG(s.arg_set_id, 'debug.tid')
WHERE s.category = 'memq.set'
UNION ALL
SELECT
  s.id, s.ts, s.dur, s.ts + s.dur, 'kineto', t.upid, NULL,
  COALESCE(EXTRACT_ARG(s.arg_set_id, 'debug.bytes'), EXTRACT_ARG(s.arg_set_id, 'args.bytes')), NULL,
  COALESCE(EXTRACT_ARG(s.arg_set_id, 'debug.stream'), EXTRACT_ARG(s.arg_set_id, 'args.stream')),
  COALESCE(EXTRACT_ARG(s.arg_set_id, 'debug.device'), EXTRACT_ARG(s.arg_set_id, 'args.device'))
FROM slice s
LEFT JOIN thread_track tt ON tt.id = s.track_id
LEFT JOIN thread t USING (utid)
WHERE s.category = 'gpu_memset'
ORDER BY id;

-- What the trace holds and which figures apply to it.
CREATE PERFETTO TABLE memq_source(
  -- What recorded it: `lttng` (memq record), `kineto` (a PyTorch-profiler JSON), or the profiler whose file memq
  -- imported (`rpd`, `rocpd`, `thapi`, `nsys`: the name its memq.meta instant gives). An import's events are
  -- memq's own: memq_copy.source says `lttng` or `kineto` for them, and memq_has_addresses!() by that.
  source STRING,
  -- 1 when copies carry addresses (duplicated, redundant classes and leaks apply).
  has_addresses BOOL,
  -- Copies from this source.
  copies LONG,
  -- Memsets from this source.
  sets LONG
) AS
WITH src AS (
  SELECT source, COUNT(*) AS copies, 0 AS sets FROM memq_copy GROUP BY source
  UNION ALL
  SELECT source, 0, COUNT(*) FROM memq_set GROUP BY source
  UNION ALL
  SELECT 'lttng', 0, 0
  WHERE EXISTS (SELECT 1 FROM slice WHERE category IN ('memq.heap', 'memq.api')
                OR (category = 'memq.meta' AND EXTRACT_ARG(arg_set_id, 'debug.source') = 'lttng'))
),
per AS (
  SELECT source, memq_has_addresses!(source) AS has_addresses, SUM(copies) AS copies, SUM(sets) AS sets
  FROM src GROUP BY source
),
imported AS (
  SELECT EXTRACT_ARG(arg_set_id, 'debug.source') AS name FROM slice
  WHERE category = 'memq.meta' AND EXTRACT_ARG(arg_set_id, 'debug.source') NOT IN ('lttng', 'kineto')
  LIMIT 1
)
SELECT IFNULL((SELECT name FROM imported), per.source) AS source, has_addresses, copies, sets FROM per;
