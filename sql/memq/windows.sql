-- Capture windows: the parts of the run that `memq record --delay/--duration` or
-- `--capture-range profiler-api` recorded.
--
-- A trace recorded with windows holds memq events only inside them; each process has
-- its own windows, numbered from 0 in that process (memq.window slices on the
-- process's `Capture windows` track). When a window opens, every allocation live then
-- is written (memq.live markers): memq_allocation has them with `live_at_start` = 1,
-- starting at the window's start. When a window closes before its process exits, the
-- allocations still live end there (`outlived_window` = 1): what happens to them
-- outside the window is not recorded, so they are not leaks.
--
-- Decisions:
-- * A trace without windows has no rows here, and its recorded time is the whole
--   trace: memq_recorded_dur() = trace_end() - trace_start().
-- * A window the trace never closes (a process killed, a trace cut short) ends at
--   trace_end(); its `close_cause` is 'trace_end'.
-- * Recorded time (the denominator of time-weighted means and busy shares) is the
--   union of all windows of all processes.

INCLUDE PERFETTO MODULE memq.intervals;

-- Every capture window of the trace.
CREATE PERFETTO TABLE memq_window(
  -- Slice id of the window (memq.window slice).
  id LONG,
  -- Process.
  upid LONG,
  -- Its pid.
  pid LONG,
  -- Index of the window in its process (0, 1, ...).
  window LONG,
  -- When it opened.
  ts TIMESTAMP,
  -- How long it lasted.
  dur DURATION,
  -- When it closed (trace_end() when the trace does not say).
  end_ts TIMESTAMP,
  -- `delay` (a --delay elapsed, or the process started inside the window), `profiler_api` or `range` (the
  -- start of a `ctf2perfetto --from` range).
  open_cause STRING,
  -- `duration`, `profiler_api`, `exit` (the process exited inside it), `trace_end` or `range` (the end of
  -- a `ctf2perfetto --to` range).
  close_cause STRING,
  -- The profiler call that opened it (`cudaProfilerStart`, ...); NULL for a timer.
  open_api STRING,
  -- The profiler call that closed it; NULL otherwise.
  close_api STRING,
  -- Allocations live when it opened (memq.live).
  live_allocations LONG,
  -- Their bytes.
  live_bytes LONG
) AS
SELECT
  s.id,
  pt.upid,
  EXTRACT_ARG(s.arg_set_id, 'debug.pid') AS pid,
  EXTRACT_ARG(s.arg_set_id, 'debug.index') AS window,
  s.ts,
  s.dur,
  s.ts + s.dur AS end_ts,
  EXTRACT_ARG(s.arg_set_id, 'debug.open_cause') AS open_cause,
  EXTRACT_ARG(s.arg_set_id, 'debug.close_cause') AS close_cause,
  EXTRACT_ARG(s.arg_set_id, 'debug.open_api') AS open_api,
  EXTRACT_ARG(s.arg_set_id, 'debug.close_api') AS close_api,
  EXTRACT_ARG(s.arg_set_id, 'debug.live_allocations') AS live_allocations,
  EXTRACT_ARG(s.arg_set_id, 'debug.live_bytes') AS live_bytes
FROM slice s
JOIN process_track pt ON pt.id = s.track_id
WHERE s.category = 'memq.window'
ORDER BY pt.upid, window;

-- Time the trace recorded: the union of its windows, or the whole trace without windows.
CREATE PERFETTO FUNCTION memq_recorded_dur()
-- Nanoseconds.
RETURNS LONG AS
SELECT IIF(
  EXISTS (SELECT 1 FROM memq_window),
  IFNULL((SELECT wall_dur FROM _memq_union_dur!((SELECT 1 AS grp, ts, dur FROM memq_window))), 0),
  trace_end() - trace_start());

-- End of the window of process `upid` that holds time `ts`; NULL outside windows or without them.
CREATE PERFETTO FUNCTION memq_window_end(
  -- Process.
  upid LONG,
  -- A time in the window.
  ts TIMESTAMP
)
-- The window's end_ts.
RETURNS TIMESTAMP AS
SELECT MIN(end_ts) FROM memq_window WHERE upid = $upid AND ts <= $ts AND end_ts >= $ts;

-- The capture window of each row of `tab` (columns `key`, `upid`, `ts`): the last window
-- of its process opened at or before `ts` (indexes grow with time in a process), when
-- `ts` is not after its end. Returns `key`, `window`, `end_ts` and `closed_early` (closed
-- before its process exited); rows outside windows, and every row without windows
-- (nothing is sorted then), are left out.
CREATE PERFETTO MACRO _memq_window_of(tab TableOrSubquery)
RETURNS TableOrSubquery AS (
  SELECT c.key, w.window, w.end_ts, w.close_cause NOT IN ('exit', 'trace_end') AS closed_early
  FROM (
    SELECT key, is_row, upid, ts,
      MAX(window) OVER (PARTITION BY upid ORDER BY ts, is_row ROWS UNBOUNDED PRECEDING) AS window
    FROM (
      SELECT upid, ts, 0 AS is_row, window, NULL AS key FROM memq_window
      UNION ALL
      SELECT upid, ts, 1, NULL, key FROM $tab WHERE EXISTS (SELECT 1 FROM memq_window)
    )
  ) c
  JOIN memq_window w ON w.upid = c.upid AND w.window = c.window
  WHERE c.is_row AND c.ts <= w.end_ts
);

-- memq_window with process ids, in time order (ctf2perfetto.analyses.windows).
CREATE PERFETTO VIEW memq_window_report AS
SELECT pid, window, ts, dur, end_ts, open_cause, close_cause, open_api, close_api, live_allocations, live_bytes
FROM memq_window ORDER BY ts, pid, window;
