"""Every analysis memq offers, in the order `memq --help` lists them.

The command line (`memq NAME`, `--parts`), the notebook API (ctf2perfetto.analyses) and the report iterate this
one list. Adding an analysis: one SQL module in sql/memq/, one Python module here in analysis/ ending with its
`ANALYSIS = Analysis(...)` (base.Analysis says what each field is for), its name added below, and its tests.
"""
from __future__ import annotations

from ctf2perfetto.analysis import advice, duplicated, leaks, redundant, summary
from ctf2perfetto.analysis.base import Analysis
from ctf2perfetto.errors import UsageError

ANALYSES: tuple[Analysis, ...] = (duplicated.ANALYSIS, redundant.ANALYSIS, summary.ANALYSIS, leaks.ANALYSIS,
                                  advice.ANALYSIS)


def analysis(name: str) -> Analysis:
    """The analysis called `name`; UsageError for any other name."""
    for found in ANALYSES:
        if found.name == name:
            return found
    raise UsageError(f"{name}: no such analysis (one of {', '.join(a.name for a in ANALYSES)})")
