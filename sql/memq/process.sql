-- Which process and thread each memq event belongs to.
--
-- Heap instants and GPU API slices sit on thread tracks; copy and memset slices sit on
-- per-stream tracks (shared by all processes) and reach their process through the
-- `call_id` they share with the API slice of the same call (docs/TRACE_FORMAT.md).

-- One row per memq.api slice that carries a `call_id`: the call's thread and process.
CREATE PERFETTO TABLE _memq_api_call(
  -- `debug.call_id` of the call.
  call_id LONG,
  -- Slice id of the memq.api slice.
  api_slice_id LONG,
  -- Thread of the call.
  utid LONG,
  -- Process of the call.
  upid LONG
) AS
SELECT
  EXTRACT_ARG(s.arg_set_id, 'debug.call_id') AS call_id,
  s.id AS api_slice_id,
  tt.utid,
  t.upid
FROM slice s
JOIN thread_track tt ON tt.id = s.track_id
JOIN thread t USING (utid)
WHERE s.category = 'memq.api'
  AND EXTRACT_ARG(s.arg_set_id, 'debug.op') IN ('copy', 'set')
ORDER BY call_id;

CREATE PERFETTO INDEX _memq_api_call_idx ON _memq_api_call(call_id);
