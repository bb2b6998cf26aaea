-- What attribution (ctf2perfetto/analysis/attribution.py) maps copies, mirrors and allocations onto: the event
-- that carries a key on its thread, the PyTorch ops of each thread, and the binaries each process loaded.

-- The event that carries `debug.<key>` (`call_id`: the API call; `alloc_id`: the allocating heap or API
-- event) on its thread, with its caller's address.
CREATE PERFETTO FUNCTION memq_anchor(
  -- `call_id` or `alloc_id`.
  key STRING
)
-- One row per event carrying the key.
RETURNS TABLE(
  -- The key's value.
  anchor_key LONG,
  -- Start of the event.
  anchor_ts TIMESTAMP,
  -- Its duration (0 for heap instants).
  anchor_dur DURATION,
  -- Its thread.
  utid LONG,
  -- Its process id.
  pid LONG,
  -- Caller address (`debug.ip`), when recorded.
  ip LONG
) AS
SELECT
  EXTRACT_ARG(s.arg_set_id, 'debug.' || $key) AS anchor_key,
  s.ts AS anchor_ts,
  s.dur AS anchor_dur,
  tt.utid,
  p.pid,
  EXTRACT_ARG(s.arg_set_id, 'debug.ip') AS ip
FROM slice s
JOIN thread_track tt ON s.track_id = tt.id
JOIN thread t USING (utid)
LEFT JOIN process p USING (upid)
WHERE s.category IN ('memq.api', 'memq.heap') AND EXTRACT_ARG(s.arg_set_id, 'debug.' || $key) IS NOT NULL;

-- PyTorch-profiler ops (Kineto `cpu_op` slices merged with `ctf2perfetto --kineto`) on thread tracks,
-- per thread in time order, outer ops first.
CREATE PERFETTO TABLE memq_cpu_op(
  -- Slice id of the op.
  op_slice_id LONG,
  -- Start.
  op_ts TIMESTAMP,
  -- Duration.
  op_dur DURATION,
  -- Op name (`aten::copy_`, ...).
  op STRING,
  -- Thread.
  utid LONG,
  -- 1 for an op not nested in another.
  top_level BOOL
) AS
SELECT s.id AS op_slice_id, s.ts AS op_ts, s.dur AS op_dur, s.name AS op, tt.utid, s.depth = 0 AS top_level
FROM slice s JOIN thread_track tt ON s.track_id = tt.id
WHERE s.category = 'cpu_op'
ORDER BY tt.utid, s.ts, s.dur DESC;

-- Binaries the traced processes had mapped (memq.binary instants: statedump and later loads).
CREATE PERFETTO TABLE memq_binary(
  -- When it was reported.
  ts TIMESTAMP,
  -- Process.
  pid LONG,
  -- Load address.
  baddr LONG,
  -- Size of the mapping.
  memsz LONG,
  -- Path on the traced machine.
  path STRING,
  -- GNU build id (hex), when known.
  build_id STRING
) AS
SELECT
  s.ts,
  EXTRACT_ARG(s.arg_set_id, 'debug.pid') AS pid,
  EXTRACT_ARG(s.arg_set_id, 'debug.baddr') AS baddr,
  EXTRACT_ARG(s.arg_set_id, 'debug.memsz') AS memsz,
  EXTRACT_ARG(s.arg_set_id, 'debug.path') AS path,
  EXTRACT_ARG(s.arg_set_id, 'debug.build_id') AS build_id
FROM slice s WHERE s.category = 'memq.binary';
