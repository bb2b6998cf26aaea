-- The converter's live-bytes counters (docs/TRACE_FORMAT.md, "Counter tracks"), by memory kind.

-- One row per live-bytes counter track: per process for host heap, pinned, registered and managed
-- memory, per device for device memory.
CREATE PERFETTO TABLE memq_live_counter_track(
  -- Counter track id.
  id LONG,
  -- Track name (`Host heap live bytes`, `GPU 0 device live bytes`, ...).
  name STRING,
  -- `host`, `pinned`, `registered`, `managed` or `device`.
  kind STRING
) AS
SELECT
  id,
  name,
  CASE
    WHEN name = 'Host heap live bytes' THEN 'host'
    WHEN name = 'Pinned live bytes' THEN 'pinned'
    WHEN name = 'Registered live bytes' THEN 'registered'
    WHEN name = 'Managed live bytes' THEN 'managed'
    WHEN name GLOB 'GPU * device live bytes' THEN 'device'
  END AS kind
FROM counter_track
WHERE name IN ('Host heap live bytes', 'Pinned live bytes', 'Registered live bytes', 'Managed live bytes')
   OR name GLOB 'GPU * device live bytes';

-- Every sample of the live-bytes counters, in time order.
CREATE PERFETTO VIEW memq_live_counter(
  -- Counter track id.
  track_id LONG,
  -- Track name.
  track STRING,
  -- Memory kind.
  kind STRING,
  -- Sample time: the value holds from here to the track's next sample.
  ts TIMESTAMP,
  -- Live bytes.
  value LONG
) AS
SELECT t.id AS track_id, t.name AS track, t.kind, c.ts, CAST(c.value AS INT) AS value
FROM counter c JOIN memq_live_counter_track t ON c.track_id = t.id
ORDER BY c.ts, c.id;
