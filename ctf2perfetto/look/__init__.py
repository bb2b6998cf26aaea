"""What users look at: the trace annotated with the analyses, a plot, the Perfetto UI served locally.

annotate.py (memq annotate), plot.py (memq plot), browser.py (memq open --engine browser: the UI
with the trace loaded in its own engine), rpcserver/ (memq serve: memq's trace processor behind
any Perfetto UI).
"""
