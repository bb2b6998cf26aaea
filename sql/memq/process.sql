-- Which process and thread each memq event belongs to.
--
-- Heap instants and GPU API slices sit on thread tracks. Copy and memset slices sit on per-stream
-- tracks (shared by all processes) and name their thread in `debug.pid` / `debug.tid`
-- (docs/TRACE_FORMAT.md).

-- Every thread of the trace by (pid, tid) (the first, should a pid or tid be reused).
CREATE PERFETTO TABLE _memq_thread(
  -- Process id.
  pid LONG,
  -- Thread id.
  tid LONG,
  -- Its process.
  upid LONG,
  -- The thread.
  utid LONG
) AS
SELECT p.pid, t.tid, MIN(t.upid) AS upid, MIN(t.utid) AS utid
FROM thread t JOIN process p USING (upid)
GROUP BY p.pid, t.tid
ORDER BY p.pid, t.tid;

CREATE PERFETTO INDEX _memq_thread_idx ON _memq_thread(pid, tid);
