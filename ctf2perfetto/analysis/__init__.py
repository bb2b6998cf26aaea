"""The analyses: each figure of docs/DEFINITIONS.md as PerfettoSQL (sql/memq) plus its Python side.

parts.py and wholerun.py compute a long run's figures a part at a time and merge them;
attribution.py and callsite.py attribute copies to PyTorch ops or call sites.
"""
