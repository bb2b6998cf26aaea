"""The memq analyses as pandas DataFrames, for notebooks (HolisticTraceAnalysis style).

    from ctf2perfetto import analyses
    with analyses.load("out.pftrace") as engine:
        analyses.duplicated(engine)          # peak / mean duplicated bytes per grouping
        analyses.redundant(engine)           # totals per class
        analyses.summary(engine)["copies"]   # copies per direction
        analyses.advice(engine)["advice"]    # what to fix: one row per rule, then each rule's places

Every function takes a trace (a .pftrace, a PyTorch-profiler .json/.json.gz, an
LTTng trace directory, converted on the fly) or an engine from `load`. The SQL is
the `memq` package (sql/memq/*.sql); this module only runs it and shapes the
result. Each frame carries in `df.attrs`:

* `applies`: False when the trace's source has no addresses (Kineto), so the
  figure cannot be computed; the frame is then empty.
* `note`: why not, or the upper-bound caveat (CPU and kernel writes are not traced).
* `source`: the trace's sources (`lttng`, `kineto`, or `none`).
* `windows`: the capture windows the figures cover (one dict per window, as `windows()`
  gives them; empty for a trace recorded without windows, whose figures cover it all),
  and `windows_note`: the same in one sentence ("" without windows).

Each figure is computed once, as engine Rows (`*_rows(engine)`, plain Python values: what
`memq duplicated` etc. print, without importing pandas), and returned here as a DataFrame.
"""
from __future__ import annotations

# The figures live one module per analysis in ctf2perfetto/analysis/ (registry.ANALYSES lists them); this module
# is the notebook's one import.
from ctf2perfetto.analysis.base import (EVIDENCE, FIGURES, META_COUNTS, NO_ADDRESSES, NO_EVENTS, UPPER_BOUND, frame,
                                       host_min_size, load, module_query, module_rows, source_info, sources,
                                       trace_warnings, warning_counts, warning_lines, windows, windows_rows,
                                       with_windows_note)
from ctf2perfetto.analysis.duplicated import (DUP_GROUPINGS, duplicated, duplicated_counter, duplicated_over_time,
                                             duplicated_result, duplicated_rows, mirrors)
from ctf2perfetto.analysis.leaks import (OUTLIVED, leaked_allocations, leaks, leaks_result, leaks_rows, outlived,
                                        outlived_result, outlived_rows)
from ctf2perfetto.analysis.redundant import (ADDRESS_CLASSES, CLASSES, UNIFIED_MODES, check_unified, redundant,
                                            redundant_copies, redundant_result, redundant_rows)
from ctf2perfetto.analysis.advice import RULES, advice, advice_tables
from ctf2perfetto.analysis.registry import ANALYSES, analysis
from ctf2perfetto.analysis.summary import SUMMARY_TABLES, summary, summary_result, summary_rows

__all__ = [
    "ANALYSES", "analysis", "load", "frame", "module_rows", "module_query", "sources", "source_info", "windows",
    "windows_rows", "with_windows_note", "trace_warnings", "warning_counts", "warning_lines", "host_min_size",
    "duplicated", "duplicated_rows", "duplicated_result", "duplicated_counter", "duplicated_over_time", "mirrors",
    "redundant", "redundant_rows", "redundant_result", "redundant_copies", "check_unified",
    "summary", "summary_rows", "summary_result", "leaks", "leaks_rows", "leaks_result", "outlived", "outlived_rows",
    "outlived_result", "leaked_allocations", "advice", "advice_tables", "RULES",
    "UPPER_BOUND", "NO_ADDRESSES", "NO_EVENTS", "META_COUNTS", "EVIDENCE", "FIGURES", "DUP_GROUPINGS", "OUTLIVED",
    "CLASSES", "ADDRESS_CLASSES", "UNIFIED_MODES", "SUMMARY_TABLES",
]
