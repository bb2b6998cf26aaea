-- Call sites for the advice rules: the caller address (`ip`) of each traced GPU API call.
--
-- A program that makes the same call in a loop makes it from one place: the advice rules
-- group calls by `ip` (the return address the recorder took with the ip context), which
-- ctf2perfetto.analysis.callsite maps to binary + function (+ file:line). A trace without
-- the ip context (Kineto, or a hand-written log) has `ip` NULL: the rules then group by
-- API function alone.

INCLUDE PERFETTO MODULE memq.process;

-- One row per GPU API call (memq.api slice) that carries a `debug.call_id`.
CREATE PERFETTO TABLE memq_advice_call(
  -- `debug.call_id` of the call (shared with its memq.copy / memq.set slice).
  call_id LONG,
  -- Caller address (`debug.ip`); NULL when not recorded.
  ip LONG,
  -- API function (the slice's name: `hipMemcpy`, `cudaHostAlloc`, ...).
  api STRING,
  -- Thread that made the call.
  utid LONG,
  -- Start of the call.
  ts TIMESTAMP,
  -- Duration of the call: the time the calling thread spent in it.
  dur DURATION
) AS
SELECT
  EXTRACT_ARG(s.arg_set_id, 'debug.call_id') AS call_id,
  MIN(EXTRACT_ARG(s.arg_set_id, 'debug.ip')) AS ip,
  MIN(s.name) AS api,
  MIN(tt.utid) AS utid,
  MIN(s.ts) AS ts,
  MAX(s.dur) AS dur
FROM slice s
JOIN thread_track tt ON tt.id = s.track_id
WHERE s.category = 'memq.api' AND EXTRACT_ARG(s.arg_set_id, 'debug.call_id') IS NOT NULL
GROUP BY 1
ORDER BY 1;

CREATE PERFETTO INDEX memq_advice_call_idx ON memq_advice_call(call_id);
