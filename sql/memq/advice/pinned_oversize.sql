-- Advice: pinned host allocations much larger than what any copy uses.
--
-- Pinned (page-locked) memory is taken from the operating system's pageable pool; too
-- much of it slows the whole machine, and the runtimes round and cache it. A pinned
-- buffer whose copies only ever use its first few bytes (sized for a worst case, rounded
-- up by a caching allocator, or never used by a copy at all) holds the rest for nothing.
-- The fix: size it to the largest copy (`used_bytes`), or take staging buffers from one
-- pool (PyTorch's caching host allocator: `pin_memory=True` on the batch instead of a
-- large hand-made buffer).
--
-- Decisions:
-- * Pinned: memq_allocation.kind = `pinned` (hipHostMalloc, cudaHostAlloc, cudaMallocHost);
--   registered memory is the program's own memory and not counted.
-- * Used: the highest byte any copy reached in it, from the allocation's first byte:
--   over the LTTng copies whose first source or destination byte lies in the allocation
--   (src_alloc_id / dst_alloc_id), the end of that side's span (linear: `bytes`; 2D:
--   (height - 1) * pitch + width; 3D: plus (depth - 1) * slice), not beyond the size.
--   Memsets are not counted (they touch device memory in practice).
-- * Much larger: `unused_bytes` = size - used_bytes is at least half the size and at least
--   1 MiB. The gain is those bytes (no time).

INCLUDE PERFETTO MODULE memq.copies;
INCLUDE PERFETTO MODULE memq.allocations;

-- One row per pinned allocation much larger than its copies use.
CREATE PERFETTO TABLE memq_advice_pinned_oversize(
  -- Allocation id.
  alloc_id LONG,
  -- Process.
  upid LONG,
  -- Allocating function.
  api STRING,
  -- First byte.
  addr LONG,
  -- Size in bytes.
  size LONG,
  -- Highest byte (from `addr`) any copy used; 0 when no copy used it.
  used_bytes LONG,
  -- size - used_bytes.
  unused_bytes LONG,
  -- Copies that read or wrote it.
  copies LONG,
  -- Start of its lifetime.
  ts TIMESTAMP,
  -- End of its lifetime (NULL: never freed).
  end_ts TIMESTAMP,
  -- Slice of the allocating call.
  alloc_slice_id LONG
) AS
WITH pinned AS MATERIALIZED (
  SELECT alloc_id, addr, size FROM memq_allocation WHERE kind = 'pinned'
),
side AS (
  SELECT dst_alloc_id AS alloc_id, dst AS addr,
    CASE WHEN height IS NULL THEN bytes
      ELSE (IFNULL(MAX(depth, 1), 1) - 1) * IFNULL(dslice, 0) + (height - 1) * dpitch + width END AS extent
  FROM memq_copy WHERE memq_has_addresses!(source) AND dst_alloc_id IN (SELECT alloc_id FROM pinned)
  UNION ALL
  SELECT src_alloc_id, src,
    CASE WHEN height IS NULL THEN bytes
      ELSE (IFNULL(MAX(depth, 1), 1) - 1) * IFNULL(sslice, 0) + (height - 1) * spitch + width END
  FROM memq_copy WHERE memq_has_addresses!(source) AND src_alloc_id IN (SELECT alloc_id FROM pinned)
),
used AS (
  SELECT s.alloc_id, MIN(a.size, MAX(s.addr - a.addr + s.extent)) AS used_bytes, COUNT(*) AS copies
  FROM side s JOIN pinned a USING (alloc_id)
  GROUP BY s.alloc_id
)
SELECT a.alloc_id, a.upid, a.api, a.addr, a.size, IFNULL(u.used_bytes, 0) AS used_bytes,
  a.size - IFNULL(u.used_bytes, 0) AS unused_bytes, IFNULL(u.copies, 0) AS copies, a.ts, a.end_ts,
  a.alloc_slice_id
FROM memq_allocation a LEFT JOIN used u USING (alloc_id)
WHERE a.kind = 'pinned'
  AND a.size - IFNULL(u.used_bytes, 0) >= a.size / 2.0
  AND a.size - IFNULL(u.used_bytes, 0) >= 1048576
ORDER BY unused_bytes DESC, a.alloc_id;
