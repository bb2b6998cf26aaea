-- Unit conversions shared by the memq modules: byte counts and copy bandwidth.
-- Sizes use binary prefixes (MiB = 2^20 bytes), bandwidth decimal ones (GB/s = 10^9 bytes/s),
-- as GPU vendors quote bandwidth.

-- A byte count in mebibytes (MiB, 2^20 bytes).
CREATE PERFETTO FUNCTION memq_mib(
  -- Number of bytes.
  bytes LONG
)
-- The same amount in MiB (NULL when `bytes` is NULL).
RETURNS DOUBLE AS
SELECT $bytes / 1048576.0;

-- A byte count in gibibytes (GiB, 2^30 bytes).
CREATE PERFETTO FUNCTION memq_gib(
  -- Number of bytes.
  bytes LONG
)
-- The same amount in GiB (NULL when `bytes` is NULL).
RETURNS DOUBLE AS
SELECT $bytes / 1073741824.0;

-- Bandwidth of moving `bytes` in `dur_ns` nanoseconds, in GB/s (10^9 bytes per second).
CREATE PERFETTO FUNCTION memq_gb_per_s(
  -- Number of bytes moved.
  bytes LONG,
  -- Time it took, in nanoseconds.
  dur_ns LONG
)
-- Bytes per nanosecond, which is GB/s; NULL when the duration is not positive (instant or unfinished copies).
RETURNS DOUBLE AS
SELECT IIF($dur_ns > 0, $bytes * 1.0 / $dur_ns, NULL);
