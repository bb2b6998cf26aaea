-- The trace as a whole: its window, what the converter counted (memq.meta), and whether `memq annotate`
-- has already added its tracks.

INCLUDE PERFETTO MODULE memq.allocations;
INCLUDE PERFETTO MODULE memq.copies;
INCLUDE PERFETTO MODULE memq.windows;

-- One row per converted trace (memq.meta instant `memq trace info`): what it lost or could not use
-- (docs/TRACE_FORMAT.md, "Loss").
CREATE PERFETTO VIEW memq_meta(
  -- `lttng`, or `kineto` for a JSON trace memq's importer converted alone.
  source STRING,
  -- Events LTTng discarded (net change of its counter).
  lost_events LONG,
  -- Packets LTTng discarded.
  lost_packets LONG,
  -- Frees that matched no traced allocation.
  unmatched_frees LONG,
  -- Events decoded but not usable.
  skipped_events LONG,
  -- Every event babeltrace2 delivered.
  events_read LONG,
  -- The events memq-record.json counted, when the trace has one.
  recorded_events LONG,
  -- Recorded events the files do not hold (memq-record.json's count minus the events read).
  missing_events LONG,
  -- Packets index/ lists that the stream files no longer hold.
  missing_packets LONG,
  -- Stream files index/ lists that are gone.
  missing_streams LONG,
  -- Packets --salvage cut away.
  dropped_packets LONG,
  -- Their bytes.
  dropped_bytes LONG,
  -- What recorded the host heap (`memq record --host-source`: `memq` or `lttng`), when the recording says.
  host_source STRING,
  -- The recording's host heap threshold (`memq record --host-min-size`), when it says.
  host_min_size LONG,
  -- Capture windows (memq_window), when the recording had any.
  windows LONG,
  -- Allocations live when a capture window opened, when the recording had windows.
  live_at_start LONG
) AS
SELECT
  EXTRACT_ARG(arg_set_id, 'debug.source') AS source,
  EXTRACT_ARG(arg_set_id, 'debug.lost_events') AS lost_events,
  EXTRACT_ARG(arg_set_id, 'debug.lost_packets') AS lost_packets,
  EXTRACT_ARG(arg_set_id, 'debug.unmatched_frees') AS unmatched_frees,
  EXTRACT_ARG(arg_set_id, 'debug.skipped_events') AS skipped_events,
  EXTRACT_ARG(arg_set_id, 'debug.events_read') AS events_read,
  EXTRACT_ARG(arg_set_id, 'debug.recorded_events') AS recorded_events,
  EXTRACT_ARG(arg_set_id, 'debug.missing_events') AS missing_events,
  EXTRACT_ARG(arg_set_id, 'debug.missing_packets') AS missing_packets,
  EXTRACT_ARG(arg_set_id, 'debug.missing_streams') AS missing_streams,
  EXTRACT_ARG(arg_set_id, 'debug.dropped_packets') AS dropped_packets,
  EXTRACT_ARG(arg_set_id, 'debug.dropped_bytes') AS dropped_bytes,
  EXTRACT_ARG(arg_set_id, 'debug.host_source') AS host_source,
  EXTRACT_ARG(arg_set_id, 'debug.host_min_size') AS host_min_size,
  EXTRACT_ARG(arg_set_id, 'debug.windows') AS windows,
  EXTRACT_ARG(arg_set_id, 'debug.live_at_start') AS live_at_start
FROM slice WHERE category = 'memq.meta';

-- One row: the trace window and what every figure depends on.
CREATE PERFETTO VIEW memq_trace(
  -- First timestamp.
  start_ts TIMESTAMP,
  -- Last timestamp.
  end_ts TIMESTAMP,
  -- Time recorded: end_ts - start_ts, or with capture windows the union of the windows (memq_recorded_dur).
  recorded_dur DURATION,
  -- Allocations in the trace.
  allocations LONG,
  -- Processes with host heap blocks below the recording's threshold (counted, not recorded one by one:
  -- memq_host_small).
  small_block_processes LONG,
  -- LTTng copies and memsets with no process or no destination address: left out of the mirror,
  -- duplicated and redundant figures.
  unplaced LONG,
  -- 1 when `memq annotate` has added its tracks already.
  annotated BOOL
) AS
SELECT
  trace_start() AS start_ts,
  trace_end() AS end_ts,
  memq_recorded_dur() AS recorded_dur,
  (SELECT COUNT(*) FROM memq_allocation) AS allocations,
  (SELECT COUNT(*) FROM memq_host_small) AS small_block_processes,
  (SELECT COUNT(*) FROM memq_copy WHERE memq_has_addresses!(source) AND (upid IS NULL OR dst IS NULL))
    + (SELECT COUNT(*) FROM memq_set WHERE memq_has_addresses!(source) AND (upid IS NULL OR dst IS NULL)) AS unplaced,
  EXISTS (SELECT 1 FROM track WHERE name = 'Duplicated bytes') AS annotated;
