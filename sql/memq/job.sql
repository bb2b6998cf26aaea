-- The job: who each process is (rank, node, launcher, the rank it works for), the GPUs it used by
-- stable identity, and each process's own figures, for the per-rank reports (ctf2perfetto.analysis.job).
--
-- Decisions:
-- * Identity is what the converter decided from the recorded facts (memq:identity, memq:device) and
--   wrote as one memq.process instant per process (docs/TRACE_FORMAT.md "The job"); nothing is guessed
--   here. `pid` is the process's id in the trace (a job of several recordings moves the pids of every
--   recording after the first apart), `real_pid` the one it had on its node.
-- * A process's GPUs: the devices of its allocations, copies and memsets, named by the UUID its own
--   memq.device instant gave for that device number (ordinals differ per process).
-- * `run_dur`: the process's traced life (its memq:clock start to end), the base of per-rank shares.

INCLUDE PERFETTO MODULE memq.allocations;
INCLUDE PERFETTO MODULE memq.copies;

-- One row per process the trace describes.
CREATE PERFETTO TABLE memq_process_identity(
  -- Process id in the trace.
  pid LONG,
  -- The process (first upid of that pid).
  upid LONG,
  -- Process id on its node.
  real_pid LONG,
  -- Parent's process id in the trace.
  ppid LONG,
  -- Host name the process recorded.
  node STRING,
  -- Rank the launcher gave it (RANK, SLURM_PROCID, ...), NULL if none.
  rank LONG,
  -- Local rank on its node, NULL if none.
  local_rank LONG,
  -- World size, NULL if none.
  world_size LONG,
  -- SLURM_JOB_ID, else TORCHELASTIC_RUN_ID; '' if none.
  job_id STRING,
  -- `rank`, `worker` (under a rank), `launcher` (parents ranks) or `process`.
  role STRING,
  -- The rank its figures count under (its own for a rank, its parent rank's for a worker), NULL otherwise.
  owner_rank LONG,
  -- Traced life (memq:clock start to end) in ns, NULL if unknown.
  run_dur DURATION
) AS
WITH ident AS (
  SELECT
    EXTRACT_ARG(arg_set_id, 'debug.pid') AS pid,
    EXTRACT_ARG(arg_set_id, 'debug.real_pid') AS real_pid,
    EXTRACT_ARG(arg_set_id, 'debug.ppid') AS ppid,
    EXTRACT_ARG(arg_set_id, 'debug.node') AS node,
    EXTRACT_ARG(arg_set_id, 'debug.rank') AS rank,
    EXTRACT_ARG(arg_set_id, 'debug.local_rank') AS local_rank,
    EXTRACT_ARG(arg_set_id, 'debug.world_size') AS world_size,
    EXTRACT_ARG(arg_set_id, 'debug.job_id') AS job_id,
    EXTRACT_ARG(arg_set_id, 'debug.role') AS role,
    EXTRACT_ARG(arg_set_id, 'debug.owner_rank') AS owner_rank,
    EXTRACT_ARG(arg_set_id, 'debug.run_dur') AS run_dur
  FROM slice WHERE category = 'memq.process'
),
first_upid AS (SELECT pid, MIN(upid) AS upid FROM process GROUP BY pid)
SELECT i.pid, f.upid, i.real_pid, i.ppid, i.node, i.rank, i.local_rank, i.world_size, i.job_id, i.role,
  i.owner_rank, i.run_dur
FROM ident i LEFT JOIN first_upid f USING (pid)
ORDER BY i.pid;

-- Each device a process described, with its stable identity.
CREATE PERFETTO TABLE memq_device_identity(
  -- Process id in the trace.
  pid LONG,
  -- Device number in that process.
  device LONG,
  -- `GPU-…` UUID, '' if the runtime did not say.
  gpu_uuid STRING,
  -- PCI bus id (`0000:17:00.0`), '' if the runtime did not say.
  pci_bus_id STRING,
  -- Device name.
  name STRING
) AS
SELECT
  EXTRACT_ARG(arg_set_id, 'debug.pid') AS pid,
  EXTRACT_ARG(arg_set_id, 'debug.device') AS device,
  COALESCE(EXTRACT_ARG(arg_set_id, 'debug.gpu_uuid'), '') AS gpu_uuid,
  COALESCE(EXTRACT_ARG(arg_set_id, 'debug.pci_bus_id'), '') AS pci_bus_id,
  EXTRACT_ARG(arg_set_id, 'debug.name') AS name
FROM slice WHERE category = 'memq.device';

-- The GPUs each process used (allocations, copies, memsets), by UUID where known.
CREATE PERFETTO TABLE memq_process_gpu(
  -- The process.
  upid LONG,
  -- Device number in that process.
  device LONG,
  -- Its UUID ('' if unknown).
  gpu_uuid STRING,
  -- Its PCI bus id ('' if unknown).
  pci_bus_id STRING
) AS
WITH used AS (
  SELECT DISTINCT upid, device FROM (
    SELECT upid, device FROM memq_allocation WHERE kind IN ('device', 'managed') AND device >= 0
    UNION ALL SELECT upid, device FROM memq_copy WHERE device >= 0
    UNION ALL SELECT upid, device FROM memq_set WHERE device >= 0)
  WHERE upid IS NOT NULL
),
named AS (
  SELECT p.upid, d.device, MIN(d.gpu_uuid) AS gpu_uuid, MIN(d.pci_bus_id) AS pci_bus_id
  FROM memq_device_identity d JOIN process p ON p.pid = d.pid
  GROUP BY p.upid, d.device
)
SELECT u.upid, u.device, COALESCE(n.gpu_uuid, '') AS gpu_uuid, COALESCE(n.pci_bus_id, '') AS pci_bus_id
FROM used u LEFT JOIN named n USING (upid, device)
ORDER BY u.upid, u.device;

-- Each process's own figures (the per-process split of memq summary).
CREATE PERFETTO TABLE memq_process_figures(
  -- The process.
  upid LONG,
  -- Process id in the trace.
  pid LONG,
  -- Copies.
  copies LONG,
  -- Bytes copied.
  copy_bytes LONG,
  -- Summed copy time.
  copy_dur DURATION,
  -- Memsets.
  sets LONG,
  -- Bytes set.
  set_bytes LONG,
  -- Allocations recorded one by one (host blocks at or above the threshold, GPU allocations).
  allocations LONG,
  -- Their bytes.
  allocated_bytes LONG,
  -- Host blocks below the recording's threshold (counted, not recorded one by one).
  small_allocations LONG,
  -- Their bytes.
  small_bytes LONG
) AS
WITH procs AS (SELECT pid, MIN(upid) AS upid FROM process WHERE pid IS NOT NULL GROUP BY pid),
c AS (SELECT upid, COUNT(*) AS n, SUM(bytes) AS b, SUM(dur) AS d FROM memq_copy GROUP BY upid),
s AS (SELECT upid, COUNT(*) AS n, SUM(bytes) AS b FROM memq_set GROUP BY upid),
a AS (SELECT upid, COUNT(*) AS n, SUM(size) AS b FROM memq_allocation GROUP BY upid),
h AS (SELECT upid, SUM(alloc_count) AS n, SUM(alloc_bytes) AS b FROM memq_host_small GROUP BY upid)
SELECT p.upid, p.pid, COALESCE(c.n, 0) AS copies, COALESCE(c.b, 0) AS copy_bytes, COALESCE(c.d, 0) AS copy_dur,
  COALESCE(s.n, 0) AS sets, COALESCE(s.b, 0) AS set_bytes, COALESCE(a.n, 0) AS allocations,
  COALESCE(a.b, 0) AS allocated_bytes, COALESCE(h.n, 0) AS small_allocations, COALESCE(h.b, 0) AS small_bytes
FROM procs p LEFT JOIN c USING (upid) LEFT JOIN s USING (upid) LEFT JOIN a USING (upid) LEFT JOIN h USING (upid)
ORDER BY p.pid;

-- memq_process_identity with the GPUs each process used (`gpu_uuid`: their UUIDs, comma-separated).
CREATE PERFETTO VIEW memq_process_identity_report AS
SELECT i.pid, i.real_pid, i.ppid, i.node, i.rank, i.local_rank, i.world_size, i.job_id, i.role, i.owner_rank,
  i.run_dur,
  (SELECT GROUP_CONCAT(g.gpu_uuid, ',') FROM (SELECT DISTINCT gpu_uuid FROM memq_process_gpu
     WHERE upid = i.upid AND gpu_uuid != '' ORDER BY gpu_uuid) g) AS gpu_uuid,
  (SELECT GROUP_CONCAT(g.pci_bus_id, ',') FROM (SELECT DISTINCT pci_bus_id FROM memq_process_gpu
     WHERE upid = i.upid AND pci_bus_id != '' ORDER BY pci_bus_id) g) AS pci_bus_id
FROM memq_process_identity i
ORDER BY i.pid;
