"""Traces of other tools read into memq: each importer yields memq's own events or trace.

kineto/ reads PyTorch-profiler (Kineto) JSON, alone or merged into a memq recording.
"""
