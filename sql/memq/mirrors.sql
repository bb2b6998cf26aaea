-- Mirrors: byte ranges whose content a copy duplicated, and how long each lasts.
--
-- docs/DEFINITIONS.md, "Mirrors": when a copy completes, each destination byte holds the same content as
-- the corresponding source byte; that pair stays a mirror until the first of: either
-- byte's allocation ends (free, realloc), a later write (copy destination or memset)
-- covers either byte, or a content fingerprint shows that either side no longer holds
-- what the copy copied (at the moment it was taken). Only sources with addresses
-- (LTTng) have mirrors.
--
-- Content (memq record --content; columns of memq_copy): a copy's *content* is the
-- fingerprint of what it copied: its source's at the call, else its destination's
-- after completion. Fingerprints are *observations* of a byte sequence (a side's
-- key) at a time: a copy's source at its start (its destination after completion
-- when the source was not read: that is what it read, seen at its end), its
-- destination before (at its start) and after (at `after_ts`). A mirror whose copy
-- has a content ends at the first observation after the copy's end of exactly its
-- source's or its destination's byte sequence with another fingerprint: a fingerprint
-- covers a whole side, so when it differs every byte of the mirror is taken as
-- changed. Sequences that only overlap are not compared. At the copy's end itself only
-- after-fingerprints count (what a copy starting then saw is the state before it).
--
-- How: the address space of each process is cut into elementary segments at every
-- boundary of a write range, a copy source range and an allocation that a copy
-- touches. Every segment then has one history (the same writes cover all of its
-- bytes, the same allocations hold them). A copy's mirror is cut into *pieces*: the
-- overlaps of its destination segments with its source segments shifted into
-- destination coordinates, so every byte of a piece ends its mirror at the same time.
--
-- Decisions (docs/DEFINITIONS.md, "Tie rules" and "Which allocation holds a byte"):
-- * A write takes effect at the end of its call; writes are ordered by (end, slice
--   id); trace_processor numbers slices in the order they start (at equal starts, in
--   the order of the trace). A free takes effect at the start of its call; at equal
--   times frees come before writes.
-- * The allocations of a byte are all allocations live at the copy's start (allocated
--   by then and not freed by then: a free starting as the copy starts has released
--   them) that hold it (a registered range and the heap block under it both count);
--   any of them ending ends the mirror. The *primary* one (for the split by allocation) is the
--   one rule of docs/DEFINITIONS.md, "Which allocation holds a byte" (also how
--   ctf2perfetto picks a copy's dst_alloc_id / src_alloc_id for its first bytes):
--   first of device/managed, pinned, registered, host, the latest started within a
--   kind (the later alloc_id on a tie).
-- * A copy whose source and destination overlap still mirrors every byte.
-- * A 2D copy writes `height` rows of `width` bytes, `dpitch` apart (reading rows
--   `spitch` apart); each row is a write of its own, at the copy's end, in row order:
--   where rows overlap (pitch < width) the last row's bytes stay. A 3D copy writes
--   `depth` such slices, `dslice` apart (reading `sslice` apart).
-- * Repeat and round trip look at the mirrors just before the copy: a copy is never
--   redundant with its own rows.
-- * Upper bound: CPU and kernel writes are not traced, so a mirror may have ended
--   earlier than shown (fingerprints see some of them, where and when they are taken).
-- * Capture windows (memq.windows): a mirror ends at the latest when the window of the
--   copy that made it closes (nothing is known after), also between untracked bytes. A
--   close comes after the writes at its time (the preload writes it after every call of
--   its window): a copy returning as the window closes still sees the window's mirrors.
--   An early close ends the process's allocations there, like a free: before them.
-- * Carried pieces (memq.carried): a part of a longer recording starts with the mirror
--   pieces alive at its start. Each is a copy row that completed at the part's start,
--   before every write of the part, in the recording's order; the pieces of one call
--   share its id (negative: below every slice id) and are its rows. Its bytes are held
--   by the allocations its holders name (live at the start), whatever else started over
--   them since. No per-copy figure counts them (memq_copy does not hold them).

INCLUDE PERFETTO MODULE intervals.intersect;
INCLUDE PERFETTO MODULE memq.allocations;
INCLUDE PERFETTO MODULE memq.carried;
INCLUDE PERFETTO MODULE memq.copies;
INCLUDE PERFETTO MODULE memq.windows;

-- Carried pieces (memq.carried) as copy rows completing at the part's start: `id` is their
-- call's (memq_carried_piece.write, offset below every slice id), `r` the piece's own id.
CREATE PERFETTO TABLE _memq_carried_copy AS
SELECT
  c.write - 4611686018427387904 AS id,
  c.id AS r,
  p.upid,
  NULL AS call_id,
  c.ts,
  c.ts AS end_ts,
  c.direction,
  c.dst,
  c.src,
  c.bytes,
  c.content,
  c.src_key,
  c.dst_key
FROM memq_carried_piece c
JOIN (SELECT pid, MIN(upid) AS upid FROM process GROUP BY pid) p USING (pid)
ORDER BY id, r;

-- The byte sequences of every copy with addresses, carried ones included (what content
-- observations name).
CREATE PERFETTO TABLE _memq_copy_key AS
SELECT id, src_key, dst_key FROM memq_copy WHERE memq_has_addresses!(source)
UNION ALL
SELECT DISTINCT id, src_key, dst_key FROM _memq_carried_copy
ORDER BY id;

CREATE PERFETTO INDEX _memq_copy_key_idx ON _memq_copy_key(id);

-- The rows every write makes, in no order: one for a linear copy, `height` rows of `width` bytes (at `dpitch` /
-- `spitch` strides) for a 2D copy, `depth` times that (slices at `dslice` / `sslice` strides) for a 3D copy (row
-- `r` is in slice r / height); a memset's one; a carried piece's (`r` its memq_carried_piece.id). `first` marks the
-- first row of its call, so that one window over this table numbers both the rows and the calls.
CREATE PERFETTO TABLE _memq_write_row AS
WITH RECURSIVE two_d(id, upid, call_id, ts, end_ts, direction, r, nrows, height, dst, src, width, dpitch,
  spitch, dslice, sslice) AS (
  SELECT id, upid, call_id, ts, end_ts, direction, 0, height * MAX(IFNULL(depth, 0), 1), height, dst, src,
    width, dpitch, spitch, IFNULL(dslice, 0), IFNULL(sslice, 0)
  FROM memq_copy
  WHERE memq_has_addresses!(source) AND height > 0 AND width > 0 AND dst IS NOT NULL AND upid IS NOT NULL
  UNION ALL
  SELECT id, upid, call_id, ts, end_ts, direction, r + 1, nrows, height, dst, src, width, dpitch, spitch,
    dslice, sslice
  FROM two_d WHERE r + 1 < nrows
)
SELECT id, upid, call_id, ts, end_ts, direction, r,
  dst + (r / height) * dslice + (r % height) * dpitch AS dst,
  src + (r / height) * sslice + (r % height) * spitch AS src,
  width AS bytes,
  1 AS is_copy,
  0 AS carried,
  r = 0 AS first
FROM two_d
UNION ALL
SELECT id, upid, call_id, ts, end_ts, direction, 0, dst, src, bytes, 1, 0, 1 FROM memq_copy
WHERE memq_has_addresses!(source) AND bytes > 0 AND upid IS NOT NULL AND dst IS NOT NULL AND height IS NULL
UNION ALL
SELECT id, upid, call_id, ts, end_ts, NULL, 0, dst, NULL, bytes, 0, 0, 1
FROM memq_set WHERE memq_has_addresses!(source) AND bytes > 0 AND upid IS NOT NULL AND dst IS NOT NULL
UNION ALL
SELECT id, upid, call_id, ts, end_ts, direction, r, dst, src, bytes, 1, 1,
  r = (SELECT MIN(f.r) FROM _memq_carried_copy f WHERE f.id = c.id AND f.bytes > 0 AND f.upid IS NOT NULL)
FROM _memq_carried_copy c
WHERE bytes > 0 AND upid IS NOT NULL;

-- Writes with addresses (copy rows and memsets), in effect order (`ord`: by end, slice
-- id, then row, so where rows of one copy overlap (pitch < width) the last row's
-- bytes stay); `seq` numbers the calls: the rows of one copy share it. `carried`: a
-- carried piece (`r` its memq_carried_piece.id).
-- One window straight over a table: trace_processor sorts the rows for it (SQLite sorts a join or a union
-- itself, several times slower), and its rows come out in `ord` order, sorted again by nothing.
CREATE PERFETTO TABLE _memq_write AS
SELECT
  ROW_NUMBER() OVER w AS ord,
  SUM(first) OVER w AS seq,
  id,
  upid,
  call_id,
  ts AS begin_ts,
  end_ts AS t,
  dst AS lo,
  dst + bytes AS hi,
  src - dst AS k,
  is_copy,
  direction,
  r,
  carried
FROM _memq_write_row
WINDOW w AS (ORDER BY end_ts, id, r ROWS UNBOUNDED PRECEDING);

CREATE PERFETTO INDEX _memq_write_idx ON _memq_write(ord);

-- Address ranges to cut: destination ranges (rid = ord) and copy source ranges (rid = ord + the number of
-- writes), as intervals over addresses, in rid order as written; with what the windows over them need.
CREATE PERFETTO TABLE _memq_range AS
SELECT ord AS id, ord, 1 AS is_dst, upid, lo AS ts, hi - lo AS dur, begin_ts, carried, seq, is_copy, k
FROM _memq_write
UNION ALL
SELECT (SELECT COUNT(*) FROM _memq_write) + ord, ord, 0, upid, lo + k, hi - lo, begin_ts, carried, seq, is_copy, k
FROM _memq_write WHERE is_copy;

CREATE PERFETTO INDEX _memq_range_idx ON _memq_range(id);

-- Allocations as intervals over addresses.
CREATE PERFETTO TABLE _memq_alloc_iv AS
SELECT alloc_id AS id, addr AS ts, size AS dur, upid
FROM memq_allocation WHERE size > 0 AND addr IS NOT NULL
ORDER BY id;

-- The holders of each carried piece's ranges (memq_carried_holder), by range id.
CREATE PERFETTO TABLE _memq_carried_range_holder AS
SELECT IIF(h.side = 'dst', w.ord, (SELECT COUNT(*) FROM _memq_write) + w.ord) AS rid, h.kind, h.addr, h.size
FROM (SELECT ord, r FROM _memq_write WHERE carried) w
JOIN memq_carried_holder h ON h.piece = w.r
ORDER BY rid;

CREATE PERFETTO INDEX _memq_carried_range_holder_idx ON _memq_carried_range_holder(rid);

-- Allocations live at a range's copy start that overlap the range; of a carried piece's
-- range, only its holders (memq_carried_holder), whatever else started over its bytes.
CREATE PERFETTO TABLE _memq_range_alloc AS
SELECT
  r.id AS rid,
  a.alloc_id,
  a.addr AS a_lo,
  a.addr + a.size AS a_hi,
  a.kind,
  a.ts AS a_start,
  a.end_ts AS a_end,
  CASE a.kind WHEN 'device' THEN 1 WHEN 'managed' THEN 1 WHEN 'pinned' THEN 2
    WHEN 'registered' THEN 3 ELSE 4 END AS rank
FROM _interval_intersect!((_memq_range, _memq_alloc_iv), (upid)) ii
JOIN _memq_range r ON r.id = ii.id_0
JOIN memq_allocation a ON a.alloc_id = ii.id_1
WHERE a.ts <= r.begin_ts AND (a.end_ts IS NULL OR a.end_ts > r.begin_ts)
  AND (NOT r.carried OR EXISTS (
    SELECT 1 FROM _memq_carried_range_holder h
    WHERE h.rid = r.id AND h.kind = a.kind AND h.addr = a.addr AND h.size = a.size))
ORDER BY rid;

CREATE PERFETTO INDEX _memq_range_alloc_idx ON _memq_range_alloc(rid);

-- Elementary segments: consecutive cut points of one process.
CREATE PERFETTO TABLE _memq_segment AS
WITH point AS (
  SELECT upid, ts AS pos FROM _memq_range
  UNION SELECT upid, ts + dur FROM _memq_range
  UNION SELECT r.upid, ra.a_lo FROM _memq_range_alloc ra JOIN _memq_range r ON r.id = ra.rid
    WHERE ra.a_lo > r.ts
  UNION SELECT r.upid, ra.a_hi FROM _memq_range_alloc ra JOIN _memq_range r ON r.id = ra.rid
    WHERE ra.a_hi < r.ts + r.dur
),
step AS (
  SELECT upid, pos, LEAD(pos) OVER (PARTITION BY upid ORDER BY pos) AS next FROM point
)
SELECT ROW_NUMBER() OVER (ORDER BY upid, pos) AS id, upid, pos AS ts, next - pos AS dur
FROM step WHERE next IS NOT NULL;

-- Which segments each range covers, with the range's write (`seq`, `is_copy`, `k`): the windows below read this
-- table alone, so trace_processor sorts it for them.
CREATE PERFETTO TABLE _memq_cover AS
SELECT ii.id_0 AS rid, r.ord, r.seq, r.is_dst, r.is_copy, r.k, ii.id_1 AS seg, ii.ts AS lo, ii.dur AS len
FROM _interval_intersect!((_memq_range, _memq_segment), (upid)) ii
JOIN _memq_range r ON r.id = ii.id_0;

-- Destination pieces of copies as intervals, partitioned by the copy's `ord`: per (copy row, destination
-- segment), the last write of an earlier call (a copy is never a repeat of its own rows) and the next write (a
-- later row of the same copy included: its bytes replace this row's). Memsets count as writes, have no piece.
-- The windows carry few columns: SQLite copies every column of every row through each.
CREATE PERFETTO TABLE _memq_dst_piece_iv AS
SELECT ROW_NUMBER() OVER () AS id, lo AS ts, len AS dur, ord, rid, seg, prev_ord, next_ord
FROM (
  SELECT
    rid, ord, seg, lo, len, is_copy,
    MAX(ord) OVER (PARTITION BY seg ORDER BY seq RANGE BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_ord,
    LEAD(ord) OVER (PARTITION BY seg ORDER BY ord) AS next_ord
  FROM _memq_cover
  WHERE is_dst
)
WHERE is_copy;

-- Source segments of copies shifted into destination coordinates, partitioned by `ord`: per (copy row, source
-- segment), the last write of an earlier call and the first write of a later call on that segment (the copy's
-- own rows are neither: at equal `seq` the sources sort before the writes one way, after them the other).
CREATE PERFETTO TABLE _memq_src_piece_iv AS
SELECT ROW_NUMBER() OVER () AS id, ts, len AS dur, ord, rid, seg, prev_ord, next_ord
FROM (
  SELECT
    rid, ord, seg, lo - k AS ts, len, is_dst,
    MAX(IIF(is_dst, ord, NULL)) OVER (
      PARTITION BY seg ORDER BY seq, is_dst ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_ord,
    MIN(IIF(is_dst, ord, NULL)) OVER (
      PARTITION BY seg ORDER BY seq DESC, is_dst ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS next_ord
  FROM _memq_cover
)
WHERE NOT is_dst;

-- Mirror pieces before their lifetimes: both segments and their neighbours.
CREATE PERFETTO TABLE _memq_piece_raw AS
SELECT
  ROW_NUMBER() OVER (ORDER BY ii.ord, ii.ts) AS piece_id,
  ii.ord,
  ii.ts AS lo,
  ii.dur AS len,
  d.rid AS dst_rid,
  s.rid AS src_rid,
  d.prev_ord AS dst_prev_ord,
  d.next_ord AS dst_next_ord,
  s.prev_ord AS src_prev_ord,
  s.next_ord AS src_next_ord
FROM _interval_intersect!((_memq_dst_piece_iv, _memq_src_piece_iv), (ord)) ii
JOIN _memq_dst_piece_iv d ON d.id = ii.id_0
JOIN _memq_src_piece_iv s ON s.id = ii.id_1;

-- Per piece and side: the allocations holding its bytes (at the copy's start), one row each.
CREATE PERFETTO TABLE _memq_piece_holder AS
SELECT p.piece_id, 'dst' AS side, ra.alloc_id, ra.kind, ra.a_start, ra.a_end, ra.rank FROM _memq_piece_raw p
JOIN _memq_range_alloc ra ON ra.rid = p.dst_rid
WHERE ra.a_lo <= p.lo AND ra.a_hi >= p.lo + p.len
UNION ALL
SELECT p.piece_id, 'src', ra.alloc_id, ra.kind, ra.a_start, ra.a_end, ra.rank FROM _memq_piece_raw p
JOIN _memq_write w USING (ord)
JOIN _memq_range_alloc ra ON ra.rid = p.src_rid
WHERE ra.a_lo <= p.lo + w.k AND ra.a_hi >= p.lo + w.k + p.len;

CREATE PERFETTO INDEX _memq_piece_holder_idx ON _memq_piece_holder(piece_id, side);

-- Per piece and side: when the first of its holders ends, whether one is managed, and the primary one.
-- A grouping of the table alone (trace_processor sorts it); a side held by one allocation (nearly all) has
-- it as its primary, only the others look the rule's order up.
CREATE PERFETTO TABLE _memq_piece_side AS
SELECT
  piece_id,
  side,
  MIN(IFNULL(a_end, 9223372036854775807)) AS alloc_end,
  MAX(kind = 'managed') AS managed,
  IIF(COUNT(*) = 1, MIN(alloc_id), (
    SELECT h.alloc_id FROM _memq_piece_holder h
    WHERE h.piece_id = g.piece_id AND h.side = g.side
    ORDER BY h.rank, h.a_start DESC, h.alloc_id DESC
    LIMIT 1)) AS alloc_id
FROM _memq_piece_holder g
GROUP BY piece_id, side;

CREATE PERFETTO INDEX _memq_piece_side_idx ON _memq_piece_side(piece_id, side);

-- End of the capture window of each write (memq.windows). Empty without windows.
CREATE PERFETTO TABLE _memq_write_window AS
SELECT key AS ord, end_ts FROM _memq_window_of!((SELECT ord AS key, upid, t AS ts FROM _memq_write))
ORDER BY ord;

CREATE PERFETTO INDEX _memq_write_window_idx ON _memq_write_window(ord);

-- Content observations (see the module comment): kind `copied` (the content a copy
-- copied, on its source's sequence), `before` and `after` (its destination's).
CREATE PERFETTO TABLE _memq_observation(
  -- The copy that took it.
  copy_id LONG,
  -- Process.
  upid LONG,
  -- `copied`, `before` or `after`.
  kind STRING,
  -- Byte sequence observed (memq_copy src_key / dst_key).
  key STRING,
  -- When.
  ts TIMESTAMP,
  -- Its place among the observations and queries at one time: 2 for kind `after`, else 0 (a copy's end,
  -- put among them as a query, is 1).
  rank LONG,
  -- Fingerprint.
  hash LONG
) AS
WITH c AS (
  SELECT * FROM memq_copy WHERE memq_has_addresses!(source) AND upid IS NOT NULL AND dst IS NOT NULL
)
SELECT id AS copy_id, upid, 'copied' AS kind, src_key AS key, IIF(src_hash IS NOT NULL, ts, end_ts) AS ts,
  0 AS rank, IFNULL(src_hash, dst_hash_after) AS hash
FROM c WHERE src_key IS NOT NULL AND IFNULL(src_hash, dst_hash_after) IS NOT NULL
UNION ALL
SELECT id, upid, 'before', dst_key, ts, 0, dst_hash_before FROM c WHERE dst_hash_before IS NOT NULL
UNION ALL
SELECT id, upid, 'after', dst_key, after_ts, 2, dst_hash_after FROM c WHERE dst_hash_after IS NOT NULL;

-- The observations of every sequence in one order (by process, sequence, time; at equal times those taken at a
-- copy's start before after-fingerprints), numbered, with the runs of equal fingerprints numbered across all
-- sequences: one sort of the observations, so each copy below finds what it needs by id.
CREATE PERFETTO TABLE _memq_obs_order(
  -- Position in the order (from 1).
  id LONG,
  -- Process.
  upid LONG,
  -- Byte sequence observed.
  key STRING,
  -- When.
  ts TIMESTAMP,
  -- Fingerprint.
  hash LONG,
  -- 1 when it starts a run: the first of its sequence, or another fingerprint than the one before.
  new_run BOOL,
  -- Its run's number (from 1, ascending with id).
  run LONG
) AS
WITH n AS (
  SELECT upid, key, ts, hash,
    ROW_NUMBER() OVER w AS id,
    upid IS NOT LAG(upid) OVER w OR key IS NOT LAG(key) OVER w OR hash IS NOT LAG(hash) OVER w AS new_run
  FROM _memq_observation
  WINDOW w AS (ORDER BY upid, key, ts, rank, hash)
)
SELECT id, upid, key, ts, hash, new_run, SUM(new_run) OVER (ORDER BY id ROWS UNBOUNDED PRECEDING) AS run
FROM n
ORDER BY id;

-- Where each run of _memq_obs_order starts.
CREATE PERFETTO TABLE _memq_obs_run(
  -- The run's number.
  id LONG,
  -- Process.
  upid LONG,
  -- Byte sequence.
  key STRING,
  -- Time of its first observation.
  ts TIMESTAMP
) AS
SELECT run AS id, upid, key, ts FROM _memq_obs_order WHERE new_run ORDER BY run;

-- The copies with a content (what they copied), each of whose ends is put among the observations of its
-- sequences as a query point (_memq_traced_content).
CREATE PERFETTO TABLE _memq_content_copy AS
SELECT id, upid, end_ts, src_key, dst_key, IFNULL(src_hash, dst_hash_after) AS content
FROM memq_copy
WHERE memq_has_addresses!(source) AND upid IS NOT NULL AND dst IS NOT NULL
  AND IFNULL(src_hash, dst_hash_after) IS NOT NULL;

-- The observations and the query points (a copy's end on each of its sequences, each sequence once) in one
-- table, in no order: the window below reads it alone, so trace_processor sorts it (SQLite sorting a union
-- inside the same statement cost a third more).
CREATE PERFETTO TABLE _memq_content_point AS
SELECT upid, key, ts, rank, hash, NULL AS id, NULL AS content, 1 AS is_obs FROM _memq_observation
UNION ALL
SELECT upid, src_key, end_ts, 1, NULL, id, content, 0 FROM _memq_content_copy WHERE src_key IS NOT NULL
UNION ALL
SELECT upid, dst_key, end_ts, 1, NULL, id, content, 0 FROM _memq_content_copy
WHERE src_key IS NULL OR dst_key != src_key;

-- Per query point: the observations before it in _memq_obs_order's order (at equal times: observations taken
-- at a copy's start, then the query, then after-fingerprints): the next one's id there is this plus one.
CREATE PERFETTO TABLE _memq_content_query AS
SELECT id, content, upid, key, n_obs
FROM (
  SELECT id, content, upid, key, is_obs,
    SUM(is_obs) OVER (ORDER BY upid, key, ts, rank, hash, id ROWS UNBOUNDED PRECEDING) AS n_obs
  FROM _memq_content_point
)
WHERE NOT is_obs;

-- Per copy with a content: that content and the first observation that contradicts it: the first observation
-- after a query point if it differs, else the start of the next run: look-ups by id, O(n log n) with the sorts.
CREATE PERFETTO TABLE _memq_traced_content(
  -- Slice id of the copy.
  copy_id LONG,
  -- What it copied (fingerprint).
  content LONG,
  -- When an observation first showed a side no longer holding it; NULL: never.
  content_end TIMESTAMP
) AS
WITH first_after AS (
  -- the queries outermost (CROSS JOIN keeps them there): each then looks its observation up by id
  SELECT q.id, IIF(f.hash != q.content, f.ts, nr.ts) AS end_ts
  FROM _memq_content_query q
  CROSS JOIN _memq_obs_order f
  LEFT JOIN _memq_obs_run nr ON nr.id = f.run + 1 AND nr.upid = f.upid AND nr.key = f.key
  WHERE f.id = q.n_obs + 1 AND f.upid = q.upid AND f.key = q.key
),
ended AS (
  SELECT id, MIN(end_ts) AS content_end FROM first_after GROUP BY id
)
SELECT c.id AS copy_id, c.content, e.content_end
FROM _memq_content_copy c LEFT JOIN ended e USING (id)
ORDER BY copy_id;

CREATE PERFETTO INDEX _memq_observation_idx ON _memq_observation(upid, key);

-- The same for the carried pieces' copies (memq.carried), few: the first observation after the part's
-- start, of one of the copy's byte sequences, with another fingerprint (what the runs above find). Kept
-- apart: with them in the statement above, its plan took over 8 minutes instead of 33 s on a 30-minute trace.
CREATE PERFETTO TABLE _memq_carried_content AS
SELECT c.id AS copy_id, c.content, (
    SELECT MIN(o.ts) FROM _memq_observation o
    WHERE o.upid = c.upid AND o.key IN (c.src_key, c.dst_key) AND o.hash != c.content
      AND (o.ts > c.end_ts OR (o.ts = c.end_ts AND o.kind = 'after'))
  ) AS content_end
FROM (SELECT DISTINCT id, upid, end_ts, src_key, dst_key, content FROM _memq_carried_copy
      WHERE content IS NOT NULL AND upid IS NOT NULL) c;

-- Per copy with a content, traced or carried: that content and when it was first contradicted.
CREATE PERFETTO TABLE _memq_copy_content AS
SELECT * FROM _memq_traced_content
UNION ALL
SELECT * FROM _memq_carried_content
ORDER BY copy_id;

CREATE PERFETTO INDEX _memq_copy_content_idx ON _memq_copy_content(copy_id);

-- Mirror pieces with their lifetimes (internal: zero-length ones included).
CREATE PERFETTO TABLE _memq_piece AS
WITH p AS (
  SELECT
    r.piece_id,
    r.ord,
    r.lo,
    r.len,
    r.dst_rid,
    r.src_rid,
    r.dst_prev_ord,
    r.src_prev_ord,
    w.id AS copy_id,
    w.call_id,
    w.upid,
    w.t,
    w.k,
    w.seq,
    w.direction,
    w.carried,
    dn.seq AS dst_next_seq,
    sn.seq AS src_next_seq,
    IFNULL(dn.t, 9223372036854775807) AS dst_write_end,
    IFNULL(sn.t, 9223372036854775807) AS src_write_end,
    IFNULL(ds.alloc_end, 9223372036854775807) AS dst_alloc_end,
    IFNULL(ss.alloc_end, 9223372036854775807) AS src_alloc_end,
    ds.alloc_id AS dst_alloc_id,
    ss.alloc_id AS src_alloc_id,
    IFNULL(ds.managed, 0) OR IFNULL(ss.managed, 0) AS managed,
    IFNULL(ww.end_ts, 9223372036854775807) AS window_end,
    cc.content,
    IFNULL(cc.content_end, 9223372036854775807) AS content_end
  FROM _memq_piece_raw r
  JOIN _memq_write w USING (ord)
  -- the next writes of each side, joined once each (four correlated look-ups per piece cost twice as much)
  LEFT JOIN _memq_write dn ON dn.ord = r.dst_next_ord
  LEFT JOIN _memq_write sn ON sn.ord = r.src_next_ord
  LEFT JOIN _memq_piece_side ds ON ds.piece_id = r.piece_id AND ds.side = 'dst'
  LEFT JOIN _memq_piece_side ss ON ss.piece_id = r.piece_id AND ss.side = 'src'
  LEFT JOIN _memq_write_window ww USING (ord)
  LEFT JOIN _memq_copy_content cc ON cc.copy_id = w.id
)
-- the columns the figures read (every column is copied once per piece)
SELECT
  piece_id, ord, lo, len, dst_rid, src_rid, dst_prev_ord, src_prev_ord, copy_id, call_id, upid, t, k, seq,
  direction, carried, dst_next_seq, src_next_seq, dst_alloc_id, src_alloc_id, managed, window_end, content,
  content_end,
  MIN(dst_write_end, src_write_end, dst_alloc_end, src_alloc_end, window_end, content_end) AS end_raw,
  MIN(dst_alloc_end, src_alloc_end) AS alloc_end
FROM p
ORDER BY ord, lo;

CREATE PERFETTO INDEX _memq_piece_idx ON _memq_piece(ord, lo);

-- Per piece: whether its pair was already a mirror just before the copy completed,
-- and whether content confirmed it.
-- repeat: the last write of the destination bytes by an earlier call was a copy from
-- the same source bytes, still alive; round trip: the last write of the source bytes
-- by an earlier call was a copy from these destination bytes, still alive. Alive
-- includes content: no observation after the earlier copy's end up to this copy's end
-- (this copy's own included) contradicted it. *Checked*: this copy itself observed
-- exactly a side of that mirror in that window (same tie rule), with the mirror's
-- content.
CREATE PERFETTO TABLE _memq_piece_history AS
WITH earlier AS (
  SELECT p.piece_id, p.copy_id, p.t, 'repeat' AS how, q.copy_id AS q_copy, q.t AS q_t, q.content AS q_content
  FROM _memq_piece p
  JOIN _memq_piece q ON q.ord = p.dst_prev_ord AND q.lo = p.lo AND q.k = p.k
  WHERE q.alloc_end > p.t AND q.window_end >= p.t AND IFNULL(q.src_next_seq, p.seq) >= p.seq
    AND q.content_end > p.t
  UNION ALL
  SELECT p.piece_id, p.copy_id, p.t, 'round_trip', q.copy_id, q.t, q.content
  FROM _memq_piece p
  JOIN _memq_piece q ON q.ord = p.src_prev_ord AND q.lo = p.lo + p.k AND q.k = -p.k
  WHERE q.alloc_end > p.t AND q.window_end >= p.t AND IFNULL(q.src_next_seq, p.seq) >= p.seq
    AND IFNULL(q.dst_next_seq, p.seq) >= p.seq AND q.content_end > p.t
),
pair AS (
  SELECT DISTINCT copy_id, t, q_copy, q_t, q_content FROM earlier WHERE q_content IS NOT NULL
),
checked AS (
  SELECT pr.copy_id, pr.q_copy
  FROM pair pr
  JOIN _memq_copy_key qc ON qc.id = pr.q_copy
  JOIN _memq_observation o ON o.copy_id = pr.copy_id AND o.key IN (qc.src_key, qc.dst_key)
  WHERE (o.ts > pr.q_t OR (o.ts = pr.q_t AND o.kind = 'after')) AND o.ts <= pr.t AND o.hash = pr.q_content
  GROUP BY pr.copy_id, pr.q_copy
)
SELECT
  p.piece_id,
  r.piece_id IS NOT NULL AS is_repeat,
  b.piece_id IS NOT NULL AS is_round_trip,
  (r.piece_id IS NOT NULL AND cr.q_copy IS NOT NULL)
    OR (r.piece_id IS NULL AND b.piece_id IS NOT NULL AND cb.q_copy IS NOT NULL) AS checked
FROM _memq_piece p
LEFT JOIN earlier r ON r.piece_id = p.piece_id AND r.how = 'repeat'
LEFT JOIN earlier b ON b.piece_id = p.piece_id AND b.how = 'round_trip'
LEFT JOIN checked cr ON cr.copy_id = r.copy_id AND cr.q_copy = r.q_copy
LEFT JOIN checked cb ON cb.copy_id = b.copy_id AND cb.q_copy = b.q_copy;

-- Mirror intervals: pieces of copies whose bytes stay duplicated for a while.
CREATE PERFETTO TABLE memq_mirror(
  -- Piece id.
  id LONG,
  -- Slice id of the memq.copy slice that made it.
  copy_id LONG,
  -- `debug.call_id` of the copy (joins to the API call, its thread and call site); NULL
  -- for a carried piece.
  call_id LONG,
  -- Process.
  upid LONG,
  -- First destination byte.
  dst LONG,
  -- First source byte.
  src LONG,
  -- Number of bytes (destination bytes counted once).
  bytes LONG,
  -- When the mirror starts: the copy's end.
  ts TIMESTAMP,
  -- How long it lasts; to trace_end() when still alive at the end.
  dur DURATION,
  -- When it ends; NULL when alive at the end of the trace.
  end_ts TIMESTAMP,
  -- Direction of the copy that made it.
  direction STRING,
  -- Primary allocation holding the destination bytes; NULL when untracked.
  dst_alloc_id LONG,
  -- Primary allocation holding the source bytes; NULL when untracked.
  src_alloc_id LONG,
  -- 1 when the source bytes lie in no traced allocation.
  untracked_source BOOL,
  -- 1 for a piece carried in from before the trace (memq.carried; `copy_id` is then negative).
  carried BOOL
) AS
SELECT
  p.piece_id AS id,
  p.copy_id,
  p.call_id,
  p.upid,
  p.lo AS dst,
  p.lo + p.k AS src,
  p.len AS bytes,
  p.t AS ts,
  IIF(p.end_raw = 9223372036854775807, trace_end(), p.end_raw) - p.t AS dur,
  IIF(p.end_raw = 9223372036854775807, NULL, p.end_raw) AS end_ts,
  p.direction,
  p.dst_alloc_id,
  p.src_alloc_id,
  p.src_alloc_id IS NULL AS untracked_source,
  p.carried
FROM _memq_piece p
WHERE p.end_raw > p.t
ORDER BY p.t, p.lo;

-- The mirror pieces to carry into the next part of the recording (memq.carried): those
-- alive at `at`, the end of this part, where nothing happens but the part's closes (its
-- windows and the allocations they outlive end there, and no piece ends otherwise), in
-- the order their bytes were written. `write` numbers their calls.
CREATE PERFETTO FUNCTION memq_mirror_carry(
  -- The part's end.
  at TIMESTAMP
)
-- One row per piece.
RETURNS TABLE(
  -- _memq_piece.piece_id (memq_mirror_carry_holder names it).
  piece_id LONG,
  -- The call that wrote it (pieces of one call share it), ascending in effect order.
  write LONG,
  -- Process id.
  pid LONG,
  -- First destination byte.
  dst LONG,
  -- First source byte.
  src LONG,
  -- Bytes.
  bytes LONG,
  -- Direction of the copy that made it.
  direction STRING,
  -- What it copied (fingerprint), NULL without one.
  content LONG,
  -- Its source byte sequence.
  src_key STRING,
  -- Its destination byte sequence.
  dst_key STRING
) AS
SELECT p.piece_id, p.seq AS write, pr.pid, p.lo AS dst, p.lo + p.k AS src, p.len AS bytes, p.direction,
  p.content, k.src_key, k.dst_key
FROM _memq_piece p
JOIN process pr USING (upid)
LEFT JOIN _memq_copy_key k ON k.id = p.copy_id
WHERE p.t < $at AND p.end_raw >= $at AND p.end_raw > p.t
ORDER BY p.ord, p.lo;

-- The holders of the pieces memq_mirror_carry(at) gives: per piece and side, every
-- allocation that held its bytes when its copy started.
CREATE PERFETTO FUNCTION memq_mirror_carry_holder(
  -- The part's end.
  at TIMESTAMP
)
-- One row per piece, side and holder.
RETURNS TABLE(
  -- memq_mirror_carry's piece_id.
  piece_id LONG,
  -- `dst` or `src`.
  side STRING,
  -- Allocation kind.
  kind STRING,
  -- Its first byte.
  addr LONG,
  -- Its size.
  size LONG
) AS
SELECT p.piece_id, 'dst' AS side, ra.kind, ra.a_lo AS addr, ra.a_hi - ra.a_lo AS size
FROM _memq_piece p JOIN _memq_range_alloc ra ON ra.rid = p.dst_rid
WHERE p.t < $at AND p.end_raw >= $at AND p.end_raw > p.t AND ra.a_lo <= p.lo AND ra.a_hi >= p.lo + p.len
UNION ALL
SELECT p.piece_id, 'src', ra.kind, ra.a_lo, ra.a_hi - ra.a_lo
FROM _memq_piece p JOIN _memq_range_alloc ra ON ra.rid = p.src_rid
WHERE p.t < $at AND p.end_raw >= $at AND p.end_raw > p.t
  AND ra.a_lo <= p.lo + p.k AND ra.a_hi >= p.lo + p.k + p.len
ORDER BY 1, 2;

-- memq_mirror with process ids (ctf2perfetto.analyses.mirrors).
CREATE PERFETTO VIEW memq_mirror_report AS
SELECT m.id, m.copy_id, m.call_id, p.pid, m.dst, m.src, m.bytes, m.ts, m.dur, m.end_ts, m.direction,
  m.dst_alloc_id, m.src_alloc_id, m.untracked_source, m.carried
FROM memq_mirror m LEFT JOIN process p USING (upid) ORDER BY m.ts, m.dst;
