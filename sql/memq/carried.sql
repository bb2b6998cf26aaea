-- Carried mirrors: what a part of a longer recording starts with.
--
-- A recording too long for one trace_processor is analysed a part at a time, each part
-- a range of it (ctf2perfetto --from/--to) in a fresh trace_processor
-- (ctf2perfetto.analysis.parts). A copy made before a part can still be mirrored inside it: the
-- mirror pieces alive at the part's start are *carried in* through these two tables,
-- which the caller creates and fills before including any memq module. They are empty
-- otherwise. memq.mirrors treats each carried piece as a copy that completed at the
-- part's start with the piece's bytes, holders and content, and that no per-copy figure
-- counts (memq_mirror.carried): the piece then ends inside the part exactly as it would
-- have in the whole trace. memq_mirror_carry gives the pieces to carry into the next
-- part.
--
-- Plain SQLite tables, not PerfettoSQL ones: the caller creates them first, and the
-- module leaves them as it finds them.

-- One row per carried mirror piece.
CREATE TABLE IF NOT EXISTS memq_carried_piece(
  -- Piece id: ascending in the order the pieces' bytes were written.
  id INTEGER PRIMARY KEY,
  -- The call that wrote it: pieces of one copy share it (a copy is never a repeat of itself, and
  -- its own rows do not end its mirrors); ascending in the order the calls took effect.
  write INTEGER,
  -- Process id.
  pid INTEGER,
  -- When it is carried in: the part's start.
  ts INTEGER,
  -- First destination byte.
  dst INTEGER,
  -- First source byte.
  src INTEGER,
  -- Number of bytes.
  bytes INTEGER,
  -- Direction of the copy that made it (in an earlier part: memq_mirror.call_id is NULL).
  direction TEXT,
  -- What that copy copied (fingerprint); NULL without one.
  content INTEGER,
  -- Its source byte sequence (memq_copy.src_key), which fingerprints observe.
  src_key TEXT,
  -- Its destination byte sequence (memq_copy.dst_key).
  dst_key TEXT
);

-- The allocations that held each carried piece's bytes when its copy started (at the
-- part's start they are live, its memq.live markers): any of them ending ends the piece.
CREATE TABLE IF NOT EXISTS memq_carried_holder(
  -- memq_carried_piece.id.
  piece INTEGER,
  -- `dst` or `src`.
  side TEXT,
  -- Allocation kind.
  kind TEXT,
  -- Its first byte.
  addr INTEGER,
  -- Its size.
  size INTEGER
);
